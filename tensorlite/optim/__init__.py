"""Optimizers (torch.optim names, defaults, update rules and state_dict layout).

torch's list: SGD, Adam, AdamW, Adadelta, Adagrad, Adamax, ASGD, NAdam, RAdam, RMSprop, Rprop and
LBFGS (SparseAdam raises: there are no sparse gradients here). Updates run under no_grad on each
parameter's device. SGD, RMSprop and Adagrad compose Tensor ops and swap the result into the
parameter (`p.data = ...`); the others written in Tensor ops (adadelta.py, adamax.py, asgd.py,
nadam.py, radam.py, rprop.py, lbfgs.py) write the parameter and their buffers in place, as torch's;
Adam/AdamW update each parameter and its moment buffers in place with one fused step (`adamw_step`;
`adamw_steps` hands a group's parameters to the backend at once, a few kernel launches on a GPU),
as torch does. Either way modules
and optimizers keep the same objects. Step counts and bias corrections are Python numbers: a step
never waits for the device; with capturable=True (Adam/AdamW) they live on the device instead, so
a step can be captured in a graph (tl.graphs). `lr_scheduler` holds the learning-rate schedules.
"""
from __future__ import annotations

from ..autograd import no_grad, note_write
from ..backend import adam_state_dtype
from ..dtype import float32
from ..errors import ArgumentError, CaptureError, TensorliteError
from ..ops.creation import full_like, tensor, zeros, zeros_like
from ..tensor import Tensor
from . import lr_scheduler  # noqa: F401  (tl.optim.lr_scheduler)
from .adadelta import Adadelta  # noqa: F401
from .adamax import Adamax  # noqa: F401
from .asgd import ASGD  # noqa: F401
from .lbfgs import LBFGS  # noqa: F401
from .nadam import NAdam  # noqa: F401
from .optimizer import Optimizer
from .radam import RAdam  # noqa: F401
from .rprop import Rprop  # noqa: F401
from .sparse_adam import SparseAdam  # noqa: F401


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
        self._check_settings(lr=lr, momentum=momentum, weight_decay=weight_decay)
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
                self._update(p, p - d.affine(self._lr(group), 0.0))
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
        self._check_settings(lr=lr, alpha=alpha, eps=eps, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize, capturable=capturable), differentiable)

    def _initial_state(self, group, p):
        return dict(square_avg=zeros_like(p), **({"momentum_buffer": zeros_like(p)} if group["momentum"] else {}),
                    **({"grad_avg": zeros_like(p)} if group["centered"] else {}))

    def _step_one(self, group, p, g, state):
        a, mu = group["alpha"], group["momentum"]
        v = state["square_avg"] = state["square_avg"].affine(a, 0.0) + (g * g).affine(1.0 - a, 0.0)
        if group["centered"]:
            m = state["grad_avg"] = state["grad_avg"] + (g - state["grad_avg"]).affine(1.0 - a, 0.0)
            v = v - m * m
        d = g / v.sqrt().affine(1.0, group["eps"])
        if mu:
            d = state["momentum_buffer"] = state["momentum_buffer"].affine(mu, 0.0) + d
        self._update(p, p - d.affine(self._lr(group), 0.0))


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
        self._check_settings(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                             initial_accumulator_value=initial_accumulator_value)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps, maximize=maximize,
                                      initial_accumulator_value=initial_accumulator_value), differentiable)

    def add_param_group(self, param_group: dict):
        """Add a parameter group (see Optimizer.add_param_group) with its accumulators initialised."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self.state[p] = {"step": 0, **self._initial_state(group, p)}

    def _initial_state(self, group, p):
        return {"sum": full_like(p, group["initial_accumulator_value"])}

    def _step_one(self, group, p, g, state):
        s = state["sum"] = state["sum"] + g * g
        lr = self._lr(group) / (1 + (state["step"] - 1) * group["lr_decay"])
        self._update(p, p - (g / s.sqrt().affine(1.0, group["eps"])).affine(lr, 0.0))


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), torch's defaults and update:
    p *= 1 - lr * wd;  m, v = EMAs of g and g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    One fused step per parameter, in place (batched per group, `adamw_steps`); the moment buffers are float32 (float64
    for float64 parameters), so f16/bf16 parameters keep full-precision state.

    capturable=True (torch's): each parameter's step count t is a 0-d float32 tensor on its device
    (state['step'], as torch keeps it), incremented on the device, and the update kernel computes the
    bias corrections from it; lr may be a one-element float32 Tensor on the parameters' device, which
    the kernel reads and lr_scheduler updates in place. A step captured in a graph (tl.graphs) then
    counts and follows the schedule on every replay (a float lr is a constant of the graph). A
    parameter's state is made at its first step, which a capture cannot record: step once before
    capturing. The step counts of a group's parameters on one device are the elements of one buffer,
    so counting a step is one op.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([5.0])
    >>> tl.optim.AdamW([p], lr=0.1, weight_decay=0.0).step(); round(p.item(), 4)  # the first step moves by lr
    0.9
    """
    _CAN_CAPTURE = True

    def _state_dtype(self, p):
        return adam_state_dtype(p.dtype)

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        self._init(params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, True, capturable)

    def _init(self, params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, decoupled_weight_decay,
              capturable):
        self._check_settings(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._step_buffers = {}  # (id(group), device) -> _StepBuffer (capturable groups)
        Optimizer.__init__(self, params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                              amsgrad=amsgrad, maximize=maximize, capturable=bool(capturable),
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
                batch = batches.setdefault((id(group), type(p._storage)), (group, [], [], []))
                batch[1].append(item)
                batch[2].append(state)
                batch[3].append(p)
            for (_, storage_class), (group, items, states, ps) in batches.items():
                undo = None
                if group["capturable"]:  # this step's device counts (torch: step_t += 1 first)
                    steps, undo = self._count_steps(group, ps)
                    items = [item[:-1] + ((t._storage, t._layout),) for item, t in zip(items, steps)]
                try:
                    storage_class.adamw_steps(items, self._lr_arg(group), tuple(group["betas"]), group["eps"],
                                              group["weight_decay"], group["decoupled_weight_decay"],
                                              group["maximize"])
                except BaseException:
                    if undo is not None:  # as without capturable: a step that raised counts nothing
                        for t in undo:
                            t.sub_(1.0)
                    raise
                for state, item, p in zip(states, items, ps):  # counted once its update ran (an error above: not)
                    if not group["capturable"]:
                        state["step"] = item[-1]
                    elif p._device.capture is not None:
                        self._graph_grads[p] = p.grad  # replays write it: zero_grad keeps it (see there)
                    note_write(item[0])  # the parameter, written in place (its moment buffers are ours)
        return loss

    @staticmethod
    def _lr_arg(group):
        """The lr adamw_steps takes: a number, or (capturable, a Tensor lr) the tensor's memory."""
        lr = group["lr"]
        if not isinstance(lr, Tensor):
            return lr
        return (lr._storage, lr._layout) if group["capturable"] else lr.item()

    def _prepare(self, group, p, grad, state):
        """Checks p and makes its state buffers: the adamw_steps item, whose last field is
        the step number this update counts (step() records it in the state once it ran;
        capturable: None, step() puts the device count there)."""
        name = type(self).__name__
        if not p.dtype.is_floating_point:
            raise TensorliteError(f"{name}: parameters must be floating point, got {p.dtype.name}")
        if grad.dtype is not p.dtype:
            grad = grad._cast(p.dtype)
        # moment buffers: f32 (f64 for f64 parameters), also for f16/bf16 parameters
        sdt = adam_state_dtype(p.dtype)
        names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
        stale = [k for k in names if (buf := state.get(k)) is None or buf.dtype is not sdt
                 or buf._device is not p._device or not buf._layout.is_contiguous() or buf._layout.offset]
        if (stale or not p._layout.is_contiguous()) and p._device.capture is not None:
            raise CaptureError(f"{name}.step inside a graph capture on {p._device}: the state of a parameter of shape "
                               f"{tuple(p.shape)} would be made in the capture, and every replay would reset it; step "
                               "once before capturing")
        if not p._layout.is_contiguous():  # the in-place kernel writes each element once
            p.data = p.contiguous()
        for k in stale:
            buf = state.get(k)
            state[k] = (zeros(p.shape, dtype=sdt, device=p._device) if buf is None
                        else buf.to(p._device)._cast(sdt).clone())
        t = None if group["capturable"] else state.get("step", 0) + 1
        return (p._storage, p._layout, grad._storage, grad._layout, state["exp_avg"]._storage,
                state["exp_avg_sq"]._storage, state["max_exp_avg_sq"]._storage if group["amsgrad"] else None, t)

    def _count_steps(self, group, ps):
        """Capturable: increments the device step count of each of `ps` (parameters of `group`
        with a gradient); returns their 0-d count tensors and what to decrement if the update fails.
        One op per device where every parameter of the group there has a gradient, else one each."""
        by_device, steps = {}, {}
        for p in ps:
            by_device.setdefault(p._device, []).append(p)
        bumped = []
        for dev, dps in by_device.items():
            sb = self._step_buffer(group, dev)
            for p in dps:
                steps[p] = self.state[p].setdefault("step", sb.views[sb.index[id(p)]])
            bumped += [sb.buffer] if len(dps) == len(sb.members) else [steps[p] for p in dps]
        for t in bumped:
            t.add_(1.0)
        return [steps[p] for p in ps], bumped

    def _step_buffer(self, group, dev) -> "_StepBuffer":
        """The float32 buffer of `group`'s step counts on `dev`, one element per parameter there,
        each parameter's state['step'] a 0-d view of its element; made again (keeping the counts)
        when the group or a state's 'step' changed (load_state_dict, add_param_group)."""
        members = [q for q in group["params"] if q._device is dev]
        sb = self._step_buffers.get((id(group), dev))
        if sb is not None and len(sb.members) == len(members) and all(
                a is b and self.state.get(a, {}).get("step", v) is v for a, b, v in zip(sb.members, members, sb.views)):
            return sb
        if dev.capture is not None:
            raise CaptureError(f"{type(self).__name__}.step inside a graph capture on {dev}: the step counts would "
                               "be made in the capture, and every replay would reset them; step once before capturing")
        sb = _StepBuffer(zeros(len(members), dtype=float32, device=dev), members)
        for q, v in zip(members, sb.views):
            st = self.state.get(q)
            if st and "step" in st:  # the count so far, from a view of an older buffer, a loaded tensor or a number
                v.copy_(st["step"]) if isinstance(st["step"], Tensor) else v.fill_(float(st["step"]))
                st["step"] = v
        self._step_buffers[(id(group), dev)] = sb
        return sb

    def load_state_dict(self, state_dict: dict):
        """Optimizer.load_state_dict, then each step count as the group keeps it (torch): a 0-d float32
        tensor on the parameter's device where capturable (a Tensor lr moved there too), else a number."""
        unset = [isinstance(g, dict) and "capturable" not in g for g in state_dict.get("param_groups", ())] \
            if isinstance(state_dict, dict) else []
        super().load_state_dict(state_dict)
        self._step_buffers = {}
        for group, saved_without in zip(self.param_groups, unset):
            if saved_without:  # a state saved before the setting existed: torch's __setstate__ default
                group["capturable"] = False
            for p in group["params"]:
                st = self.state.get(p)
                if not st or "step" not in st:
                    continue
                t = st["step"]
                if group["capturable"]:
                    t = t if isinstance(t, Tensor) else tensor(float(t))
                    st["step"] = t.to(p.device)._cast(float32).reshape(()).clone()
                else:
                    st["step"] = int(t.item()) if isinstance(t, Tensor) else t
            if group["capturable"] and isinstance(group["lr"], Tensor) and group["params"]:
                group["lr"] = group["lr"].to(group["params"][0].device)


class _StepBuffer:
    """A capturable group's step counts on one device: `buffer` (float32, one element per
    parameter of `members`), `views` its 0-d elements, `index` id(parameter) -> element."""
    __slots__ = ("buffer", "members", "views", "index")

    def __init__(self, buffer, members):
        self.buffer, self.members = buffer, members
        self.views = [buffer[i] for i in range(len(members))]
        self.index = {id(q): i for i, q in enumerate(members)}


class Adam(AdamW):
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam; default 0), or AdamW's decoupled
    decay with decoupled_weight_decay=True; capturable as AdamW.

    >>> import tensorlite as tl
    >>> p = tl.nn.Parameter(tl.tensor([1.0]))
    >>> p.grad = tl.tensor([-5.0])
    >>> tl.optim.Adam([p], lr=0.1).step(); round(p.item(), 4)
    1.1
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None, decoupled_weight_decay: bool = False):
        self._init(params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, decoupled_weight_decay,
                   capturable)


