"""Backends of tensorlite (installed as `tensorlite.backends`).

`cpu` is the numpy reference; `rocm` and `cuda` are the two platforms of the one GPU
backend in `rocm/`. Third-party backends register through the entry-point group
`tensorlite.backends` (value: a factory `ordinal -> BackendDevice`) or `register()`;
`scoped_registry()` undoes the registrations made inside it.
"""
from tensorlite.backend import (BackendDevice, BackendStorage, available, available_devices,  # noqa: F401
                                get_device, load_entry_points, register, scoped_registry)
