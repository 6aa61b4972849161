"""nn.functional's PyTorch breadth (padding, resampling, adaptive pools, group/instance norm,
distances, one_hot, activations, rearrangements) against torch.nn.functional (CPU, float64)
on every device: forward, gradients, several dtypes, and the errors of bad input."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from conftest import assert_close

torch = pytest.importorskip("torch")
from test_nn_losses import compare  # noqa: E402  (torch's float64 result and gradients on the same values)

TF = torch.nn.functional
FLOATS = [tl.float32, tl.float64, tl.float16, tl.bfloat16]


# ---- pad ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode, shape, pad", [
    ("constant", (2, 3, 4), (1, 2)), ("constant", (2, 3, 4), (1, -1, 0, 2, 1, 1)), ("constant", (5,), (3, 0)),
    ("reflect", (2, 3, 5), (2, 4)), ("reflect", (1, 2, 4, 5), (1, 2, 3, 0)), ("reflect", (3, 4, 5), (1, 1, 2, 3)),
    ("reflect", (1, 2, 3, 4, 5), (1, 2, 2, 1, 1, 2)),
    ("replicate", (2, 3, 4), (3, 1)), ("replicate", (1, 2, 3, 4), (2, 0, 1, 5)),
    ("replicate", (1, 1, 2, 3, 4), (1, 1, 1, 1, 1, 1)),
    ("circular", (2, 3, 4), (4, 2)), ("circular", (1, 2, 3, 4), (1, 2, 3, 0)),
    ("circular", (1, 1, 2, 3, 4), (1, 1, 1, 1, 1, 1))])
def test_pad(device, rng, dtype, mode, shape, pad):
    x = rng.standard_normal(shape)
    compare(device, rng, lambda a: F.pad(a, pad, mode), lambda a: TF.pad(a, pad, mode), [x], dtype)


def test_pad_constant_value_and_integers(device):
    x = tl.tensor([[1, 2], [3, 4]], device=device)
    got = F.pad(x, (1, 0, 0, 1), value=7)
    assert got.dtype == tl.int64
    assert got.tolist() == TF.pad(torch.tensor([[1, 2], [3, 4]]), (1, 0, 0, 1), value=7).tolist()
    assert F.pad(x.unsqueeze(0), (1, 1), mode="reflect").tolist() == [[[2, 1, 2, 1], [4, 3, 4, 3]]]


def test_pad_errors(device):
    x = tl.ones(1, 2, 3, device=device)
    with pytest.raises(tl.ArgumentError, match=r"pad\(input: shape=\(1, 2, 3\).*reflect padding \(3, 0\) is too large"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(tl.ArgumentError, match="circular padding .* too large"):
        F.pad(x, (0, 4), mode="circular")
    with pytest.raises(tl.ArgumentError, match="even-length"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(tl.ArgumentError, match="even-length"):
        F.pad(x, (1,) * 8)
    with pytest.raises(tl.ArgumentError, match="mode must be"):
        F.pad(x, (1, 1), mode="mirror")
    with pytest.raises(tl.ShapeError, match="pads 1 to 3 trailing dims"):
        F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate")
    with pytest.raises(tl.ArgumentError, match="takes no value"):
        F.pad(x, (1, 1), mode="reflect", value=2.0)
    with pytest.raises(tl.ShapeError, match="negative"):
        F.pad(x, (-2, -2))


# ---- interpolate ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode, shape, kw", [
    ("nearest", (2, 3, 5), {"size": 8}), ("nearest", (2, 3, 5), {"scale_factor": 1.7}),
    ("nearest", (1, 2, 3, 4), {"scale_factor": 2}), ("nearest", (1, 2, 6, 5), {"size": (4, 3)}),
    ("nearest", (1, 1, 2, 3, 4), {"scale_factor": (2, 1, 0.5)}),
    ("nearest-exact", (1, 2, 5, 3), {"size": (7, 2)}),
    ("linear", (2, 3, 5), {"size": 9}), ("linear", (2, 3, 5), {"size": 9, "align_corners": True}),
    ("linear", (2, 3, 8), {"scale_factor": 0.6}),
    ("bilinear", (1, 2, 3, 4), {"size": (5, 7)}), ("bilinear", (1, 2, 6, 5), {"size": (4, 3), "align_corners": True}),
    ("bilinear", (2, 1, 4, 4), {"scale_factor": 1.5}),
    ("bilinear", (2, 1, 4, 4), {"scale_factor": 1.5, "recompute_scale_factor": True}),
    ("bicubic", (1, 2, 4, 5), {"size": (7, 3)}), ("bicubic", (1, 1, 4, 5), {"size": (6, 8), "align_corners": True}),
    ("trilinear", (1, 1, 2, 3, 4), {"size": (3, 5, 2)}),
    ("area", (1, 2, 7, 5), {"size": (3, 2)}), ("area", (1, 2, 9), {"scale_factor": 0.5})])
def test_interpolate(device, rng, dtype, mode, shape, kw):
    x = rng.standard_normal(shape)
    compare(device, rng, lambda a: F.interpolate(a, mode=mode, **kw), lambda a: TF.interpolate(a, mode=mode, **kw),
            [x], dtype, terms=16)


def test_interpolate_nearest_of_integers_and_upsample_aliases(device):
    x = tl.arange(6, device=device).reshape(1, 1, 2, 3)
    ref = TF.interpolate(torch.arange(6.0).reshape(1, 1, 2, 3), scale_factor=(1.5, 2))  # torch: floats only
    got = F.interpolate(x, scale_factor=(1.5, 2))
    assert got.dtype == tl.int64 and got.tolist() == ref.long().tolist()
    y = tl.tensor([[[[0.0, 1.0], [2.0, 3.0]]]], device=device)
    with pytest.warns(UserWarning, match="deprecated"):
        got = F.upsample_bilinear(y, size=3)
    assert_close(got, TF.interpolate(torch.tensor(y.tolist()), size=3, mode="bilinear", align_corners=True).numpy())
    with pytest.warns(UserWarning, match="deprecated"):
        assert F.upsample(y, scale_factor=2).shape == (1, 1, 4, 4)


def test_interpolate_errors(device):
    x = tl.ones(1, 1, 4, device=device)
    with pytest.raises(tl.ShapeError, match="'bilinear' needs a 4-D input"):
        F.interpolate(x, size=3, mode="bilinear")
    with pytest.raises(tl.ArgumentError, match="exactly one of size and scale_factor"):
        F.interpolate(x, size=3, scale_factor=2)
    with pytest.raises(tl.ArgumentError, match="exactly one"):
        F.interpolate(x)
    with pytest.raises(tl.ArgumentError, match="align_corners"):
        F.interpolate(x, size=3, align_corners=True)
    with pytest.raises(tl.ArgumentError, match="unknown mode"):
        F.interpolate(x, size=3, mode="cubic")
    with pytest.raises(tl.ArgumentError, match=r"interpolate\(input: shape=\(1, 1, 4\).*needs 1 values"):
        F.interpolate(x, size=(3, 3))
    with pytest.raises(tl.ShapeError, match="expected an"):
        F.interpolate(tl.ones(4, device=device), size=3)
    with pytest.raises(tl.DTypeError, match="floating point"):
        F.interpolate(tl.ones(1, 1, 4, dtype=tl.int64, device=device), size=3, mode="linear")
    with pytest.raises(tl.ArgumentError, match="positive"):
        F.interpolate(x, scale_factor=-1.0)


# ---- pooling --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name, shape, out", [
    ("adaptive_avg_pool1d", (2, 3, 7), 3), ("adaptive_avg_pool1d", (3, 5), 5),
    ("adaptive_avg_pool2d", (2, 3, 7, 5), (3, 2)), ("adaptive_avg_pool2d", (1, 2, 5, 6), 1),
    ("adaptive_avg_pool2d", (2, 4, 6), (None, 4)), ("adaptive_avg_pool3d", (1, 2, 3, 5, 4), (2, 3, 2)),
    ("adaptive_max_pool1d", (2, 3, 7), 3), ("adaptive_max_pool2d", (2, 3, 7, 5), (3, 2)),
    ("adaptive_max_pool2d", (1, 2, 4, 4), (6, 6)), ("adaptive_max_pool3d", (1, 2, 3, 5, 4), (2, 2, 3))])
def test_adaptive_pools(device, rng, dtype, name, shape, out):
    x = rng.permutation(np.prod(shape)).reshape(shape) / np.prod(shape)  # distinct values: one max per window
    compare(device, rng, lambda a: getattr(F, name)(a, out), lambda a: getattr(TF, name)(a, out), [x], dtype,
            terms=16)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
@pytest.mark.parametrize("kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
                                {"kernel_size": 3, "stride": 1}])
def test_pool1d(device, rng, dtype, kw):
    x = rng.permutation(2 * 3 * 9).reshape(2, 3, 9) / 54.0
    compare(device, rng, lambda a: F.max_pool1d(a, **kw), lambda a: TF.max_pool1d(a, **kw), [x], dtype)
    compare(device, rng, lambda a: F.avg_pool1d(a, **kw), lambda a: TF.avg_pool1d(a, **kw), [x], dtype)
    compare(device, rng, lambda a: F.avg_pool1d(a, **kw, count_include_pad=False),
            lambda a: TF.avg_pool1d(a, **kw, count_include_pad=False), [x[0]], dtype)
    compare(device, rng, lambda a: F.max_pool1d(a, 2, dilation=2), lambda a: TF.max_pool1d(a, 2, dilation=2),
            [x[0]], dtype)


def test_pool_errors(device):
    x = tl.ones(1, 2, 4, device=device)
    with pytest.raises(tl.ShapeError, match=r"adaptive_avg_pool2d\(input: shape=\(4,\)"):
        F.adaptive_avg_pool2d(tl.ones(4, device=device), 2)
    with pytest.raises(tl.ArgumentError, match="output_size"):
        F.adaptive_avg_pool1d(x, 0)
    with pytest.raises(tl.ArgumentError, match="return_indices"):
        F.adaptive_max_pool1d(x, 2, return_indices=True)
    with pytest.raises(tl.ShapeError, match="max_pool1d.*expected an"):
        F.max_pool1d(tl.ones(1, 1, 2, 2, device=device), 2)


# ---- normalisation --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, groups, affine", [((2, 6, 5), 3, True), ((2, 4, 3, 3), 2, False),
                                                   ((3, 4), 4, True), ((2, 6, 2, 2), 1, True)])
def test_group_norm(device, rng, dtype, shape, groups, affine):
    x = rng.standard_normal(shape) * 2 + 1
    w, b = rng.uniform(0.5, 1.5, shape[1]), rng.standard_normal(shape[1])
    if affine:
        compare(device, rng, lambda a, c, d: F.group_norm(a, groups, c, d),
                lambda a, c, d: TF.group_norm(a, groups, c, d), [x, w, b], dtype, (0, 1, 2), terms=16)
    else:
        compare(device, rng, lambda a: F.group_norm(a, groups), lambda a: TF.group_norm(a, groups), [x], dtype,
                terms=16)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_instance_norm(device, rng, dtype):
    x, w, b = rng.standard_normal((2, 3, 5)), rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    compare(device, rng, lambda a, c, d: F.instance_norm(a, weight=c, bias=d),
            lambda a, c, d: TF.instance_norm(a, weight=c, bias=d), [x, w, b], dtype, (0, 1, 2), terms=8)
    rm, rv = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    for use_input_stats in (True, False):
        stats = [tl.tensor(rm, dtype=dtype, device=device), tl.tensor(rv, dtype=dtype, device=device)]
        ref_stats = [torch.tensor(rm), torch.tensor(rv)]
        compare(device, rng,
                lambda a, s=stats, u=use_input_stats: F.instance_norm(a, *s, use_input_stats=u, momentum=0.3),
                lambda a, s=ref_stats, u=use_input_stats: TF.instance_norm(a, *s, use_input_stats=u, momentum=0.3),
                [x], dtype, terms=8)
        for got, ref in zip(stats, ref_stats):  # the running statistics updated as torch's
            assert_close(got, ref.numpy(), dtype, terms=8)


def test_norm_errors(device):
    x = tl.ones(2, 6, 3, device=device)
    with pytest.raises(tl.ShapeError, match=r"group_norm\(input: shape=\(2, 6, 3\).*divisible by num_groups=4"):
        F.group_norm(x, 4)
    with pytest.raises(tl.ShapeError, match="weight must have shape"):
        F.group_norm(x, 3, tl.ones(3, device=device))
    with pytest.raises(tl.ShapeError, match="instance_norm"):
        F.instance_norm(tl.ones(2, 3, device=device))


# ---- distances, one_hot ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_distances(device, rng, dtype):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    compare(device, rng, lambda x, y: F.cosine_similarity(x, y), lambda x, y: TF.cosine_similarity(x, y), [a, b],
            dtype, (0, 1), terms=8)
    compare(device, rng, lambda x, y: F.cosine_similarity(x, y, dim=0), lambda x, y: TF.cosine_similarity(x, y, dim=0),
            [a, b[:1]], dtype, (0, 1), terms=8)  # broadcast
    for kw in ({}, {"p": 1.0}, {"p": 3.0, "keepdim": True}, {"p": float("inf")}):
        compare(device, rng, lambda x, y, kw=kw: F.pairwise_distance(x, y, **kw),
                lambda x, y, kw=kw: TF.pairwise_distance(x, y, **kw), [a, b], dtype, (0, 1), terms=8)


def test_cosine_similarity_of_zero_vectors(device):
    x = tl.tensor([[0.0, 0.0], [1e-10, 0.0]], dtype=tl.float64, device=device, requires_grad=True)
    xr = torch.tensor(x.tolist(), dtype=torch.float64, requires_grad=True)
    y = [[1.0, 2.0], [3.0, 1.0]]
    got, ref = F.cosine_similarity(x, tl.tensor(y, dtype=tl.float64, device=device)), \
        TF.cosine_similarity(xr, torch.tensor(y, dtype=torch.float64))
    np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-12)
    got.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-9)


def test_one_hot(device):
    t = tl.tensor([[0, 3], [1, 1]], device=device)
    got = F.one_hot(t)
    assert got.dtype == tl.int64 and got.tolist() == TF.one_hot(torch.tensor([[0, 3], [1, 1]])).tolist()
    assert F.one_hot(t, 6).tolist() == TF.one_hot(torch.tensor([[0, 3], [1, 1]]), 6).tolist()
    with pytest.raises(tl.DTypeError, match=r"one_hot\(tensor: shape=\(2, 2\) float32.*index"):
        F.one_hot(t.float())
    with pytest.raises(tl.ArgumentError, match="smaller than num_classes"):
        F.one_hot(t, 3)
    with pytest.raises(tl.ArgumentError, match="non-negative"):
        F.one_hot(tl.tensor([-1, 0], device=device))
    with pytest.raises(tl.ArgumentError, match="empty"):
        F.one_hot(tl.tensor([], dtype=tl.int64, device=device))


def test_distance_errors(device):
    with pytest.raises(tl.ShapeError, match="cosine_similarity.*do not broadcast"):
        F.cosine_similarity(tl.ones(2, 3, device=device), tl.ones(2, 4, device=device))
    with pytest.raises(tl.ShapeError, match="pairwise_distance: "):
        F.pairwise_distance(tl.ones(2, 3, device=device), tl.ones(2, 4, device=device))
    with pytest.raises(tl.ArgumentError, match="p must be"):
        F.pairwise_distance(tl.ones(2, 3, device=device), tl.ones(2, 3, device=device), p=-1)


# ---- activations ----------------------------------------------------------------------

ACTIVATIONS = [
    ("softplus", {}), ("softplus", {"beta": 2.0, "threshold": 3.0}), ("leaky_relu", {}),
    ("leaky_relu", {"negative_slope": 0.2}), ("hardtanh", {}), ("hardtanh", {"min_val": -2.0, "max_val": 0.5}),
    ("relu6", {}), ("hardsigmoid", {}), ("hardswish", {}), ("mish", {}), ("selu", {}), ("celu", {}),
    ("celu", {"alpha": 0.5}), ("elu", {"alpha": 0.7}), ("logsigmoid", {}), ("softsign", {}), ("tanhshrink", {}),
    ("softshrink", {}), ("softshrink", {"lambd": 1.0}), ("hardshrink", {}), ("relu", {}), ("silu", {}),
    ("rrelu", {}), ("glu", {}), ("glu", {"dim": 0}), ("softmin", {"dim": 1}), ("threshold", {"threshold": 0.3,
                                                                                            "value": -2.0})]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name, kw", ACTIVATIONS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ACTIVATIONS)])
def test_activations(device, rng, dtype, name, kw):
    x = rng.uniform(-7, 7, (4, 6))
    x[np.abs(x) < 1e-2] = 0.5  # away from the kinks
    for k in (-3.0, 3.0, 6.0, 0.5, 1.0, -0.5, -1.0, 0.3):
        x[np.abs(np.abs(x) - abs(k)) < 2e-2] += 0.1
    ref = (lambda a: TF.relu6(a + 3) / 6) if name == "hardsigmoid" else getattr(TF, name)  # torch's: f32 constants
    compare(device, rng, lambda a: getattr(F, name)(a, **kw), lambda a: ref(a, **kw), [x], dtype, terms=4)


def test_prelu_and_rrelu_training(device, rng):
    x, w = rng.standard_normal((2, 3, 4)), rng.uniform(0, 0.5, 3)
    compare(device, rng, F.prelu, TF.prelu, [x, w], tl.float64, (0, 1))
    compare(device, rng, F.prelu, TF.prelu, [x, w[:1]], tl.float64, (0, 1))
    y = F.rrelu(tl.tensor(-np.ones(1000), device=device), 0.1, 0.3, training=True).numpy()
    assert ((-y >= 0.1) & (-y <= 0.3)).all() and np.std(y) > 0.01  # random slopes in [lower, upper]


def test_inplace_activations(device):
    x = tl.tensor([-1.0, 2.0, 8.0], device=device)
    y = F.relu6(x, inplace=True)
    assert y is x and x.tolist() == [0.0, 2.0, 6.0]
    F.leaky_relu(x.sub_(1.0), 0.5, inplace=True)
    assert x.tolist() == [-0.5, 1.0, 5.0]
    assert F.relu(x, inplace=True) is x and x.tolist() == [0.0, 1.0, 5.0]


def test_activation_errors(device):
    with pytest.raises(tl.ShapeError, match=r"glu\(input: shape=\(2, 3\).*must be even"):
        F.glu(tl.ones(2, 3, device=device))
    with pytest.raises(tl.ArgumentError, match="min_val"):
        F.hardtanh(tl.ones(2, device=device), 1.0, -1.0)
    with pytest.raises(tl.ArgumentError, match="lambd must be non-negative"):
        F.softshrink(tl.ones(2, device=device), -0.5)
    with pytest.raises(tl.ShapeError, match="prelu.*weight must have 1 or 3"):
        F.prelu(tl.ones(2, 3, device=device), tl.ones(2, device=device))
    with pytest.warns(UserWarning, match="implicit dimension"):
        assert F.softmin(tl.ones(2, 2, device=device)).tolist() == [[0.5, 0.5], [0.5, 0.5]]


# ---- rearrangements, dropout ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16])
def test_pixel_shuffle(device, rng, dtype):
    x = rng.standard_normal((2, 8, 3, 2))
    compare(device, rng, lambda a: F.pixel_shuffle(a, 2), lambda a: TF.pixel_shuffle(a, 2), [x], dtype)
    compare(device, rng, lambda a: F.pixel_unshuffle(a, 2), lambda a: TF.pixel_unshuffle(a, 2), [x[:, :, :2]], dtype)
    with pytest.raises(tl.ShapeError, match="pixel_shuffle"):
        F.pixel_shuffle(tl.ones(1, 3, 2, 2, device=device), 2)


def test_channel_dropout(device):
    x = tl.ones(8, 16, 3, 3, device=device)
    y = F.dropout2d(x, 0.5).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert ((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1)).all()  # whole channels, scaled by 1/(1-p)
    assert 0 < (per_channel == 0).all(-1).sum() < 128
    assert F.dropout1d(tl.ones(3, 4, device=device), 0.5, training=False).tolist() == [[1.0] * 4] * 3
    with pytest.raises(tl.ShapeError, match="dropout2d"):
        F.dropout2d(tl.ones(2, device=device))
    with pytest.raises(tl.ArgumentError, match="dropout3d.*probability"):
        F.dropout3d(tl.ones(1, 1, 1, 1, device=device), 2.0)


def test_normalize_defaults_to_dim_1(device):
    x = tl.tensor([[[3.0], [4.0]]], device=device)
    assert_close(F.normalize(x), TF.normalize(torch.tensor([[[3.0], [4.0]]])).numpy())


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64, tl.bfloat16])
@pytest.mark.parametrize("kw", [{"kernel_size": 2}, {"kernel_size": (3, 2), "dilation": (1, 2), "padding": 1,
                                                     "stride": (2, 1)}, {"kernel_size": 3, "stride": 3}])
def test_unfold_and_fold(device, rng, dtype, kw):
    x = rng.standard_normal((2, 3, 7, 6))
    compare(device, rng, lambda a: F.unfold(a, **kw), lambda a: TF.unfold(a, **kw), [x], dtype)
    compare(device, rng, lambda a: F.unfold(a, **kw), lambda a: TF.unfold(a, **kw), [x[0]], dtype)  # unbatched
    cols = TF.unfold(torch.tensor(x), **kw).numpy()
    compare(device, rng, lambda a: F.fold(a, (7, 6), **kw), lambda a: TF.fold(a, (7, 6), **kw), [cols], dtype,
            terms=6)


def test_unfold_fold_errors(device):
    x = tl.ones(1, 2, 3, 3, device=device)
    with pytest.raises(tl.ShapeError, match=r"unfold\(input: shape=\(1, 2, 3, 3\).*holds no"):
        F.unfold(x, 4)
    with pytest.raises(tl.ArgumentError, match="stride must be 2 integers >= 1"):
        F.unfold(x, 2, stride=0)
    with pytest.raises(tl.ShapeError, match="unfold.*expected an"):
        F.unfold(tl.ones(3, 3, device=device), 2)
    with pytest.raises(tl.ShapeError, match=r"fold\(input: shape=\(1, 8, 3\).*blocks"):
        F.fold(tl.ones(1, 8, 3, device=device), (3, 3), 2)
