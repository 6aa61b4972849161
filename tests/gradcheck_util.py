"""Gradient checks: autograd against float64 central finite differences on cpu, and a
device's float32 gradients against those cpu float64 gradients.

`fn(*tensors) -> Tensor` receives one tensor per input array; anything that is not
differentiated (index tensors, masks, fixed parameters) is closed over by `fn`. The
scalar that is differentiated is sum(fn(...) * W) with random weights W, so every
output element contributes with a different weight (a sum alone would hide errors
that cancel, e.g. in softmax).
"""
from __future__ import annotations

import numpy as np

import tensorlite as tl


def _as_tensors(arrays, dtype, device, requires_grad):
    return [tl.tensor(np.asarray(a, np.float64), dtype=dtype, device=device, requires_grad=requires_grad)
            for a in arrays]


def _weighted_value(fn, arrays, weights):
    with tl.no_grad():
        out = fn(*_as_tensors(arrays, tl.float64, "cpu", False))
    return float((out.numpy().astype(np.float64) * weights).sum())


def autograd_grads(fn, arrays, weights, dtype=tl.float64, device="cpu"):
    """(output as float64 numpy, [d sum(out * weights) / d array_i as float64 numpy])."""
    ts = _as_tensors(arrays, dtype, device, True)
    out = fn(*ts)
    (out * tl.tensor(weights, dtype=out.dtype, device=device)).sum().backward()
    missing = [i for i, t in enumerate(ts) if t.grad is None]
    assert not missing, f"inputs {missing} received no gradient"
    for t in ts:
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype, (t.grad.shape, t.grad.dtype, t.shape, t.dtype)
        assert t.grad.device == out.device
    return out.numpy().astype(np.float64), [t.grad.numpy().astype(np.float64) for t in ts]


def output_weights(fn, arrays, rng):
    with tl.no_grad():
        shape = fn(*_as_tensors(arrays, tl.float64, "cpu", False)).shape
    return rng.standard_normal(shape)


def numeric_grads(fn, arrays, weights, eps=1e-6):
    """Central differences of sum(fn(...) * weights) in float64, one element at a time."""
    arrays = [np.array(a, np.float64) for a in arrays]
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            orig = a[j]
            a[j] = orig + eps
            hi = _weighted_value(fn, arrays, weights)
            a[j] = orig - eps
            lo = _weighted_value(fn, arrays, weights)
            a[j] = orig
            g[j] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads


def gradcheck(fn, arrays, rng, eps=1e-6, rtol=1e-5, atol=1e-6):
    """Assert autograd == finite differences (float64, cpu); returns (weights, grads)."""
    weights = output_weights(fn, arrays, rng)
    _, analytic = autograd_grads(fn, arrays, weights)
    numeric = numeric_grads(fn, arrays, weights, eps)
    for i, (a, n) in enumerate(zip(analytic, numeric)):
        assert np.abs(n).max(initial=0) > 0 or np.abs(a).max(initial=0) == 0
        np.testing.assert_allclose(a, n, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")
    return weights, analytic


def check_device_grads(fn, arrays, device, rng, rtol=2e-4, atol=2e-5):
    """Forward and gradients in float32 on `device` against float64 autograd on cpu."""
    weights = output_weights(fn, arrays, rng)
    ref_out, ref = autograd_grads(fn, arrays, weights)
    out, got = autograd_grads(fn, arrays, weights, dtype=tl.float32, device=device)
    np.testing.assert_allclose(out, ref_out, rtol=rtol, atol=atol, err_msg="forward")
    for i, (g, r) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol * max(1.0, np.abs(r).max(initial=0)),
                                   err_msg=f"gradient of input {i} on {device}")
