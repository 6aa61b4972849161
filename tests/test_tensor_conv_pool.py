"""conv1d/2d, conv_transpose1d/2d, max/avg pooling and nearest upsampling on every device,
against direct numpy loop references written here (so CI without torch still checks);
one test also checks those references against torch when it is importable."""
import itertools

import numpy as np
import pytest

import tensorlite as tl
from conftest import FLOAT_DTYPES, as_f64, assert_close, random_array


def _tup(v, nd):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd


def _window(k, dilation, stride, count):
    """The slice that picks, for each output position, the input at kernel offset k."""
    start = k * dilation
    return slice(start, start + (count - 1) * stride + 1, stride)


# ------------------------------------------------------------------- references
def conv_ref(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch conv{1,2}d: out[b, o, p] = sum_{c in group, k} x_pad[b, c, p*s + k*d] * w[o, c, k]."""
    nd = x.ndim - 2
    stride, padding, dilation = (_tup(v, nd) for v in (stride, padding, dilation))
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    cout, cin_g, ks = w.shape[0], w.shape[1], w.shape[2:]
    cout_g = cout // groups
    out_size = [(x.shape[2 + i] + 2 * padding[i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1
                for i in range(nd)]
    out = np.zeros((x.shape[0], cout, *out_size))
    for g in range(groups):
        xg = xp[:, g * cin_g:(g + 1) * cin_g]
        wg = w[g * cout_g:(g + 1) * cout_g]
        for k in itertools.product(*map(range, ks)):
            win = tuple(_window(k[i], dilation[i], stride[i], out_size[i]) for i in range(nd))
            patch = xg[(slice(None), slice(None)) + win]
            out[:, g * cout_g:(g + 1) * cout_g] += np.einsum("bc...,oc->bo...", patch, wg[(Ellipsis,) + k])
    if bias is not None:
        out += bias.reshape((1, -1) + (1,) * nd)
    return out


def conv_transpose_ref(x, w, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """PyTorch conv_transpose{1,2}d: each input element scatters x * w[c, o, k] to
    position i*s + k*d of an uncropped output, which is then cropped by `padding`."""
    nd = x.ndim - 2
    stride, padding, dilation, output_padding = (_tup(v, nd) for v in (stride, padding, dilation, output_padding))
    cin, cout_g, ks = w.shape[0], w.shape[1], w.shape[2:]
    cin_g, n = cin // groups, x.shape[2:]
    full = [(n[i] - 1) * stride[i] + dilation[i] * (ks[i] - 1) + 1 + output_padding[i] for i in range(nd)]
    buf = np.zeros((x.shape[0], cout_g * groups, *full))
    for g in range(groups):
        xg = x[:, g * cin_g:(g + 1) * cin_g]
        wg = w[g * cin_g:(g + 1) * cin_g]
        for k in itertools.product(*map(range, ks)):
            win = tuple(_window(k[i], dilation[i], stride[i], n[i]) for i in range(nd))
            buf[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + win] += np.einsum(
                "bc...,co->bo...", xg, wg[(Ellipsis,) + k])
    crop = tuple(slice(padding[i], full[i] - padding[i]) for i in range(nd))
    out = buf[(slice(None), slice(None)) + crop]
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * nd)
    return out


def pool_ref(x, kind, kernel_size, stride=None, padding=0, dilation=1, count_include_pad=True):
    k = _tup(kernel_size, 2)
    s = _tup(stride if stride is not None else kernel_size, 2)
    p, d = _tup(padding, 2), _tup(dilation, 2)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), [(p[0], p[0]), (p[1], p[1])])  # 1 where the input is real
    out_hw = [(x.shape[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]
    windows = [tuple(_window(kk[i], d[i], s[i], out_hw[i]) for i in range(2))
               for kk in itertools.product(range(k[0]), range(k[1]))]
    if kind == "max":
        return np.max([xp[:, :, wh, ww] for wh, ww in windows], axis=0)
    total = np.sum([xp[:, :, wh, ww] for wh, ww in windows], axis=0)
    count = k[0] * k[1] if count_include_pad else np.sum([ones[wh, ww] for wh, ww in windows], axis=0)
    return total / count


def max_pool_winners(x, kernel_size, stride=None, padding=0, dilation=1):
    """(b, c, oh, ow) flat (iy * w + ix) positions of the element PyTorch's max pooling picks in
    each window: its unpadded elements in row-major order, a value replacing the running max when
    it is greater or NaN (a tie keeps the first maximum, NaNs the last NaN; all -inf: the first)."""
    k, s = _tup(kernel_size, 2), _tup(stride if stride is not None else kernel_size, 2)
    p, d = _tup(padding, 2), _tup(dilation, 2)
    h, w = x.shape[2:]
    out_hw = [(x.shape[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]
    won = np.zeros(x.shape[:2] + tuple(out_hw), np.int64)
    for b, c, oy, ox in np.ndindex(won.shape):
        best, win = -np.inf, None
        for ky, kx in itertools.product(range(k[0]), range(k[1])):
            iy, ix = oy * s[0] - p[0] + ky * d[0], ox * s[1] - p[1] + kx * d[1]
            if 0 <= iy < h and 0 <= ix < w:
                v = x[b, c, iy, ix]
                if win is None or v > best or np.isnan(v):
                    best, win = v, iy * w + ix
        won[b, c, oy, ox] = win
    return won


def max_pool_grad_ref(x, g, *pool_args):
    """max_pool2d's input gradient: each window's gradient added at its winner (float64)."""
    gx = np.zeros(x.shape)
    won = max_pool_winners(x, *pool_args)
    for b, c in np.ndindex(x.shape[:2]):
        np.add.at(gx[b, c].reshape(-1), won[b, c].reshape(-1), g[b, c].reshape(-1))
    return gx


def upsample_ref(x, out_h, out_w):
    h, w = x.shape[2:]
    rows = np.arange(out_h) * h // out_h
    cols = np.arange(out_w) * w // out_w
    return x[:, :, rows][:, :, :, cols]


# ------------------------------------------------------------------------ conv
CONV2D_CASES = [  # (cin, cout, kernel, stride, padding, dilation, groups)
    (3, 4, (3, 3), 1, 0, 1, 1),
    (3, 5, (3, 2), 2, 1, 1, 1),
    (2, 4, (3, 3), 1, 2, 2, 1),
    (4, 6, (2, 3), (2, 1), (1, 0), (1, 2), 2),
    (4, 8, (3, 3), 2, 1, 1, 4),          # 2 output channels per group
    (3, 3, (1, 1), 1, 0, 1, 3),          # depthwise 1x1
    (2, 3, (5, 6), 1, 0, 1, 1),          # kernel as large as the input
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CONV2D_CASES, ids=str)
def test_conv2d(device, rng, dtype, case):
    cin, cout, k, stride, padding, dilation, groups = case
    x = random_array(rng, (2, cin, 5, 6), dtype)
    w = random_array(rng, (cout, cin // groups) + k, dtype)
    b = random_array(rng, (cout,), dtype)
    X, W, B = (tl.tensor(a, device=device) for a in (x, w, b))
    terms = cin // groups * k[0] * k[1]
    expected = conv_ref(as_f64(x), as_f64(w), None, stride, padding, dilation, groups)
    assert_close(tl.conv2d(X, W, stride=stride, padding=padding, dilation=dilation, groups=groups),
                 expected, dtype, terms=terms)
    expected = conv_ref(as_f64(x), as_f64(w), as_f64(b), stride, padding, dilation, groups)
    assert_close(tl.conv2d(X, W, B, stride, padding, dilation, groups), expected, dtype, terms=terms + 1)


CONV1D_CASES = [(3, 4, 3, 1, 0, 1, 1), (2, 6, 3, 2, 1, 2, 2), (4, 4, 1, 3, 0, 1, 4), (3, 2, 4, 1, 3, 1, 1)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CONV1D_CASES, ids=str)
def test_conv1d(device, rng, dtype, case):
    cin, cout, k, stride, padding, dilation, groups = case
    x = random_array(rng, (3, cin, 9), dtype)
    w = random_array(rng, (cout, cin // groups, k), dtype)
    b = random_array(rng, (cout,), dtype)
    X, W, B = (tl.tensor(a, device=device) for a in (x, w, b))
    expected = conv_ref(as_f64(x), as_f64(w), as_f64(b), stride, padding, dilation, groups)
    assert_close(tl.conv1d(X, W, B, stride=stride, padding=padding, dilation=dilation, groups=groups),
                 expected, dtype, terms=cin // groups * k + 1)


CONV_T2D_CASES = [  # (cin, cout, kernel, stride, padding, output_padding, dilation, groups)
    (3, 4, (3, 3), 1, 0, 0, 1, 1),
    (3, 2, (3, 3), 2, 1, 1, 1, 1),
    (2, 3, (2, 3), (2, 3), (0, 1), (1, 2), 1, 1),
    (4, 6, (3, 2), 2, 1, 0, (2, 1), 2),
    (4, 4, (3, 3), 3, 2, 2, 1, 4),
    (2, 2, (1, 1), 1, 0, 0, 1, 1),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CONV_T2D_CASES, ids=str)
def test_conv_transpose2d(device, rng, dtype, case):
    cin, cout, k, stride, padding, output_padding, dilation, groups = case
    x = random_array(rng, (2, cin, 4, 5), dtype)
    w = random_array(rng, (cin, cout // groups) + k, dtype)
    b = random_array(rng, (cout,), dtype)
    X, W, B = (tl.tensor(a, device=device) for a in (x, w, b))
    expected = conv_transpose_ref(as_f64(x), as_f64(w), as_f64(b), stride, padding, output_padding, groups, dilation)
    got = tl.conv_transpose2d(X, W, B, stride=stride, padding=padding, output_padding=output_padding,
                              groups=groups, dilation=dilation)
    assert_close(got, expected, dtype, terms=cin // groups * k[0] * k[1] + 1)


CONV_T1D_CASES = [(3, 4, 3, 1, 0, 0, 1, 1), (2, 4, 3, 2, 1, 1, 1, 2), (4, 2, 2, 3, 0, 2, 2, 1),
                  (3, 3, 4, 2, 2, 0, 1, 3)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CONV_T1D_CASES, ids=str)
def test_conv_transpose1d(device, rng, dtype, case):
    cin, cout, k, stride, padding, output_padding, dilation, groups = case
    x = random_array(rng, (2, cin, 7), dtype)
    w = random_array(rng, (cin, cout // groups, k), dtype)
    X, W = (tl.tensor(a, device=device) for a in (x, w))
    expected = conv_transpose_ref(as_f64(x), as_f64(w), None, stride, padding, output_padding, groups, dilation)
    got = tl.conv_transpose1d(X, W, None, stride, padding, output_padding, groups, dilation)
    assert_close(got, expected, dtype, terms=cin // groups * k)


def test_conv_reads_non_contiguous_operands(device, rng):
    x = random_array(rng, (2, 6, 7, 3), tl.float32)     # (b, w, h, c): permuted to NCHW below
    w = random_array(rng, (3, 4, 3, 2), tl.float32)     # (cin, cout, kh, kw): transposed to OIHW
    X = tl.tensor(x, device=device).permute(0, 3, 2, 1)
    W = tl.tensor(w, device=device).transpose(0, 1)
    xr, wr = x.transpose(0, 3, 2, 1), w.transpose(1, 0, 2, 3)
    assert_close(tl.conv2d(X, W, padding=1), conv_ref(xr, wr, padding=1), tl.float32, terms=18)
    assert_close(tl.conv2d(X[:, :, 1::2], W, stride=(1, 2)), conv_ref(xr[:, :, 1::2], wr, stride=(1, 2)),
                 tl.float32, terms=18)
    wt = tl.tensor(w, device=device)[:, :, ::-1][:, :, 1:]  # (cin, cout, 2, 2) with an offset
    assert_close(tl.conv_transpose2d(X, wt), conv_transpose_ref(xr, w[:, :, ::-1][:, :, 1:]), tl.float32, terms=12)
    x1 = random_array(rng, (5, 2, 3), tl.float32)        # (l, b, c) -> (b, c, l)
    w1 = random_array(rng, (4, 3, 3), tl.float32)
    got = tl.conv1d(tl.tensor(x1, device=device).permute(1, 2, 0), tl.tensor(w1, device=device), padding=1)
    assert_close(got, conv_ref(x1.transpose(1, 2, 0), w1, padding=1), tl.float32, terms=9)


def test_conv_empty_batch_and_size_one(device, rng):
    w = tl.tensor(random_array(rng, (4, 3, 3, 3), tl.float32), device=device)
    assert tl.conv2d(tl.zeros((0, 3, 5, 5), device=device), w).shape == (0, 4, 3, 3)
    x = random_array(rng, (1, 3, 3, 3), tl.float32)
    got = tl.conv2d(tl.tensor(x, device=device), w)
    assert_close(got, conv_ref(x, w.numpy()), tl.float32, terms=27)
    assert tl.conv_transpose2d(tl.zeros((0, 4, 2, 2), device=device), w).shape == (0, 3, 4, 4)


@pytest.mark.parametrize("op", [tl.conv2d, tl.conv_transpose2d], ids=["conv2d", "conv_transpose2d"])
def test_conv_of_an_empty_input_has_zero_gradients(device, rng, op):
    """The bad-input fuzz's finding: the backward of conv2d over an input of no pixels, padded to a
    positive output, leaked conv_transpose2d's ShapeError; an empty batch or no channels now gives
    zero gradients (PyTorch's), and an input of no pixels in a batch of channels is refused, as
    PyTorch refuses it."""
    w = tl.tensor(random_array(rng, (3, 3, 2, 2), tl.float32), device=device, requires_grad=True)
    padding = 1 if op is tl.conv2d else 0  # a positive output from no pixels
    for shape in ((0, 3, 0, 0), (0, 3, 4, 4), (0, 3, 1, 0)) + (((2, 0, 3, 3),) if op is tl.conv2d else ()):
        x = tl.zeros(shape, device=device, requires_grad=True)
        wx = w if shape[1] else tl.zeros((3, 0, 2, 2), device=device, requires_grad=True)
        op(x, wx, None, 1, padding).sum().backward()
        assert x.grad.shape == shape and wx.grad.shape == wx.shape and not wx.grad.abs().sum().item()
    with pytest.raises(tl.ShapeError, match=op.__name__ + r".*zero batch or zero channel.*\(2, 3, 0, 3\)"):
        op(tl.zeros(2, 3, 0, 3, device=device), w, None, 1, padding)


def test_loop_references_agree_with_torch(rng):
    torch = pytest.importorskip("torch", reason="torch is not installed: references checked against numpy only")
    F = torch.nn.functional
    x, w, b = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((6, 2, 3, 2)), rng.standard_normal(6)
    tx, tw, tb = (torch.tensor(a) for a in (x, w, b))
    kw = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    np.testing.assert_allclose(conv_ref(x, w, b, **kw), F.conv2d(tx, tw, tb, **kw).numpy(), rtol=1e-10, atol=1e-10)
    wt = rng.standard_normal((4, 3, 3, 2))
    kw = dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(1, 2))
    np.testing.assert_allclose(conv_transpose_ref(x, wt, None, **kw),
                               F.conv_transpose2d(tx, torch.tensor(wt), None, **kw).numpy(), rtol=1e-10, atol=1e-10)
    x1, w1 = rng.standard_normal((2, 4, 9)), rng.standard_normal((4, 1, 3))
    kw = dict(stride=2, padding=1, output_padding=1, groups=4, dilation=1)
    np.testing.assert_allclose(conv_transpose_ref(x1, w1, None, **kw),
                               F.conv_transpose1d(torch.tensor(x1), torch.tensor(w1), **kw).numpy(), rtol=1e-10)
    np.testing.assert_allclose(pool_ref(x, "max", 3, 2, 1, 2), F.max_pool2d(tx, 3, 2, 1, 2).numpy())
    np.testing.assert_allclose(pool_ref(x, "avg", (3, 2), (2, 1), (1, 1), count_include_pad=False),
                               F.avg_pool2d(tx, (3, 2), (2, 1), (1, 1), count_include_pad=False).numpy())
    np.testing.assert_allclose(upsample_ref(x, 9, 4), F.interpolate(tx, size=(9, 4), mode="nearest").numpy())
    xm = _pool_edge_values(rng, (2, 3, 7, 8), tl.float64)  # ties, NaN, -inf, -0
    for args in ((2,), (3, 1, 1), (3, 2, 1, 2)):
        txm = torch.tensor(xm, requires_grad=True)
        y = F.max_pool2d(txm, *args)
        g = rng.standard_normal(tuple(y.shape))
        y.backward(torch.tensor(g))
        np.testing.assert_allclose(max_pool_grad_ref(xm, g, *args), txm.grad.numpy(), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------- pooling
POOL_CASES = [  # (kernel, stride, padding, dilation)
    (2, None, 0, 1), (3, 1, 1, 1), ((3, 2), (2, 1), (1, 0), 1), (2, 3, 0, 1), (3, 2, 1, 2), (1, 1, 0, 1),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d(device, rng, dtype, case):
    kernel, stride, padding, dilation = case
    x = random_array(rng, (2, 3, 7, 8), dtype)
    got = tl.max_pool2d(tl.tensor(x, device=device), kernel, stride, padding, dilation)
    assert_close(got, pool_ref(as_f64(x), "max", kernel, stride, padding, dilation), dtype)


def _pool_edge_values(rng, shape, dtype):
    """Random values of dtype with what decides a max-pool gradient: ties (halves of integers,
    +0 beside -0), NaNs, and -inf (a whole plane's top rows: windows of -inf and padding)."""
    x = np.round(random_array(rng, shape, dtype, -3.0, 3.0).astype(np.float64) * 2) / 2
    x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
    x.reshape(-1)[rng.choice(x.size, max(1, x.size // 40), replace=False)] = np.nan
    x[-1, -1, :3] = -np.inf
    return x.astype(dtype.np)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", POOL_CASES + [((2, 3), (1, 2), (1, 1), (2, 1))], ids=str)
def test_max_pool2d_backward(device, rng, dtype, case):
    """The input gradient goes to each window's winner as PyTorch picks it (ties, NaN, -inf,
    padding, overlapping windows that add up), through a permuted input and a broadcast gradient."""
    x = _pool_edge_values(rng, (2, 3, 8, 7), dtype)
    X = tl.tensor(x.transpose(0, 1, 3, 2), device=device).transpose(2, 3).requires_grad_()  # strided (h, w)
    y = tl.max_pool2d(X, *case)
    g = random_array(rng, y.shape, dtype)
    y.backward(tl.tensor(g, device=device))
    terms = int(np.prod(_tup(case[0], 2)))  # overlapping windows sum up to kh * kw gradients
    assert_close(X.grad, max_pool_grad_ref(as_f64(x), as_f64(g), *case), dtype, terms=terms)
    X.grad = None
    y = tl.max_pool2d(X, *case)
    y.sum().backward()  # a broadcast (stride 0) gradient of ones
    assert_close(X.grad, max_pool_grad_ref(as_f64(x), np.ones(y.shape), *case), dtype, terms=terms)


def test_max_pool2d_backward_contract_checks_grad(device):
    from tensorlite.backend import PoolParams
    x = tl.ones(1, 2, 4, 4, device=device)
    p = PoolParams((2, 2), (2, 2))
    for bad, err in ((tl.ones(1, 2, 3, 2, device=device), tl.ShapeError),
                     (tl.ones(1, 2, 2, 2, dtype=tl.float64, device=device), tl.DTypeError)):
        with pytest.raises(err, match="max_pool2d_backward"):
            x._storage.max_pool2d_backward(x._layout, p, bad._storage, bad._layout)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, case", [((2, 3, 1, 1), (2, None, 1, 2)),  # overlapping windows
                                         ((1, 2, 1, 4), ((2, 1), 3, (1, 0), (2, 1)))],  # disjoint windows
                         ids=["overlapping", "disjoint"])
def test_max_pool2d_windows_of_padding_alone(device, rng, dtype, shape, case):
    """A dilated kernel whose every window holds padding alone (the bad-input fuzz's finding: cpu's
    backward leaked numpy's MemoryError, or an IndexError where the windows are disjoint): the
    output is -inf, as PyTorch's, and no gradient arrives (PyTorch's CUDA kernel drops it; its
    cpu kernel writes out of bounds, so torch is no reference here)."""
    x = random_array(rng, shape, dtype)
    X = tl.tensor(x, device=device, requires_grad=True)
    y = tl.max_pool2d(X, *case)
    assert y.shape[2:] == (1, 2 if shape[3] == 4 else 1) and np.isneginf(as_f64(y.detach().numpy())).all()
    y.backward(tl.tensor(random_array(rng, y.shape, dtype), device=device))
    assert_close(X.grad, np.zeros(shape), dtype)
    (gx,) = tl.autograd.grad(tl.max_pool2d(X, *case).sum(), X, create_graph=True)  # the composite backward
    assert_close(gx, np.zeros(shape), dtype)


def test_max_pool2d_second_derivative(device, rng):
    """create_graph differentiates the gradient again (as PyTorch): d/dx of sum(w * dL/dx) for
    L = sum(max_pool2d(x) ** 2) is each window's 2 * w[winner] at its winner."""
    x = rng.standard_normal((2, 3, 6, 7))  # distinct values: one winner per window
    wt = rng.standard_normal(x.shape)
    X = tl.tensor(x, device=device, requires_grad=True)
    (gx,) = tl.autograd.grad((tl.max_pool2d(X, 3, 2, 1) ** 2).sum(), X, create_graph=True)
    won = max_pool_winners(x, 3, 2, 1)
    out = np.take_along_axis(x.reshape(2, 3, -1), won.reshape(2, 3, -1), 2).reshape(won.shape)
    assert_close(gx, max_pool_grad_ref(x, 2 * out, 3, 2, 1), tl.float64)
    (gx * tl.tensor(wt, device=device)).sum().backward()
    w_at = np.take_along_axis(wt.reshape(2, 3, -1), won.reshape(2, 3, -1), 2).reshape(won.shape)
    assert_close(X.grad, max_pool_grad_ref(x, 2 * w_at, 3, 2, 1), tl.float64)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] == 1], ids=str)
def test_avg_pool2d(device, rng, dtype, case, count_include_pad):
    kernel, stride, padding, _ = case
    x = random_array(rng, (2, 3, 7, 8), dtype)
    got = tl.avg_pool2d(tl.tensor(x, device=device), kernel, stride, padding, count_include_pad=count_include_pad)
    k = _tup(kernel, 2)
    assert_close(got, pool_ref(as_f64(x), "avg", kernel, stride, padding, count_include_pad=count_include_pad),
                 dtype, terms=k[0] * k[1])


def test_pool_non_contiguous_and_integers(device, rng):
    x = random_array(rng, (2, 6, 5, 3), tl.float32)
    X = tl.tensor(x, device=device).permute(0, 3, 2, 1)           # (2, 3, 5, 6)
    xr = x.transpose(0, 3, 2, 1)
    assert_close(tl.max_pool2d(X, 2), pool_ref(xr, "max", 2), tl.float32)
    assert_close(tl.avg_pool2d(X[:, :, ::2], (1, 2), padding=(0, 1)),
                 pool_ref(xr[:, :, ::2], "avg", (1, 2), padding=(0, 1)), tl.float32, terms=2)
    xi = random_array(rng, (1, 2, 4, 4), tl.int64, -9, 9)
    got = tl.max_pool2d(tl.tensor(xi, device=device), 2)
    assert got.dtype is tl.int64
    assert_close(got, pool_ref(xi.astype(np.float64), "max", 2).astype(np.int64), tl.int64)
    # the exact mean, then the dtype's cast: integers truncate toward zero, a bool is mean != 0
    # (the GPU kernel divided the bool window's count of trues first: one true of four read false)
    got = tl.avg_pool2d(tl.tensor(xi, device=device), 2)
    assert_close(got, np.trunc(pool_ref(xi.astype(np.float64), "avg", 2)).astype(np.int64), tl.int64)
    xb = np.eye(4, dtype=bool).reshape(1, 1, 4, 4)
    assert_close(tl.avg_pool2d(tl.tensor(xb, device=device), 2), pool_ref(xb.astype(np.float64), "avg", 2) != 0,
                 tl.bool_)


# -------------------------------------------------------------------- upsample
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (tl.int64, tl.uint8), ids=lambda d: d.name)
@pytest.mark.parametrize("out_hw", [(8, 10), (4, 5), (3, 7), (2, 2), (9, 11), (1, 1)], ids=str)
def test_upsample_nearest2d(device, rng, dtype, out_hw):
    x = random_array(rng, (2, 3, 4, 5), dtype)
    X = tl.tensor(x, device=device)
    got = tl.upsample_nearest2d(X, out_hw)
    assert got.dtype is dtype
    assert_close(got, upsample_ref(x, *out_hw), dtype)
    assert_close(tl.upsample_nearest2d(X.transpose(2, 3), out_hw), upsample_ref(x.transpose(0, 1, 3, 2), *out_hw),
                 dtype)


def test_upsample_scale_factor(device, rng):
    x = random_array(rng, (1, 2, 3, 4), tl.float32)
    got = tl.upsample_nearest2d(tl.tensor(x, device=device), scale_factor=2)
    assert_close(got, upsample_ref(x, 6, 8), tl.float32)


@pytest.mark.parametrize("op", ["conv2d", "conv1d", "conv_transpose2d"])
def test_conv_backward_computes_only_the_gradients_needed(device, rng, op):
    """A frozen weight or an input without grad gets no gradient computed; the other one is the
    same as when both need theirs."""
    shapes = {"conv2d": ((2, 3, 6, 5), (4, 3, 3, 3)), "conv1d": ((2, 3, 7), (4, 3, 3)),
              "conv_transpose2d": ((2, 3, 4, 5), (3, 2, 3, 3))}[op]
    x, w = (random_array(rng, s, tl.float64) for s in shapes)
    fn = getattr(tl, op)

    def grads(x_grad, w_grad):
        X = tl.tensor(x, device=device, requires_grad=x_grad)
        W = tl.tensor(w, device=device, requires_grad=w_grad)
        fn(X, W, padding=1).square().sum().backward()
        return X.grad, W.grad
    gx, gw = grads(True, True)
    only_x, none_w = grads(True, False)
    none_x, only_w = grads(False, True)
    assert none_w is None and none_x is None
    assert_close(only_x, gx.numpy(), tl.float64)
    assert_close(only_w, gw.numpy(), tl.float64)
