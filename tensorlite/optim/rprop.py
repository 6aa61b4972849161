"""Rprop (torch.optim.Rprop)."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops.creation import full_like, ones_like, zeros_like
from ..ops.elementwise import where
from .optimizer import Optimizer


class Rprop(Optimizer):
    """Resilient backpropagation (Riedmiller & Braun), torch's defaults and update: each element's step
    size (starting at lr) is multiplied by etaplus where the gradient g (negated for maximize) kept its
    sign since the last step, by etaminus where it flipped (and that element's g counts as 0, also for
    the next comparison), then clamped to step_sizes; p -= sign(g) * step_size. Only the magnitude-free
    signs are used, so there is no weight decay (as torch's). State: 'step', 'prev', 'step_size'.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0, 1.0]))
    >>> p.grad = tl.tensor([5.0, -0.1])
    >>> tl.optim.Rprop([p], lr=0.25).step(); p.tolist()
    [0.75, 1.25]
    """

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable: bool = False, foreach=None, maximize: bool = False, differentiable: bool = False):
        self._check_settings(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ArgumentError(f"Rprop: invalid etas={tuple(etas)} (must be 0 < etaminus < 1 < etaplus)")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize,
                                      capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(prev=zeros_like(p), step_size=full_like(p, self._lr(group)))

    def _step_one(self, group, p, g, state):
        (minus, plus), (smallest, largest) = group["etas"], group["step_sizes"]
        agreement = (g * state["prev"]).sign()
        factor = where(agreement > 0, plus, where(agreement < 0, minus, ones_like(g)))
        step_size = state["step_size"]
        step_size.mul_(factor).clamp_(smallest, largest)
        g = where(agreement < 0, 0.0, g)
        p.sub_(g.sign() * step_size)
        state["prev"].copy_(g)
