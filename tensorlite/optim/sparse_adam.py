"""SparseAdam (torch.optim.SparseAdam): refused, as tensorlite has no sparse gradients."""
from __future__ import annotations

from ..errors import TensorliteError
from .optimizer import Optimizer


class SparseAdam(Optimizer):
    """torch's SparseAdam updates only the rows a sparse gradient names (nn.Embedding(sparse=True)) and
    refuses dense gradients. tensorlite has no sparse tensors, so every gradient is dense: constructing
    one raises, naming the alternatives (Adam: the same update on every row each step).

    >>> import tensorlite as tl
    >>> try:
    ...     tl.optim.SparseAdam([tl.nn.Parameter(tl.zeros(2))])
    ... except tl.TensorliteError as e:
    ...     print(str(e).split(':')[0])
    SparseAdam
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, maximize: bool = False):
        raise TensorliteError("SparseAdam: tensorlite has no sparse gradients (nn.Embedding(sparse=True) does not "
                              "exist here), and SparseAdam refuses dense ones, as torch's; use optim.Adam (or "
                              "AdamW), which updates every row at each step")
