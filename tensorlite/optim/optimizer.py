"""The Optimizer base class (torch.optim.optimizer.Optimizer): parameter groups, defaults, state,
state_dict / load_state_dict, zero_grad; tensorlite.optim's optimizers and lr_scheduler build on it."""
from __future__ import annotations

import numpy as np

from ..autograd import enable_grad, no_grad, note_write
from ..dtype import float64, get_default_dtype
from ..errors import ArgumentError, CaptureError, StateDictError, TensorliteError
from ..tensor import Tensor

# torch's ValueError for a setting outside its range: name -> (test, the range in words)
_NONNEGATIVE = ("lr", "eps", "weight_decay", "momentum", "alpha", "lr_decay", "initial_accumulator_value",
                "momentum_decay")
_SETTING_RANGES = {
    **{name: (lambda v: v >= 0, ">= 0") for name in _NONNEGATIVE},
    "rho": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "betas": (lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
}


class Optimizer:
    """Base class of the optimizers (torch.optim.Optimizer): `param_groups`, `defaults`, `state`,
    `zero_grad`, `add_param_group`, `state_dict` / `load_state_dict`. `params`: tensors, (name, tensor) pairs
    or dicts of settings with their own 'params'. torch's implementation switches
    (foreach, fused) are accepted and change nothing: each optimizer has one implementation;
    capturable=True of Adam/AdamW keeps the step count and lr on the device (see AdamW); the
    other optimizers accept it and count on the host (their step inside a graph capture raises).
    A Tensor lr is read on the host at each step (torch's _get_value), except by a capturable AdamW.

    >>> import tensorlite as tl
    >>> w, b = tl.nn.Parameter(tl.ones(2)), tl.nn.Parameter(tl.ones(1))
    >>> opt = tl.optim.SGD([{'params': [w]}, {'params': [b], 'lr': 0.5}], lr=0.1)
    >>> [g['lr'] for g in opt.param_groups], opt.state_dict()['param_groups'][1]['params']
    ([0.1, 0.5], [1])
    """
    _CAN_CAPTURE = False  # capturable=True keeps the step state on the device: AdamW's

    def __init__(self, params, defaults: dict, differentiable: bool = False):
        if differentiable:
            raise ArgumentError(f"{type(self).__name__}: differentiable=True (autograd through step()) is not "
                                "supported")
        if isinstance(params, Tensor):
            raise ArgumentError(f"{type(self).__name__}: params must be an iterable of Tensors or of dicts, "
                                "got a Tensor (wrap it in a list)")
        self.defaults, self.state, self.param_groups = dict(defaults), {}, []  # state: parameter -> its buffers
        self._graph_grads = {}  # parameter -> the gradient a captured step read (AdamW.step)
        groups = list(params)
        if not groups:
            raise ArgumentError(f"{type(self).__name__}: got an empty parameter list")
        for group in groups if isinstance(groups[0], dict) else [{"params": groups}]:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict):
        """Add a group of parameters with its own settings (the others from `defaults`)."""
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise ArgumentError(f"{name}.add_param_group: expected a dict with a 'params' entry, got "
                                f"{type(param_group).__name__}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        if params and isinstance(params[0], tuple):  # model.named_parameters(): torch keeps the names
            param_group = {**param_group, "param_names": [n for n, _ in params]}
            params = [p for _, p in params]
        for p in params:
            if not isinstance(p, Tensor) or not p.is_leaf:
                raise TensorliteError(f"{name}: can only optimize leaf tensors, got {type(p).__name__}")
        ids = {id(p) for g in self.param_groups for p in g["params"]} | {id(p) for p in params}
        if len(ids) != len(params) + sum(len(g["params"]) for g in self.param_groups):
            raise ArgumentError(f"{name}: a parameter appears more than once (in one group or in several)")
        self.param_groups.append({**self.defaults, **param_group, "params": params})

    def zero_grad(self, set_to_none: bool = True):
        """Clear every parameter's gradient: None, or (set_to_none=False) zeros written in place,
        as torch. A gradient that a captured step reads (AdamW(capturable=True).step in a
        graph) is zeroed in place, never dropped: every replay writes that memory, so it must
        stay the parameter's (and alive). Before capturing a training step, clear the
        gradients to None: backward then makes them inside the capture, and each replay writes
        them anew (gradients kept from eager steps would be added to in every replay)."""
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if set_to_none and not (self._graph_grads.get(p) is g and p._device.capture is None):
                        p.grad = None
                    else:
                        if g.requires_grad:  # a create_graph=True gradient: torch detaches it first
                            p.grad = g = g.detach()
                        g.zero_()

    def _params_with_grad(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if p._device.capture is not None and not (self._CAN_CAPTURE and group.get("capturable")):
                        fix = ("pass capturable=True to keep them on the device" if self._CAN_CAPTURE else
                               "step the optimizer outside the captured code")
                        raise CaptureError(f"{type(self).__name__}.step inside a graph capture on {p._device}: its "
                                           "step count and learning rate are host values that every replay would "
                                           f"repeat; {fix}")
                    yield group, p, p.grad, self.state.setdefault(p, {})

    def _check_settings(self, **settings):
        """torch's range checks of the settings named in _SETTING_RANGES (lr may be a 1-element Tensor)."""
        name = type(self).__name__
        lr = settings.get("lr")
        if isinstance(lr, Tensor):
            if lr.numel() != 1:
                raise ArgumentError(f"{name}: Tensor lr must be 1-element, got shape {tuple(lr.shape)}")
            settings["lr"] = lr.item()
        for key, value in settings.items():
            ok, words = _SETTING_RANGES[key]
            if not ok(value):
                raise ArgumentError(f"{name}: invalid {key}={value!r} (must be {words})")

    @staticmethod
    def _scalar_state(x: float) -> float:
        """x as torch keeps a per-parameter scalar of the state (ASGD's eta and mu, NAdam's mu_product):
        a 0-d tensor of torch's scalar dtype (float32 unless the default dtype is float64), so x is
        rounded to it; the trajectories then match torch's to the last bit of float64."""
        return float(x) if get_default_dtype() is float64 else float(np.float32(x))

    @staticmethod
    def _lr(group):  # a Tensor lr is read on the host (torch's _get_value)
        lr = group["lr"]
        return lr.item() if isinstance(lr, Tensor) else lr

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns closure()'s loss. A parameter's
        state starts as {'step': 0, **_initial_state()} (torch's keys); each update counts a step, then
        runs _step_one on the gradient as _direction gives it (maximize, weight decay)."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group, p, grad, state in self._params_with_grad():
                if not state:
                    state.update(step=0, **self._initial_state(group, p))
                state["step"] += 1
                self._step_one(group, p, self._direction(group, p, grad), state)
        return loss

    def _initial_state(self, group, p) -> dict:
        """p's buffers before its first step, by torch's names (zeros, lr, ...)."""
        raise NotImplementedError(f"{type(self).__name__} must define step() or _initial_state()")

    def _step_one(self, group, p, g, state):
        """Update p (and its state) from the gradient g; state['step'] already counts this update."""
        raise NotImplementedError(f"{type(self).__name__} must define step() or _step_one()")

    @staticmethod
    def _closure_loss(closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    @classmethod
    def _direction(cls, group, p, grad):
        """The gradient in p's dtype, negated for maximize, then weight decay as torch applies it: added
        to the gradient (L2), or with decoupled_weight_decay p *= 1 - lr * weight_decay (in place)."""
        g = grad if grad.dtype is p.dtype else grad._cast(p.dtype)
        g = g.affine(-1.0, 0.0) if group["maximize"] else g
        wd = group.get("weight_decay", 0.0)
        if not wd:
            return g
        if group.get("decoupled_weight_decay"):
            p.mul_(1.0 - cls._lr(group) * wd)
            return g
        return g + p.affine(wd, 0.0)

    @staticmethod
    def _update(p, new):  # new storage for p (README: where SGD differs); a backward that saved p must refuse
        p.data = new
        note_write(p._storage)

    def _state_dtype(self, p):
        return p.dtype

    def state_dict(self) -> dict:
        """torch's layout: {'state': {index: buffers}, 'param_groups': [{settings..., 'params': [indices]}]},
        parameters numbered in group order (the buffers are the live ones, as torch's)."""
        flat, groups = [p for g in self.param_groups for p in g["params"]], []
        for g in self.param_groups:
            n = sum(len(saved["params"]) for saved in groups)
            groups.append({**{k: v for k, v in g.items() if k != "params"},
                           "params": list(range(n, n + len(g["params"])))})
        return {"state": {i: dict(self.state[p]) for i, p in enumerate(flat) if p in self.state},
                "param_groups": groups}

    def load_state_dict(self, state_dict: dict):
        """Resume from state_dict(): group settings, and copies of the buffers on each parameter's device."""
        name = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            raise StateDictError(f"{name}: expected a dict with 'state' and 'param_groups' (an optimizer's "
                                 "state_dict())")
        saved_groups, index = state_dict["param_groups"], {}
        if len(saved_groups) != len(self.param_groups):
            raise ArgumentError(f"{name}: {len(saved_groups)} parameter groups in the state, "
                                f"{len(self.param_groups)} in the optimizer")
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ArgumentError(f"{name}: parameter group {i} has {len(saved['params'])} parameters in the "
                                    f"state, {len(group['params'])} in the optimizer")
            index.update(zip(saved["params"], group["params"]))
        state = {}
        for i, buffers in state_dict["state"].items():
            if i not in index:
                raise StateDictError(f"{name}: the state has buffers for parameter {i!r}, which no group lists")
            p = index[i]
            state[p] = {k: self._copy_buffer(v, p) if isinstance(v, (Tensor, list, tuple)) else v
                        for k, v in buffers.items()}
        for group, saved in zip(self.param_groups, saved_groups):  # Tensor settings copied (torch: deepcopy)
            group.update({k: v.clone() if isinstance(v, Tensor) else v for k, v in saved.items() if k != "params"})
        self.state = state

    def _copy_buffer(self, v, p):  # a copy (buffers change in place), on p's device, floats in the state dtype
        if isinstance(v, (list, tuple)):  # LBFGS's histories
            return type(v)(self._copy_buffer(x, p) if isinstance(x, Tensor) else x for x in v)
        v = v.detach().to(p.device)
        return (v._cast(self._state_dtype(p)) if v.dtype.is_floating_point else v).clone()
