"""tensorlite.utils: `data`, the dataset and loader classes of torch.utils.data."""
from . import data  # noqa: F401
