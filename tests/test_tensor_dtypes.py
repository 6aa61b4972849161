"""dtypes, PyTorch-style promotion (tensor/tensor, tensor/Python scalar) and casts between
every pair of dtypes, on every device."""
import itertools

import ml_dtypes
import numpy as np
import pytest

import tensorlite as tl
from conftest import ALL_DTYPES, as_f64, assert_close, random_array

f32, f16, bf16, f64 = tl.float32, tl.float16, tl.bfloat16, tl.float64
u8, u32, i64, b = tl.uint8, tl.uint32, tl.int64, tl.bool


def test_dtype_objects():
    expected = {  # name: (short, itemsize, is_floating_point)
        "float32": ("f32", 4, True), "float16": ("f16", 2, True), "bfloat16": ("bf16", 2, True),
        "float64": ("f64", 8, True), "uint8": ("u8", 1, False), "uint32": ("u32", 4, False),
        "int64": ("i64", 8, False), "bool": ("bool", 1, False), "int8": ("i8", 1, False),
        "int16": ("i16", 2, False), "int32": ("i32", 4, False),
    }
    for name, (short, size, is_float) in expected.items():
        d = getattr(tl, name)
        assert (d.name, d.short, d.itemsize, d.is_floating_point) == (name, short, size, is_float)
    assert tl.bfloat16.np == np.dtype(ml_dtypes.bfloat16)
    assert tl.float is tl.float32 and tl.double is tl.float64 and tl.half is tl.float16 and tl.long is tl.int64
    assert tl.int is tl.int32 and tl.short is tl.int16


# PyTorch's promotion for the pairs where the answer is not "the same dtype"
PROMOTIONS = {
    (f16, bf16): f32, (f16, f32): f32, (bf16, f32): f32, (f32, f64): f64, (bf16, f64): f64,
    (u8, f16): f16, (i64, bf16): bf16, (u32, f32): f32, (b, f64): f64, (i64, f32): f32,
    (u8, i64): i64, (u8, u32): u32, (u32, i64): i64, (b, u8): u8, (b, i64): i64, (b, u32): u32,
    (u8, tl.int8): tl.int16, (u8, tl.int16): tl.int16, (u8, tl.int32): tl.int32, (tl.int8, tl.int32): tl.int32,
    (tl.int32, i64): i64, (tl.int32, f16): f16, (tl.int8, bf16): bf16, (u32, tl.int8): i64, (b, tl.int8): tl.int8,
}


@pytest.mark.parametrize("pair", list(PROMOTIONS), ids=lambda p: f"{p[0].short}+{p[1].short}")
def test_promote_types_table(pair):
    a, c = pair
    assert tl.promote_types(a, c) is PROMOTIONS[pair]
    assert tl.promote_types(c, a) is PROMOTIONS[pair]


def test_promote_types_agrees_with_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed: the explicit table above still runs")
    compared = 0
    for a, c in itertools.product(ALL_DTYPES, repeat=2):
        try:
            want = torch.promote_types(getattr(torch, a.name), getattr(torch, c.name))
        except RuntimeError:  # torch does not promote uint32 with other dtypes
            continue
        assert tl.promote_types(a, c).name == str(want).replace("torch.", ""), (a, c)
        compared += 1
    assert compared >= 100  # every pair among the 10 dtypes torch promotes fully


@pytest.mark.parametrize("da, db", list(itertools.product(ALL_DTYPES, repeat=2)),
                         ids=lambda d: d.short)
def test_binary_ops_promote_tensor_pairs(device, rng, da, db):
    a = random_array(rng, (3, 4), da, 1, 5)
    c = random_array(rng, (4,), db, 1, 5)
    x, y = tl.tensor(a, device=device), tl.tensor(c, device=device)
    want = tl.promote_types(da, db)
    for got, ref in ((x * y, as_f64(a) * as_f64(c)), (tl.maximum(x, y), np.maximum(as_f64(a), as_f64(c)))):
        assert got.dtype is want
        if want is b:   # bool * bool is logical and
            ref = ref != 0
        assert_close(got, ref.astype(want.np), want)


SCALAR_RESULTS = [  # (tensor dtype, scalar, PyTorch's result dtype)
    (i64, 2.5, f32), (u8, 2.5, f32), (b, 2.5, f32), (u8, 3, u8), (u32, 3, u32), (f16, 2.5, f16),
    (bf16, 3, bf16), (f64, 2, f64), (b, True, b), (u8, True, u8), (b, 3, i64), (f16, True, f16),
]


@pytest.mark.parametrize("dtype, scalar, want", SCALAR_RESULTS, ids=str)
def test_python_scalars_never_widen_within_a_kind(device, rng, dtype, scalar, want):
    a = random_array(rng, (5,), dtype, 1, 5)
    x = tl.tensor(a, device=device)
    for got, ref in ((x + scalar, as_f64(a) + float(scalar)), (scalar * x, as_f64(a) * float(scalar))):
        assert got.dtype is want, (dtype, scalar, got.dtype)
        assert_close(got, ref.astype(want.np) if want is not b else ref != 0, want)


def test_zero_dim_tensors_promote_like_scalars(device):
    x = tl.tensor([1.0, 2.0], dtype=f32, device=device)
    assert (x + tl.tensor(3.0, dtype=f64, device=device)).dtype is f32
    i = tl.tensor([1, 2], dtype=u8, device=device)
    assert (i + tl.tensor(3, dtype=i64, device=device)).dtype is u8
    assert (i * tl.tensor(1.5, dtype=f64, device=device)).dtype is f64  # higher category: its own dtype
    assert (tl.tensor([1.5], dtype=f16, device=device) + tl.tensor(2.0, dtype=f32, device=device)).dtype is f16


@pytest.fixture
def default_float64():
    tl.set_default_dtype(tl.float64)
    yield
    tl.set_default_dtype(tl.float32)


def test_set_default_dtype(device, default_float64):
    assert tl.get_default_dtype() is f64
    assert tl.tensor([1.5], device=device).dtype is f64
    assert tl.zeros(2, device=device).dtype is f64
    assert (tl.tensor([1, 2], device=device) / 2).dtype is f64
    with pytest.raises(TypeError):
        tl.set_default_dtype(tl.int64)


def test_dtype_resolution_from_names_and_numpy():
    from tensorlite.dtype import get
    assert get("bf16") is bf16 and get("float32") is f32 and get(np.float16) is f16
    assert get(np.dtype(ml_dtypes.bfloat16)) is bf16 and get(bool) is b and get(float) is f32
    assert get(np.int8) is tl.int8 and get(np.int16) is tl.int16 and get(np.int32) is tl.int32
    assert get("i32") is tl.int32 and get("short") is tl.int16 and get("int") is tl.int32
    assert tl.ones(2, dtype="f64").dtype is f64
    with pytest.raises(TypeError):
        get("complex64")


# ----------------------------------------------------------------------------- casts
def _cast_ref(a, dst):
    """numpy cast with the documented rules: float->int truncates toward zero,
    ->bool is x != 0, float->float rounds to nearest even once."""
    if dst is b:
        return as_f64(a) != 0
    if a.dtype.kind == "f" or a.dtype == np.dtype(ml_dtypes.bfloat16):
        a = as_f64(a)
        return (np.trunc(a) if not dst.is_floating_point else a).astype(dst.np)
    return a.astype(dst.np)


@pytest.mark.parametrize("src, dst", list(itertools.product(ALL_DTYPES, repeat=2)), ids=lambda d: d.short)
def test_cast_every_pair(device, rng, src, dst):
    # non-negative and below 250: representable (after rounding) in every target dtype
    a = random_array(rng, (4, 6), src, 0, 249)
    x = tl.tensor(a, device=device)
    for got in (x.to(dst), x.T.to(dst).T):
        assert got.dtype is dst and got.shape == (4, 6)
        np.testing.assert_array_equal(got.numpy(), _cast_ref(a, dst))


def test_float_to_signed_int_truncates_toward_zero(device):
    a = np.array([-2.75, -1.5, -0.5, 0.5, 1.5, 2.75, 100.9], np.float32)
    for dst in (i64,):
        np.testing.assert_array_equal(tl.tensor(a, device=device).to(dst).numpy(), [-2, -1, 0, 0, 1, 2, 100])
    assert tl.tensor(a, device=device).long().dtype is i64


def test_to_bool_is_nonzero(device):
    a = np.array([0.0, -0.0, 0.25, -3.0, np.nan, np.inf], np.float32)
    np.testing.assert_array_equal(tl.tensor(a, device=device).to(b).numpy(), [False, False, True, True, True, True])
    np.testing.assert_array_equal(tl.tensor([0, 7, 255], dtype=u8, device=device).bool().numpy(), [False, True, True])


def test_narrowing_float_casts_round_to_nearest_even(device):
    one = np.float32(1.0)
    # halfway cases of bf16 (8 significant bits) and f16 (11 significant bits)
    halfway_bf16 = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 256 + 1, 3.0e38], np.float32)
    got = tl.tensor(halfway_bf16, device=device).to(bf16).numpy()
    np.testing.assert_array_equal(got, halfway_bf16.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(got.astype(np.float32)[:3], [one, 1 + 2 ** -6, -one])
    halfway_f16 = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 2049.0, 70000.0, -70000.0, 1e-8], np.float32)
    got = tl.tensor(halfway_f16, device=device).half().numpy()
    np.testing.assert_array_equal(got, halfway_f16.astype(np.float16))
    assert np.isinf(got[3]) and np.isinf(got[4])


def test_cast_keeps_nan_and_inf(device):
    a = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    for dst in (f16, bf16, f64):
        got = tl.tensor(a, device=device).to(dst).to(f32).numpy()
        np.testing.assert_array_equal(got, a)


def test_cast_helpers_and_empty(device):
    x = tl.tensor([1.5, -2.5], device=device)
    assert x.double().dtype is f64 and x.half().dtype is f16 and x.bfloat16().dtype is bf16
    assert x.float() is x or x.float().dtype is f32
    assert tl.zeros((0, 2), device=device).to(i64).shape == (0, 2)


def _foreach_sources(device, rng):
    """f32 tensors that take every path of foreach_to: sizes around the GPU kernel's chunk
    (4096) and vector width, a misaligned contiguous view (odd offset), a transposed view,
    an empty tensor, more than one launch's worth (24), plus one already bf16 and an int."""
    sizes = [1, 3, 4096, 4099, 10000] + [7 + i for i in range(22)]
    xs = [tl.tensor(random_array(rng, (n,), f32), device=device) for n in sizes]
    base = tl.tensor(random_array(rng, (2, 301), f32), device=device)
    xs += [base[:, 1:], base[:, 1:].mT, tl.zeros((0, 3), device=device)]
    return xs + [tl.tensor(random_array(rng, (5,), bf16), dtype=bf16, device=device),
                 tl.tensor(np.arange(6), device=device)]


@pytest.mark.parametrize("dst", [bf16, f16, f64], ids=lambda d: d.short)
def test_foreach_to_equals_one_cast_each(device, rng, dst):
    xs = _foreach_sources(device, rng)
    outs = tl.foreach_to(xs, dst)
    assert len(outs) == len(xs)
    for x, y in zip(xs, outs):
        want = x.to(dst)
        assert (y is x) == (x.dtype is dst) and y.dtype is dst and y.shape == x.shape
        np.testing.assert_array_equal(y.numpy(), want.numpy())  # bit-equal to the single cast


def test_foreach_to_backward_is_one_node_with_each_cast_back(device, rng):
    """Gradients come back in each input's dtype as the per-tensor casts give them; an
    output left out of the loss gives its input no gradient; a tensor listed twice sums."""
    leaves = [tl.tensor(random_array(rng, s, f32), device=device, requires_grad=True) for s in ((4099,), (3, 5), (7,))]
    half = tl.tensor(random_array(rng, (6,), f16), dtype=f16, device=device, requires_grad=True)
    ws = [tl.tensor(random_array(rng, s, f32), device=device) for s in ((4099,), (3, 5), (7,), (3, 5), (6,))]
    inputs = [leaves[0], leaves[1], leaves[2], leaves[1], half]
    outs = tl.foreach_to(inputs, bf16)
    assert all(o.requires_grad for o in outs) and len({id(o.grad_fn) for o in outs}) == len(outs)
    loss = sum((o.float() * w).sum() for i, (o, w) in enumerate(zip(outs, ws)) if i != 2)
    loss.backward()
    ref_leaves = [tl.tensor(x.numpy(), dtype=x.dtype, device=device, requires_grad=True) for x in leaves + [half]]
    ref_inputs = [ref_leaves[0], ref_leaves[1], ref_leaves[2], ref_leaves[1], ref_leaves[3]]
    sum((x.to(bf16).float() * w).sum() for i, (x, w) in enumerate(zip(ref_inputs, ws)) if i != 2).backward()
    for got, want in ((leaves[0], ref_leaves[0]), (leaves[1], ref_leaves[1]), (half, ref_leaves[3])):
        assert got.grad.dtype is got.dtype
        np.testing.assert_array_equal(got.grad.numpy(), want.grad.numpy())
    assert leaves[2].grad is None


def test_foreach_to_errors_and_no_grad(device):
    x = tl.ones(3, device=device, requires_grad=True)
    with pytest.raises(TypeError, match="foreach_to: element 1 is a list"):
        tl.foreach_to([x, [1.0]], bf16)
    with tl.no_grad():
        (y,) = tl.foreach_to([x], bf16)
    assert not y.requires_grad
    assert tl.foreach_to([], bf16) == []
