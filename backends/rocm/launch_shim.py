"""The compiled launch shim: every kernel launch's call into the driver, through cffi's API mode.

cffi's ABI mode (how the platforms call the HIP and CUDA runtimes) converts a call's arguments
through libffi: measured on an H200 host, a bare cuLaunchKernel call cost 7.1 us from Python
against 5.0 us in a C loop. API mode compiles the conversion into C. `setup.py` builds this
module's C source into `_launch_shim` at install where cffi and a C compiler are present; without
them the install succeeds and launches stay in ABI mode (TENSORLITE_LAUNCH_SHIM=0 forces that).

The shim is one C function with the launch call's arguments in the driver's order, plus the
driver entry point's address in the slot of the driver's `extra` argument (always NULL here):
cuLaunchKernel and hipModuleLaunchKernel have the same C signature, so one shim serves both.
This file imports nothing from tensorlite: setup.py loads it on its own.
"""
from __future__ import annotations

import os

MODULE = "tensorlite.backends.rocm._launch_shim"
# f, grid x/y/z, block x/y/z, dynamic shared memory, stream, kernel parameters, and where
# the driver's `extra` would be, its launch entry point
CDEF = ("int tl_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, "
        "unsigned shared_mem, void* stream, void** params, void* launch);")
SOURCE = """
typedef int (*tl_launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void*, void**, void**);
static int tl_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared_mem, void* stream, void** params, void* launch)
{
    return ((tl_launch_t)launch)(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, 0);
}
"""


def ffibuilder():
    """The cffi builder of the shim (setup.py compiles it)."""
    import cffi
    builder = cffi.FFI()
    builder.cdef(CDEF)
    builder.set_source(MODULE, SOURCE)
    return builder


def through_shim(ffi, launch):
    """(shim, address of `launch`) where `launch` is a C function of the driver's launch
    signature called through `ffi` in ABI mode and the compiled shim is installed; else None
    (a Python launcher, as the emulated and null platforms have, or no shim)."""
    if os.environ.get("TENSORLITE_LAUNCH_SHIM", "1") == "0":
        return None
    if not isinstance(launch, ffi.CData) or ffi.typeof(launch).kind != "function":
        return None
    shim = _compiled()
    return None if shim is None else (shim.lib.tl_launch, ffi.cast("void*", launch))


def installed() -> bool:
    """Is the compiled shim importable here?"""
    return _compiled() is not None


def _compiled():
    try:
        from . import _launch_shim
    except ImportError:  # built without a C compiler or cffi: ABI mode
        return None
    return _launch_shim
