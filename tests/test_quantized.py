"""Weight-only int8 (issue 46): per-channel quantization, F.linear_int8 on every device against a
float64 reference of the dequantised product (the GPU's gemv(1)_q8 kernels for up to 4 rows, the
dequantised BLAS path beyond), tl.quantize_weights on a model, and the errors."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from conftest import assert_close

DTYPES = [tl.float32, tl.bfloat16, tl.float16, tl.float64]


def test_quantize_per_channel_int8_bounds_the_error(rng):
    w = rng.standard_normal((6, 40)).astype(np.float32) * np.array([[1e-3], [1], [30], [0], [5], [0.2]], np.float32)
    q, scale = F.quantize_per_channel_int8(tl.tensor(w))
    q, scale = q.numpy(), scale.numpy()
    assert q.dtype == np.int8 and scale.dtype == np.float32 and np.abs(q).max() <= 127
    assert (np.abs(q).max(axis=1)[[0, 1, 2, 4, 5]] == 127).all() and (q[3] == 0).all()  # each row's max is 127
    assert (np.abs(q * scale[:, None] - w) <= scale[:, None] * 0.5 * (1 + 1e-6)).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("m, k", [(1, 64), (1, 37), (3, 64), (4, 40), (4, 33), (7, 64), (1, 1)],
                         ids=lambda v: str(v))
def test_linear_int8_matches_the_dequantised_product(device, rng, dtype, m, k):
    n = 24
    q = rng.integers(-127, 128, (n, k)).astype(np.int8)
    scale = (rng.random(n) * 0.05 + 0.001).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    xs, ss, bs = (tl.tensor(a, device=device).to(dtype) for a in (x, scale, bias))
    with tl.no_grad():
        got = F.linear_int8(xs, tl.tensor(q, device=device), ss, bs)
    # the reference from the operands as the device holds them (rounded to dtype), in float64
    x64, s64, b64 = (t.to(tl.float64).cpu().numpy() for t in (xs, ss, bs))
    want = x64 @ (q.astype(np.float64) * s64[:, None]).T + b64
    assert got.shape == (m, n) and got.device == xs.device
    assert_close(got, want, dtype, terms=k)


def test_linear_int8_keeps_leading_dims_and_strided_input(device, rng):
    q = tl.tensor(rng.integers(-127, 128, (8, 16)).astype(np.int8), device=device)
    scale = tl.tensor(rng.random(8).astype(np.float32) * 0.1, device=device)
    x = tl.tensor(rng.standard_normal((2, 3, 32)).astype(np.float32), device=device)[..., ::2]  # strided k
    with tl.no_grad():
        got = F.linear_int8(x, q, scale)
    want = x.numpy().astype(np.float64) @ (q.numpy() * scale.numpy()[:, None].astype(np.float64)).T
    assert got.shape == (2, 3, 8)
    assert_close(got, want, tl.float32, terms=16)


def test_linear_int8_differentiates_in_the_input(device, rng):
    q = tl.tensor(rng.integers(-127, 128, (5, 6)).astype(np.int8), device=device)
    scale = tl.tensor(rng.random(5).astype(np.float32) * 0.1, device=device)
    x = tl.tensor(rng.standard_normal((2, 6)).astype(np.float32), device=device, requires_grad=True)
    bias = tl.zeros(5, device=device, requires_grad=True)
    F.linear_int8(x, q, scale, bias).square().sum().backward()
    w = q.numpy().astype(np.float64) * scale.numpy()[:, None]
    y = x.detach().numpy() @ w.T
    assert_close(x.grad, 2 * y @ w, tl.float32, terms=6)
    assert_close(bias.grad, 2 * y.sum(0), tl.float32, terms=2)


def test_quantize_weights_swaps_linears_and_keeps_the_output(device):
    tl.manual_seed(0)
    emb = tl.nn.Embedding(50, 32)
    head = tl.nn.Linear(32, 50, bias=False)
    head.weight = emb.weight  # tied: left in float
    model = tl.nn.ModuleDict({"emb": emb, "body": tl.nn.Sequential(tl.nn.Linear(32, 64), tl.nn.GELU(),
                                                                   tl.nn.Linear(64, 32)),
                              "head": head, "skipped": tl.nn.Linear(32, 4)}).to(device)
    x = tl.randn(5, 32, device=device)
    before = model["body"](x)
    assert tl.quantize_weights(model, skip=("skipped",)) is model
    assert [type(m).__name__ for m in model["body"]] == ["Int8Linear", "GELU", "Int8Linear"]
    assert type(model["head"]) is tl.nn.Linear and type(model["skipped"]) is tl.nn.Linear
    layer = model["body"][0]
    assert layer.weight.dtype == tl.int8 and layer.scale.shape == (64,) and layer.weight.device == x.device
    with tl.no_grad():
        after = model["body"](x)
    rel = float((after - before).abs().max() / before.abs().max())
    assert rel < 0.02  # int8 per channel: ~0.4% of the range per weight, summed over 32 and 64 terms
    state = model.state_dict()
    assert state["body.0.weight"].dtype == tl.int8 and "body.0.scale" in state
    assert repr(layer) == "Int8Linear(in_features=32, out_features=64, bias=True)"


def test_bad_operands_name_the_op():
    q = tl.zeros(4, 8, dtype=tl.int8)
    with pytest.raises(tl.ShapeError, match=r"linear_int8.*expected input \(\.\.\., in_features\)"):
        F.linear_int8(tl.ones(2, 7), q, tl.ones(4))
    with pytest.raises(tl.DTypeError, match="linear_int8.*expected an int8 weight"):
        F.linear_int8(tl.ones(2, 8), q.float(), tl.ones(4))
    with pytest.raises(tl.DTypeError, match="linear_int8.*scale and bias of its dtype"):
        F.linear_int8(tl.ones(2, 8), q, tl.ones(4, dtype=tl.float64))
    with pytest.raises(tl.ArgumentError, match="quantize_weights: dtype must be 'int8'"):
        tl.quantize_weights(tl.nn.Linear(2, 2), dtype="int4")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("m", [1, 3, 6])
def test_linear_int8_adds_the_residual(device, rng, dtype, m):
    """residual=: the block's residual add in the product's store (gemv(1)_q8's `add`)."""
    n, k = 24, 64
    q = tl.tensor(rng.integers(-127, 128, (n, k)).astype(np.int8), device=device)
    scale, x, res = (tl.tensor(a, device=device).to(dtype) for a in (
        rng.random(n).astype(np.float32) * 0.05, rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((m, n)).astype(np.float32)))
    with tl.no_grad():
        got = F.linear_int8(x, q, scale, residual=res)
    s64, x64, r64 = (t.to(tl.float64).cpu().numpy() for t in (scale, x, res))
    assert_close(got, r64 + x64 @ (q.numpy() * s64[:, None]).T, dtype, terms=k)
    with pytest.raises(tl.ShapeError, match="residual of the result's shape"):
        F.linear_int8(x, q, scale, residual=res[:, :3])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
@pytest.mark.parametrize("m", [1, 2])
def test_rms_norm_linear_with_an_int8_weight(device, rng, dtype, gated, m):
    """F.rms_norm_linear(..., scale=): the norm inside the int8 product (gemv1_q8_norm(_silu) for one
    row on GPUs), against the norm, the dequantised product and SwiGLU written out in float64."""
    n, k = 32, 64
    q = rng.integers(-127, 128, (n, k)).astype(np.int8)
    scale, g, x = (tl.tensor(a, device=device).to(dtype) for a in (
        rng.random(n).astype(np.float32) * 0.05, rng.random(k).astype(np.float32) + 0.5,
        rng.standard_normal((m, k)).astype(np.float32)))
    with tl.no_grad():
        got = F.rms_norm_linear(x, k, g, tl.tensor(q, device=device), None, 1e-5, gated, scale=scale)
    s64, g64, x64 = (t.to(tl.float64).cpu().numpy() for t in (scale, g, x))
    h = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * g64
    y = h @ (q * s64[:, None]).T
    if gated:
        gate, up = y[:, :n // 2], y[:, n // 2:]
        y = gate / (1 + np.exp(-gate)) * up
    # relative to the largest output: silu(gate) * up of a cancelling `up` is small, and the composite
    # (more than one row) rounds the normed input, the dequantised weight and y to dtype on the way
    err = np.abs(got.to(tl.float64).cpu().numpy() - y).max() / np.abs(y).max()
    assert err < {"float64": 1e-12, "float32": 1e-5, "float16": 5e-3, "bfloat16": 4e-2}[dtype.name]


@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("op", ["plain", "residual", "norm", "gated"])
def test_int8_products_of_decode_length_rows(device, rng, dtype, op):
    """Rows as long as the 1.1B decode step's down projection's (k = 5632: each lane loads its runs
    of a row in several batches, on 32- and 64-lane warps), an odd number of them (gemv1_q8 and
    gemv1_q8_norm take two rows a warp: the last warp's second row is past the weight) and
    magnitudes to 127 (the int8 weights widened exactly), against float64."""
    n, k = 26 if op == "gated" else 25, 5632
    q = rng.integers(-127, 128, (n, k)).astype(np.int8)
    q[:, :2] = [-127, 127]
    scale, g, x, res = (tl.tensor(a, device=device).to(dtype) for a in (
        rng.random(n).astype(np.float32) * 2e-3 + 5e-4, rng.random(k).astype(np.float32) + 0.5,
        rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((1, n)).astype(np.float32)))
    qs = tl.tensor(q, device=device)
    s64, g64, x64, r64 = (t.to(tl.float64).cpu().numpy() for t in (scale, g, x, res))
    with tl.no_grad():
        if op in ("plain", "residual"):
            got = F.linear_int8(x, qs, scale, residual=res if op == "residual" else None)
            want = x64 @ (q * s64[:, None]).T + (r64 if op == "residual" else 0)
            assert_close(got, want, dtype, terms=k)
            return
        got = F.rms_norm_linear(x, k, g, qs, None, 1e-5, op == "gated", scale=scale)
    y = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * g64 @ (q * s64[:, None]).T
    if op == "gated":
        gate, up = y[:, :n // 2], y[:, n // 2:]
        y = gate / (1 + np.exp(-gate)) * up
    assert got.shape == y.shape
    err = np.abs(got.to(tl.float64).cpu().numpy() - y).max() / np.abs(y).max()
    assert err < {"float32": 1e-5, "bfloat16": 4e-2}[dtype.name]
