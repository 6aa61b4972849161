"""Optimizers (torch.optim names, defaults and update rules).

Updates run under no_grad on each parameter's device. SGD composes Tensor ops and swaps
the result into the parameter (`p.data = ...`); Adam/AdamW update each parameter and its
moment buffers in place with one fused step (`adamw_step`; `adamw_steps` hands a group's
parameters to the backend at once, a few kernel launches on a GPU), as torch does. Either way modules and optimizers keep the same objects.
Step counts and bias corrections are Python floats: a step never waits for the device.
"""
from __future__ import annotations

from .autograd import enable_grad, no_grad, note_write
from .backend import adam_state_dtype
from .errors import ArgumentError, TensorliteError
from .tensor import Tensor, zeros, zeros_like


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        params = list(params)
        if not params:
            raise ArgumentError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for g in groups:
            group = {**self.defaults, **g, "params": list(g["params"])}
            for p in group["params"]:
                if not isinstance(p, Tensor) or not p.is_leaf:
                    raise TensorliteError(f"{type(self).__name__}: can only optimize leaf tensors, got "
                                          f"{type(p).__name__}")
            self.param_groups.append(group)
        self.state = {}  # parameter -> dict of its buffers (keyed by the object itself)

    def zero_grad(self, set_to_none: bool = True):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else zeros_like(p.grad)

    def _params_with_grad(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group, p, p.grad, self.state.setdefault(p, {})

    def step(self, closure=None):
        raise NotImplementedError(f"{type(self).__name__} must define step()")

    @staticmethod
    def _closure_loss(closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    def state_dict(self):
        """Per-parameter buffers (by position across groups) and the group settings."""
        flat = [p for g in self.param_groups for p in g["params"]]
        return {"state": {i: dict(self.state[p]) for i, p in enumerate(flat) if p in self.state},
                "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]}

    def load_state_dict(self, state_dict):
        flat = [p for g in self.param_groups for p in g["params"]]
        if len(state_dict["param_groups"]) != len(self.param_groups):
            raise ArgumentError(f"{type(self).__name__}.load_state_dict: {len(state_dict['param_groups'])} groups "
                             f"in the state, {len(self.param_groups)} in the optimizer")
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update(saved)
        # copies: buffers are updated in place, and the saved state must not change with them
        self.state = {flat[int(i)]: {k: v.clone() if isinstance(v, Tensor) else v for k, v in s.items()}
                      for i, s in state_dict["state"].items()}


class SGD(Optimizer):
    """p -= lr * d, with d = g + weight_decay * p, then momentum: buf = momentum * buf +
    (1 - dampening) * d (buf = d on the first step) and d = buf, or d + momentum * buf
    with nesterov."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ArgumentError(f"SGD: invalid lr={lr}, momentum={momentum} or weight_decay={weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ArgumentError("SGD: nesterov momentum requires momentum > 0 and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        with no_grad():
            for group, p, grad, state in self._params_with_grad():
                d = grad.affine(-1.0, 0.0) if group["maximize"] else grad
                if group["weight_decay"]:
                    d = d + p.affine(group["weight_decay"], 0.0)
                mu = group["momentum"]
                if mu:
                    buf = state.get("momentum_buffer")
                    buf = d if buf is None else buf.affine(mu, 0.0) + d.affine(1.0 - group["dampening"], 0.0)
                    state["momentum_buffer"] = buf
                    d = d + buf.affine(mu, 0.0) if group["nesterov"] else buf
                p.data = p - d.affine(group["lr"], 0.0)  # new storage (README: where SGD differs)
                note_write(p._storage)  # a backward that saved p before this step must refuse
        return loss


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), torch's defaults and update:
    p *= 1 - lr * wd;  m, v = EMAs of g and g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    One fused step per parameter, in place (batched per group, `adamw_steps`); the moment buffers are float32 (float64
    for float64 parameters), so f16/bf16 parameters keep full-precision state."""
    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or weight_decay < 0:
            raise ArgumentError(f"{type(self).__name__}: invalid lr={lr}, betas={betas}, eps={eps} or "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def step(self, closure=None):
        # One adamw_steps call per (group, storage class): a GPU runs a whole group's
        # parameters in a few launches instead of one each.
        loss = self._closure_loss(closure)
        with no_grad():
            batches = {}
            for group, p, grad, state in self._params_with_grad():
                item = self._prepare(group, p, grad, state)
                batch = batches.setdefault((id(group), type(p._storage)), (group, [], []))
                batch[1].append(item)
                batch[2].append(state)
            for (_, storage_class), (group, items, states) in batches.items():
                storage_class.adamw_steps(items, group["lr"], tuple(group["betas"]), group["eps"],
                                          group["weight_decay"], self.decoupled, group["maximize"])
                for state, item in zip(states, items):  # counted once its update ran (an error above: not)
                    state["step"] = item[-1]
                    note_write(item[0])  # the parameter, written in place (its moment buffers are ours)
        return loss

    def _prepare(self, group, p, grad, state):
        """Checks p and makes its state buffers: the adamw_steps item, whose last field is
        the step number this update counts (step() records it in the state once it ran)."""
        if not p.dtype.is_floating_point:
            raise TensorliteError(f"{type(self).__name__}: parameters must be floating point, got {p.dtype.name}")
        if grad.dtype is not p.dtype:
            grad = grad._cast(p.dtype)
        if not p._layout.is_contiguous():  # the in-place kernel writes each element once
            p.data = p.contiguous()
        # moment buffers: f32 (f64 for f64 parameters), also for f16/bf16 parameters
        sdt = adam_state_dtype(p.dtype)
        names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
        for name in names:
            buf = state.get(name)
            if buf is None:
                state[name] = zeros(p.shape, dtype=sdt, device=p._device)
            elif buf.dtype is not sdt or buf._device is not p._device or not buf._layout.is_contiguous() \
                    or buf._layout.offset:
                state[name] = buf.to(p._device)._cast(sdt).clone()
        t = state.get("step", 0) + 1
        return (p._storage, p._layout, grad._storage, grad._layout, state["exp_avg"]._storage,
                state["exp_avg_sq"]._storage, state["max_exp_avg_sq"]._storage if group["amsgrad"] else None, t)


class Adam(AdamW):
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam; default 0)."""
    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)
