"""L-BFGS (torch.optim.LBFGS) with torch's strong-Wolfe line search."""
from __future__ import annotations

import math
from functools import partial

from ..autograd import no_grad
from ..errors import ArgumentError
from ..ops.creation import zeros
from ..ops.joins import cat
from ..tensor import Tensor
from .optimizer import Optimizer


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to
    `bounds` (default: between x1 and x2); their midpoint where the cubic has no minimum."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """torch's line search along d from the point of loss f, flat gradient g and slope gtd = g.d:
    brackets a step t satisfying the strong Wolfe conditions (sufficient decrease c1, curvature c2),
    then zooms in by cubic interpolation. evaluate(t) -> (loss, flat gradient, slope) at x + t d.
    Returns (loss, flat gradient, t, evaluations)."""
    d_norm = d.abs().max().item()
    f_new, g_new, gtd_new = evaluate(t)
    evals, ls_iter, done = 1, 0, False
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    bracket = None
    while ls_iter < max_ls:  # bracketing phase
        overshot = f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev)  # not enough decrease
        if not overshot and abs(gtd_new) <= -c2 * gtd:  # both conditions hold at t
            bracket, bracket_f, bracket_g, done = [t], [f_new], [g_new], True
            break
        if overshot or gtd_new >= 0:  # or the slope turned: a minimum lies between t_prev and t
            bracket, bracket_f, bracket_g = [t_prev, t], [f_prev, f_new], [g_prev, g_new]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        t_prev, t = t, _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                                          bounds=(t + 0.01 * (t - t_prev), t * 10))
        f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
        f_new, g_new, gtd_new = evaluate(t)
        evals += 1
        ls_iter += 1
    if ls_iter == max_ls:  # no bracket found: the best of the start and the last try
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]
    insufficient_progress = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:  # zoom phase
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        top, bottom = max(bracket), min(bracket)
        eps = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < eps:  # too close to an end: move away from it, unless progress was fine
            if insufficient_progress or t >= top or t <= bottom:
                t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
                insufficient_progress = False
            else:
                insufficient_progress = True
        else:
            insufficient_progress = False
        f_new, g_new, gtd_new = evaluate(t)
        evals += 1
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high], bracket_g[high], bracket_gtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low], bracket_g[low], bracket_gtd[low] = t, f_new, g_new, gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evals


class LBFGS(Optimizer):
    """L-BFGS (torch.optim.LBFGS, after minFunc): step(closure) runs up to max_iter quasi-Newton iterations
    (max_eval closure calls), each a direction from the last history_size curvature pairs and a step of lr
    (the first one scaled to min(1, 1 / |g|_1) * lr), or of torch's strong-Wolfe line search with
    line_search_fn='strong_wolfe'; it stops early where the gradient's largest element is at most
    tolerance_grad or the loss or the step changes less than tolerance_change. One parameter group, its
    parameters on one device; the state (torch's keys: 'func_evals', 'n_iter', 'd', 't', 'old_dirs',
    'old_stps', 'ro', 'H_diag', 'prev_flat_grad', 'prev_loss', 'al') is the first parameter's; 'ro', 'al'
    and 'H_diag' are 0-d tensors in the parameters' dtype, as torch's. Each iteration reads a few dot
    products and norms on the host, to branch on them (as torch's does).

    >>> import tensorlite as tl
    >>> x = tl.nn.Parameter(tl.tensor([3.0, -1.0]))
    >>> opt = tl.optim.LBFGS([x], line_search_fn='strong_wolfe')
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((x - tl.tensor([1.0, 2.0])) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> _ = opt.step(closure); [round(v, 4) for v in x.tolist()]
    [1.0, 2.0]
    """

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval=None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn=None):
        self._check_settings(lr=lr)
        if line_search_fn not in (None, "strong_wolfe"):
            raise ArgumentError(f"LBFGS: line_search_fn={line_search_fn!r}: only 'strong_wolfe' (or None) is "
                                "supported")
        super().__init__(params, dict(lr=lr, max_iter=max_iter,
                                      max_eval=max_iter * 5 // 4 if max_eval is None else max_eval,
                                      tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ArgumentError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _flat_grad(self):  # every parameter's gradient (zeros where none) as one new vector
        return cat([zeros(p.numel(), dtype=p.dtype, device=p.device) if p.grad is None
                    else p.grad.reshape(-1)._cast(p.dtype) for p in self._params])

    def _add_direction(self, t, d):  # params += t * d, d cut into the parameters' shapes
        offset = 0
        for p in self._params:
            p.add_(d[offset:offset + p.numel()].reshape(p.shape).affine(t, 0.0))
            offset += p.numel()

    def _evaluate(self, closure, x, d, t):
        """(loss, flat gradient, slope along d) at x + t d; the parameters are put back to x."""
        self._add_direction(t, d)
        loss = float(self._closure_loss(closure))
        g = self._flat_grad()
        for p, saved in zip(self._params, x):
            p.copy_(saved)
        return loss, g, g.dot(d).item()

    def step(self, closure):
        """Up to max_iter L-BFGS iterations on the loss closure() returns (it must reevaluate the model and
        call backward); returns the loss of its first call."""
        if closure is None:
            raise ArgumentError("LBFGS.step needs a closure that reevaluates the model, calls backward and returns "
                                "the loss")
        if len(self.param_groups) != 1:
            raise ArgumentError("LBFGS doesn't support per-parameter options (parameter groups)")
        group = self.param_groups[0]
        lr, max_iter, max_eval = self._lr(group), group["max_iter"], group["max_eval"]
        tol_grad, tol_change, history = group["tolerance_grad"], group["tolerance_change"], group["history_size"]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        first_loss = self._closure_loss(closure)
        loss, evals = float(first_loss), 1
        state["func_evals"] += 1
        with no_grad():
            g = self._flat_grad()
            if g.abs().max().item() <= tol_grad:  # already optimal
                return first_loss
            d, t, prev_g = state.get("d"), state.get("t"), state.get("prev_flat_grad")
            dirs, steps, ro, h_diag = state.get("old_dirs"), state.get("old_stps"), state.get("ro"), state.get("H_diag")
            prev_loss = state.get("prev_loss")
            for n_iter in range(1, max_iter + 1):
                state["n_iter"] += 1
                if state["n_iter"] == 1:
                    d, dirs, steps, ro, h_diag = g.neg(), [], [], [], 1.0
                else:
                    d, h_diag = self._direction_from_history(state, g, prev_g, d, t, dirs, steps, ro, h_diag,
                                                             history)
                if prev_g is None:
                    prev_g = g.clone()
                else:
                    prev_g.copy_(g)
                prev_loss = loss
                t = min(1.0, 1.0 / g.abs().sum().item()) * lr if state["n_iter"] == 1 else lr
                gtd = g.dot(d).item()
                if gtd > -tol_change:  # not a descent direction
                    break
                if group["line_search_fn"] == "strong_wolfe":
                    x = [p.clone() for p in self._params]
                    loss, g, t, used = _strong_wolfe(partial(self._evaluate, closure, x, d), t, d, loss, g,
                                                     gtd, max_ls=max_eval - evals)
                    self._add_direction(t, d)
                else:
                    self._add_direction(t, d)
                    used = 0
                    if n_iter != max_iter:  # the fixed step's loss and gradient, for the next iteration
                        loss, g, used = float(self._closure_loss(closure)), self._flat_grad(), 1
                evals += used
                state["func_evals"] += used
                if n_iter == max_iter or evals >= max_eval or g.abs().max().item() <= tol_grad:
                    break
                if d.affine(t, 0.0).abs().max().item() <= tol_change or abs(loss - prev_loss) < tol_change:
                    break
        state.update(d=d, t=t, old_dirs=dirs, old_stps=steps, ro=ro, H_diag=h_diag, prev_flat_grad=prev_g,
                     prev_loss=prev_loss)
        return first_loss

    @staticmethod
    def _direction_from_history(state, g, prev_g, d, t, dirs, steps, ro, h_diag, history):
        """The two-loop recursion: -H g, H the inverse Hessian estimate from the curvature pairs (y, s),
        after adding this iteration's pair where it has positive curvature (y.s > 1e-10). Returns it and
        H_diag (y.s / y.y of the newest pair, the initial Hessian's scale); keeps state['al'] (torch's)."""
        y, s = g - prev_g, d.affine(t, 0.0)
        ys = y.dot(s)
        if ys.item() > 1e-10:
            if len(dirs) == history:
                dirs.pop(0), steps.pop(0), ro.pop(0)
            dirs.append(y), steps.append(s), ro.append(ys.reciprocal())
            h_diag = ys / y.dot(y)
        al = state.setdefault("al", [None] * history)
        q = g.neg()
        for i in range(len(dirs) - 1, -1, -1):
            al[i] = steps[i].dot(q) * ro[i]
            q.sub_(dirs[i] * al[i])
        r = q * h_diag if isinstance(h_diag, Tensor) else q.affine(h_diag, 0.0)
        for i in range(len(dirs)):
            r.add_(steps[i] * (al[i] - dirs[i].dot(r) * ro[i]))
        return r, h_diag
