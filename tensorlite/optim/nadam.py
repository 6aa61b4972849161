"""NAdam (torch.optim.NAdam)."""
from __future__ import annotations

from ..ops.creation import zeros_like
from .optimizer import Optimizer


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat 2016), torch's defaults and update: with g the gradient (negated
    for maximize; weight decay added to it, or with decoupled_weight_decay p *= 1 - lr * weight_decay),
    mu_t = b1 * (1 - 0.5 * 0.96^(t * momentum_decay)), P = mu_1 * ... * mu_t; m, v = EMAs of g and g^2;
    d = sqrt(v / (1 - b2^t)) + eps;
    p -= lr * (1 - mu_t) / (1 - P) * g / d + lr * mu_{t+1} / (1 - P * mu_{t+1}) * m / d.
    State: 'step', 'mu_product' (P, rounded as torch's float32 0-d tensor holds it), 'exp_avg', 'exp_avg_sq'.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([3.0])
    >>> tl.optim.NAdam([p], lr=0.1).step(); round(p.item(), 3)  # 1 - 0.1 - 0.1 * 0.45 / (1 - 0.45^2) * 0.1
    0.894
    """

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        self._check_settings(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(mu_product=1.0, exp_avg=zeros_like(p), exp_avg_sq=zeros_like(p))

    def _step_one(self, group, p, g, state):
        t, (b1, b2), lr, decay = state["step"], group["betas"], self._lr(group), group["momentum_decay"]
        mu, mu_next = (b1 * (1.0 - 0.5 * 0.96 ** (n * decay)) for n in (t, t + 1))
        product = state["mu_product"] = self._scalar_state(state["mu_product"] * self._scalar_state(mu))
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.lerp_(g, 1.0 - b1)
        v.mul_(b2).add_((g * g).affine(1.0 - b2, 0.0))
        d = (v / (1.0 - b2 ** t)).sqrt().affine(1.0, group["eps"])
        p.sub_((g / d).affine(lr * (1.0 - mu) / (1.0 - product), 0.0))
        p.sub_((m / d).affine(lr * mu_next / (1.0 - product * mu_next), 0.0))
