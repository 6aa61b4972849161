"""Gradient utilities (torch.nn.utils names)."""
from __future__ import annotations

import math

from ..autograd import no_grad
from ..errors import TensorliteError
from ..ops.creation import tensor
from ..ops.joins import stack
from ..tensor import Tensor


def _grads(parameters):  # the parameters (a tensor or an iterable of them) that have a gradient
    return [p for p in ([parameters] if isinstance(parameters, Tensor) else parameters) if p.grad is not None]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False):
    """Scale all gradients together so their joint norm is at most max_norm; returns the
    norm before clipping as a 0-d tensor. The scale stays on the device (no host sync)
    unless error_if_nonfinite asks for a check."""
    params = _grads(parameters)
    if not params:
        return tensor(0.0)
    norm_type = float(norm_type)
    with no_grad():
        if math.isinf(norm_type):
            norms = [p.grad.abs().amax().float() for p in params]
            total = norms[0] if len(norms) == 1 else stack(norms).amax()
        else:
            sums = [(p.grad.float().square() if norm_type == 2.0 else p.grad.float().abs() ** norm_type).sum()
                    for p in params]
            total = (sums[0] if len(sums) == 1 else stack(sums).sum()) ** (1.0 / norm_type)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise TensorliteError(f"clip_grad_norm_: the total norm of order {norm_type} is non-finite")
        scale = (float(max_norm) / (total + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad = p.grad * scale._cast(p.grad.dtype)
    return total


def clip_grad_value_(parameters, clip_value: float):
    """Clamp every parameter's .grad to [-clip_value, clip_value], as torch.nn.utils.clip_grad_value_."""
    with no_grad():
        for p in _grads(parameters):
            p.grad = p.grad.clamp(-clip_value, clip_value)
