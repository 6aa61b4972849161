"""tensorlite.utils: `data`, the dataset, sampler and loader classes of torch.utils.data (a package
with its submodules), and `tensorboard`'s SummaryWriter (import tensorlite.utils.tensorboard: it needs
the optional tensorboard package only when a writer is made)."""
from . import data  # noqa: F401
