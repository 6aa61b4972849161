"""Adadelta (torch.optim.Adadelta)."""
from __future__ import annotations

from ..ops.creation import zeros_like
from .optimizer import Optimizer


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012), torch's defaults and update: with g the gradient (negated for maximize,
    plus weight_decay * p), v = rho * v + (1 - rho) * g^2; delta = sqrt(u + eps) / sqrt(v + eps) * g;
    u = rho * u + (1 - rho) * delta^2; p -= lr * delta. State: 'step', 'square_avg' (v), 'acc_delta' (u).

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([2.0])
    >>> tl.optim.Adadelta([p], rho=0.0, eps=0.01).step(); round(p.item(), 3)  # 1 - 2 * sqrt(0.01 / 4.01)
    0.9
    """

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        self._check_settings(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(square_avg=zeros_like(p), acc_delta=zeros_like(p))

    def _step_one(self, group, p, g, state):
        rho, eps = group["rho"], group["eps"]
        v, u = state["square_avg"], state["acc_delta"]
        v.mul_(rho).add_((g * g).affine(1.0 - rho, 0.0))
        delta = u.affine(1.0, eps).sqrt() / v.affine(1.0, eps).sqrt() * g
        u.mul_(rho).add_((delta * delta).affine(1.0 - rho, 0.0))
        p.sub_(delta.affine(self._lr(group), 0.0))
