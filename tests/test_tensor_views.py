"""View ops (layout-only, sharing storage) and __getitem__, on every device, against numpy."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import assert_close, make_tensor, shares_storage


@pytest.fixture
def x234(device, rng):
    return make_tensor(rng, (2, 3, 4), tl.float32, device)


def check_view(view, base, expected):
    """A view has the expected values and reads the base's storage (nothing was copied)."""
    assert shares_storage(view, base), "view op copied its input"
    assert_close(view, expected, tl.float32)


# ------------------------------------------------------------------- reshape / view
@pytest.mark.parametrize("shape", [(6, 4), (24,), (-1,), (2, -1), (4, 3, 2), (1, 24, 1), (2, 3, 2, 2)])
def test_reshape_and_view_of_contiguous_share_storage(x234, shape):
    x, a = x234
    check_view(x.reshape(shape), x, a.reshape(shape))
    check_view(x.view(*shape), x, a.reshape(shape))


def test_reshape_copies_only_when_needed(x234):
    x, a = x234
    t = x.transpose(0, 1)                      # (3, 2, 4): splitting a dim is a view
    check_view(t.reshape(3, 2, 2, 2), x, a.transpose(1, 0, 2).reshape(3, 2, 2, 2))
    s = x[:, :, 1:3]                           # (2, 3, 2) with strides (12, 4, 1): dims 0, 1 merge
    check_view(s.reshape(6, 2), x, a[:, :, 1:3].reshape(6, 2))
    p = x.permute(2, 0, 1)                     # nothing mergeable: must copy
    r = p.reshape(-1)
    assert_close(r, a.transpose(2, 0, 1).reshape(-1), tl.float32)
    assert r.is_contiguous()
    s = x[:, :, 1:3]                           # (2, 3, 2) slice: splitting dim 1 is a view
    check_view(s.reshape(2, 3, 1, 2), x, a[:, :, 1:3].reshape(2, 3, 1, 2))


def test_view_on_non_viewable_layout_raises(x234):
    x, _ = x234
    with pytest.raises(tl.TensorliteError) as info:
        x.permute(2, 0, 1).view(-1)
    assert "view" in str(info.value)


@pytest.mark.parametrize("bad", [(5, 5), (7, -1), (-1, -1)])
def test_reshape_to_wrong_size_raises(x234, bad):
    x, _ = x234
    with pytest.raises(tl.ShapeError) as info:
        x.reshape(bad)
    assert "(2, 3, 4)" in str(info.value)


def test_reshape_empty_and_size_one(device, rng):
    e = tl.zeros((0, 3), device=device)
    assert e.reshape(3, 0).shape == (3, 0)
    assert e.reshape(-1).shape == (0,)
    assert e.view(0, 1, 3).shape == (0, 1, 3)
    s, a = make_tensor(rng, (1,), tl.float32, device)
    check_view(s.reshape(()), s, a.reshape(()))
    check_view(s.reshape(()).reshape(1, 1, 1), s, a.reshape(1, 1, 1))


# ------------------------------------------------------------ transpose & permute
def test_transpose_permute_T_mT(x234):
    x, a = x234
    check_view(x.transpose(0, 2), x, a.swapaxes(0, 2))
    check_view(x.transpose(-1, -2), x, a.swapaxes(-1, -2))
    check_view(x.permute(2, 0, 1), x, a.transpose(2, 0, 1))
    check_view(x.permute((1, 2, 0)), x, a.transpose(1, 2, 0))
    check_view(x.permute(-1, 0, 1), x, a.transpose(2, 0, 1))
    check_view(x.mT, x, a.swapaxes(-1, -2))
    check_view(x[0].T, x, a[0].T)
    assert x.permute(2, 0, 1).stride() == (1, 12, 4)
    assert not x.transpose(0, 1).is_contiguous()
    assert x.transpose(1, 1).is_contiguous()


def test_T_of_1d_and_0d_is_identity(device, rng):
    v, a = make_tensor(rng, (5,), tl.float32, device)
    check_view(v.T, v, a)


def test_permute_with_repeated_dims_raises(x234):
    x, _ = x234
    with pytest.raises(tl.TensorliteError):
        x.permute(0, 0, 1)
    with pytest.raises(tl.TensorliteError):
        x.permute(0, 1)


# ------------------------------------------------------------ narrow / unsqueeze / squeeze
def test_narrow(x234):
    x, a = x234
    check_view(x.narrow(2, 1, 2), x, a[:, :, 1:3])
    check_view(x.narrow(-2, 2, 1), x, a[:, 2:3])
    check_view(x.narrow(0, 1, 0), x, a[1:1])
    check_view(x.narrow(2, 1, 2).narrow(1, 1, 2), x, a[:, 1:3, 1:3])
    with pytest.raises(tl.TensorliteError):
        x.narrow(1, 2, 2)


def test_whole_dim_slices_are_new_views(x234):
    # `:` and `...` take no view of their own, but the result is still a new view of x
    x, a = x234
    for idx in (slice(None), Ellipsis, (slice(None), slice(None)), (Ellipsis, slice(0, 100))):
        view = x[idx]
        assert view is not x
        check_view(view, x, a[idx])
    check_view(x[..., 1:3], x, a[..., 1:3])
    check_view(x[:, ::2, None, :], x, a[:, ::2, None, :])


def test_unsqueeze_squeeze(x234):
    x, a = x234
    check_view(x.unsqueeze(0), x, a[None])
    check_view(x.unsqueeze(-1), x, a[..., None])
    check_view(x.unsqueeze(2), x, a[:, :, None])
    y = x.unsqueeze(1).unsqueeze(-1)                 # (2, 1, 3, 4, 1)
    check_view(y.squeeze(), x, a)
    check_view(y.squeeze(1), x, a[..., None])
    check_view(y.squeeze(-1), x, a[:, None])
    check_view(y.squeeze(0), x, a[:, None, :, :, None])   # not size 1: unchanged (PyTorch)
    check_view(y.squeeze((1, 4)), x, a)
    assert tl.zeros((1, 0, 1), device=x.device).squeeze().shape == (0,)


# ------------------------------------------------------------ expand / broadcast_to
def test_expand_and_broadcast_to(device, rng):
    x, a = make_tensor(rng, (3, 1), tl.float32, device)
    e = x.expand(2, 3, 4)
    check_view(e, x, np.broadcast_to(a, (2, 3, 4)))
    assert e.stride()[0] == 0 and e.stride()[2] == 0
    check_view(x.expand(-1, 5), x, np.broadcast_to(a, (3, 5)))
    check_view(x.expand((3, 0)), x, np.broadcast_to(a, (3, 0)))
    check_view(x.broadcast_to((4, 3, 2)), x, np.broadcast_to(a, (4, 3, 2)))
    check_view(tl.broadcast_to(x, (3, 3)), x, np.broadcast_to(a, (3, 3)))
    # ops read stride-0 views correctly
    assert_close(e * 2.0, np.broadcast_to(a, (2, 3, 4)) * 2, tl.float32)
    assert_close(e.contiguous(), np.broadcast_to(a, (2, 3, 4)), tl.float32)


def test_expand_incompatible_raises(device, rng):
    x, _ = make_tensor(rng, (3, 2), tl.float32, device)
    with pytest.raises(tl.ShapeError) as info:
        x.expand(3, 4)
    assert "(3, 2)" in str(info.value)
    with pytest.raises(tl.ShapeError):
        x.broadcast_to((2,))


# ------------------------------------------------------------ flatten / unflatten
def test_flatten_unflatten(x234):
    x, a = x234
    check_view(x.flatten(), x, a.reshape(-1))
    check_view(x.flatten(1), x, a.reshape(2, 12))
    check_view(x.flatten(0, 1), x, a.reshape(6, 4))
    check_view(x.flatten(-2, -1), x, a.reshape(2, 12))
    check_view(x.unflatten(2, (2, 2)), x, a.reshape(2, 3, 2, 2))
    check_view(x.unflatten(-1, (-1, 2)), x, a.reshape(2, 3, 2, 2))
    assert_close(x.transpose(0, 2).flatten(), a.transpose(2, 1, 0).reshape(-1), tl.float32)
    s = tl.tensor(3.0, device=x.device)
    assert s.flatten().shape == (1,)
    with pytest.raises(tl.ArgumentError, match=r"flatten\(self: .*start_dim -1 comes after end_dim 0"):
        x.flatten(-1, 0)  # was an error naming reshape here, and a silent (2, 1, 3) for a (2, 3) input


# ------------------------------------------------------------ chunk / split
@pytest.mark.parametrize("n, chunks, expected_sizes", [
    (6, 3, [2, 2, 2]), (7, 3, [3, 3, 1]), (5, 4, [2, 2, 1]), (6, 4, [2, 2, 2]), (2, 5, [1, 1]),
])
def test_chunk_follows_pytorch_sizes(device, rng, n, chunks, expected_sizes):
    x, a = make_tensor(rng, (3, n), tl.float32, device)
    parts = x.chunk(chunks, dim=1)
    assert [p.shape[1] for p in parts] == expected_sizes
    starts = np.cumsum([0] + expected_sizes)
    for p, s, size in zip(parts, starts, expected_sizes):
        check_view(p, x, a[:, s:s + size])
    assert len(tl.chunk(x, chunks, 1)) == len(expected_sizes)


def test_split_by_size_and_sections(device, rng):
    x, a = make_tensor(rng, (7, 2), tl.float32, device)
    parts = x.split(3)
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    for p, s in zip(parts, (0, 3, 6)):
        check_view(p, x, a[s:s + 3])
    parts = x.split([2, 0, 5], dim=0)
    assert [p.shape[0] for p in parts] == [2, 0, 5]
    check_view(parts[2], x, a[2:])
    parts = tl.split(x, 1, dim=1)
    check_view(parts[1], x, a[:, 1:2])
    with pytest.raises(tl.ShapeError):
        x.split([2, 2], dim=0)


# ------------------------------------------------------------------ __getitem__
BASIC_INDICES = [
    (1,), (-1,), (slice(None),), (slice(1, None),), (slice(None, None, 2),),
    (0, 2), (-2, -1, 3), (slice(None), 1), (Ellipsis, 0), (Ellipsis, slice(1, 3)),
    (None,), (slice(None), None, 1), (0, None, slice(None), None),
    (slice(0, 2), slice(None, None, 2), slice(3, 0, -1)),  # negative step may copy
    (slice(None, None, -1),), (Ellipsis, slice(None, None, -2)),
    (slice(5, 10),), (slice(1, 1),), (slice(-100, 100),),   # clipping like Python
    (1, Ellipsis, None),
]


@pytest.mark.parametrize("index", BASIC_INDICES, ids=repr)
def test_getitem_basic_matches_numpy(device, rng, index):
    x, a = make_tensor(rng, (3, 4, 5), tl.float32, device)
    got = x[index]
    assert_close(got, a[index], tl.float32)
    steps_positive = all(not isinstance(i, slice) or (i.step or 1) > 0 for i in index)
    if steps_positive:
        assert shares_storage(got, x), f"x[{index!r}] copied"


def test_getitem_single_int_and_scalar_result(device, rng):
    x, a = make_tensor(rng, (3, 4), tl.float32, device)
    v = x[1, 2]
    assert v.shape == () and v.item() == pytest.approx(float(a[1, 2]))
    assert_close(x[2], a[2], tl.float32)


def test_getitem_out_of_range_raises_index_error(device, rng):
    x, _ = make_tensor(rng, (3, 4), tl.float32, device)
    for index in [(3,), (-4,), (0, 4), (slice(None), -5)]:
        with pytest.raises(IndexError):
            x[index]
    with pytest.raises(IndexError):
        x[0, 0, 0]


@pytest.mark.parametrize("dtype", [tl.int64, tl.uint32, tl.uint8], ids=lambda d: d.name)
def test_getitem_integer_tensor(device, rng, dtype):
    x, a = make_tensor(rng, (4, 5, 3), tl.float32, device)
    idx = np.array([3, 0, 0, 2], dtype=dtype.np)
    it = tl.tensor(idx, device=device)
    assert_close(x[it], a[idx], tl.float32)
    assert_close(x[:, it], a[:, idx], tl.float32)
    last = np.array([2, 0, 2], dtype=dtype.np)           # within the last dim (size 3)
    assert_close(x[..., tl.tensor(last, device=device)], a[..., last], tl.float32)
    idx2 = np.array([[1, 2], [0, 0]], dtype=dtype.np)
    assert_close(x[tl.tensor(idx2, device=device)], a[idx2], tl.float32)
    assert_close(x[1:, tl.tensor(idx[:2], device=device)], a[1:, idx[:2]], tl.float32)


def test_getitem_two_integer_tensors_pair_up(device, rng):
    x, a = make_tensor(rng, (4, 5), tl.float32, device)
    i, j = np.array([0, 3, 1]), np.array([4, 0, 2])
    assert_close(x[tl.tensor(i, device=device), tl.tensor(j, device=device)], a[i, j], tl.float32)


def test_getitem_negative_integer_tensor_wraps(device, rng):
    x, a = make_tensor(rng, (4, 3), tl.float32, device)
    idx = np.array([-1, 0, -4])
    assert_close(x[tl.tensor(idx, device=device)], a[idx], tl.float32)


def test_getitem_integer_tensor_out_of_range_raises(device, rng):
    x, _ = make_tensor(rng, (4, 3), tl.float32, device)
    with pytest.raises(IndexError):
        x[tl.tensor([0, 4], device=device)]


def test_getitem_boolean_mask(device, rng):
    x, a = make_tensor(rng, (4, 5), tl.float32, device)
    m = a > 0
    assert_close(x[tl.tensor(m, device=device)], a[m], tl.float32)
    rows = np.array([True, False, True, True])
    assert_close(x[tl.tensor(rows, device=device)], a[rows], tl.float32)
    assert_close(x[x > 10.0], a[a > 10.0], tl.float32)  # nothing selected: empty
    assert_close(x[:, tl.tensor(m[0], device=device)], a[:, m[0]], tl.float32)


def test_getitem_on_views_and_empty(device, rng):
    x, a = make_tensor(rng, (4, 6), tl.float32, device)
    v = x.T[1:5:2]
    assert_close(v[:, ::-1], a.T[1:5:2][:, ::-1], tl.float32)
    assert_close(v[tl.tensor([1, 0], device=device)], a.T[1:5:2][[1, 0]], tl.float32)
    e = x[2:2]
    assert e.shape == (0, 6)
    assert e[:, 1:3].shape == (0, 2)


# ------------------------------------------------------------- views feed every op
def test_ops_read_chained_views(device, rng):
    x, a = make_tensor(rng, (4, 6, 5), tl.float32, device)
    v = x.permute(2, 0, 1)[1:, ::2, 3:].unsqueeze(1).expand(-1, 3, -1, -1)
    ref = np.broadcast_to(a.transpose(2, 0, 1)[1:, ::2, 3:][:, None], (4, 3, 2, 3))
    assert not v.is_contiguous()
    assert_close(v, ref, tl.float32)
    assert_close(v.exp(), np.exp(ref), tl.float32)
    assert_close(v + v.mT.mT, ref * 2, tl.float32)
    assert_close(v.sum(dim=1), ref.sum(axis=1), tl.float32, terms=3)
    assert_close(v.contiguous().view(4, 3, 6), ref.reshape(4, 3, 6), tl.float32)


# ------------------------------------------------------- writes through views
def test_setitem_writes_through_views(device, rng):
    x, a = make_tensor(rng, (4, 6), tl.float32, device)
    a = a.copy()
    rows = x[1:]                                   # a view taken before the writes sees them
    x[1:3, ::2] = 0.5
    a[1:3, ::2] = 0.5
    last = rng.standard_normal(4).astype(np.float32)
    x[:, -1] = tl.tensor(last, device=device)
    a[:, -1] = last
    row = rng.standard_normal(6).astype(np.float32)
    x[0] = tl.tensor(row, device=device)
    a[0] = row
    pair = rng.standard_normal(2).astype(np.float32)
    x[2:4, 1:3] = tl.tensor(pair, device=device)   # broadcast over the rows
    a[2:4, 1:3] = pair
    x.T[3] = -4.0                                  # scalar through a transposed view
    a.T[3] = -4.0
    x[..., 4] = tl.tensor(7, device=device)        # value cast to x's dtype
    a[..., 4] = 7
    assert_close(x, a, tl.float32)
    assert_close(rows, a[1:], tl.float32)


def test_inplace_methods(device, rng):
    x, a = make_tensor(rng, (3, 4), tl.float32, device)
    y = x.clone()
    assert not shares_storage(y, x)
    assert y.add_(1.5) is y
    y.mul_(2.0).sub_(x).div_(4.0)
    assert_close(y, ((a + 1.5) * 2 - a) / 4, tl.float32)
    assert_close(x, a, tl.float32)                 # the clone's source is untouched
    y.clamp_(-0.5, 0.5)
    assert_close(y, np.clip(((a + 1.5) * 2 - a) / 4, -0.5, 0.5), tl.float32)
    m = a > 0
    y.masked_fill_(tl.tensor(m, device=device), 9.0)
    assert_close(y, np.where(m, 9.0, np.clip(((a + 1.5) * 2 - a) / 4, -0.5, 0.5)), tl.float32)
    z = x.clone()
    z[1:].copy_(x[0])                              # broadcasting copy into a view
    expected = a.copy()
    expected[1:] = a[0]
    assert_close(z, expected, tl.float32)
    z.fill_(2.5)
    assert_close(z, np.full((3, 4), 2.5), tl.float32)
    z.zero_()
    assert_close(z, np.zeros((3, 4)), tl.float32)
