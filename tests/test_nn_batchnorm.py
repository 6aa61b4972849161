"""F.batch_norm and nn.BatchNorm1d/2d against a numpy transcription of torch's semantics
(batch statistics with the biased variance, running stats updated with the unbiased one),
on every device; gradients against finite differences (cpu, f64) and cpu (other devices)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import nn
from tensorlite.errors import DeviceError, ShapeError

from conftest import FLOAT_DTYPES, as_f64, assert_close, make_tensor, random_array
from gradcheck_util import check_device_grads, gradcheck


def ref_batch_norm(x, rm, rv, w, b, training, momentum, eps):
    """(y, new running mean, new running var) in float64, as torch computes them."""
    x = as_f64(x)
    dims = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(dims), x.var(dims)
        n = x.size // x.shape[1]
        rm = None if rm is None else (1 - momentum) * as_f64(rm) + momentum * mean
        rv = None if rv is None else (1 - momentum) * as_f64(rv) + momentum * var * n / (n - 1)
    else:
        mean, var = as_f64(rm), as_f64(rv)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if w is not None:
        y = y * as_f64(w).reshape(shape)
    if b is not None:
        y = y + as_f64(b).reshape(shape)
    return y, rm, rv


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 5), (3, 4, 7)])
def test_batch_norm_matches_reference(device, rng, dtype, training, shape):
    c = shape[1]
    x, xa = make_tensor(rng, shape, dtype, device)
    xa = xa + 3.0 * np.arange(c).reshape((1, c) + (1,) * (len(shape) - 2))  # a different mean per channel
    x = tl.tensor(xa, dtype=dtype, device=device)
    rm, rma = make_tensor(rng, (c,), dtype, device)
    rv, rva = make_tensor(rng, (c,), dtype, device, 0.5, 2.0)
    w, wa = make_tensor(rng, (c,), dtype, device)
    b, ba = make_tensor(rng, (c,), dtype, device)
    y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.2, eps=1e-3)
    ey, erm, erv = ref_batch_norm(x.numpy(), rma, rva, wa, ba, training, 0.2, 1e-3)
    n = int(np.prod(shape)) // c
    assert_close(y, ey, dtype, terms=n if training else 4)
    if training:
        assert_close(rm, erm, dtype, terms=n)
        assert_close(rv, erv, dtype, terms=n)
    else:  # inference leaves the running stats alone
        np.testing.assert_array_equal(rm.numpy(), rma)
        np.testing.assert_array_equal(rv.numpy(), rva)


def test_batch_norm_without_running_stats_or_affine(device, rng):
    x, xa = make_tensor(rng, (5, 2, 3, 3), tl.float32, device)
    y = F.batch_norm(x, None, None, training=True)
    assert_close(y, ref_batch_norm(xa, None, None, None, None, True, 0.1, 1e-5)[0], tl.float32, terms=45)


def test_batch_norm_errors(rng):
    x = tl.tensor(random_array(rng, (2, 3, 4), tl.float32))
    with pytest.raises(ShapeError, match="running_mean must have shape"):
        F.batch_norm(x, tl.zeros(4), tl.ones(3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(tl.ones(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match="required when training=False"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(ShapeError, match="at least 2 dims"):
        F.batch_norm(tl.ones(3), tl.zeros(3), tl.ones(3))


def test_batch_norm_device_mismatch_is_named(gpu_device):
    x = tl.ones(2, 3, device=gpu_device)
    with pytest.raises(DeviceError, match="running_mean"):
        F.batch_norm(x, tl.zeros(3), tl.ones(3, device=gpu_device))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradcheck(rng, training):
    xa = rng.standard_normal((3, 2, 2, 3))
    wa, ba = rng.standard_normal(2), rng.standard_normal(2)
    rma, rva = rng.standard_normal(2), rng.uniform(0.5, 2.0, 2)

    def fn(x, w, b):
        rm = tl.tensor(rma, dtype=x.dtype, device=x.device)
        rv = tl.tensor(rva, dtype=x.dtype, device=x.device)
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-3)
    gradcheck(fn, [xa, wa, ba], rng)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_grads_on_device(device, rng, training):
    """With running stats, weight and bias: on a GPU with cuDNN/MIOpen this is the fused path."""
    xa = rng.standard_normal((4, 3, 3, 2))
    wa, ba = rng.standard_normal(3), rng.standard_normal(3)
    rma, rva = rng.standard_normal(3), rng.uniform(0.5, 2.0, 3)

    def fn(x, w, b):
        rm, rv = (tl.tensor(a, dtype=x.dtype, device=x.device) for a in (rma, rva))
        return F.batch_norm(x, rm, rv, w, b, training=training)
    check_device_grads(fn, [xa, wa, ba], device, rng)


def test_batchnorm2d_module_train_eval(device, rng):
    m = nn.BatchNorm2d(3, momentum=0.25, device=device)
    assert [k for k in m.state_dict()] == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    rm, rv = np.zeros(3), np.ones(3)
    xs = [random_array(rng, (4, 3, 2, 5), tl.float32) for _ in range(2)]
    for xa in xs:
        y = m(tl.tensor(xa, device=device))
        ey, rm, rv = ref_batch_norm(xa, rm, rv, None, None, True, 0.25, 1e-5)
        assert_close(y, ey, tl.float32, terms=40)
    assert int(m.num_batches_tracked) == 2
    assert_close(m.running_mean, rm, tl.float32, terms=40)
    assert_close(m.running_var, rv, tl.float32, terms=40)
    m.eval()
    y = m(tl.tensor(xs[0], device=device))
    assert_close(y, ref_batch_norm(xs[0], rm, rv, None, None, False, 0, 1e-5)[0], tl.float32, terms=40)
    with pytest.raises(ShapeError, match="4-D"):
        m(tl.ones(2, 3, device=device))


def test_batchnorm1d_cumulative_average_and_no_tracking(rng):
    m = nn.BatchNorm1d(2, momentum=None)
    batches = [random_array(rng, (5, 2, 3), tl.float32) for _ in range(3)]
    for xa in batches:
        m(tl.tensor(xa))
    means = [xa.astype(np.float64).mean((0, 2)) for xa in batches]
    assert_close(m.running_mean, np.mean(means, 0), tl.float32, terms=15)  # momentum None: a plain average
    m2 = nn.BatchNorm1d(2, affine=False, track_running_stats=False)
    assert m2.running_mean is None and not list(m2.parameters())
    m2.eval()  # no running stats: batch statistics even in eval, as torch
    y = m2(tl.tensor(batches[0]))
    assert_close(y, ref_batch_norm(batches[0], None, None, None, None, True, 0, 1e-5)[0], tl.float32, terms=15)


@pytest.mark.parametrize("training", [True, False])
def test_fused_hook_and_its_backward(monkeypatch, rng, training):
    """F.batch_norm's fast path (the contract's batch_norm_fused: None by default, cuDNN /
    MIOpen on the GPU storage): stood in for here by a numpy forward on cpu, so that the
    hook's plumbing and its hand-written backward are checked against finite differences."""
    from tensorlite.backends.cpu import CpuStorage
    used = []

    def fused(self, layout, w, wl, b, bl, m, ml, v, vl, training_, momentum, eps):
        x = self.to_cpu(layout)
        col = lambda st, lay: st.to_cpu(lay)  # noqa: E731
        y, rm, rv = ref_batch_norm(x, col(m, ml), col(v, vl), col(w, wl), col(b, bl), training_, momentum, eps)
        if training_:
            m.data[ml.offset:ml.offset + rm.size] = rm
            v.data[vl.offset:vl.offset + rv.size] = rv
        used.append(training_)
        return self.device.from_cpu(y.astype(self.dtype.np))
    monkeypatch.setattr(CpuStorage, "batch_norm_fused", fused, raising=False)

    xa = rng.standard_normal((3, 2, 2, 3))
    wa, ba = rng.standard_normal(2), rng.standard_normal(2)
    rma, rva = rng.standard_normal(2), rng.uniform(0.5, 2.0, 2)

    def fn(x, w, b):
        rm = tl.tensor(rma, dtype=x.dtype, device=x.device)
        rv = tl.tensor(rva, dtype=x.dtype, device=x.device)
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-3)
    gradcheck(fn, [xa, wa, ba], rng)
    assert used and all(t == training for t in used)
    # the composite (the contract's default: no fused path) gives the same forward
    monkeypatch.delattr(CpuStorage, "batch_norm_fused")
    with tl.no_grad():
        ref = fn(*(tl.tensor(a) for a in (xa, wa, ba)))
    monkeypatch.setattr(CpuStorage, "batch_norm_fused", fused, raising=False)
    with tl.no_grad():
        got = fn(*(tl.tensor(a) for a in (xa, wa, ba)))
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
