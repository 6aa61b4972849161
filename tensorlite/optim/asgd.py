"""ASGD (torch.optim.ASGD)."""
from __future__ import annotations

from ..ops.creation import zeros_like
from .optimizer import Optimizer


class ASGD(Optimizer):
    """Averaged SGD (Polyak & Juditsky), torch's defaults and update: with g the gradient (negated for
    maximize, plus weight_decay * p), p = p * (1 - lambd * eta) - eta * g; the average ax += mu * (p - ax)
    (ax = p while mu is 1); then eta = lr / (1 + lambd * lr * t)^alpha and mu = 1 / max(1, t - t0).
    State: 'step', 'eta', 'mu' (numbers rounded as torch's float32 0-d tensors hold them) and 'ax'.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([2.0])
    >>> opt = tl.optim.ASGD([p], lr=0.25, lambd=0.0)
    >>> opt.step(); p.item(), opt.state[p]['ax'].item()
    (0.5, 0.5)
    """

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0.0, foreach=None, maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False):
        self._check_settings(lr=lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize, capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(eta=self._scalar_state(self._lr(group)), mu=1.0, ax=zeros_like(p))

    def _step_one(self, group, p, g, state):
        lr, lambd, eta, t = self._lr(group), group["lambd"], state["eta"], state["step"]
        p.mul_(1.0 - lambd * eta)
        p.sub_(g.affine(eta, 0.0))
        if state["mu"] != 1:
            state["ax"].add_((p - state["ax"]).affine(state["mu"], 0.0))
        else:
            state["ax"].copy_(p)
        state["eta"] = self._scalar_state(lr / (1.0 + lambd * lr * t) ** group["alpha"])
        state["mu"] = self._scalar_state(1.0 / max(1.0, t - group["t0"]))
