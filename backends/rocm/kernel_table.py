"""The kernel table: every entry point of every kernels/*.hip source, by source file.

Dispatch looks names up here (`kernel_for`): a dtype a kernel is not instantiated for raises
DTypeError naming the op and operands, like the cpu reference. tests/test_kernels_gfx90a.py
and tests/test_kernels_sm90.py check that every name is compiled into its code object, and
the emulated AMD platform's coverage check that every one of them runs.
"""
from __future__ import annotations

from typing import Dict, Tuple

from tensorlite import dtype as dtypes, op_table
from tensorlite.backend import CMP_OPS, REDUCE_OPS
from tensorlite.errors import unsupported_dtype

ALL = tuple(d.short for d in dtypes.ALL)           # f32 f16 bf16 f64 u8 u32 i64 bool
FLOATS = tuple(d.short for d in dtypes.FLOATS)
NONFLOATS = tuple(d.short for d in dtypes.ALL if not d.is_floating_point)
IDS = ("i64", "u32", "u8")                          # index dtypes the contract allows


def unary_ops(t: str) -> Tuple[str, ...]:
    """The unary ops unary.hip instantiates for dtype `t` (its op table rows say which)."""
    return tuple(op.name for op in op_table.UNARY if op_table.defined_for(op, t in FLOATS, t == "bool"))


def binary_ops(t: str) -> Tuple[str, ...]:
    """The binary ops binary.hip instantiates for dtype `t`."""
    return tuple(op.name for op in op_table.BINARY if op_table.defined_for(op, t in FLOATS, t == "bool"))


KERNELS: Dict[str, Tuple[str, ...]] = {
    "unary.hip": tuple(f"u{op}_{t}" for t in ALL for op in unary_ops(t))
    + tuple(f"affine_{t}" for t in ALL) + tuple(f"{op}_{t}" for op in ("powf", "elu") for t in FLOATS),
    "binary.hip": tuple(f"b{op}_{t}" for t in ALL for op in binary_ops(t))
    + tuple(f"{op}_{t}" for op in CMP_OPS for t in ALL),
    "where.hip": tuple(f"where_{t}" for t in ALL),
    "cast.hip": tuple(f"cast_{s}_{d}" for s in ALL for d in ALL)
    + tuple(f"cast_many_{s}_{d}" for s in FLOATS for d in FLOATS),
    "reduce.hip": tuple(f"reduce_{op}_{t}" for op in REDUCE_OPS for t in ALL),
    "index.hip": tuple(f"{op}_{i}_{t}" for op in ("index_select", "gather", "scatter_add", "index_add")
                       for i in IDS for t in ALL),
    "copy.hip": tuple(f"{op}_{t}" for op in ("copy2d", "const_set") for t in ALL),
    "conv.hip": tuple(f"{op}_{t}" for op in ("im2col", "col2im", "max_pool2d", "avg_pool2d",
                                             "upsample_nearest2d") for t in ALL)
    + tuple(f"gemm_{t}" for t in ALL),
    "random.hip": tuple(f"rand_{kind}_{t}" for kind in ("uniform", "normal") for t in FLOATS),
    "fused.hip": tuple(f"{op}_{t}" for op in ("softmax", "log_softmax", "layer_norm", "rms_norm", "rope",
                                              "rope_i", "rope_thd", "attn_softmax") for t in FLOATS),
    "fused_grad.hip": tuple(f"{op}_{t}" for op in ("softmax_bwd", "log_softmax_bwd", "layer_norm_bwd", "rms_norm_bwd",
                                                   "layer_norm_bwd_fit", "rms_norm_bwd_fit",
                                                   "layer_norm_bwd_fit_vec", "rms_norm_bwd_fit_vec",
                                                   "norm_wgrad", "norm_wgrad_finish", "cross_entropy_fwd",
                                                   "cross_entropy_bwd", "gelu_bwd", "gelu_erf_bwd", "silu_bwd",
                                                   "adamw", "adamw_many") for t in FLOATS),
    "attention.hip": tuple(f"flash_{op}{dp}_{t}" for op in ("fwd", "bwd") for dp in (32, 64, 128)
                           for t in ("f32", "f16", "bf16"))
    + tuple(f"flash_bwd_pre_{t}" for t in ("f32", "f16", "bf16"))
    + tuple(f"flash_{op}_mma{dp}_{t}" for op in ("fwd", "bwd") for dp in (64, 128) for t in ("f16", "bf16"))
    + tuple(f"flash_{op}_wg{dp}_{t}" for op in ("fwd", "bwd") for dp in (64, 128) for t in ("f16", "bf16")),
}
SOURCE_OF = {name: src for src, names in KERNELS.items() for name in names}


def kernel_for(dev, name: str, op: str, **operands):
    """The kernel handle for entry point `name`, or DTypeError (naming `op` and the
    operands, given as name=(storage, layout)) when the table has no such instantiation."""
    source = SOURCE_OF.get(name)
    if source is None:
        raise unsupported_dtype(op, **operands)
    return dev.function(source, name)
