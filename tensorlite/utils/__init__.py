"""tensorlite.utils: `data`, the dataset, sampler and loader classes of torch.utils.data (a package
with its submodules)."""
from . import data  # noqa: F401
