"""setuptools reads the project from pyproject.toml; this file adds one optional C extension,
the compiled launch shim (backends/rocm/launch_shim.py says why), built through cffi's API mode.
It is optional: without cffi or a C compiler at install the build warns and goes on, and
launches go through cffi's ABI mode."""
import importlib.util
import os

from setuptools import setup


def _launch_shim_extension():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("_tl_launch_shim_build",
                                                  os.path.join(here, "backends", "rocm", "launch_shim.py"))
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    try:
        builder = shim.ffibuilder()
    except ImportError:  # no cffi in the build environment
        return []
    ext = builder.distutils_extension(os.path.join(here, "build", "cffi"), verbose=False)
    ext.optional = True  # a failed compile is a warning, not a failed install
    return [ext]


setup(ext_modules=_launch_shim_extension())
