"""Differential fuzzing: random chains of ops (elementwise, broadcasting binaries, views,
reductions, matmul, in-place ops) run on every device beside the `cpu` reference, and on
`cpu` beside PyTorch where it is installed; values and input gradients must agree.

Each step is written once against a namespace that both libraries fill in (`tl` with
tensorlite.nn.functional, `torch` with torch.nn.functional), so a program is the same text
for both. 60 examples a case; TL_FUZZ_EXAMPLES, TL_FUZZ_SEED and how a failure reproduces:
fuzz_util.py."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import tensorlite as tl
import tensorlite.nn.functional as tlF
from fuzz_util import examples, fuzz

try:
    import torch
except ImportError:  # the optional reference package
    torch = None


def _safe(x):
    return x.tanh() * 2  # keeps values in (-2, 2): no overflow, no log of a negative


# (name, step(lib, F, x, other) -> tensor, needs an `other` operand of x's shape)
STEPS = [
    ("tanh", lambda L, F, x, o: x.tanh(), False),
    ("sigmoid", lambda L, F, x, o: x.sigmoid(), False),
    ("sin", lambda L, F, x, o: x.sin(), False),
    ("abs-log1p", lambda L, F, x, o: (x.abs() + 1).log(), False),
    ("sqrt", lambda L, F, x, o: (x * x + 1).sqrt(), False),
    ("exp", lambda L, F, x, o: _safe(x).exp(), False),
    ("relu", lambda L, F, x, o: F.relu(x), False),
    ("silu", lambda L, F, x, o: F.silu(x), False),
    ("gelu", lambda L, F, x, o: F.gelu(x), False),
    ("square", lambda L, F, x, o: _safe(x) ** 2, False),
    ("pow-scalar", lambda L, F, x, o: (x.abs() + 0.5) ** 1.5, False),
    ("add", lambda L, F, x, o: x + o, True),
    ("sub-row", lambda L, F, x, o: x - o[..., :1, :], True),
    ("mul-col", lambda L, F, x, o: x * o[..., :1], True),
    ("div", lambda L, F, x, o: x / (o.abs() + 1), True),
    ("maximum", lambda L, F, x, o: L.maximum(x, o), True),
    ("where", lambda L, F, x, o: L.where(o > 0, x, -x), True),
    ("affine", lambda L, F, x, o: x * 0.5 - 1.25, False),
    ("transpose", lambda L, F, x, o: (x.transpose(-1, -2) * 1).transpose(-1, -2), False),
    ("narrow", lambda L, F, x, o: L.cat([x.narrow(-1, 1, x.shape[-1] - 1), x.narrow(-1, 0, 1)], -1), False),
    ("strided", lambda L, F, x, o: L.cat([x[..., ::2], x[..., 1::2]], -1), False),
    ("unsqueeze-expand", lambda L, F, x, o: x.unsqueeze(0).expand(2, *x.shape).sum(0), False),
    ("sum-keep", lambda L, F, x, o: x - x.sum(-1, keepdim=True) / x.shape[-1], False),
    ("mean-keep", lambda L, F, x, o: x * x.mean(-2, keepdim=True), False),
    ("amax", lambda L, F, x, o: x - x.amax(-1, keepdim=True), False),
    ("logsumexp", lambda L, F, x, o: x - x.logsumexp(-1, keepdim=True), False),
    ("softmax", lambda L, F, x, o: F.softmax(x, -1), False),
    ("log_softmax", lambda L, F, x, o: F.log_softmax(x, dim=-1), False),
    # normalising x + o, not x: rows of near-equal values (tanh of exp's output is within 1% of 1)
    # make layer_norm amplify float32 rounding by 1/std past any fixed tolerance against float64
    ("layer_norm", lambda L, F, x, o: F.layer_norm(x + o, (x.shape[-1],)), True),
    ("var", lambda L, F, x, o: x * x.var(-1, keepdim=True), False),
    ("matmul", lambda L, F, x, o: (x @ o.transpose(-1, -2)) @ o * 0.1, True),
    ("clamp", lambda L, F, x, o: x.clamp(-0.5, 0.75), False),
    # in-place ops on a fresh intermediate (x * 1), as PyTorch programs write them
    ("mul_", lambda L, F, x, o: (x * 1).mul_(o), True),
    ("add_-alpha", lambda L, F, x, o: (x * 1).add_(o, alpha=0.5), True),
    ("iadd", lambda L, F, x, o: _iadd(x * 1, o), True),
    ("clamp_", lambda L, F, x, o: (x * 1).clamp_(min=-0.25), False),
    ("setitem", lambda L, F, x, o: _setrow(x * 1, o), True),
]


def _iadd(y, o):
    y += o
    return y


def _setrow(y, o):
    y[..., 0, :] = o[..., 1, :] * 2
    return y


class _Lib:
    """What a step sees of one library: the tensor namespace and its nn.functional."""
    def __init__(self, lib, functional, make):
        self.L, self.F, self.make = lib, functional, make


def _run(lib, program, arrays, shape):
    x = lib.make(arrays[0])
    h = x
    for k, (name, step, needs) in enumerate(program):
        other = lib.make(arrays[k + 1]) if needs else None
        h = step(lib.L, lib.F, h, other)
        assert tuple(h.shape) == shape, f"{name} changed the shape"
    (h * lib.make(arrays[-1])).sum().backward()
    return h.detach().cpu().numpy() if hasattr(h, "cpu") else h.numpy(), x.grad.cpu().numpy()


def _tl(device, dtype):
    return _Lib(tl, tlF, lambda a: tl.tensor(a, dtype=dtype, device=device, requires_grad=True))


programs = st.lists(st.sampled_from(STEPS), min_size=1, max_size=6)
shapes = st.sampled_from([(3, 4), (2, 3, 4), (4, 4)])


def _arrays(seed, shape, n):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5, 1.5, shape) for _ in range(n)]


FUZZ = fuzz(examples(60))


@FUZZ
@given(program=programs, shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_random_programs_agree_with_cpu(device, program, shape, seed):
    arrays = _arrays(seed, shape, len(program) + 2)
    dt = tl.float32
    got = _run(_tl(device, dt), program, arrays, shape)
    ref = _run(_tl("cpu", tl.float64), program, arrays, shape)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-4,
                                   err_msg=" -> ".join(name for name, _, _ in program))


@pytest.mark.skipif(torch is None, reason="needs torch (the optional reference package)")
@FUZZ
@given(program=programs, shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_random_programs_agree_with_pytorch(program, shape, seed):
    arrays = _arrays(seed, shape, len(program) + 2)
    ours = _run(_tl("cpu", tl.float64), program, arrays, shape)
    theirs = _run(_Lib(torch, torch.nn.functional,
                       lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True)), program, arrays, shape)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-9, atol=1e-9, err_msg=" -> ".join(name for name, _, _ in program))
