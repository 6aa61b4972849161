"""Bad input, fuzzed: every op family gets invalid or edge-case shapes, dtypes, dims, sizes and
parameters (and edge inputs: empty, 0-d, NaN/Inf, non-contiguous), on every device.

An op may succeed or refuse; what it may not do is leak an internal exception (an IndexError
from a tuple, a numpy ValueError, a ZeroDivisionError): anything raised must be a
`tl.TensorliteError` whose message names the op. A result must be usable (no negative dims),
and a differentiable float result must survive `.sum().backward()`.

100 examples per family (kept small so the file runs in well under a minute on two cores);
TL_FUZZ_EXAMPLES, TL_FUZZ_SEED and how a failure reproduces: fuzz_util.py."""
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import dtype as _dt
from fuzz_util import examples, fuzz

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, on NaN/Inf and empty edge inputs
FUZZ = fuzz(examples(100))

ints = st.integers(-3, 5)
# what a user may pass where an int (a size, a dim, a stride) is expected
int_args = st.one_of(ints, ints, ints, st.sampled_from([None, 1.5, float("nan"), "2", True, (1, 2), 10 ** 13]))
shapes = st.lists(st.integers(0, 3), max_size=4).map(tuple)
dtypes = st.sampled_from(_dt.ALL)
scalars = st.sampled_from([0, 1, -1, 2, 0.5, -2.5, float("nan"), float("inf"), float("-inf"), True, 10 ** 20])


def _tensors_of(out):
    if isinstance(out, tl.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors_of(o)]
    return []


def call(names, fn, *args, backward=True, **kwargs):
    """fn(*args, **kwargs) (then the backward of its float results that require grad): returns
    the result, or None where it raised a TensorliteError naming one of `names`."""
    names = (names,) if isinstance(names, str) else names
    try:
        out = fn(*args, **kwargs)
        for t in _tensors_of(out):
            assert min(t.shape, default=0) >= 0, f"{names[0]} made a tensor of shape {t.shape}"
        if backward:
            for t in _tensors_of(out):
                if t.requires_grad and t.dtype.is_floating_point and t.numel() <= 10 ** 5:
                    t.sum().backward()
        return out
    except tl.TensorliteError as e:
        assert any(n in str(e) for n in names), f"{type(e).__name__} does not name {names}: {e}"
        return None
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(f"{names[0]} leaked {type(e).__name__}: {e}") from e


@st.composite
def tensors(draw, shape=shapes, dtype=dtypes, device="cpu", grad=True):
    """A tensor of a drawn shape and dtype, sometimes holding NaN/Inf, sometimes
    non-contiguous (transposed or strided), sometimes requiring grad."""
    shape, dt = draw(shape), draw(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    a = rng.uniform(-3, 3, size=shape)
    if dt.is_floating_point and a.size and draw(st.booleans()):
        a.flat[rng.integers(0, a.size, size=min(a.size, 2))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    a = a if dt.is_floating_point else np.abs(a).astype(np.int64) if dt is not tl.bool else a > 0
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    if layout == "transposed" and len(shape) >= 2:
        t = tl.tensor(np.ascontiguousarray(np.swapaxes(a, 0, 1)), dtype=dt, device=device).transpose(0, 1)
    elif layout == "strided" and len(shape) >= 1:
        t = tl.tensor(np.repeat(a, 2, axis=0), dtype=dt, device=device)[::2]
    else:
        t = tl.tensor(a, dtype=dt, device=device)
    if grad and dt.is_floating_point and draw(st.booleans()):
        t = t.detach().requires_grad_()
    return t


def dims():
    return st.one_of(st.integers(-5, 5), st.sampled_from([None, (), (0, 0), (0, -1), (1, 0), 1.5, "0", [0]]))


# ----------------------------------------------------------------------------- creation
@FUZZ
@given(data=st.data())
def test_creation(device, data):
    size = data.draw(st.one_of(int_args, st.lists(int_args, max_size=3).map(tuple)))
    dtype = data.draw(st.one_of(dtypes, st.sampled_from([None, "int32", "complex64", 5, "f16"])))
    name = data.draw(st.sampled_from(["zeros", "ones", "empty", "rand", "randn"]))
    call(name, getattr(tl, name), size, dtype=dtype, device=device)
    call("full", tl.full, size, data.draw(scalars), dtype=dtype, device=device)
    a, b, c = data.draw(scalars), data.draw(scalars), data.draw(st.one_of(scalars, ints))
    call("arange", tl.arange, a, b, c, dtype=dtype, device=device)
    call("arange", tl.arange, data.draw(int_args), device=device)
    call("linspace", tl.linspace, a, b, data.draw(int_args), dtype=dtype, device=device)
    call("eye", tl.eye, data.draw(int_args), data.draw(int_args), dtype=dtype, device=device)
    call("randint", tl.randint, data.draw(int_args), data.draw(int_args), size, device=device)
    x = data.draw(tensors(device=device))
    for name in ("zeros_like", "ones_like", "empty_like", "rand_like"):
        if hasattr(tl, name):
            call(name, getattr(tl, name), x, dtype=dtype)
    call(("full_like", "full"), tl.full_like, x, data.draw(scalars), dtype=dtype)


# ------------------------------------------------------------------- views and reshapes
@FUZZ
@given(data=st.data())
def test_views(device, data):
    x = data.draw(tensors(device=device))
    sizes = data.draw(st.lists(int_args, max_size=4).map(tuple))
    d0, d1, n = data.draw(int_args), data.draw(int_args), data.draw(int_args)
    ops = [
        ("reshape", lambda: x.reshape(*sizes)), ("view", lambda: x.view(sizes)),
        (("expand", "broadcast_to"), lambda: x.expand(*sizes)), ("broadcast_to", lambda: x.broadcast_to(sizes)),
        ("permute", lambda: x.permute(*sizes)), ("transpose", lambda: x.transpose(d0, d1)),
        ("narrow", lambda: x.narrow(d0, d1, n)), ("select", lambda: x.select(d0, d1)),
        ("unsqueeze", lambda: x.unsqueeze(d0)), ("squeeze", lambda: x.squeeze(data.draw(dims()))),
        ("flatten", lambda: x.flatten(d0, d1)), ("unflatten", lambda: x.unflatten(d0, sizes)),
        ("split", lambda: x.split(n, d0)), ("split", lambda: x.split(list(sizes), d0)),
        ("chunk", lambda: x.chunk(n, d0)), ("size", lambda: x.size(d0)), ("stride", lambda: x.stride(d0)),
        ("contiguous", lambda: x.mT.contiguous() if x.ndim >= 2 else x.T),
    ]
    for name, fn in data.draw(st.lists(st.sampled_from(ops), min_size=1, max_size=4)):
        call(name, fn)


# ------------------------------------------------------------------------------ indexing
@FUZZ
@given(data=st.data())
def test_getitem(device, data):
    x = data.draw(tensors(device=device))
    slices = st.builds(slice, st.one_of(st.none(), ints), st.one_of(st.none(), ints), st.one_of(st.none(), ints))
    bool_mask = data.draw(tensors(shape=st.just(x.shape[:1]), dtype=st.just(tl.bool), device=device))
    ids = data.draw(tensors(shape=st.sampled_from([(), (2,), (0,)]), dtype=dtypes, device=device, grad=False))
    item = st.one_of(ints, slices, st.sampled_from([None, Ellipsis, 1.5, "a", [0, -1], [True], bool_mask, ids]))
    idx = data.draw(st.one_of(item, st.lists(item, max_size=4).map(tuple)))
    call(("__getitem__", "select", "narrow", "index_select"), lambda: x[idx])


# ---------------------------------------------------------------------------- reductions
@FUZZ
@given(data=st.data())
def test_reductions(device, data):
    x = data.draw(tensors(device=device))
    dim, keepdim = data.draw(dims()), data.draw(st.booleans())
    name = data.draw(st.sampled_from(["sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var",
                                      "std", "prod", "logsumexp"]))
    call(name, getattr(x, name), dim, keepdim)
    call(name, getattr(x, name))


# -------------------------------------------------------------- elementwise and broadcast
UNARY = sorted({row.method for row in tl.op_table.UNARY})


@FUZZ
@given(data=st.data())
def test_elementwise(device, data):
    a = data.draw(tensors(device=device))
    b = data.draw(st.one_of(tensors(device=device), scalars, st.sampled_from([[1.0, 2.0], "a", None])))
    binary = [("add", lambda: a + b), ("sub", lambda: a - b), ("mul", lambda: a * b), ("div", lambda: a / b),
              ("pow", lambda: a ** b), ("pow", lambda: b ** a), ("floor_divide", lambda: a // b),
              ("remainder", lambda: a % b), ("maximum", lambda: tl.maximum(a, b)),
              ("minimum", lambda: tl.minimum(a, b)), ("eq", lambda: a == b), ("lt", lambda: a < b),
              (("and", "bitwise"), lambda: a & b), ("clamp", lambda: a.clamp(b, None)),
              ("clamp", lambda: a.clamp(None, b)), ("where", lambda: tl.where(a > 0, a, b)),
              ("masked_fill", lambda: a.masked_fill(a > 0, b)), ("add", lambda: a.add(b, alpha=2)),
              ("affine", lambda: a.affine(2.0, 1.0)), ("elu", lambda: a.elu(0.5))]
    for name, fn in data.draw(st.lists(st.sampled_from(binary), min_size=1, max_size=4)):
        call(name, fn)
    name = data.draw(st.sampled_from(UNARY))
    call(name, getattr(a, name))


# ------------------------------------------------------------------------------- matmul
@FUZZ
@given(data=st.data())
def test_matmul(device, data):
    small = st.lists(st.integers(0, 3), max_size=4).map(tuple)
    a, b = data.draw(tensors(shape=small, device=device)), data.draw(tensors(shape=small, device=device))
    call("matmul", lambda: a @ b)


# ---------------------------------------------------------------------------- cat, stack
@FUZZ
@given(data=st.data())
def test_cat_stack(device, data):
    ts = data.draw(st.lists(st.one_of(tensors(device=device), st.sampled_from([1.0, [1, 2]])), max_size=3))
    dim = data.draw(st.one_of(st.integers(-3, 3), st.sampled_from([None, 1.5])))
    call("cat", tl.cat, ts, dim)
    call("stack", tl.stack, ts, dim)


# ---------------------------------------------------------------------------- index ops
@FUZZ
@given(data=st.data())
def test_index_ops(device, data):
    x = data.draw(tensors(device=device))
    ids = data.draw(tensors(shape=shapes, dtype=st.sampled_from([tl.int64, tl.uint8, tl.float32, tl.bool]),
                            device=device, grad=False))
    src = data.draw(tensors(device=device))
    dim = data.draw(st.one_of(st.integers(-3, 3), st.sampled_from([1.5, None])))
    name = data.draw(st.sampled_from(["index_select", "gather", "scatter_add", "index_add"]))
    args = (dim, ids) if name in ("index_select", "gather") else (dim, ids, src)
    call(name, getattr(x, name), *args)


# -------------------------------------------------------------- conv, pooling, upsampling
params = st.one_of(st.integers(-1, 3), st.integers(-1, 3), st.tuples(st.integers(-1, 3), st.integers(-1, 3)),
                   st.sampled_from([(1,), (1, 1, 1), 1.5, "same", "valid", "full", None]))


# Half the conv and pool examples draw parameters PyTorch accepts: `params` alone rarely makes
# a valid call (2 in 100), and then the kernels and their backward would seldom run.
accepted = st.integers(1, 2)


@FUZZ
@given(data=st.data())
def test_conv(device, data):
    nd, valid = data.draw(st.sampled_from([1, 2])), data.draw(st.booleans())
    spatial = st.lists(st.integers(1 if valid else 0, 5), min_size=nd, max_size=nd).map(tuple)
    if valid:
        g = data.draw(accepted)
        b, cin, cout = data.draw(accepted), g * data.draw(accepted), g * data.draw(accepted)
    else:
        b, cin, cout, g = (data.draw(st.integers(0, 3)) for _ in range(4))
    dt = data.draw(st.sampled_from([tl.float32, tl.float64, tl.int64]))
    x = data.draw(tensors(shape=spatial.map(lambda s: (b, cin) + s), dtype=st.just(dt), device=device))
    transposed = data.draw(st.booleans())
    wshape = (cin, cout // g) if transposed and valid else (cin, cout) if transposed else (cout, cin // max(g, 1))
    kernel = (lambda k: 1 + k % 3) if valid else (lambda k: k % 4)
    w = data.draw(tensors(shape=spatial.map(lambda s: wshape + tuple(kernel(k) for k in s)), dtype=st.just(dt),
                          device=device))
    if valid:
        kw = dict(stride=data.draw(accepted), padding=data.draw(st.integers(0, 1)), dilation=data.draw(accepted),
                  groups=g)
    else:
        kw = dict(stride=data.draw(params), padding=data.draw(params), dilation=data.draw(params), groups=g)
    if transposed:
        op = f"conv_transpose{nd}d"
        call(op, getattr(tl, op), x, w, None, output_padding=0 if valid else data.draw(params), **kw)
    else:
        op = f"conv{nd}d"
        call(op, getattr(tl, op), x, w, None, **kw)


@FUZZ
@given(data=st.data())
def test_pool_upsample(device, data):
    valid = data.draw(st.booleans())
    shape = st.tuples(accepted, accepted, st.integers(1, 6), st.integers(1, 6)) if valid else \
        st.lists(st.integers(0, 5), min_size=3, max_size=5).map(tuple)
    x = data.draw(tensors(shape=shape, device=device))
    if valid:
        k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
        s = data.draw(st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))))
        p = tuple(data.draw(st.integers(0, kk // 2)) for kk in k)
        d, ceil_mode = (data.draw(accepted), data.draw(accepted)), False
    else:
        (k, s, p, d), ceil_mode = (data.draw(params) for _ in range(4)), data.draw(st.booleans())
    call("max_pool2d", tl.max_pool2d, x, k, s, p, d, ceil_mode=ceil_mode)
    call("avg_pool2d", tl.avg_pool2d, x, k, s, p, count_include_pad=data.draw(st.booleans()))
    if valid:
        size = data.draw(st.one_of(st.none(), st.tuples(st.integers(1, 6), st.integers(1, 6))))
        scale = None if size else data.draw(st.sampled_from([0.5, 1, 1.5, 2, (2, 0.5), (1, 3)]))
    else:
        size = data.draw(st.one_of(params, st.none()))
        scale = data.draw(st.one_of(st.none(), scalars, st.tuples(scalars, scalars)))
    call("upsample_nearest2d", tl.upsample_nearest2d, x, size, scale)


# -------------------------------------------------------------------- nn.functional
@FUZZ
@given(data=st.data())
def test_functional(device, data):
    x = data.draw(tensors(device=device))
    dim = data.draw(st.one_of(st.integers(-4, 4), st.sampled_from([None, 1.5])))
    call("softmax", F.softmax, x, dim)
    call("log_softmax", F.log_softmax, x, dim)
    ns = data.draw(st.one_of(int_args, st.lists(st.integers(-1, 3), max_size=3).map(tuple)))
    w = data.draw(st.one_of(st.none(), tensors(device=device)))
    call("layer_norm", F.layer_norm, x, ns, w, None, data.draw(scalars))
    call("rms_norm", F.rms_norm, x, ns, w)
    target = data.draw(tensors(shape=shapes, dtype=st.sampled_from([tl.int64, tl.uint8, tl.float32, tl.bool]),
                               device=device, grad=False))
    call("cross_entropy", F.cross_entropy, x, target, ignore_index=data.draw(ints),
         reduction=data.draw(st.sampled_from(["mean", "sum", "none", "avg"])),
         label_smoothing=data.draw(st.sampled_from([0.0, 0.1, -0.5, 1.5])))
    call(("embedding", "index_select"), F.embedding, target, x, padding_idx=data.draw(st.one_of(st.none(), ints)))
    call("dropout", F.dropout, x, data.draw(scalars), data.draw(st.booleans()))
    y = data.draw(tensors(device=device))
    call("normalize", F.normalize, x, data.draw(scalars), dim)
    call("gelu", F.gelu, x, data.draw(st.sampled_from(["none", "tanh", "erf"])))
    call("linear", F.linear, x, y, data.draw(st.one_of(st.none(), tensors(device=device))))
    with warnings.catch_warnings(record=True) as caught:  # PyTorch's broadcast warning, checked here
        warnings.simplefilter("always")
        out = call("mse_loss", F.mse_loss, x, y, reduction=data.draw(st.sampled_from(["mean", "sum", "none", "avg"])))
    broadcast = [w for w in caught if issubclass(w.category, UserWarning) and "differs from input size" in
                 str(w.message)]
    assert len(broadcast) == (x.shape != y.shape and out is not None) or (out is None and len(broadcast) <= 1), \
        (x.shape, y.shape, [str(w.message) for w in caught])
    for w in caught:  # any other warning stays visible
        if w not in broadcast:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


# --------------------------------------------------------------------------------- casts
@FUZZ
@given(data=st.data())
def test_casts(device, data):
    x = data.draw(tensors(device=device))
    target = data.draw(st.one_of(dtypes, st.sampled_from(["int32", "float32", "bf16", "cpu", "nope", "cuda:x",
                                                          device, 5, None, np.float32, np.complex64])))
    call(("to", "dtype", "device"), x.to, target)
    call(("type", "dtype"), x.type, target)
    call(("to", "dtype", "device"), x.to, device, target)
    for name in ("float", "half", "bfloat16", "double", "long", "int", "bool"):
        call(name, getattr(x, name))


# ----------------------------------------------------------------------------- reproducibility
def _probe_run(fail_at=None):
    """The integers one run of a small FUZZ test draws (it fails on `fail_at`)."""
    drawn = []

    @fuzz(30)  # its own count: TL_FUZZ_EXAMPLES may be below the 10 it checks for
    @given(x=st.integers(0, 10 ** 9))
    def probe(x):
        drawn.append(x)
        assert x != fail_at
    probe()
    return drawn


def test_a_fuzz_run_draws_the_same_examples_and_a_failure_prints_its_replay(capsys):
    first = _probe_run()
    assert len(first) > 10 and first == _probe_run()  # a rerun tries the same examples
    with pytest.raises(AssertionError) as info:
        _probe_run(fail_at=first[5])
    report = "\n".join(getattr(info.value, "__notes__", [])) + capsys.readouterr().out
    digits = re.sub(r"(?<=\d)_(?=\d)", "", report)  # hypothesis prints a large int as 1_000_000
    assert f"x={first[5]}" in digits and "@reproduce_failure(" in report
