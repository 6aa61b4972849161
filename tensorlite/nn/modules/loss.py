"""Loss modules, as torch.nn.modules.loss: each holds its reduction and settings and calls
the nn.functional loss of its name."""
from __future__ import annotations

import warnings

from .. import functional as F
from .module import Module


class _Loss(Module):
    """forward(input, target) = F.<fname>(input, target, reduction=..., **{a: self.a for a in args})."""
    fname, args = "", ()

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        if size_average is not None or reduce is not None:  # torch's deprecated pair, as torch maps it
            reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
            warnings.warn(f"size_average and reduce are deprecated: use reduction={reduction!r}", UserWarning, 3)
        self.reduction = reduction

    def forward(self, input, target):
        """The loss of input against target (F.<loss> with this module's reduction and settings)."""
        kw = {a: getattr(self, a) for a in self.args}
        return getattr(F, self.fname)(input, target, reduction=self.reduction, **kw)


class _WeightedLoss(_Loss):
    args = ("weight",)

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)  # in state_dict when given, as torch's


class L1Loss(_Loss):
    """Mean absolute error |input - target| (reduced)."""
    fname = "l1_loss"


class MSELoss(_Loss):
    """Mean squared error (input - target)^2 (reduced).

    >>> import tensorlite as tl
    >>> tl.nn.MSELoss()(tl.tensor([1.0, 2.0]), tl.tensor([1.0, 4.0])).item()
    2.0
    """
    fname = "mse_loss"


class SmoothL1Loss(_Loss):
    """Quadratic below beta, linear above: 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta."""
    fname, args = "smooth_l1_loss", ("beta",)

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta


class HuberLoss(_Loss):
    """0.5 d^2 if |d| < delta else delta (|d| - 0.5 delta)."""
    fname, args = "huber_loss", ("delta",)

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta


class KLDivLoss(_Loss):
    """target * (log target - input) for log-probabilities `input` (log_target: target is log too)."""
    fname, args = "kl_div", ("log_target",)

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities `input` against targets in [0, 1]."""
    fname = "binary_cross_entropy"


class BCEWithLogitsLoss(_Loss):
    """sigmoid + binary cross entropy in one numerically stable op; pos_weight weighs the positives."""
    fname, args = "binary_cross_entropy_with_logits", ("weight", "pos_weight")

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities (N, C, ...) at class ids (N, ...)."""
    fname, args = "nll_loss", ("weight", "ignore_index")

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index


class CrossEntropyLoss(_WeightedLoss):
    """log_softmax + NLL of logits (N, C, ...) at class ids (N, ...) or class probabilities.

    >>> import tensorlite as tl
    >>> loss = tl.nn.CrossEntropyLoss(ignore_index=0)
    >>> round(loss(tl.tensor([[0.0, 0.0], [5.0, 5.0]]), tl.tensor([0, 1])).item(), 4)
    0.6931
    """
    fname, args = "cross_entropy", ("weight", "ignore_index", "label_smoothing")

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
