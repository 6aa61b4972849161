"""Learning-rate schedules (torch.optim.lr_scheduler): the same names, arguments, and lr sequences.

Like torch's, most schedules are chainable: step() derives each group's new lr from its current one
(so two schedules on one optimizer compose), with a closed form for SequentialLR's restarts.
A Tensor lr (AdamW(capturable=True) reads it on the device) is written in place, as torch's
fill_, so a captured step sees every new value; the schedule then computes on tensors and
get_last_lr() returns copies, as torch's (nothing is read back to the host).
"""
from __future__ import annotations

import math
import types
import warnings
from bisect import bisect_right
from collections import Counter

from ..errors import ArgumentError, StateDictError
from ..tensor import Tensor
from .optimizer import Optimizer


def _per_group(optimizer, value, name):  # one value per parameter group
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ArgumentError(f"expected {len(optimizer.param_groups)} values of {name} (one per parameter "
                                f"group), got {len(value)}")
        return list(value)
    return [value] * len(optimizer.param_groups)


def _copy(value):  # a Tensor lr copied (torch: no aliasing of the groups' tensors)
    return value.clone() if isinstance(value, Tensor) else value


def _set_lr(group, value):
    """group['lr'] = value; a Tensor lr is written in place (torch's fill_): whatever reads it
    on the device (a captured optimizer step) sees the new value."""
    if isinstance(group["lr"], Tensor):
        if value is not group["lr"]:  # get_lr() may hand back the live tensor (an unchanged lr)
            group["lr"].fill_(value)
    else:
        group["lr"] = value


def _check_optimizer(optimizer):
    if not isinstance(optimizer, Optimizer):
        raise ArgumentError(f"{type(optimizer).__name__} is not an Optimizer")


def _check_members(kind, optimizer, schedulers):  # SequentialLR's / ChainedScheduler's schedules
    if not schedulers:
        raise ArgumentError(f"{kind}: expected at least one scheduler")
    for i, s in enumerate(schedulers):
        if isinstance(s, ReduceLROnPlateau) or getattr(s, "optimizer", None) is not optimizer:
            raise ArgumentError(f"{kind}: scheduler {i} ({type(s).__name__}) must be a schedule of the same "
                                "optimizer (ReduceLROnPlateau is not supported)")


class LRScheduler:
    """Base class of the schedules: step() sets each group's lr to get_lr(); `last_epoch` counts the steps.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> sched = tl.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    >>> lrs = []
    >>> for _ in range(4):
    ...     opt.step(); sched.step(); lrs.append(sched.get_last_lr()[0])
    >>> lrs
    [1.0, 0.5, 0.5, 0.25]
    """
    _is_initial = False

    def __init__(self, optimizer, last_epoch: int = -1):
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                if "initial_lr" not in group:
                    group["initial_lr"] = _copy(group["lr"])
            elif "initial_lr" not in group:
                raise StateDictError(f"{type(self).__name__}: param_groups[{i}] has no 'initial_lr': resuming with "
                                     f"last_epoch={last_epoch} needs the optimizer's saved state loaded first")
        self.base_lrs = [_copy(group["initial_lr"]) for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self._step_count, self._is_initial = 0, True
        try:
            self.step()
        finally:
            self._is_initial = False

    def _lrs(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def _last_lrs(self):  # get_last_lr()'s values: copies of Tensor lrs
        return [_copy(group["lr"]) for group in self.optimizer.param_groups]

    def get_lr(self) -> list:
        """The learning rates of the step being taken (use get_last_lr() to read the current ones)."""
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def get_last_lr(self) -> list:
        """The learning rates the last step set, one per parameter group."""
        return self._last_lr

    def step(self, epoch: int | None = None):
        """Advance the schedule by one step (call it after optimizer.step())."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn("passing an epoch to step() is deprecated (as in torch): call step() without it",
                          UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch=None):
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            _set_lr(group, lr)
        self._last_lr = self._last_lrs()

    def state_dict(self) -> dict:
        """The schedule's state (its attributes except the optimizer; functions as None, as torch)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas", "_schedulers")}
        if "lr_lambdas" in self.__dict__:  # a callable object's attributes are kept, a function is not
            out["lr_lambdas"] = [None if isinstance(f, types.FunctionType) else dict(f.__dict__)
                                 for f in self.lr_lambdas]
        if "_schedulers" in self.__dict__:
            out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: dict):
        """Restore a state_dict()."""
        state_dict = dict(state_dict)
        for f, saved in zip(getattr(self, "lr_lambdas", ()), state_dict.pop("lr_lambdas", ()) or ()):
            if saved is not None:
                f.__dict__.update(saved)
        for s, saved in zip(getattr(self, "_schedulers", ()), state_dict.pop("_schedulers", ()) or ()):
            s.load_state_dict(saved)
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """lr = initial lr * lr_lambda(epoch) (one function, or one per group).

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=2.0)
    >>> tl.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5).get_last_lr()
    [1.0]
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group(optimizer, lr_lambda, "lr_lambda")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's LambdaLR."""
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(LRScheduler):
    """lr *= lr_lambda(epoch) at each step (not at construction).

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.MultiplicativeLR(opt, lambda epoch: 0.5); s.step(); s.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group(optimizer, lr_lambda, "lr_lambda")
        for f in self.lr_lambdas:
            if not callable(f):
                raise ArgumentError(f"MultiplicativeLR: lr_lambda should be a function, got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's MultiplicativeLR."""
        if self._is_initial:
            return self._lrs()
        return [lr * f(self.last_epoch) for f, lr in zip(self.lr_lambdas, self._lrs())]


class StepLR(LRScheduler):
    """lr *= gamma every step_size steps.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5); s.step(); s.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's StepLR."""
        if self.last_epoch == 0 or self.last_epoch % self.step_size:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr *= gamma at each milestone step.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.MultiStepLR(opt, milestones=[1], gamma=0.5); s.step(); s.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's MultiStepLR."""
        if self.last_epoch not in self.milestones:
            return self._lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

    def _get_closed_form_lr(self):
        milestones = sorted(Counter(self.milestones).elements())  # a loaded state holds a plain dict
        return [base * self.gamma ** bisect_right(milestones, self.last_epoch) for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = initial lr * factor for the first total_iters steps, then the initial lr.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> tl.optim.lr_scheduler.ConstantLR(opt, factor=0.5).get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ArgumentError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's ConstantLR."""
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr goes linearly from initial lr * start_factor to initial lr * end_factor over total_iters steps.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2); s.step(); s.get_last_lr()
    [0.75]
    """

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ArgumentError(f"LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1], got "
                                f"{start_factor} and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's LinearLR."""
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lrs()
        span = self.end_factor - self.start_factor
        ratio = 1.0 + span / (self.total_iters * self.start_factor + (self.last_epoch - 1) * span)
        return [lr * ratio for lr in self._lrs()]

    def _get_closed_form_lr(self):
        f = self.start_factor + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch) \
            / self.total_iters
        return [base * f for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr *= gamma at every step.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5); s.step(); s.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's ExponentialLR."""
        return self._lrs() if self._is_initial else [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = initial lr * (1 - epoch / total_iters) ** power, then 0.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.PolynomialLR(opt, total_iters=4); s.step(); s.get_last_lr()
    [0.75]
    """

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's PolynomialLR."""
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lrs()
        e, n = self.last_epoch, self.total_iters
        f = ((1.0 - e / n) / (1.0 - (e - 1) / n)) ** self.power
        return [lr * f for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (initial lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (torch's recursive form).

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2); s.step(); [round(x, 6) for x in s.get_last_lr()]
    [0.5]
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's CosineAnnealingLR."""
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._lrs()
        if self._step_count == 1 and e > 0:
            return [lo + (base - lo) * (1 + math.cos(e * math.pi / T)) / 2 for base in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (base - lo) * (1 - math.cos(math.pi / T)) / 2 for base, lr in zip(self.base_lrs, self._lrs())]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (lr - lo) + lo
                for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy: lr rises from max_lr / div_factor to max_lr over pct_start of total_steps, then
    anneals to max_lr / div_factor / final_div_factor ('cos' or 'linear'; three_phase as torch); with
    cycle_momentum, momentum (or beta1) moves the opposite way between base_momentum and max_momentum.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0, momentum=0.9)
    >>> s = tl.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    >>> round(s.get_last_lr()[0], 6), opt.param_groups[0]['momentum']
    (0.04, 0.95)
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False, last_epoch: int = -1):
        _check_optimizer(optimizer)
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise ArgumentError(f"OneCycleLR: expected a positive integer total_steps, got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(v, int) or v <= 0:
                    raise ArgumentError(f"OneCycleLR: expected a positive integer {name}, got {v}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ArgumentError("OneCycleLR: define either total_steps or (epochs and steps_per_epoch)")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ArgumentError(f"OneCycleLR: expected a float pct_start between 0 and 1, got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        up = float(pct_start * self.total_steps) - 1  # phases: (end step, start lr/momentum key, end key)
        phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum")]
        if three_phase:
            phases += [(float(2 * pct_start * self.total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                        "max_momentum"), (self.total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            phases += [(self.total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        self._schedule_phases = [dict(zip(("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum"), ph))
                                 for ph in phases]
        self._anneal_func_type = anneal_strategy
        if last_epoch == -1:
            for m, group in zip(_per_group(optimizer, max_lr, "max_lr"), optimizer.param_groups):
                group.update(initial_lr=m / div_factor, max_lr=m, min_lr=m / div_factor / final_div_factor)
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ArgumentError(f"OneCycleLR: cycle_momentum needs an optimizer with momentum or betas, "
                                    f"{type(optimizer).__name__} has neither (pass cycle_momentum=False)")
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                for hi, lo, group in zip(_per_group(optimizer, max_momentum, "max_momentum"),
                                         _per_group(optimizer, base_momentum, "base_momentum"), optimizer.param_groups):
                    self._set_momentum(group, hi)
                    group.update(max_momentum=hi, base_momentum=lo)
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, m):
        if self.use_beta1:
            group["betas"] = (m, *group["betas"][1:])
        else:
            group["momentum"] = m

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        """The learning rates of the step being taken, by the rule above, as torch's OneCycleLR."""
        step = self.last_epoch
        if step > self.total_steps:
            raise ArgumentError(f"OneCycleLR: tried to step {step} times; total_steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, ph in enumerate(self._schedule_phases):
                if step <= ph["end_step"] or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (ph["end_step"] - start)
                    lrs.append(self._anneal(group[ph["start_lr"]], group[ph["end_lr"]], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[ph["start_momentum"]],
                                                               group[ph["end_momentum"]], pct))
                    break
                start = ph["end_step"]
        return lrs


class SequentialLR(LRScheduler):
    """Runs `schedulers` one after another, switching at each of `milestones` (restarting the next one).

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> warm = tl.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=1)
    >>> decay = tl.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    >>> s = tl.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[1])
    >>> lrs = [s.get_last_lr()[0]]
    >>> for _ in range(2):
    ...     s.step(); lrs.append(s.get_last_lr()[0])
    >>> lrs
    [0.5, 1.0, 0.5]
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        _check_members("SequentialLR", optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(f"SequentialLR: expected {len(schedulers) - 1} milestones for {len(schedulers)} "
                                f"schedulers, got {len(milestones)}")
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        for group in optimizer.param_groups:  # undo the schedulers' construction steps
            _set_lr(group, group["initial_lr"])
        self._undo(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def _undo(self, sched):
        if hasattr(sched, "_schedulers"):
            for s in sched._schedulers:
                self._undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self):
        """Step the schedule active now (a milestone restarts the next one at its epoch 0)."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()


class ChainedScheduler(LRScheduler):
    """Steps every schedule of `schedulers` at each step (their factors compound).

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.ChainedScheduler([tl.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5),
    ...                                             tl.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)])
    >>> s.step(); s.get_last_lr()
    [0.25]
    """

    def __init__(self, schedulers, optimizer=None):
        self.optimizer = optimizer or (schedulers[0].optimizer if schedulers else None)
        _check_members("ChainedScheduler", self.optimizer, schedulers)
        self._schedulers, self._last_lr = list(schedulers), self._last_lrs()

    def step(self):
        """Step each schedule in turn."""
        for s in self._schedulers:
            s.step()
        self._last_lr = self._last_lrs()


class ReduceLROnPlateau(LRScheduler):
    """lr *= factor when `metrics` (passed to step) has not improved for `patience` steps.

    >>> import tensorlite as tl
    >>> opt = tl.optim.SGD([tl.nn.Parameter(tl.zeros(1))], lr=1.0)
    >>> s = tl.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    >>> s.step(1.0); s.step(1.0); s.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ArgumentError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ArgumentError(f"ReduceLROnPlateau: mode must be 'min' or 'max' and threshold_mode 'rel' or 'abs', "
                                f"got {mode!r} and {threshold_mode!r}")
        _check_optimizer(optimizer)
        self.optimizer, self.factor, self.patience, self.cooldown, self.eps = optimizer, factor, patience, cooldown, eps
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.min_lrs = _per_group(optimizer, min_lr, "min_lr")
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.last_epoch, self._last_lr = 0, self._last_lrs()
        self.best, self.cooldown_counter, self.num_bad_epochs = self.mode_worse, 0, 0

    def _is_better(self, a, best):
        t = self.threshold
        if self.threshold_mode == "rel":
            return a < best * (1.0 - t) if self.mode == "min" else a > best * (t + 1.0)
        return a < best - t if self.mode == "min" else a > best + t

    def step(self, metrics, epoch=None):
        """Record this step's metric value; reduce the lrs after `patience` steps without improvement."""
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            if len(self.min_lrs) != len(self.optimizer.param_groups):
                if self.default_min_lr is None:
                    raise ArgumentError("ReduceLROnPlateau: the optimizer's number of parameter groups changed; "
                                        "set min_lrs to one value per group")
                self.min_lrs = [self.default_min_lr] * len(self.optimizer.param_groups)
            for group, lo in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(float(group["lr"]) * self.factor, lo)
                if float(group["lr"]) - new > self.eps:
                    _set_lr(group, new)
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = self._last_lrs()
