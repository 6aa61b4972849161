"""RAdam (torch.optim.RAdam)."""
from __future__ import annotations

import math

from ..ops.creation import zeros_like
from .optimizer import Optimizer


class RAdam(Optimizer):
    """Rectified Adam (Liu et al. 2019), torch's defaults and update: with g the gradient (negated for
    maximize; weight decay added to it, or with decoupled_weight_decay p *= 1 - lr * weight_decay),
    m, v = EMAs of g and g^2, m' = m / (1 - b1^t), rho_inf = 2 / (1 - b2) - 1,
    rho_t = rho_inf - 2 t b2^t / (1 - b2^t). While rho_t <= 5, p -= lr * m' (SGD with momentum); after,
    p -= lr * m' * sqrt(1 - b2^t) / (sqrt(v) + eps) * r_t, r_t the variance rectification
    sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)).
    State: 'step', 'exp_avg', 'exp_avg_sq'.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([3.0])
    >>> tl.optim.RAdam([p], lr=0.1).step(); round(p.item(), 4)  # first steps: lr * m'
    0.7
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        self._check_settings(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(exp_avg=zeros_like(p), exp_avg_sq=zeros_like(p))

    def _step_one(self, group, p, g, state):
        t, (b1, b2), lr = state["step"], group["betas"], self._lr(group)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.lerp_(g, 1.0 - b1)
        v.mul_(b2).add_((g * g).affine(1.0 - b2, 0.0))
        update = (m / (1.0 - b1 ** t)).affine(lr, 0.0)
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        rho_t = rho_inf - 2.0 * t * b2 ** t / (1.0 - b2 ** t)
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive = v.sqrt().affine(1.0, group["eps"]).reciprocal().affine(math.sqrt(1.0 - b2 ** t), 0.0)
            update = (update * adaptive).affine(rect, 0.0)
        p.sub_(update)
