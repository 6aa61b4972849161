"""Bad input for every op family: the right exception type (also the built-in a Python user
catches) and a message that names the op and each operand's shape, dtype and device."""
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F


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
    s3 = t((1, 1), device=device)
    with pytest.raises(tl.ShapeError) as err:
        x.scatter_add(0, i2, s3)                      # index larger than src
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


# ======================================================================================
# "PyTorch semantics and bad input": every bad input gets a TensorliteError naming the op
# (tests/test_fuzz_bad_input.py fuzzes the same families)
# ======================================================================================

def _raises(cls, op, fn, *operands):
    """fn() raises `cls`, a TensorliteError, whose message names `op` and the operands."""
    with pytest.raises(cls) as err:
        fn()
    assert isinstance(err.value, tl.TensorliteError), type(err.value)
    check_message(err, op, *operands)
    return err


# ------------------------------------------------------------------ sizes of new tensors
@pytest.mark.parametrize("op, fn", [
    ("rand", lambda d: tl.rand(-1, -1, device=d)), ("randn", lambda d: tl.randn(2, -3, device=d)),
    ("zeros", lambda d: tl.zeros(-1, device=d)), ("ones", lambda d: tl.ones((2, -1), device=d)),
    ("empty", lambda d: tl.empty(-2, device=d)), ("full", lambda d: tl.full((-1,), 1.0, device=d)),
    ("randint", lambda d: tl.randint(0, 5, (-2,), device=d)), ("eye", lambda d: tl.eye(-1, device=d)),
    ("eye", lambda d: tl.eye(2, -1, device=d)), ("linspace", lambda d: tl.linspace(0, 1, -1, device=d)),
    ("zeros_like", lambda d: tl.zeros_like(tl.zeros(2, device=d), dtype="complex64")),
])
def test_new_tensors_never_have_negative_sizes(device, op, fn):
    with pytest.raises((ValueError, TypeError)) as err:
        fn(device)
    assert isinstance(err.value, tl.TensorliteError) and op in str(err.value)


@pytest.mark.parametrize("fn", [lambda d: tl.zeros(2.5, device=d), lambda d: tl.ones((2, None), device=d),
                                lambda d: tl.rand(2, dtype=tl.int64, device=d),
                                lambda d: tl.full((2,), "a", device=d), lambda d: tl.randint(0.5, 3, (2,), device=d)])
def test_creation_arguments_of_the_wrong_type(device, fn):
    with pytest.raises(tl.DTypeError):
        fn(device)


@pytest.mark.parametrize("args", [(0, 5, -1), (5, 0, 1), (0, float("inf")), (0, float("nan")), (0, 1, 0)], ids=str)
def test_arange_refuses_what_pytorch_refuses(device, args):
    with pytest.raises(tl.ArgumentError) as err:
        tl.arange(*args, device=device)
    assert "arange" in str(err.value)
    assert tl.arange(1, 1, -1, device=device).shape == (0,)           # an empty range is fine


@pytest.mark.parametrize("fill, dtype", [(float("nan"), tl.int64), (float("inf"), tl.uint8), (10 ** 20, tl.int64)])
def test_fill_values_an_integer_dtype_cannot_hold(device, fill, dtype):
    with pytest.raises(tl.ArgumentError) as err:
        tl.full((2,), fill, dtype=dtype, device=device)
    assert "full" in str(err.value)
    with pytest.raises(tl.ArgumentError) as err:
        tl.zeros(2, dtype=tl.int64, device=device) + 10 ** 20
    assert "add" in str(err.value)


@pytest.mark.parametrize("fn", [lambda d: tl.zeros(10 ** 13, device=d), lambda d: tl.arange(10 ** 12, device=d),
                                lambda d: tl.rand(10 ** 7, 10 ** 7, device=d),
                                lambda d: tl.linspace(0, 1, 10 ** 13, device=d),
                                lambda d: tl.eye(10 ** 7, device=d)])
def test_absurd_sizes_fail_at_once_with_out_of_memory(device, fn):
    import time
    start = time.perf_counter()
    with pytest.raises(tl.OutOfMemoryError) as err:
        fn(device)
    assert time.perf_counter() - start < 2.0
    assert isinstance(err.value, MemoryError) and "bytes" in str(err.value)


@pytest.mark.parametrize("op, fn", [("add", lambda a, b: a + b), ("matmul", lambda a, b: a @ b),
                                    ("lt", lambda a, b: a < b), ("where", lambda a, b: tl.where(a > 0, a, b))])
def test_broadcast_and_matmul_results_larger_than_memory_are_out_of_memory(device, op, fn):
    """issue 48: (n, 1) + (1, n) and (n, 1) @ (1, n) leaked numpy's MemoryError from the backend;
    the result's (n, n) size is checked where its shape is computed, as creation functions do."""
    a, b = tl.zeros(2 * 10 ** 6, 1, device=device), tl.zeros(1, 2 * 10 ** 6, device=device)
    with pytest.raises(tl.OutOfMemoryError) as err:
        fn(a, b)
    assert f"{op}: a (2000000, 2000000)" in str(err.value) and "bytes" in str(err.value), str(err.value)


def test_results_larger_than_the_free_memory_are_out_of_memory_naming_the_op():
    """issue 48: a result that fits the host's total memory (check_size lets it through) but not
    what is free now (here: an address-space limit 1 GiB above the process's size) leaked numpy's
    MemoryError from inside the backend, or an OutOfMemoryError naming only 'cpu'."""
    resource = pytest.importorskip("resource")  # (not on Windows)
    script = textwrap.dedent("""
        import resource
        import tensorlite as tl
        tl.ones(2, 2) @ tl.ones(2, 2) + 1  # the BLAS and the pools up before the limit
        size = int(open("/proc/self/statm").read().split()[0]) * 4096
        resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
        n = 30000  # an (n, n) float32 result: 3.6 GB
        a, b = tl.zeros(n, 1), tl.zeros(1, n)
        cases = {"add": lambda: a + b, "lt": lambda: tl.zeros(2 * n, 1) < tl.zeros(1, 2 * n),
                 "where": lambda: tl.where(a > 0, a, b), "matmul": lambda: a @ b,
                 "upsample_nearest2d": lambda: tl.upsample_nearest2d(tl.zeros(1, 1, 2, 2), (n, n)),
                 "zeros": lambda: tl.zeros(n, n)}
        for op, fn in cases.items():
            try:
                fn()
                print(op, "made it")
            except tl.OutOfMemoryError as e:
                print(op, "raised", str(e).split(":")[0], "bytes" in str(e))
            except MemoryError as e:
                print(op, "leaked", type(e).__name__)
        print("after:", (tl.ones(3) + tl.ones(3)).tolist())
    """)
    if not hasattr(resource, "RLIMIT_AS") or not pathlib.Path("/proc/self/statm").exists():
        pytest.skip("needs Linux's address-space limit (RLIMIT_AS) and /proc/self/statm")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for op in ("add", "lt", "where", "matmul", "upsample_nearest2d", "zeros"):
        assert f"{op} raised {op} True" in lines, proc.stdout
    assert lines[-1] == "after: [2.0, 2.0, 2.0]"


def test_cpu_memory_error_is_out_of_memory(monkeypatch):
    dev = tl.backend.get_device("cpu")

    def no_memory(*a, **k):
        raise MemoryError("Unable to allocate")
    monkeypatch.setattr(np, "empty", no_memory)  # the numpy the cpu backend allocates with
    with pytest.raises(tl.OutOfMemoryError) as err:
        dev.alloc_uninit((3, 4), tl.float32)
    assert "(3, 4) float32" in str(err.value) and "48 bytes" in str(err.value)


def test_gpu_sizes_are_refused_before_any_device_work(tmp_path, monkeypatch):
    """The null GPU platform counts device calls: a bad size never reaches the allocator or a
    kernel (on a real GPU a negative size poisoned the context, a huge one hung the driver)."""
    pytest.importorskip("cffi")
    from tensorlite.backends.rocm.device import GpuDevice
    from tensorlite.backends.rocm.null import NullPlatform
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))
    dev = GpuDevice(NullPlatform(), 0)
    mallocs = []
    monkeypatch.setattr(dev.platform, "malloc", lambda n: mallocs.append(n) or 1 << 32)
    for fn in (lambda: tl.randint(0, 5, (-2,), device=dev), lambda: tl.rand(-1, -1, device=dev),
               lambda: tl.zeros((2, -3), device=dev)):
        with pytest.raises(tl.ShapeError):
            fn()
    with pytest.raises(tl.OutOfMemoryError) as err:
        tl.arange(10 ** 12, device=dev)                 # 8e12 bytes > the null device's 1 TiB
    assert "arange" in str(err.value)
    with pytest.raises(tl.OutOfMemoryError):
        dev.alloc_uninit((1 << 40,), tl.float32)        # the allocator refuses it before the driver
    assert not mallocs and not sum(dev.platform.counts.values())


# --------------------------------------------------------------------------- views
def test_views_never_make_negative_sizes(device):
    x = t((3,), device=device)
    _raises(tl.ShapeError, "expand", lambda: x.expand(-1, 3), x)     # -1 only keeps an existing size
    assert x.expand(2, -1).shape == (2, 3)
    _raises(tl.ShapeError, "broadcast_to", lambda: t((1,), device=device).broadcast_to((-5,)))
    _raises(tl.DTypeError, "reshape", lambda: x.reshape(1.5, 2), x)    # sizes are integers (PyTorch)
    _raises(tl.DTypeError, "narrow", lambda: x.narrow(0, 1.5, 1), x)
    _raises(tl.ArgumentError, "narrow", lambda: x.narrow(0, 0, 1, 0), x)
    _raises(tl.DTypeError, "select", lambda: x.select(0, 1.5), x)
    _raises(tl.ArgumentError, "split", lambda: x.split(0), x)
    _raises(tl.ShapeError, "split", lambda: x.split([4, -1]), x)
    _raises(tl.ArgumentError, "chunk", lambda: x.chunk(0), x)
    _raises(tl.DTypeError, "sum", lambda: x.sum(0.5), x)
    s = t((), device=device)
    for op, fn in (("size", lambda: s.size(0)), ("narrow", lambda: s.narrow(0, 0, 1)),
                   ("select", lambda: s.select(0, 0))):
        _raises(tl.IndexOutOfRange, op, fn, s)          # dim 0 of a 0-d tensor only where PyTorch allows it


def test_bad_slices(device):
    x = t((4,), device=device)
    _raises(tl.ArgumentError, "__getitem__", lambda: x[::0], x)
    _raises(tl.DTypeError, "__getitem__", lambda: x[0.5:], x)
    assert x[0:3:-1].shape == (0,) and x[3:0:-1].shape == (3,)


# ----------------------------------------------------------------- reductions on 0-d
@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std",
                                "prod", "logsumexp"])
def test_reductions_take_dim_0_and_minus_1_of_a_0d_tensor(device, op):
    """PyTorch: a 0-d tensor reduces over dim 0 or -1 (to itself); dim 1 is out of range."""
    torch = pytest.importorskip("torch")
    for dim in (0, -1, (0,), ()):
        if op in ("max", "min", "argmax", "argmin", "prod") and not isinstance(dim, int):
            continue
        x = tl.tensor(1.5, device=device, requires_grad=True)
        out = getattr(x, op)(dim)
        ref = getattr(torch.tensor(1.5, dtype=torch.float32), op)(dim)
        got, ref = (out.values, ref.values) if op in ("max", "min") else (out, ref)
        assert got.shape == () and np.allclose(got.numpy(), ref.numpy(), equal_nan=True), (op, dim)
        if got.dtype.is_floating_point:
            got.backward()
            assert x.grad.shape == ()
    x = t((), device=device)
    _raises(IndexError, op, lambda: getattr(x, op)(1), x)


def test_reductions_over_every_dim_with_an_empty_tuple(device):
    x = t((2, 3), device=device)
    assert x.sum(()).item() == x.sum().item() and x.amax(()).shape == ()
    assert x.squeeze(()).shape == (2, 3)                 # squeeze(()) squeezes nothing, as PyTorch


# --------------------------------------------------- composite ops name themselves
@pytest.mark.parametrize("op, fn", [
    ("pow", lambda x, y: x ** y), ("pow", lambda x, y: 2.0 ** y if False else x.pow(y)),
    ("floor_divide", lambda x, y: x // y), ("remainder", lambda x, y: x % y),
    ("clamp", lambda x, y: x.clamp(y)), ("clamp", lambda x, y: x.clamp(None, y)),
    ("masked_fill", lambda x, y: x.masked_fill(tl.ones(y.shape, dtype=tl.bool, device=y.device), 0.0)),
    ("mse_loss", lambda x, y: tl.nn.functional.mse_loss(x, y)),
])
def test_composite_ops_name_themselves_not_their_parts(device, op, fn):
    x, y = t((2, 3), device=device), t((4,), device=device)
    _raises(tl.ShapeError, op, lambda: fn(x, y), x)


@pytest.mark.parametrize("op, fn", [("std", lambda x: x.std(5)), ("amax", lambda x: x.amax(5)),
                                    ("amin", lambda x: x.amin(-4)), ("normalize", lambda x: F.normalize(x, dim=3)),
                                    ("softmax", lambda x: F.softmax(x, 2)),
                                    ("log_softmax", lambda x: F.log_softmax(x, -3))])
def test_bad_dims_name_the_op(device, op, fn):
    x = t((2, 3), device=device)
    _raises(IndexError, op, lambda: fn(x), x)


def test_masked_fill_follows_pytorch(device):
    x = t((2,), device=device)
    _raises(tl.ShapeError, "masked_fill", lambda: x.masked_fill(tl.ones((3,), dtype=tl.bool, device=device), 0.0), x)
    assert x.masked_fill(tl.ones((3, 2), dtype=tl.bool, device=device), 0.0).shape == (3, 2)  # broadcast, as torch
    _raises(tl.DTypeError, "masked_fill", lambda: x.masked_fill(x > 1, t((2,), device=device)), x)
    _raises(tl.DTypeError, "masked_fill", lambda: x.masked_fill(x, 0.0), x)
    assert x.masked_fill(x > 1, tl.tensor(7.0, device=device)).tolist() == [1.0, 7.0]


def test_ordering_comparisons_with_non_numbers(device):
    x = t((2,), device=device)
    _raises(tl.DTypeError, "lt", lambda: x < "a", x)
    assert (x == None) is False and (x != "a") is True   # noqa: E711 - identity fallback, as Python


# --------------------------------------------------------------------------- casts
def test_to_with_a_string_that_is_neither_device_nor_dtype(device):
    x = t((2,), device=device)
    err = _raises(tl.DeviceError, "to", lambda: x.to("complex64"), x)
    assert "complex64" in str(err.value) and "float32" in str(err.value)   # lists the dtype names too
    assert x.to("f16").dtype is tl.float16 and x.to(float).dtype is tl.float32
    for op, fn in (("to", lambda: x.to(5)), ("type", lambda: x.type("complex64"))):
        with pytest.raises(tl.DTypeError) as err:
            fn()
        assert op in str(err.value)


# ------------------------------------------------------------------ conv and pooling
@pytest.mark.parametrize("kw, cls", [
    (dict(stride=0), tl.ArgumentError), (dict(stride=(1, -1)), tl.ArgumentError), (dict(dilation=0), tl.ArgumentError),
    (dict(padding=-1), tl.ArgumentError), (dict(groups=0), tl.ArgumentError),
    (dict(stride=(1, 1, 1)), tl.ArgumentError),
    (dict(stride=1.5), tl.DTypeError), (dict(padding="full"), tl.ArgumentError),
    (dict(padding="same", stride=2), tl.ArgumentError), (dict(groups=2), tl.ShapeError),
], ids=str)
def test_conv_parameters_are_checked(device, kw, cls):
    x, w = t((1, 2, 5, 5), device=device), t((4, 2, 3, 3), device=device)
    _raises(cls, "conv2d", lambda: tl.conv2d(x, w, **kw), x, w)


@pytest.mark.parametrize("x_shape, w_shape, kw, expect", [
    ((1, 5, 8, 8), (4, 3, 3, 3), {}, "expected an input with 3 channels (3 per group x groups=1), got 5 channels"),
    ((1, 4, 8, 8), (6, 1, 3, 3), dict(groups=2), "with 2 channels (1 per group x groups=2), got 4"),
    ((1, 4, 8, 8), (5, 2, 3, 3), dict(groups=2), "first dim (5 output channels) is not a multiple of groups=2"),
], ids=str)
def test_conv_channel_mismatch_gives_the_counts(device, x_shape, w_shape, kw, expect):
    """issue 45: 'channels do not match (groups=1), or a kernel size is 0' gave no counts."""
    x, w = t(x_shape, device=device), t(w_shape, device=device)
    err = _raises(tl.ShapeError, "conv2d", lambda: tl.conv2d(x, w, **kw), x, w)
    assert expect in str(err.value)
    err = _raises(tl.ShapeError, "conv2d", lambda: tl.nn.Conv2d(3, 4, 3).to(device)(t((1, 5, 8, 8), device=device)))
    assert "expected an input with 3 channels" in str(err.value) and "got 5 channels" in str(err.value)


def test_cross_entropy_float_class_ids_say_they_must_be_integers(device):
    """issue 45: float class ids said only 'probability targets need the input's shape'."""
    x, tgt = t((4, 5, 3), device=device), tl.tensor([[1.0, 2, 3]] * 4, device=device)
    err = _raises(tl.DTypeError, "cross_entropy", lambda: F.cross_entropy(x, tgt), x, tgt)
    msg = str(err.value)
    assert "class indices must be integers" in msg and "float32" in msg, msg
    assert "of shape (4, 3)" in msg and "the input's shape (4, 5, 3)" in msg, msg


def test_conv_kernel_and_output_padding_are_checked(device):
    x = t((1, 2, 5, 5), device=device)
    w0 = t((4, 2, 0, 3), device=device)
    _raises(tl.ShapeError, "conv2d", lambda: tl.conv2d(x, w0), x, w0)              # a kernel size of 0
    wt = t((2, 3, 3, 3), device=device)
    _raises(tl.ArgumentError, "conv_transpose2d", lambda: tl.conv_transpose2d(x, wt, stride=2, output_padding=2),
            x, wt)                                                                    # must be < stride or dilation
    assert tl.conv_transpose2d(x, wt, stride=1, dilation=2, output_padding=1).shape == (1, 3, 10, 10)
    _raises(tl.DTypeError, "conv_transpose2d", lambda: tl.conv_transpose2d(x, wt, padding="same"), x, wt)
    x1, w1 = t((1, 2, 5), device=device), t((3, 2, 2), device=device)
    _raises(tl.ArgumentError, "conv1d", lambda: tl.conv1d(x1, w1, dilation=(0,)), x1, w1)


@pytest.mark.parametrize("kw", [dict(kernel_size=0), dict(kernel_size=2, stride=0), dict(kernel_size=2, dilation=0),
                                dict(kernel_size=2, padding=2), dict(kernel_size=2, padding=-1),
                                dict(kernel_size=(2, 2, 2)), dict(kernel_size=2, ceil_mode=True)], ids=str)
def test_pool_parameters_are_checked(device, kw):
    x = t((1, 1, 4, 4), device=device)
    for op in ("max_pool2d", "avg_pool2d"):
        if op == "avg_pool2d" and "dilation" in kw:
            continue
        _raises(tl.ArgumentError, op, lambda op=op: getattr(tl, op)(x, **kw), x)


@pytest.mark.parametrize("kw", [dict(size=(-2, 4)), dict(size=0), dict(scale_factor=0.1), dict(scale_factor=-1.0),
                                dict(scale_factor=float("nan")), dict(), dict(size=2, scale_factor=2),
                                dict(size=(2, 2, 2))], ids=str)
def test_upsample_sizes_are_checked(device, kw):
    x = t((1, 1, 2, 2), device=device)
    with pytest.raises((tl.ArgumentError, tl.ShapeError)) as err:
        tl.upsample_nearest2d(x, **kw)
    check_message(err, "upsample_nearest2d", x)


def test_empty_batch_conv_and_pool_run_no_kernel(device):
    x = t((0, 2, 5, 5), device=device)
    assert tl.conv2d(x, t((4, 2, 3, 3), device=device)).shape == (0, 4, 3, 3)
    assert tl.max_pool2d(x, 2).shape == (0, 2, 2, 2) and tl.upsample_nearest2d(x, 3).shape == (0, 2, 3, 3)


@pytest.mark.parametrize("nd, k, dilation", [(2, (3, 3), 1), (2, (2, 4), 1), (2, (2, 3), (2, 1)), (1, (4,), 1),
                                             (1, (3,), 3)], ids=str)
@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv_string_padding_matches_pytorch(device, rng, nd, k, dilation):
    torch = pytest.importorskip("torch")
    xs, ws = (2, 3) + (7,) * nd, (4, 3) + k
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    tf = getattr(torch.nn.functional, f"conv{nd}d")
    for padding in ("same", "valid"):
        X = tl.tensor(x, device=device, requires_grad=True)
        got = getattr(tl, f"conv{nd}d")(X, tl.tensor(w, device=device), padding=padding, dilation=dilation)
        tx = torch.tensor(x, requires_grad=True)
        ref = tf(tx, torch.tensor(w), padding=padding, dilation=dilation)
        np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
        got.sum().backward()
        ref.sum().backward()
        np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- cat, index ops, nn
def test_cat_stack_operands(device):
    s = t((), device=device)
    _raises(tl.ShapeError, "cat", lambda: tl.cat([s, s]), s)          # PyTorch: use stack
    assert tl.stack([s, s]).shape == (2,)
    for op in ("cat", "stack"):
        with pytest.raises(tl.DTypeError) as err:
            getattr(tl, op)([t((2,), device=device), [1.0, 2.0]])
        assert op in str(err.value)
        with pytest.raises(tl.ArgumentError):
            getattr(tl, op)([])


def test_index_ops_on_0d_and_non_tensor_operands(device):
    s, ids = t((), device=device), tl.tensor([0], device=device)
    _raises(tl.IndexOutOfRange, "index_select", lambda: s.index_select(1, ids), s)  # a 0-d self has dim 0 (PyTorch)
    x = t((2, 2), device=device)
    _raises(tl.DTypeError, "scatter_add", lambda: x.scatter_add(0, tl.zeros((2, 2), dtype=tl.int64, device=device),
                                                                  [[1.0, 2.0]]), x)


def test_functional_arguments(device):
    x = t((2, 3), device=device)
    _raises(tl.ArgumentError, "dropout", lambda: F.dropout(x, 1.5), x)
    _raises(tl.ArgumentError, "dropout", lambda: F.dropout(x, float("nan")), x)
    _raises(tl.DTypeError, "layer_norm", lambda: F.layer_norm(x, 3.0), x)
    _raises(tl.ArgumentError, "normalize", lambda: F.normalize(x, p=0), x)
    assert np.allclose(F.normalize(x, p=float("inf")).numpy(), x.numpy() / 2.0)
    w = t((3,), device=device)
    _raises(tl.ShapeError, "embedding", lambda: F.embedding(tl.tensor([0], device=device), w), w)
    w2 = t((3, 2), device=device)
    _raises(tl.ArgumentError, "embedding", lambda: F.embedding(tl.tensor([0], device=device), w2, padding_idx=3), w2)
    tgt = tl.tensor([0, 1], device=device)
    with pytest.raises(tl.ArgumentError):
        F.cross_entropy(x, tgt, reduction="avg")
    with pytest.raises(tl.ArgumentError):
        F.cross_entropy(x, tgt, label_smoothing=1.5)
    _raises(tl.ShapeError, "cross_entropy", lambda: F.cross_entropy(t((2, 0), device=device), tgt))
    _raises(tl.ShapeError, "cross_entropy", lambda: F.cross_entropy(t((), device=device), tl.tensor(0)))
    with pytest.raises(tl.IndexOutOfRange) as err:                      # the composite path (label smoothing)
        F.cross_entropy(x, tl.tensor([0, 3], device=device), label_smoothing=0.1)
    assert "cross_entropy" in str(err.value)
    with pytest.raises(tl.ArgumentError):
        F.gelu(x, approximate="erf")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on the empty rows
def test_empty_normalized_dims(device):
    x = t((2, 0), device=device).requires_grad_()
    for fn in (lambda: F.layer_norm(x, (0,)), lambda: F.rms_norm(x, (0,)), lambda: F.softmax(x, -1)):
        out = fn()
        assert out.shape == (2, 0)
        out.sum().backward()
        assert x.grad.shape == (2, 0)


# ------------------------------------------------- deliberate errors are TensorliteErrors
@pytest.mark.parametrize("builtin, fn", [
    (ValueError, lambda: t((2,)).clamp()), (ValueError, lambda: t((2,)).split(0)), (ValueError, lambda: tl.cat([])),
    (ValueError, lambda: tl.tensor([[1, 2], [3]])), (TypeError, lambda: tl.tensor(["a"])),
    (TypeError, lambda: tl.zeros(2, dtype="int7")), (TypeError, lambda: len(t(()))),
    (ValueError, lambda: tl.tensor([1, 2]) ** tl.tensor([-1, 1])), (TypeError, lambda: tl.foreach_to([1], tl.float16)),
    (ValueError, lambda: tl.nn.Dropout(2.0)), (TypeError, lambda: setattr(tl.nn.Linear(2, 2), "weight", 3)),
    (IndexError, lambda: tl.nn.Sequential(tl.nn.ReLU())[3]), (ValueError, lambda: tl.nn.init.calculate_gain("x")),
    (TypeError, lambda: tl.save_safetensors({"a": 1}, "/nonexistent/x.safetensors")),
])
def test_deliberate_errors_are_tensorlite_errors_and_builtins(builtin, fn):
    with pytest.raises(builtin) as err:
        fn()
    assert isinstance(err.value, tl.TensorliteError), type(err.value)


def test_tensor_init_keeps_its_type_error():
    with pytest.raises(TypeError):
        tl.Tensor()


# ------------------------------------------------------------------ pickle, deepcopy
def test_deepcopy_and_pickle_work_beside_the_original(device):
    import copy
    import pickle
    x = tl.randn(2, 3, device=device, requires_grad=True)
    for y in (copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert y.device == x.device and y.dtype is x.dtype and y.requires_grad
        assert np.array_equal((x + y).numpy(), 2 * x.numpy())          # same device object: usable together
    dev = tl.backend.get_device(device)
    assert copy.deepcopy(dev) is dev and pickle.loads(pickle.dumps(dev)) is dev
    m = tl.nn.Sequential(tl.nn.Linear(3, 4), tl.nn.ReLU(), tl.nn.Linear(4, 2)).to(device)
    for m2 in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert isinstance(m2[0].weight, tl.nn.Parameter) and m2[0].weight.requires_grad
        assert np.allclose(m2(x).numpy(), m(x).numpy())
        (m2(x) + m(x)).sum().backward()
        assert m2[0].weight.grad is not None and m[0].weight.grad is not None


def test_bf16_tensors_pickle(device):
    import pickle
    x = tl.randn(4, device=device).to(tl.bfloat16)
    y = pickle.loads(pickle.dumps(x))
    assert y.dtype is tl.bfloat16 and np.array_equal(y.float().numpy(), x.float().numpy())


# -------------------------------------------------------------------------- files
def test_corrupt_files_are_format_errors_naming_the_path(tmp_path):
    pytest.importorskip("safetensors")
    good = tmp_path / "good.safetensors"
    tl.save_safetensors({"w": tl.ones(64, 64)}, good)
    data = good.read_bytes()
    for name, content in (("truncated", data[:len(data) // 2]), ("garbage", b"\xff" * 64), ("empty", b"")):
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(content)
        with pytest.raises(tl.FormatError) as err:
            tl.load_safetensors(path)
        assert str(path) in str(err.value) and isinstance(err.value, ValueError)
    with pytest.raises(FileNotFoundError):
        tl.load_safetensors(tmp_path / "missing.safetensors")
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(data)
    for config in ("{not json", "[1, 2]", "\xff"):
        (model / "config.json").write_text(config, encoding="latin-1")
        with pytest.raises(tl.FormatError) as err:
            tl.load_hf_checkpoint(model)
        assert "config.json" in str(err.value)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").unlink()
    (model / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(tl.FormatError) as err:
        tl.load_hf_checkpoint(model)
    assert "weight_map" in str(err.value) and "index.json" in str(err.value)
