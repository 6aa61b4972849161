"""torch.backends.mps: Apple's Metal devices, which tensorlite has no backend for."""


def is_available() -> bool:
    """Whether an `mps` device can run here: never in tensorlite (its devices: tl.backends.available())."""
    return False


def is_built() -> bool:
    """Whether tensorlite has an `mps` backend: it has not."""
    return False
