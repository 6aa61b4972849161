"""Bad input for every op family: the right exception type (also the built-in a Python user
catches) and a message that names the op and each operand's shape, dtype and device."""
import numpy as np
import pytest

import tensorlite as tl


def t(shape, dtype=tl.float32, device="cpu"):
    """A tensor of ones-and-twos (never all zeros) of the given shape and dtype."""
    a = (np.arange(int(np.prod(shape))) % 2 + 1).reshape(shape)
    return tl.tensor(a, dtype=dtype, device=device)


def check_message(err, op, *operands):
    """The message names `op` (or one of a tuple of equivalent names) and, for every
    operand, its shape, dtype and device."""
    msg = str(err.value)
    names = op if isinstance(op, tuple) else (op,)
    assert any(n in msg for n in names), f"op {op!r} missing from: {msg}"
    for x in operands:
        assert str(tuple(x.shape)) in msg, f"shape {tuple(x.shape)} missing from: {msg}"
        assert x.dtype.name in msg, f"dtype {x.dtype.name} missing from: {msg}"
        assert str(x.device) in msg, f"device {x.device} missing from: {msg}"


def test_error_hierarchy():
    assert issubclass(tl.ShapeError, (tl.TensorliteError, ValueError))
    assert issubclass(tl.DTypeError, TypeError) and issubclass(tl.DTypeError, tl.TensorliteError)
    assert issubclass(tl.DeviceError, tl.TensorliteError)
    assert issubclass(tl.IndexOutOfRange, IndexError) and issubclass(tl.IndexOutOfRange, tl.TensorliteError)
    assert issubclass(tl.BackendUnavailable, tl.DeviceError)


# ----------------------------------------------------------------------- elementwise
@pytest.mark.parametrize("op, fn", [
    ("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y),
    ("div", lambda x, y: x / y), ("maximum", tl.maximum), ("minimum", tl.minimum),
    ("lt", lambda x, y: x < y), ("eq", lambda x, y: x == y),
])
def test_binary_shape_mismatch(device, op, fn):
    x, y = t((2, 3), device=device), t((4,), tl.float32, device)
    with pytest.raises(tl.ShapeError) as err:
        fn(x, y)
    check_message(err, op, x, y)


def test_binary_shape_mismatch_after_promotion_names_operands(device):
    x, y = t((2, 3), tl.int64, device), t((2, 2), tl.float16, device)
    with pytest.raises(ValueError) as err:
        x * y
    assert "mul" in str(err.value) and "(2, 3)" in str(err.value) and "(2, 2)" in str(err.value)


def test_unsupported_operand_types(device):
    x = t((2,), device=device)
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        x * [1, 2]  # a list is not silently converted
    with pytest.raises(TypeError):
        x @ 2.0


def test_bool_subtraction_is_an_error_like_pytorch(device):
    x = t((3,), tl.bool, device)
    with pytest.raises(tl.DTypeError) as err:
        x - x
    check_message(err, "sub", x)


def test_where_errors(device):
    x, y = t((2, 3), device=device), t((2, 3), device=device)
    cond = t((2, 3), tl.float32, device)
    with pytest.raises(tl.DTypeError) as err:
        tl.where(cond, x, y)
    assert "where" in str(err.value) and "float32" in str(err.value)
    bad = t((4,), tl.bool, device)
    with pytest.raises(tl.ShapeError) as err:
        tl.where(bad, x, y)
    check_message(err, "where", bad, x, y)


def test_masked_fill_errors(device):
    x = t((2, 3), device=device)
    m = t((2, 3), tl.int64, device)
    with pytest.raises(tl.DTypeError) as err:
        x.masked_fill(m, 0.0)
    assert "int64" in str(err.value)
    m = t((3, 3), tl.bool, device)
    with pytest.raises(tl.ShapeError) as err:
        x.masked_fill(m, 0.0)
    assert "(2, 3)" in str(err.value) and "(3, 3)" in str(err.value)


def test_clamp_without_bounds(device):
    with pytest.raises(ValueError) as err:
        t((2,), device=device).clamp()
    assert "clamp" in str(err.value)


# -------------------------------------------------------------------------- views
def test_view_errors(device):
    x = t((2, 3, 4), device=device)
    with pytest.raises(tl.ShapeError) as err:
        x.reshape(5, 5)
    check_message(err, "reshape", x)
    with pytest.raises(tl.ShapeError) as err:
        x.view(7, -1)
    check_message(err, "view", x)
    with pytest.raises(tl.ShapeError) as err:
        x.expand(3, 3, 4)
    check_message(err, ("expand", "broadcast_to"), x)
    with pytest.raises(tl.ShapeError) as err:
        x.unflatten(1, (2, 2))
    check_message(err, "unflatten", x)


@pytest.mark.parametrize("op, fn", [
    ("transpose", lambda x: x.transpose(0, 3)), ("permute", lambda x: x.permute(0, 1, 3)),
    ("unsqueeze", lambda x: x.unsqueeze(4)), ("squeeze", lambda x: x.squeeze(-4)),
    ("narrow", lambda x: x.narrow(3, 0, 1)), ("flatten", lambda x: x.flatten(0, 5)),
    ("sum", lambda x: x.sum(3)), ("mean", lambda x: x.mean((0, 3))), ("argmax", lambda x: x.argmax(-4)),
    ("max", lambda x: x.max(5)), ("var", lambda x: x.var(3)), ("logsumexp", lambda x: x.logsumexp(7)),
    ("cat", lambda x: tl.cat([x, x], 3)), ("stack", lambda x: tl.stack([x, x], 4)),
    ("index_select", lambda x: x.index_select(3, tl.tensor([0], device=x.device))),
    ("chunk", lambda x: x.chunk(2, 3)), ("split", lambda x: x.split(1, 3)),
])
def test_dim_out_of_range_is_index_error(device, op, fn):
    x = t((2, 3, 4), device=device)
    with pytest.raises(IndexError) as err:
        fn(x)
    check_message(err, op, x)


def test_narrow_out_of_bounds(device):
    x = t((2, 3), device=device)
    with pytest.raises((IndexError, ValueError)) as err:
        x.narrow(1, 2, 2)
    check_message(err, "narrow", x)


def test_getitem_errors(device):
    x = t((3, 4), device=device)
    with pytest.raises(IndexError) as err:
        x[3]
    check_message(err, ("__getitem__", "select"), x)   # PyTorch calls x[i] `select`
    with pytest.raises(IndexError) as err:
        x[0, 0, 0]
    assert "(3, 4)" in str(err.value)
    with pytest.raises((IndexError, TypeError)):
        x[tl.tensor([0.5], device=device)]
    with pytest.raises(IndexError) as err:
        x[tl.tensor([True, False], device=device)]
    assert "(3, 4)" in str(err.value)
    with pytest.raises(IndexError):
        x[tl.tensor([1, 5], device=device)]
    with pytest.raises((IndexError, TypeError)):
        x["a"]


def test_item_and_bool_of_many_elements(device):
    x = t((2,), device=device)
    with pytest.raises(ValueError) as err:
        x.item()
    check_message(err, "item", x)
    with pytest.raises(ValueError):
        bool(x)


# --------------------------------------------------------------------- reductions
def test_reduction_of_empty_errors(device):
    e = tl.zeros((0, 3), device=device)
    for op, fn in (("max", lambda: e.max()), ("min", lambda: e.min(0)), ("argmax", lambda: e.argmax()),
                   ("argmin", lambda: e.argmin(0))):
        with pytest.raises(tl.ShapeError) as err:
            fn()
        check_message(err, op, e)


def test_repeated_reduction_dims(device):
    x = t((2, 3), device=device)
    with pytest.raises(ValueError) as err:
        x.sum((1, -1))
    assert "sum" in str(err.value)


# ------------------------------------------------------------------------ matmul
@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3, 4), (3, 4, 2)), ((2, 2), ())],
                         ids=str)
def test_matmul_shape_errors(device, sa, sb):
    x, y = t(sa, device=device), t(sb, device=device)
    with pytest.raises(tl.ShapeError) as err:
        x @ y
    check_message(err, "matmul", x, y)


# -------------------------------------------------------------------- index ops
def test_index_dtype_must_be_integer(device):
    x = t((3, 4), device=device)
    ids = t((2,), tl.float32, device)
    for op, fn in (("index_select", lambda: x.index_select(0, ids)),
                   ("gather", lambda: x.gather(0, ids.reshape(1, 2))),
                   ("index_add", lambda: x.index_add(0, ids, t((2, 4), device=device)))):
        with pytest.raises(tl.DTypeError) as err:
            fn()
        check_message(err, op, x, ids if op != "gather" else ids.reshape(1, 2))


@pytest.mark.parametrize("op", ["index_select", "gather", "scatter_add", "index_add"])
def test_index_out_of_range(device, op):
    x = t((3, 4), device=device)
    ids = tl.tensor([0, 3], device=device)           # 3 is past dim 0
    calls = {
        "index_select": lambda: x.index_select(0, ids),
        "gather": lambda: x.gather(0, ids.reshape(2, 1)),
        "scatter_add": lambda: x.scatter_add(0, ids.reshape(2, 1), t((2, 1), device=device)),
        "index_add": lambda: x.index_add(0, ids, t((2, 4), device=device)),
    }
    with pytest.raises(IndexError) as err:
        calls[op]()
    msg = str(err.value)
    assert op in msg and "3" in msg and "(3, 4)" in msg, msg


# GPU storages remember a host-side bound of uploaded ids and then skip the blocking error
# check; every write that could put a bad id in must still end in IndexOutOfRange.
_ID_WRITES = {
    "setitem scalar": lambda ids: ids.__setitem__(1, 3),
    "fill_": lambda ids: ids.fill_(3),
    "setitem slice from tensor": lambda ids: ids.__setitem__(slice(1, 2), tl.tensor([3], device=ids.device)),
    "copy_ computed on device": lambda ids: ids.copy_(ids + 3),
    "add_": lambda ids: ids.add_(3),
}


@pytest.mark.parametrize("write", sorted(_ID_WRITES))
@pytest.mark.parametrize("op", ["index_select", "index_add", "cross_entropy"])
def test_ids_out_of_range_after_inplace_write(device, op, write):
    x = t((3, 4), device=device)
    calls = {
        "index_select": lambda ids: x.index_select(0, ids),
        "index_add": lambda ids: x.index_add(0, ids, t((2, 4), device=device)),
        "cross_entropy": lambda ids: tl.nn.functional.cross_entropy(t((2, 3), device=device), ids),
    }
    ids = tl.tensor([0, 2], device=device)
    calls[op](ids)                                    # in range: runs
    _ID_WRITES[write](ids)
    with pytest.raises(IndexError) as err:
        calls[op](ids)
    assert "3" in str(err.value) and op in str(err.value), str(err.value)


def test_ids_out_of_range_after_partial_copy_of_good_ids(device):
    x = t((3, 4), device=device)
    good, bad = tl.tensor([0, 1], device=device), tl.tensor([3, 3], device=device)
    bad[0:1] = good[0:1]                              # bad keeps one id past dim 0
    with pytest.raises(IndexError):
        x.index_select(0, bad)
    copy = good.clone()                               # a whole copy of good ids stays usable
    copy[1] = 2
    np.testing.assert_array_equal(x.index_select(0, copy).numpy(), x.numpy()[[0, 2]])
    with pytest.raises(IndexError):
        x.index_select(0, tl.cat([good, bad]))        # assembled on the device


def test_index_op_shape_errors(device):
    x = t((3, 4), device=device)
    ids = tl.tensor([0, 1], device=device)
    with pytest.raises(tl.ShapeError) as err:
        x.gather(1, ids)                              # ndim differs
    check_message(err, "gather", x, ids)
    src = t((2, 5), device=device)
    with pytest.raises(tl.ShapeError) as err:
        x.index_add(0, ids, src)                      # source's other dims differ
    check_message(err, "index_add", x, src)
    i2 = tl.tensor([[0, 1]], device=device)
    s3 = t((1, 3), device=device)
    with pytest.raises(tl.ShapeError) as err:
        x.scatter_add(0, i2, s3)                      # index and src shapes differ
    check_message(err, "scatter_add", x, s3)
    with pytest.raises(tl.ShapeError):
        x.index_select(0, tl.tensor([[0, 1]], device=device))


def test_index_op_dtype_mismatch(device):
    x = t((3, 4), device=device)
    ids = tl.tensor([[0, 1, 2, 0]], device=device)
    src = t((1, 4), tl.float64, device)
    with pytest.raises(tl.DTypeError) as err:
        x.scatter_add(0, ids, src)
    check_message(err, "scatter_add", x, src)
    with pytest.raises(tl.DTypeError) as err:
        x.index_add(0, tl.tensor([1], device=device), src)
    check_message(err, "index_add", x, src)


def test_cat_and_stack_errors(device):
    a, c = t((2, 3), device=device), t((2, 4), device=device)
    with pytest.raises(tl.ShapeError) as err:
        tl.cat([a, c], 0)
    check_message(err, "cat", a, c)
    with pytest.raises(tl.ShapeError) as err:
        tl.cat([a, t((3,), device=device)], 0)
    with pytest.raises(tl.ShapeError) as err:
        tl.stack([a, c])
    check_message(err, "stack", a, c)
    with pytest.raises(ValueError):
        tl.cat([])
    with pytest.raises(ValueError):
        tl.stack([])


# ---------------------------------------------------------------- conv and pooling
def test_conv_errors(device):
    x = t((1, 3, 5, 5), device=device)
    w = t((4, 2, 3, 3), device=device)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv2d(x, w)                               # 3 input channels, weight wants 2
    check_message(err, "conv2d", x, w)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv2d(x[0], t((4, 3, 3, 3), device=device))   # 3-D input
    assert "conv2d" in str(err.value) and "(3, 5, 5)" in str(err.value)
    w4 = t((4, 4, 3, 3), device=device)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv2d(t((1, 4, 5, 5), device=device), w4, groups=3)
    assert "groups" in str(err.value) or "3" in str(err.value)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv2d(x, t((4, 3, 7, 7), device=device))     # output would be empty
    assert "conv2d" in str(err.value)
    wd = t((4, 3, 3, 3), tl.float64, device)
    with pytest.raises(tl.DTypeError) as err:
        tl.conv2d(x, wd)
    check_message(err, "conv2d", x, wd)
    x1, w1 = t((1, 3, 5), device=device), t((2, 4, 3), device=device)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv1d(x1, w1)
    check_message(err, "conv1d", x1, w1)
    wt = t((2, 4, 3), device=device)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv_transpose1d(x1, wt)                   # weight's dim 0 must equal c_in
    check_message(err, "conv_transpose1d", x1, wt)
    with pytest.raises(tl.ShapeError) as err:
        tl.conv_transpose2d(x, t((4, 3, 3, 3), device=device))
    assert "conv_transpose2d" in str(err.value)


def test_pool_and_upsample_errors(device):
    x3 = t((3, 5, 5), device=device)
    for op, fn in (("max_pool2d", lambda: tl.max_pool2d(x3, 2)), ("avg_pool2d", lambda: tl.avg_pool2d(x3, 2)),
                   ("upsample_nearest2d", lambda: tl.upsample_nearest2d(x3, (4, 4)))):
        with pytest.raises(tl.ShapeError) as err:
            fn()
        check_message(err, op, x3)
    x = t((1, 1, 2, 2), device=device)
    with pytest.raises(tl.ShapeError) as err:
        tl.max_pool2d(x, 3)
    check_message(err, "max_pool2d", x)
    with pytest.raises(ValueError):
        tl.avg_pool2d(x, 2, padding=2)


# ---------------------------------------------------------------------- creation
def test_creation_errors():
    with pytest.raises(ValueError):
        tl.tensor([[1, 2], [3]])                      # ragged
    with pytest.raises(TypeError):
        tl.tensor(["a", "b"])
    with pytest.raises(ValueError):
        tl.zeros(-1)
    with pytest.raises(ValueError):
        tl.arange(0, 5, 0)
    with pytest.raises(ValueError):
        tl.randint(5, 5, (2,))
    with pytest.raises(TypeError):
        tl.zeros(2, dtype="complex64")
    with pytest.raises(TypeError):
        tl.tensor([1.0], dtype="int7")
