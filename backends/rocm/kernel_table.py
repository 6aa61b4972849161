"""The kernel table: every entry point of every kernels/*.hip source, by source file.

Each op family declares the entry points of its own sources (`KERNELS` in ops/<family>.py,
and storage.py's copies); this module assembles them into `KERNELS` and `SOURCE_OF`, and
holds the dtype classes the declarations use. Dispatch looks names up here (`kernel_for`):
a dtype a kernel is not instantiated for raises DTypeError naming the op and operands, like
the cpu reference. tests/test_kernels_gfx90a.py and tests/test_kernels_sm90.py check that
every name is compiled into its code object, and the emulated AMD platform's coverage check
that every one of them runs.
"""
from __future__ import annotations

import threading
from importlib import import_module
from typing import Dict, Tuple

from tensorlite import dtype as dtypes, op_table
from tensorlite.errors import BackendError, unsupported_dtype

ALL = tuple(d.short for d in dtypes.ALL)           # f32 f16 bf16 f64 u8 u32 i64 bool i8 i16 i32
FLOATS = tuple(d.short for d in dtypes.FLOATS)
IDS = ("i64", "u32", "u8")                          # index dtypes the contract allows


def unary_ops(t: str) -> Tuple[str, ...]:
    """The unary ops unary.hip instantiates for dtype `t` (its op table rows say which)."""
    return tuple(op.name for op in op_table.UNARY if op_table.defined_for(op, t in FLOATS, t == "bool"))


def binary_ops(t: str) -> Tuple[str, ...]:
    """The binary ops binary.hip instantiates for dtype `t`."""
    return tuple(op.name for op in op_table.BINARY if op_table.defined_for(op, t in FLOATS, t == "bool"))


# The modules that launch kernels, each declaring the entry points of its own kernel sources
# in a module-level KERNELS = {source: (entry name, ...)}: the op families of ops/ and
# storage.py (the copies). They import this module, so their tables are assembled here on
# first use (KERNELS, SOURCE_OF, kernel_for), not at import.
DECLARING_MODULES = ("ops.elementwise", "ops.reduce", "ops.index", "storage", "ops.conv", "ops.matmul", "ops.random",
                     "ops.fused", "ops.attention", "ops.sort", "ops.rnn")

KERNELS: Dict[str, Tuple[str, ...]]   # source -> its entry names (bound by _assemble)
SOURCE_OF: Dict[str, str]             # entry name -> its source (bound by _assemble)
_SOURCE_OF: Dict[str, str] = {}       # SOURCE_OF itself, filled in place once assembled
_ASSEMBLE_LOCK = threading.Lock()


def _assemble() -> None:
    """KERNELS ({source: entry names}, every kernels/*.hip) and SOURCE_OF ({entry name: source})
    from the declaring modules; a source or an entry name declared twice is an error."""
    global KERNELS, SOURCE_OF
    with _ASSEMBLE_LOCK:
        if _SOURCE_OF:
            return
        kernels: Dict[str, Tuple[str, ...]] = {}
        source_of: Dict[str, str] = {}
        for module in DECLARING_MODULES:
            for source, names in import_module(f"{__package__}.{module}").KERNELS.items():
                if source in kernels:
                    raise BackendError(f"kernel source {source} is declared twice (again by {module})")
                kernels[source] = tuple(names)
                for name in names:
                    if name in source_of:
                        raise BackendError(f"kernel entry {name} is declared by {source_of[name]} and {source}")
                    source_of[name] = source
        KERNELS, SOURCE_OF = kernels, _SOURCE_OF
        _SOURCE_OF.update(source_of)


def __getattr__(name):  # KERNELS and SOURCE_OF: assembled on first use (PEP 562)
    if name in ("KERNELS", "SOURCE_OF"):
        _assemble()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kernel_for(dev, name: str, op: str, **operands):
    """The kernel handle for entry point `name`, or DTypeError (naming `op` and the
    operands, given as name=(storage, layout)) when the table has no such instantiation.
    Found kernels are kept in dev.kernels by entry name (names are unique across sources),
    where the hot paths look first: `dev.kernels.get(name) or kernel_for(...)`."""
    kernel = dev.kernels.get(name)
    if kernel is not None:
        return kernel
    source = _SOURCE_OF.get(name)
    if source is None:
        if not _SOURCE_OF:
            _assemble()
            source = _SOURCE_OF.get(name)
        if source is None:
            raise unsupported_dtype(op, **operands)
    kernel = dev.kernels[name] = dev.function(source, name)
    return kernel
