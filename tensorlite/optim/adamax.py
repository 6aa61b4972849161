"""Adamax (torch.optim.Adamax)."""
from __future__ import annotations

from ..ops.creation import zeros_like
from ..ops.elementwise import maximum
from .optimizer import Optimizer


class Adamax(Optimizer):
    """Adamax, Adam's infinity-norm variant (Kingma & Ba), torch's defaults and update: with g the gradient
    (negated for maximize, plus weight_decay * p), m = b1 * m + (1 - b1) * g; u = max(b2 * u, |g| + eps);
    p -= lr / (1 - b1^t) * m / u. State: 'step', 'exp_avg' (m), 'exp_inf' (u).

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([4.0])
    >>> tl.optim.Adamax([p], lr=0.5).step(); round(p.item(), 4)  # the first step moves by lr
    0.5
    """

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        self._check_settings(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(exp_avg=zeros_like(p), exp_inf=zeros_like(p))

    def _step_one(self, group, p, g, state):
        b1, b2 = group["betas"]
        m, u = state["exp_avg"], state["exp_inf"]
        m.lerp_(g, 1.0 - b1)
        u.copy_(maximum(u.affine(b2, 0.0), g.abs().affine(1.0, group["eps"])))
        p.sub_((m / u).affine(self._lr(group) / (1.0 - b1 ** state["step"]), 0.0))
