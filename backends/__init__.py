"""Backends of tensorlite (installed as `tensorlite.backends`).

`cpu` is the numpy reference; `rocm` and `cuda` are the two platforms of the one GPU
backend in `rocm/`. Third-party backends register through the entry-point group
`tensorlite.backends` (value: a factory `ordinal -> BackendDevice`) or `register()`;
`scoped_registry()` undoes the registrations made inside it.

The modules `cuda`, `cudnn` and `mps` here are torch.backends' flags and questions
(`tl.backends.cudnn.benchmark = True`, `tl.backends.mps.is_available()`), not backends.
"""
from tensorlite.backend import (BackendDevice, BackendStorage, available, available_devices,  # noqa: F401
                                get_device, load_entry_points, register, scoped_registry)

from . import cuda, cudnn, mps  # noqa: F401  (torch.backends' flags: tl.backends.cudnn.benchmark, ...)
