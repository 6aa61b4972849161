"""Optimizers (torch.optim names, defaults, update rules and state_dict layout).

Updates run under no_grad on each parameter's device. SGD, RMSprop and Adagrad compose Tensor ops
and swap the result into the parameter (`p.data = ...`); Adam/AdamW update each parameter and its
moment buffers in place with one fused step (`adamw_step`; `adamw_steps` hands a group's
parameters to the backend at once, a few kernel launches on a GPU), as torch does. Either way modules
and optimizers keep the same objects. Step counts and bias corrections are Python numbers: a step
never waits for the device. `lr_scheduler` holds the learning-rate schedules.
"""
from __future__ import annotations

from ..autograd import enable_grad, no_grad, note_write
from ..backend import adam_state_dtype
from ..errors import ArgumentError, CaptureError, StateDictError, TensorliteError
from ..tensor import Tensor, full_like, zeros, zeros_like


class Optimizer:
    """Base class of the optimizers (torch.optim.Optimizer): `param_groups`, `defaults`, `state`,
    `zero_grad`, `add_param_group`, `state_dict` / `load_state_dict`. `params`: tensors, (name, tensor) pairs
    or dicts of settings with their own 'params'. torch's implementation switches
    (foreach, fused, capturable) are accepted and change nothing: each optimizer has one implementation.

    >>> import tensorlite as tl
    >>> w, b = tl.nn.Parameter(tl.ones(2)), tl.nn.Parameter(tl.ones(1))
    >>> opt = tl.optim.SGD([{'params': [w]}, {'params': [b], 'lr': 0.5}], lr=0.1)
    >>> [g['lr'] for g in opt.param_groups], opt.state_dict()['param_groups'][1]['params']
    ([0.1, 0.5], [1])
    """

    def __init__(self, params, defaults: dict, differentiable: bool = False):
        if differentiable:
            raise ArgumentError(f"{type(self).__name__}: differentiable=True (autograd through step()) is not "
                                "supported")
        if isinstance(params, Tensor):
            raise ArgumentError(f"{type(self).__name__}: params must be an iterable of Tensors or of dicts, "
                                "got a Tensor (wrap it in a list)")
        self.defaults, self.state, self.param_groups = dict(defaults), {}, []  # state: parameter -> its buffers
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
        """Clear every parameter's gradient (None, or zeros with set_to_none=False)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else zeros_like(p.grad)

    def _params_with_grad(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if p._device.capture is not None:
                        raise CaptureError(f"{type(self).__name__}.step inside a graph capture on {p._device}: its "
                                           "step count and learning rate are host values that every replay would "
                                           "repeat; step the optimizer outside the captured code")
                    yield group, p, p.grad, self.state.setdefault(p, {})

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns closure()'s loss."""
        raise NotImplementedError(f"{type(self).__name__} must define step()")

    @staticmethod
    def _closure_loss(closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    @staticmethod
    def _direction(group, p, grad):  # the gradient (in p's dtype), negated for maximize, plus L2 weight decay
        g = grad if grad.dtype is p.dtype else grad._cast(p.dtype)
        g = g.affine(-1.0, 0.0) if group["maximize"] else g
        return g + p.affine(group["weight_decay"], 0.0) if group["weight_decay"] else g

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
            state[p] = {k: self._copy_buffer(v, p) if isinstance(v, Tensor) else v for k, v in buffers.items()}
        for group, saved in zip(self.param_groups, saved_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.state = state

    def _copy_buffer(self, v, p):  # a copy (buffers change in place), on p's device, floats in the state dtype
        v = v.detach().to(p.device)
        return (v._cast(self._state_dtype(p)) if v.dtype.is_floating_point else v).clone()


class SGD(Optimizer):
    """Stochastic gradient descent (torch.optim.SGD): d = g + weight_decay * p; with momentum,
    buf = momentum * buf + (1 - dampening) * d (buf = d on the first step) and d = buf, or
    d + momentum * buf with nesterov; p -= lr * d.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0, 2.0]))
    >>> p.grad = tl.tensor([1.0, -1.0])
    >>> tl.optim.SGD([p], lr=0.5).step(); p.tolist()
    [0.5, 2.5]
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False, foreach=None,
                 differentiable: bool = False, fused=None):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ArgumentError(f"SGD: invalid lr={lr}, momentum={momentum} or weight_decay={weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ArgumentError("SGD: nesterov momentum requires momentum > 0 and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize), differentiable)

    def step(self, closure=None):
        """One SGD update of every parameter that has a gradient."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group, p, grad, state in self._params_with_grad():
                d, mu = self._direction(group, p, grad), group["momentum"]
                if mu:
                    buf = state.get("momentum_buffer")  # a copy of d first: d may be p.grad itself
                    buf = d.clone() if buf is None else buf.affine(mu, 0.0) + d.affine(1.0 - group["dampening"], 0.0)
                    state["momentum_buffer"] = buf
                    d = d + buf.affine(mu, 0.0) if group["nesterov"] else buf
                self._update(p, p - d.affine(group["lr"], 0.0))
        return loss


class RMSprop(Optimizer):
    """RMSprop (torch.optim.RMSprop): v = alpha * v + (1 - alpha) * g^2; p -= lr * g / (sqrt(v) + eps)
    (centered: v minus the squared mean gradient; momentum: buf = momentum * buf + g / (...), p -= lr * buf).

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([2.0])
    >>> tl.optim.RMSprop([p], lr=0.1, alpha=0.0).step(); round(p.item(), 4)
    0.9
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        if lr < 0 or eps < 0 or momentum < 0 or weight_decay < 0 or alpha < 0:
            raise ArgumentError(f"RMSprop: invalid lr={lr}, alpha={alpha}, eps={eps}, momentum={momentum} or "
                                f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize), differentiable)

    def step(self, closure=None):
        """One RMSprop update of every parameter that has a gradient."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group, p, grad, state in self._params_with_grad():
                g, a, mu = self._direction(group, p, grad), group["alpha"], group["momentum"]
                if not state:
                    state.update(step=0, square_avg=zeros_like(p), **({"momentum_buffer": zeros_like(p)} if mu else {}),
                                 **({"grad_avg": zeros_like(p)} if group["centered"] else {}))
                state["step"] += 1
                v = state["square_avg"] = state["square_avg"].affine(a, 0.0) + (g * g).affine(1.0 - a, 0.0)
                if group["centered"]:
                    m = state["grad_avg"] = state["grad_avg"] + (g - state["grad_avg"]).affine(1.0 - a, 0.0)
                    v = v - m * m
                d = g / v.sqrt().affine(1.0, group["eps"])
                if mu:
                    d = state["momentum_buffer"] = state["momentum_buffer"].affine(mu, 0.0) + d
                self._update(p, p - d.affine(group["lr"], 0.0))
        return loss


class Adagrad(Optimizer):
    """Adagrad (torch.optim.Adagrad): sum += g^2; p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps).
    Its state starts at construction (sum = initial_accumulator_value), as torch's.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([3.0])
    >>> tl.optim.Adagrad([p], lr=0.5).step(); round(p.item(), 4)
    0.5
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        if lr < 0 or lr_decay < 0 or weight_decay < 0 or initial_accumulator_value < 0 or eps < 0:
            raise ArgumentError(f"Adagrad: invalid lr={lr}, lr_decay={lr_decay}, weight_decay={weight_decay}, "
                                f"initial_accumulator_value={initial_accumulator_value} or eps={eps}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps, maximize=maximize,
                                      initial_accumulator_value=initial_accumulator_value), differentiable)

    def add_param_group(self, param_group: dict):
        """Add a parameter group (see Optimizer.add_param_group) with its accumulators initialised."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self.state[p] = {"step": 0, "sum": full_like(p, group["initial_accumulator_value"])}

    def step(self, closure=None):
        """One Adagrad update of every parameter that has a gradient."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group, p, grad, state in self._params_with_grad():
                g = self._direction(group, p, grad)
                state["step"] += 1
                s = state["sum"] = state["sum"] + g * g
                lr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
                self._update(p, p - (g / s.sqrt().affine(1.0, group["eps"])).affine(lr, 0.0))
        return loss


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), torch's defaults and update:
    p *= 1 - lr * wd;  m, v = EMAs of g and g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    One fused step per parameter, in place (batched per group, `adamw_steps`); the moment buffers are float32 (float64
    for float64 parameters), so f16/bf16 parameters keep full-precision state.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([5.0])
    >>> tl.optim.AdamW([p], lr=0.1, weight_decay=0.0).step(); round(p.item(), 4)  # the first step moves by lr
    0.9
    """

    def _state_dtype(self, p):
        return adam_state_dtype(p.dtype)

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        self._init(params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, True)

    def _init(self, params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, decoupled_weight_decay):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or weight_decay < 0:
            raise ArgumentError(f"{type(self).__name__}: invalid lr={lr}, betas={betas}, eps={eps} or "
                             f"weight_decay={weight_decay}")
        Optimizer.__init__(self, params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                              amsgrad=amsgrad, maximize=maximize,
                                              decoupled_weight_decay=decoupled_weight_decay),
                         differentiable)

    def step(self, closure=None):
        """One update of every parameter that has a gradient: one adamw_steps call per (group, storage
        class), so a GPU runs a whole group's parameters in a few launches instead of one each."""
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
                                          group["weight_decay"], group["decoupled_weight_decay"], group["maximize"])
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
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam; default 0), or AdamW's decoupled
    decay with decoupled_weight_decay=True.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([-5.0])
    >>> tl.optim.Adam([p], lr=0.1).step(); round(p.item(), 4)
    1.1
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None, decoupled_weight_decay: bool = False):
        self._init(params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, decoupled_weight_decay)


from . import lr_scheduler  # noqa: E402,F401  (tl.optim.lr_scheduler, which reads Optimizer)
