"""torch.backends.cudnn's flags, for programs that set them (`torch.backends.cudnn.benchmark = True`).

tensorlite has no cuDNN: its convolutions are its own kernels (or cuBLAS/hipBLAS products), so
is_available() is False and the flags are kept for the program to read back but change nothing.
tensorlite never picks kernels by timing them (what `benchmark` asks), and never uses TF32 for
f32 convolutions (what `allow_tf32` allows).
"""
enabled = True         # torch's defaults
benchmark = False
benchmark_limit = 10
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """Whether cuDNN can be used: never in tensorlite."""
    return False


def version():
    """cuDNN's version, None without cuDNN (as torch's on a build without it)."""
    return None
