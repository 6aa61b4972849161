"""Losses with torch.nn.functional's names, arguments and reductions. cross_entropy over
class ids is a fused op (log-softmax + NLL forward, one-kernel backward); the rest are
composites of Tensor ops computed in float32 for 16-bit inputs and rounded once."""
from __future__ import annotations

import math
import warnings

from ... import amp
from ... import dtype as dtypes
from ...autograd import no_grad
from ...custom_op import custom_op, result, storage_and_layout
from ...errors import ArgumentError, DTypeError, IndexOutOfRange, ShapeError, TensorliteError, describe
from ...ops.creation import full_like, tensor
from ...ops.elementwise import maximum, minimum, where
from ...tensor import Tensor
from .common import check_positive, log1p_exp, upcast
from .activation import log_softmax
from .distance import pairwise_distance


def _reduce_loss(op, loss, reduction, denominator=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean() if denominator is None else loss.sum() / denominator
    if reduction == "batchmean":  # kl_div's: the sum over the batch size
        return loss.sum() / (loss.shape[0] if loss.ndim else 1)
    raise ArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _reduction(op, size_average, reduce, reduction, extra=()):
    """PyTorch's reduction argument, checked before any work; the deprecated size_average /
    reduce pair overrides it as in torch."""
    if size_average is not None or reduce is not None:
        warnings.warn(f"{op}: size_average and reduce are deprecated, use reduction", UserWarning, stacklevel=3)
        reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
    if reduction not in ("none", "mean", "sum") + extra:
        raise ArgumentError(f"{op}: reduction must be one of {', '.join(('none', 'mean', 'sum') + extra)}, "
                            f"got {reduction!r}")
    return reduction


def _loss(op, input, target, reduction, fn, weight=None, shapes="warn", weight_rule=None):
    """reduction(fn(input, target) * weight) in float32 for f16/bf16, rounded once to the
    operands' dtype. A target of another shape broadcasts with PyTorch's warning
    (shapes='warn'), raises (shapes='raise', as torch's BCE) or just broadcasts (None). The
    weight broadcasts (weight_rule None) or has the input's shape, and 'mean' then divides by
    its sum (weight_rule 'sum': l1_loss, mse_loss) or by the count ('mean': huber_loss)."""
    if not isinstance(input, Tensor):
        raise DTypeError(f"{op}: input must be a Tensor, got {type(input).__name__}")
    target = target if isinstance(target, Tensor) else tensor(target, dtype=input.dtype, device=input._device)
    input, target = amp.full_precision(input, target)
    if weight_rule and weight is not None and tuple(getattr(weight, "shape", ())) != input.shape:
        raise ShapeError(f"{describe(op, input=input, weight=weight)}: weight must have the input's shape")
    if input.shape != target.shape and shapes == "raise":
        raise ShapeError(f"{describe(op, input=input, target=target)}: target must have the input's shape")
    if input.shape != target.shape and shapes == "warn":
        warnings.warn(f"{op}: target size {target.shape} differs from input size {input.shape}: the two "
                      "broadcast, which is likely not what you want (as PyTorch warns)", UserWarning, stacklevel=3)
    try:
        loss = fn(upcast(input), upcast(target))
        loss = loss if weight is None else loss * upcast(weight)
    except TensorliteError as e:  # named as the loss, not the op inside it
        raise type(e)(f"{op}: {e}") from None
    denominator = upcast(weight).sum() if weight_rule == "sum" and weight is not None else None
    return _reduce_loss(op, loss, reduction, denominator)._cast(dtypes.promote_types(input.dtype, target.dtype))


def _classes_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the fused log_softmax and gather work on the last dim."""
    return x.permute((0,) + tuple(range(2, x.ndim)) + (1,)) if x.ndim > 2 else x


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean"):
    """Negative log-likelihood of log-probabilities `input` (N, C, ...) at class ids `target` (N, ...).

    >>> import tensorlite as tl; tl.nn.functional.nll_loss(tl.tensor([[-1.0, -2.0]]), tl.tensor([1])).item()
    2.0"""
    input, = amp.full_precision(input)
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    if not isinstance(input, Tensor) or input.ndim == 0:
        raise ShapeError(f"{describe('nll_loss', input=input)}: expected log-probabilities (C,), (N, C) or (N, C, ...)")
    classes = input.shape[1 if input.ndim > 1 else 0]
    if weight is not None and tuple(getattr(weight, "shape", ())) != (classes,):
        raise ShapeError(f"{describe('nll_loss', input=input, weight=weight)}: weight must be 1-D with one "
                         f"value per class ({classes})")
    target = target if isinstance(target, Tensor) else tensor(target, device=input._device)
    if target.dtype.is_floating_point:
        raise DTypeError(f"{describe('nll_loss', input=input, target=target)}: target must hold class ids (integers)")
    return _nll(_classes_last(input), target, weight, ignore_index, reduction, 0.0, "nll_loss")


def _nll(logp, target, weight, ignore_index, reduction, label_smoothing, op):
    """logp has the classes on its last dim; target holds class ids or class probabilities."""
    if logp.dtype.itemsize < 4:  # f16/bf16: reduce in float32 (bf16 counts are exact only to 256)
        up = [None if t is None else t.float() if t.dtype.is_floating_point else t for t in (logp, target, weight)]
        return _nll(*up, ignore_index, reduction, label_smoothing, op)._cast(logp.dtype)
    n_classes = logp.shape[-1]
    if target.dtype.is_floating_point:  # class probabilities, same shape as logp
        if target.shape != logp.shape:
            raise ShapeError(f"{describe(op, input=logp, target=target)}: probability targets need the input's shape")
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / n_classes
        loss = -((logp * target if weight is None else logp * target * weight).sum(-1))
        return _reduce_loss(op, loss, reduction)
    if target.shape != logp.shape[:-1]:
        raise ShapeError(f"{describe(op, input=logp, target=target)}: target must have shape {tuple(logp.shape[:-1])}")
    valid = target != ignore_index
    safe = where(valid, target, 0)._cast(dtypes.int64)
    try:
        picked = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    except IndexOutOfRange as e:  # named as the loss, not its gather
        raise IndexOutOfRange(f"{op}: a target is not a class id: {e}") from None
    w_t = None if weight is None else weight.index_select(0, safe.reshape(-1)).reshape(safe.shape)
    w = valid._cast(logp.dtype) if w_t is None else where(valid, w_t, 0.0)  # each target's weight, 0 if ignored
    if label_smoothing:  # torch: (1 - eps) * nll + eps * mean over classes of -logp (weighted)
        smooth = -(logp if weight is None else logp * weight).sum(-1) / n_classes
        picked = (picked if w_t is None else picked * w_t) * (1.0 - label_smoothing) + smooth * label_smoothing
    elif w_t is not None:
        picked = picked * w
    return _reduce_loss(op, where(valid, picked, 0.0), reduction, w.sum())


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """torch.nn.functional.cross_entropy: input logits (N, C) / (N, C, d1, ...) / (C,), target
    class ids (int) or class probabilities (float, input's shape). 'mean' over class ids
    divides by the (weighted) count of targets that are not ignore_index. Class ids without
    label smoothing take the fused op (storage cross_entropy / cross_entropy_backward);
    the rest, the composite `cross_entropy_slow`.

    >>> import tensorlite as tl; round(tl.nn.functional.cross_entropy(tl.zeros(1, 4), tl.tensor([0])).item(), 4)
    1.3863"""
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    input, = amp.full_precision(input)
    if not isinstance(input, Tensor) or input.ndim == 0 or input.shape[1 if input.ndim > 1 else 0] == 0:
        raise ShapeError(f"{describe('cross_entropy', input=input)}: expected logits (C,), (N, C) or (N, C, ...), "
                         "C > 0")
    if not (isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing <= 1.0):
        raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if not isinstance(target, Tensor):
        target = tensor(target, device=input._device)
    classes = input.shape[1 if input.ndim > 1 else 0]
    if weight is not None and tuple(getattr(weight, "shape", ())) != (classes,):
        raise ShapeError(f"{describe('cross_entropy', input=input, weight=weight)}: weight must be 1-D with one "
                         f"value per class ({classes})")
    if target.dtype.is_floating_point and tuple(target.shape) != tuple(input.shape):
        ids = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
        raise DTypeError(f"{describe('cross_entropy', input=input, target=target)}: class indices must be integers "
                         f"(int64) of shape {tuple(ids)}, got {target.dtype.name}; float targets are class "
                         f"probabilities and need the input's shape {tuple(input.shape)}")
    if not label_smoothing and not target.dtype.is_floating_point:
        logits, tgt = (input.unsqueeze(0), target.unsqueeze(0)) if input.ndim == 1 else (input, target)
        loss = _cross_entropy_fused(_classes_last(logits), tgt, weight, ignore_index, reduction)
        if loss is not None:
            return loss.squeeze(0) if input.ndim == 1 and reduction == "none" else loss
    return cross_entropy_slow(input, target, weight, ignore_index, reduction, label_smoothing)


def _cross_entropy_fused(x, tgt, weight, ignore_index, reduction):
    """Log-softmax + NLL of logits x (classes on the last dim) at integer class ids `tgt` as
    the storage's fused cross_entropy (per-row loss, logsumexp and target weight in f32,
    f64 for f64) with its one-kernel backward (softmax - onehot, scaled); the reduction
    sums in that dtype and rounds once to x's dtype. None where it does not take the case
    (the caller runs the composite): float targets, a weight that needs a gradient or has
    another dtype, shapes the composite will reject."""
    if reduction not in ("none", "sum", "mean") or not x.dtype.is_floating_point or tgt.dtype.is_floating_point \
            or tgt._device is not x._device or tuple(tgt.shape) != tuple(x.shape[:-1]) or (weight is not None and (
                weight.requires_grad or weight.dtype is not x.dtype or weight._device is not x._device
                or tuple(weight.shape) != (x.shape[-1],))):
        return None
    t = tgt if tgt.dtype is dtypes.int64 else tgt._cast(dtypes.int64)
    (xs, xl), (ts, tgl) = storage_and_layout(x), storage_and_layout(t)
    loss, lse, wt = xs.cross_entropy(xl, ts, tgl, *storage_and_layout(weight), ignore_index)
    acc = loss.dtype

    def grad(g):
        gs, gl = storage_and_layout(g._cast(acc))
        gx = xs.cross_entropy_backward(xl, ts, tgl, lse, wt, gs, gl)
        return (result(gx, x.shape, x.dtype),)
    rows = custom_op(result(loss, t.shape, acc), (x,), grad, "cross_entropy", (x, t))
    if reduction == "sum":
        rows = rows.sum()
    elif reduction == "mean":  # over the (weighted) count of targets that are not ignore_index
        rows = rows.sum() / result(wt, t.shape, acc).sum()
    return rows._cast(x.dtype)


def cross_entropy_slow(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                       label_smoothing: float = 0.0):
    """Composite reference of cross_entropy (log_softmax + gather + reductions as Tensor
    ops); cross_entropy itself takes this path for the cases the fused op does not cover."""
    if not isinstance(target, Tensor):
        target = tensor(target, device=input._device)
    logits, tgt = (input.unsqueeze(0), target.unsqueeze(0)) if input.ndim == 1 else (input, target)
    if tgt.dtype.is_floating_point:
        tgt = _classes_last(tgt)
    loss = _nll(log_softmax(_classes_last(logits), -1), tgt, weight, ignore_index, reduction, label_smoothing,
                "cross_entropy")
    return loss.squeeze(0) if input.ndim == 1 and reduction == "none" else loss


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error (input - target)^2, reduced.

    >>> import tensorlite as tl; tl.nn.functional.mse_loss(tl.tensor([1.0, 2.0]), tl.tensor([2.0, 4.0])).item()
    2.5"""
    return _loss("mse_loss", input, target, _reduction("mse_loss", size_average, reduce, reduction),
                 lambda x, t: (x - t).square(), weight, weight_rule="sum")


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean absolute error |input - target|, reduced.

    >>> import tensorlite as tl; tl.nn.functional.l1_loss(tl.tensor([1.0, 2.0]), tl.tensor([2.0, 4.0])).item()
    1.5"""
    return _loss("l1_loss", input, target, _reduction("l1_loss", size_average, reduce, reduction),
                 lambda x, t: (x - t).abs(), weight, weight_rule="sum")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta.

    >>> import tensorlite as tl; tl.nn.functional.smooth_l1_loss(tl.tensor([0.5, 3.0]), tl.zeros(2)).item()
    1.3125"""
    check_positive("smooth_l1_loss", "beta", beta, zero_ok=True)

    def fn(x, t):
        d = (x - t).abs()
        return d if beta == 0 else where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _loss("smooth_l1_loss", input, target, _reduction("smooth_l1_loss", size_average, reduce, reduction), fn)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta).

    >>> import tensorlite as tl; tl.nn.functional.huber_loss(tl.tensor([0.5, 3.0]), tl.zeros(2)).item()
    1.3125"""
    check_positive("huber_loss", "delta", delta)

    def fn(x, t):
        d = (x - t).abs()
        return where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _loss("huber_loss", input, target, _reduction("huber_loss", None, None, reduction), fn, weight,
                 weight_rule="mean")


def _bce(x, t):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100, with PyTorch's gradients
    (finite at x = 0 or 1, where the composite's would be 0 * inf)."""
    with no_grad():
        lx, l1x = x.log().clamp(min=-100.0), (1.0 - x).log().clamp(min=-100.0)
        loss = -(t * lx + (1.0 - t) * l1x)
    return custom_op(loss, (x, t), lambda g: (g * (x - t) / maximum(x * (1.0 - x), 1e-12), g * (l1x - lx)),
                     "binary_cross_entropy", (x, t))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """Binary cross entropy of probabilities `input` in [0, 1] (checked on cpu, as PyTorch's; on a GPU
    the check would wait for the device at every call, so there a value outside gives nan).

    >>> import tensorlite as tl; round(tl.nn.functional.binary_cross_entropy(tl.tensor([0.5]), tl.ones(1)).item(), 4)
    0.6931"""
    op = "binary_cross_entropy"
    reduction = _reduction(op, size_average, reduce, reduction)
    if isinstance(input, Tensor) and input.numel() and input.device == "cpu":
        with no_grad():
            if (~((input >= 0) & (input <= 1))).sum().item():
                raise ArgumentError(f"{describe(op, input=input)}: all elements of input should be between 0 and 1")
    return _loss(op, input, target, reduction, _bce, weight, shapes="raise")


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """Binary cross entropy of sigmoid(input), computed stably from the logits; pos_weight
    scales the positive term (one value per class, broadcast over the last dim).

    >>> import tensorlite as tl; x = tl.zeros(1)
    >>> round(tl.nn.functional.binary_cross_entropy_with_logits(x, x + 1).item(), 4)
    0.6931"""
    def fn(x, t):
        sp = log1p_exp(-x)  # -log sigmoid(x)
        return (1.0 - t) * x + (sp if pos_weight is None else sp * ((upcast(pos_weight) - 1.0) * t + 1.0))
    op = "binary_cross_entropy_with_logits"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction), fn, weight, shapes="raise")


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """KL divergence sum(target * (log target - input)) of log-probabilities `input`;
    reduction='batchmean' divides the sum by the batch size (the KL divergence proper).

    >>> import tensorlite as tl; tl.nn.functional.kl_div(tl.zeros(2), tl.ones(2), reduction="batchmean").item()
    0.0"""
    reduction = _reduction("kl_div", size_average, reduce, reduction, ("batchmean",))
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the sum by the number of elements, not the batch size; "
                      "'batchmean' gives the KL divergence (as PyTorch warns)", UserWarning, stacklevel=2)

    def fn(x, t):  # t log t is 0 at t = 0 (xlogy)
        return t.exp() * (t - x) if log_target else t * (where(t == 0, 1.0, t).log() - x)
    return _loss("kl_div", input, target, reduction, fn, shapes=None)


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean"):
    """Poisson negative log-likelihood: exp(input) - target * input (log_input), or
    input - target * log(input + eps); `full` adds Stirling's term where target > 1.

    >>> import tensorlite as tl; tl.nn.functional.poisson_nll_loss(tl.zeros(2), tl.ones(2)).item()
    1.0"""
    def fn(x, t):
        loss = x.exp() - t * x if log_input else x - t * (x + eps).log()
        if full:
            t1 = where(t > 1, t, 1.0)
            loss = loss + where(t > 1, t * t1.log() - t + 0.5 * (t1 * (2 * math.pi)).log(), 0.0)
        return loss
    op = "poisson_nll_loss"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction), fn, shapes=None)


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
    """Gaussian negative log-likelihood 0.5 (log var + (input - target)^2 / var), var clamped
    at eps (the clamp passes the gradient through, as PyTorch's).

    >>> import tensorlite as tl; tl.nn.functional.gaussian_nll_loss(tl.zeros(2), tl.zeros(2), tl.ones(2)).item()
    0.0"""
    op = "gaussian_nll_loss"
    reduction = _reduction(op, None, None, reduction)
    var = var if isinstance(var, Tensor) else full_like(input, float(var))
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:  # one variance per sample
            var = var.unsqueeze(-1)
        elif not (var.shape[:-1] == input.shape[:-1] and var.shape[-1:] == (1,)):
            raise ShapeError(f"{describe(op, input=input, var=var)}: var is of incorrect size")
    if (var < 0).sum().item():
        raise ArgumentError(f"{describe(op, var=var)}: var has negative entries")

    def fn(x, t):
        v = upcast(var)
        v = v + (maximum(v.detach(), eps) - v.detach())
        return ((x - t).square() / v + v.log()) * 0.5 + (0.5 * math.log(2 * math.pi) if full else 0.0)
    return _loss(op, input, target, reduction, fn, shapes=None)


def _paired(op, x1, x2, target, reduction, fn, ndims=(1, 2)):
    """reduction(fn(x1, x2, target)) of the ranking / embedding losses, f16/bf16 in float32."""
    if not all(isinstance(t, Tensor) for t in (x1, x2)) or x1.ndim != x2.ndim or x1.ndim not in ndims:
        raise ShapeError(f"{describe(op, input1=x1, input2=x2)}: inputs must be tensors of the same number of "
                         f"dims, one of {ndims}")
    target = target if isinstance(target, Tensor) else tensor(target, dtype=x1.dtype, device=x1._device)
    try:
        loss = fn(upcast(x1), upcast(x2), upcast(target))
    except TensorliteError as e:
        raise type(e)(f"{op}: {e}") from None
    return _reduce_loss(op, loss, reduction)._cast(dtypes.promote_types(x1.dtype, x2.dtype))


def cosine_embedding_loss(input1, input2, target, margin: float = 0, size_average=None, reduce=None,
                          reduction: str = "mean"):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1 (cos over the last dim).

    >>> import tensorlite as tl; x = tl.ones(1, 2)
    >>> tl.nn.functional.cosine_embedding_loss(x, x, tl.tensor([-1])).item()
    1.0"""
    def fn(a, b, t):
        cos = (a * b).sum(-1) / (((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12)).sqrt()
        return where(t == 1, 1.0 - cos, 0.0) + where(t == -1, (cos - margin).clamp(min=0.0), 0.0)
    op = "cosine_embedding_loss"
    return _paired(op, input1, input2, target, _reduction(op, size_average, reduce, reduction), fn)


def margin_ranking_loss(input1, input2, target, margin: float = 0, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """max(0, -target * (input1 - input2) + margin).

    >>> import tensorlite as tl; x = tl.tensor([1.0])
    >>> tl.nn.functional.margin_ranking_loss(x, x + 1, x).item()
    1.0"""
    op = "margin_ranking_loss"
    return _paired(op, input1, input2, target, _reduction(op, size_average, reduce, reduction),
                   lambda a, b, t: (-t * (a - b) + margin).clamp(min=0.0), (0, 1, 2, 3, 4, 5, 6))


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """input where target is 1, max(0, margin - input) where it is -1.

    >>> import tensorlite as tl; x, y = tl.tensor([0.25, 2.0]), tl.tensor([-1.0, 1.0])
    >>> tl.nn.functional.hinge_embedding_loss(x, y).item()
    1.375"""
    def fn(x, t):
        return where(t != 1, (margin - x).clamp(min=0.0), 0.0) + where(t != -1, x, 0.0)
    op = "hinge_embedding_loss"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction), fn, shapes=None)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """log(1 + exp(-target * input)).

    >>> import tensorlite as tl; round(tl.nn.functional.soft_margin_loss(tl.zeros(1), tl.ones(1)).item(), 4)
    0.6931"""
    op = "soft_margin_loss"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction),
                 lambda x, t: log1p_exp(-t * x), shapes="raise")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean"):
    """Per-class binary cross entropy of sigmoid(input), averaged over the classes (last dim).

    >>> import tensorlite as tl; x = tl.zeros(1, 2)
    >>> round(tl.nn.functional.multilabel_soft_margin_loss(x, x + 1).item(), 4)
    0.6931"""
    op = "multilabel_soft_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)

    def fn(x, t):
        loss = t * log1p_exp(-x) + (1.0 - t) * log1p_exp(x)
        loss = loss if weight is None else loss * upcast(weight)
        return loss.sum(-1) / x.shape[-1]
    return _loss(op, input, target, reduction, fn, shapes="raise")


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise p-norm distance.

    >>> import tensorlite as tl; x = tl.zeros(1, 2)
    >>> tl.nn.functional.triplet_margin_loss(x, x, x + 1).item()
    0.0"""
    op = "triplet_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)
    if not isinstance(negative, Tensor) or getattr(anchor, "ndim", None) != negative.ndim:
        raise ShapeError(f"{describe(op, anchor=anchor, negative=negative)}: inputs must have the same number of dims")

    def fn(a, pos, neg):
        d_neg = pairwise_distance(a, neg, p, eps)
        if swap:
            d_neg = minimum(d_neg, pairwise_distance(pos, neg, p, eps))
        return (margin + pairwise_distance(a, pos, p, eps) - d_neg).clamp(min=0.0)
    return _paired(op, anchor, positive, negative, reduction, fn)
