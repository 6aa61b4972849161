"""Everyday PyTorch idioms beyond the op table, against PyTorch (cpu) on every device: dtype
limits (tl.finfo / tl.iinfo), in-place random fills (normal_, uniform_), bernoulli,
clamp_min / clamp_max, nan_to_num, where(cond), Tensor.softmax / log_softmax, nbytes,
storage_offset, detach_, and nn.Embedding.from_pretrained."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from conftest import FLOAT_DTYPES, assert_close, random_array

torch = pytest.importorskip("torch")

_TORCH_DTYPE = {d: getattr(torch, d.name) for d in tl.dtype.ALL if d is not tl.bool_}


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=lambda d: d.name)
def test_finfo_matches_torch(dt):
    ours, theirs = tl.finfo(dt), torch.finfo(_TORCH_DTYPE[dt])
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert tl.finfo().eps == torch.finfo().eps  # the default dtype's


@pytest.mark.parametrize("dt", [tl.uint8, tl.int8, tl.int16, tl.int32, tl.int64], ids=lambda d: d.name)
def test_iinfo_matches_torch(dt):
    ours, theirs = tl.iinfo(dt), torch.iinfo(_TORCH_DTYPE[dt])
    assert (ours.bits, ours.min, ours.max) == (theirs.bits, theirs.min, theirs.max)


def test_dtype_limits_refuse_the_other_kind():
    with pytest.raises(tl.DTypeError, match="finfo"):
        tl.finfo(tl.int32)
    with pytest.raises(tl.DTypeError, match="iinfo"):
        tl.iinfo(tl.float32)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=lambda d: d.name)
def test_random_fills_in_place(device, dt):
    tl.manual_seed(1)
    x = tl.zeros(20000, dtype=dt, device=device)
    view = x[:10]
    assert x.normal_(2.0, 0.5) is x
    a = x.float().numpy()
    assert abs(a.mean() - 2.0) < 0.02 and abs(a.std() - 0.5) < 0.02
    assert view.float().numpy().tolist() == a[:10].tolist()  # views see the in-place fill
    x.uniform_(-3, 1)
    a = x.float().numpy()
    assert a.min() >= -3 and a.max() <= 1 and abs(a.mean() + 1.0) < 0.05
    x.uniform_(**{"from": 5.0, "to": 6.0})  # torch's keyword names
    assert 5.0 <= x.float().numpy().min()
    with pytest.raises(tl.DTypeError, match="normal_"):
        tl.zeros(3, dtype=tl.int64, device=device).normal_()
    w = tl.zeros(3, device=device, requires_grad=True)
    with pytest.raises(tl.TensorliteError):  # a leaf that requires grad: under no_grad only, as torch
        w.normal_()
    with tl.no_grad():
        w.normal_()


def test_bernoulli(device):
    tl.manual_seed(2)
    p = tl.tensor([0.0, 1.0, 0.3], device=device).expand(20000, 3)
    b = tl.bernoulli(p)
    assert b.dtype is tl.float32 and b.shape == (20000, 3)
    means = b.numpy().mean(0)
    assert means[0] == 0.0 and means[1] == 1.0 and abs(means[2] - 0.3) < 0.02
    assert abs(tl.zeros(20000, device=device).bernoulli(0.75).numpy().mean() - 0.75) < 0.02
    with pytest.raises(ValueError, match="bernoulli"):
        tl.zeros(3, device=device).bernoulli(1.5)


@pytest.mark.parametrize("dt", [tl.float32, tl.float16, tl.bfloat16], ids=lambda d: d.name)
def test_clamp_min_max_and_nan_to_num_match_torch(device, rng, dt):
    a = random_array(rng, (64,), dt, -3, 3)
    a[:6] = [np.nan, np.inf, -np.inf, np.nan, np.inf, -np.inf]
    x, t = tl.tensor(a, device=device), torch.tensor(a.astype(np.float32)).to(_TORCH_DTYPE[dt])
    for ours, theirs in [(x.clamp_min(0.5), t.clamp_min(0.5)), (x.clamp_max(-0.5), t.clamp_max(-0.5)),
                         (tl.nan_to_num(x), torch.nan_to_num(t)), (x.nan_to_num(1.0, 7.0, -7.0),
                                                                  t.nan_to_num(1.0, 7.0, -7.0))]:
        np.testing.assert_array_equal(ours.float().numpy(), theirs.float().numpy())
    y = x.clone()
    y.clamp_min_(0.0)
    assert float(y.nan_to_num().min()) >= 0.0


def test_nan_to_num_gradient_passes_where_kept(device):
    x = tl.tensor([1.0, float("nan"), 2.0], device=device, requires_grad=True)
    (x.nan_to_num() * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 0.0, 3.0]


def test_where_of_a_condition_alone_is_nonzero_as_tuple(device):
    c = np.array([[True, False], [False, True], [True, True]])
    ours, theirs = tl.where(tl.tensor(c, device=device)), torch.where(torch.tensor(c))
    assert [o.tolist() for o in ours] == [t.tolist() for t in theirs]
    with pytest.raises(ValueError, match="where"):
        tl.where(tl.tensor(c, device=device), 1.0)


def test_tensor_softmax_methods_and_sizes(device, rng):
    a = random_array(rng, (3, 5), tl.float32)
    x = tl.tensor(a, device=device)
    assert_close(x.softmax(-1), torch.tensor(a).softmax(-1).numpy(), tl.float32)
    assert_close(tl.log_softmax(x, 0), torch.log_softmax(torch.tensor(a), 0).numpy(), tl.float32)
    assert x.softmax(-1, dtype=tl.float64).dtype is tl.float64 and F.softmax(x, -1).shape == (3, 5)
    assert (x.nbytes, x.itemsize, x[1:].storage_offset(), x.T.storage_offset()) == (60, 4, 5, 0)


def test_detach_in_place():
    w = tl.ones(3, requires_grad=True)
    y = w * 2
    assert y.detach_() is y and not y.requires_grad and y.grad_fn is None
    with pytest.raises(tl.TensorliteError, match="detach_"):
        (w * 2)[1:].detach_()


def test_embedding_from_pretrained_matches_torch(device):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ours = tl.nn.Embedding.from_pretrained(tl.tensor(table, device=device), padding_idx=-1)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(table), padding_idx=-1)
    ids = [[3, 0], [1, 1]]
    np.testing.assert_array_equal(ours(tl.tensor(ids, device=device)).numpy(), theirs(torch.tensor(ids)).numpy())
    assert (ours.weight.requires_grad, ours.padding_idx) == (theirs.weight.requires_grad, theirs.padding_idx)
    assert tl.nn.Embedding.from_pretrained(tl.tensor(table), freeze=False).weight.requires_grad
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with pytest.raises(ValueError, match="2-dimensional"):
        tl.nn.Embedding.from_pretrained(tl.zeros(3))


def test_creation_functions_take_size_as_a_keyword(device):
    for fn in (tl.zeros, tl.ones, tl.empty, tl.rand, tl.randn):
        assert fn(size=(2, 3), device=device).shape == (2, 3) == fn(2, 3, device=device).shape
        with pytest.raises(ValueError, match="size"):
            fn(2, size=(2, 3))
    assert torch.zeros(size=(2, 3)).shape == (2, 3)  # the form PyTorch takes


def test_format_of_a_one_element_tensor_is_its_number(device):
    loss = tl.tensor(1.23456, device=device)
    assert f"{loss:.3f}" == f"{torch.tensor(1.23456):.3f}" == "1.235"
    assert f"{tl.tensor([7], device=device):>4d}" == "   7"
    assert f"{tl.ones(2, device=device)}" == repr(tl.ones(2, device=device))
    with pytest.raises(TypeError):
        f"{tl.ones(2, device=device):.2f}"


def test_masked_select_matches_torch(device, rng):
    a = random_array(rng, (3, 4), tl.float32)
    m = rng.random((4,)) < 0.5
    ours = tl.masked_select(tl.tensor(a, device=device), tl.tensor(m, device=device))
    np.testing.assert_array_equal(ours.numpy(), torch.masked_select(torch.tensor(a), torch.tensor(m)).numpy())
    assert tl.tensor(a, device=device).masked_select(tl.tensor(m, device=device)).shape == ours.shape
    with pytest.raises(tl.DTypeError, match="masked_select"):
        tl.masked_select(tl.tensor(a, device=device), tl.ones(4, device=device))


def test_to_takes_non_blocking_and_copy(device):
    x = tl.ones(2, device=device)
    assert x.to(device, non_blocking=True) is x  # nothing changes: the tensor itself, as torch's
    for y in (x.to(device, copy=True), x.to(x.dtype, copy=True)):
        assert y is not x and y.tolist() == [1.0, 1.0]
        y.fill_(0.0)
        assert x.tolist() == [1.0, 1.0]  # a copy: its own memory
    assert tl.nn.Linear(2, 2).to(device, non_blocking=True).weight.device == x.device


@pytest.mark.parametrize("dims", [2, 0, 1, ([1, 2], [0, 2]), ([2], [1])], ids=str)
def test_tensordot_matches_torch(device, rng, dims):
    a, b = random_array(rng, (2, 3, 4), tl.float32), random_array(rng, (3, 4, 4), tl.float32)
    if dims == 1:
        b = random_array(rng, (4, 5), tl.float32)
    ours = tl.tensordot(tl.tensor(a, device=device), tl.tensor(b, device=device), dims=dims)
    theirs = torch.tensordot(torch.tensor(a), torch.tensor(b), dims=dims)
    assert ours.shape == tuple(theirs.shape)
    assert_close(ours, theirs.numpy(), tl.float32, terms=12)
    with pytest.raises(tl.ShapeError, match="tensordot"):
        tl.tensordot(tl.tensor(a, device=device), tl.tensor(b, device=device), dims=([0], [0]))


def test_conjugate_transposes_pinning_and_exponential(device):
    x = tl.arange(6.0, device=device).reshape(2, 3)
    assert x.H.tolist() == x.T.tolist() and x.reshape(1, 2, 3).mH.shape == (1, 3, 2)
    if device == "cpu":
        p = x.pin_memory()
        p.fill_(0.0)
        assert x.sum().item() == 15.0 and not p.is_pinned()  # a copy, as torch's
    else:
        with pytest.raises(tl.DeviceError, match="pin_memory"):
            x.pin_memory()
    tl.manual_seed(4)
    e = tl.zeros(20000, device=device).exponential_(2.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.02
    with pytest.raises(ValueError, match="lambd"):
        tl.zeros(2, device=device).exponential_(0.0)
