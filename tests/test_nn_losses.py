"""nn.functional losses against torch.nn.functional (CPU, float64) on every device: forward for
each reduction and several dtypes, the gradients of every input torch differentiates, and the
errors of bad input."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from conftest import as_f64, assert_close, random_array

torch = pytest.importorskip("torch")
TF = torch.nn.functional
HALF = [tl.float16, tl.bfloat16]


def compare(device, rng, fn, ref_fn, arrays, dtype, grad=(0,), terms=4, kwargs=None):
    """fn(*tensors, **kwargs) on `device` against ref_fn on float64 torch tensors of the same
    values: the output, then d(sum(out * G))/d(input) for each float input in `grad`."""
    kwargs = kwargs or {}
    tls, refs = [], []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        is_float = a.dtype.kind == "f"
        a = a.astype(dtype.np) if is_float else a  # round to dtype once: both sides read these values
        tls.append(tl.tensor(a, dtype=dtype if is_float else None, device=device, requires_grad=i in grad))
        refs.append(torch.tensor(as_f64(a) if is_float else a, requires_grad=i in grad))
    tl_kw = {k: tl.tensor(v.astype(dtype.np), dtype=dtype, device=device) if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}
    ref_kw = {k: torch.tensor(as_f64(v.astype(dtype.np))) if isinstance(v, np.ndarray) else v
              for k, v in kwargs.items()}
    out, ref = fn(*tls, **tl_kw), ref_fn(*refs, **ref_kw)
    assert out.dtype == dtype
    assert_close(out, ref.detach().numpy(), dtype, terms=terms)
    if grad:
        g = random_array(rng, ref.shape, dtype, 0.5, 1.5)
        out.backward(tl.tensor(g, dtype=dtype, device=device))
        ref.backward(torch.tensor(as_f64(g)))
        for i in grad:
            assert_close(tls[i].grad, refs[i].grad.numpy(), dtype, terms=terms)


REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64] + HALF)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, kw", [("l1_loss", {}), ("mse_loss", {}), ("smooth_l1_loss", {}),
                                      ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0}),
                                      ("huber_loss", {}), ("huber_loss", {"delta": 2.0}),
                                      ("soft_margin_loss", {})])
def test_regression_losses(device, rng, dtype, reduction, name, kw):
    x, t = rng.uniform(-3, 3, (4, 5)), rng.uniform(-3, 3, (4, 5))
    if name == "soft_margin_loss":
        t = np.sign(t)
    compare(device, rng, lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kw),
            lambda a, b: getattr(TF, name)(a, b, reduction=reduction, **kw), [x, t], dtype,
            grad=(0,) if name == "soft_margin_loss" else (0, 1))  # torch has no target gradient there


@pytest.mark.parametrize("name", ["l1_loss", "mse_loss", "huber_loss"])
def test_elementwise_weight(device, rng, name):
    x, t, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.uniform(0, 2, (3, 4))
    compare(device, rng, lambda a, b: getattr(F, name)(a, b, weight=tl.tensor(w, device=device)),
            lambda a, b: getattr(TF, name)(a, b, weight=torch.tensor(w)), [x, t], tl.float64, grad=(0, 1))


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64] + HALF)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(device, rng, dtype, reduction, weighted):
    x, t = rng.uniform(0.05, 0.95, (3, 4)), rng.uniform(0, 1, (3, 4))
    kw = {"weight": rng.uniform(0.5, 2, (4,))} if weighted else {}
    compare(device, rng, lambda a, b, **k: F.binary_cross_entropy(a, b, reduction=reduction, **k),
            lambda a, b, **k: TF.binary_cross_entropy(a, b, reduction=reduction, **k), [x, t], dtype, (0, 1),
            kwargs=kw)


def test_binary_cross_entropy_at_zero_and_one(device):
    x = tl.tensor([0.0, 1.0, 0.0, 1.0], dtype=tl.float64, device=device, requires_grad=True)
    t = tl.tensor([0.0, 1.0, 1.0, 0.0], dtype=tl.float64, device=device)
    xr = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64, requires_grad=True)
    loss, ref = F.binary_cross_entropy(x, t), TF.binary_cross_entropy(xr, torch.tensor(t.tolist()).double())
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item())  # the log clamped at -100
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy())  # finite, as torch's


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64] + HALF)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kw", [{}, {"weight": True}, {"pos_weight": True}, {"weight": True, "pos_weight": True}])
def test_binary_cross_entropy_with_logits(device, rng, dtype, reduction, kw):
    x, t = rng.uniform(-6, 6, (3, 4)), rng.uniform(0, 1, (3, 4))
    kwargs = {k: rng.uniform(0.5, 2, (4,)) for k in kw}
    compare(device, rng, lambda a, b, **k: F.binary_cross_entropy_with_logits(a, b, reduction=reduction, **k),
            lambda a, b, **k: TF.binary_cross_entropy_with_logits(a, b, reduction=reduction, **k), [x, t], dtype,
            (0, 1), kwargs=kwargs)


def test_bce_with_logits_is_stable_for_large_logits(device):
    x = tl.tensor([-200.0, 200.0, -40.0, 40.0], device=device, requires_grad=True)
    t = tl.tensor([1.0, 0.0, 0.0, 1.0], device=device)
    loss = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    xr = torch.tensor([-200.0, 200.0, -40.0, 40.0], requires_grad=True)
    ref = TF.binary_cross_entropy_with_logits(xr, torch.tensor([1.0, 0.0, 0.0, 1.0]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-12)  # no inf, no nan
    loss.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64, tl.bfloat16])
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 3), (4,)], ids=["NC", "NCd1d2", "C"])
@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none", "ignore_index": 1},
                                {"weight": True}, {"weight": True, "ignore_index": 0}])
def test_nll_loss(device, rng, dtype, shape, kw):
    x = rng.uniform(-3, 0, shape)
    target = rng.integers(0, shape[1 if len(shape) > 1 else 0], (shape[0],) + shape[2:] if len(shape) > 1 else ())
    kw = dict(kw)
    w = rng.uniform(0.5, 2, shape[1 if len(shape) > 1 else 0]) if kw.pop("weight", False) else None
    compare(device, rng, lambda a, b, **k: F.nll_loss(a, b, **kw, **k), lambda a, b, **k: TF.nll_loss(a, b, **kw, **k),
            [x, target], dtype, kwargs={} if w is None else {"weight": w})


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.2}, {"weight": True, "label_smoothing": 0.1},
                                {"ignore_index": 2, "reduction": "sum"}, {"weight": True, "ignore_index": 0},
                                {"reduction": "none", "label_smoothing": 0.3, "ignore_index": 1}])
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 3), (4,)], ids=["NC", "NCd1d2", "C"])
def test_cross_entropy_class_ids(device, rng, dtype, kw, shape):
    x = rng.standard_normal(shape)
    target = rng.integers(0, shape[1 if len(shape) > 1 else 0], (shape[0],) + shape[2:] if len(shape) > 1 else ())
    kw = dict(kw)
    w = rng.uniform(0.5, 2, shape[1 if len(shape) > 1 else 0]) if kw.pop("weight", False) else None
    compare(device, rng, lambda a, b, **k: F.cross_entropy(a, b, **kw, **k),
            lambda a, b, **k: TF.cross_entropy(a, b, **kw, **k), [x, target], dtype,
            kwargs={} if w is None else {"weight": w})


@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.25}, {"weight": True}, {"reduction": "none"},
                                {"reduction": "sum", "weight": True, "label_smoothing": 0.1}])
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 3), (4,)], ids=["NC", "NCd1d2", "C"])
def test_cross_entropy_class_probabilities(device, rng, kw, shape):
    x = rng.standard_normal(shape)
    p = rng.uniform(0, 1, shape)
    p = p / p.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)
    kw = dict(kw)
    w = rng.uniform(0.5, 2, shape[1 if len(shape) > 1 else 0]) if kw.pop("weight", False) else None
    compare(device, rng, lambda a, b, **k: F.cross_entropy(a, b, **kw, **k),
            lambda a, b, **k: TF.cross_entropy(a, b, **kw, **k), [x, p], tl.float64, grad=(0, 1),
            kwargs={} if w is None else {"weight": w})


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64] + HALF)
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(device, rng, dtype, reduction, log_target):
    x = np.log(rng.dirichlet(np.ones(5), 4))
    t = rng.dirichlet(np.ones(5), 4)
    t = np.log(t) if log_target else t
    with pytest.warns(UserWarning, match="batchmean") if reduction == "mean" else _no_warning():
        compare(device, rng, lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target),
                lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=log_target), [x, t], dtype, (0, 1),
                terms=20)


def test_kl_div_zero_target(device):
    x = tl.tensor([[-1.0, -2.0, -0.5]], dtype=tl.float64, device=device, requires_grad=True)
    xr = torch.tensor(x.tolist(), dtype=torch.float64, requires_grad=True)
    t = [[0.0, 0.25, 0.75]]  # t log t is 0 at t = 0 (torch's xlogy)
    loss, ref = F.kl_div(x, tl.tensor(t, dtype=tl.float64, device=device), reduction="batchmean"), \
        TF.kl_div(xr, torch.tensor(t, dtype=torch.float64), reduction="batchmean")
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-12)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
@pytest.mark.parametrize("log_input, full", [(True, False), (False, False), (True, True), (False, True)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_poisson_nll_loss(device, rng, dtype, log_input, full, reduction):
    x = rng.uniform(0.1, 2, (4, 3))
    t = rng.integers(0, 5, (4, 3)).astype(np.float64)
    compare(device, rng, lambda a, b: F.poisson_nll_loss(a, b, log_input, full, reduction=reduction),
            lambda a, b: TF.poisson_nll_loss(a, b, log_input, full, reduction=reduction), [x, t], dtype,
            (0,) if full else (0, 1))  # torch's target gradient is nan where its Stirling term is masked


@pytest.mark.parametrize("var_shape", [(4, 3), (4,), (4, 1), "float"])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gaussian_nll_loss(device, rng, var_shape, full, reduction):
    x, t = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    if var_shape == "float":
        compare(device, rng, lambda a, b: F.gaussian_nll_loss(a, b, 0.7, full, reduction=reduction),
                lambda a, b: TF.gaussian_nll_loss(a, b, 0.7, full, reduction=reduction), [x, t], tl.float64, (0, 1))
        return
    v = rng.uniform(0.1, 2, var_shape)
    v.flat[0] = 1e-8  # below eps: clamped, the gradient passes through
    compare(device, rng, lambda a, b, c: F.gaussian_nll_loss(a, b, c, full, reduction=reduction),
            lambda a, b, c: TF.gaussian_nll_loss(a, b, c, full, reduction=reduction), [x, t, v], tl.float64,
            (0, 1, 2))


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64, tl.bfloat16])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pair_losses(device, rng, dtype, reduction):
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    y = np.array([1.0, -1.0, 1.0, -1.0, -1.0])
    compare(device, rng, lambda p, q, t: F.cosine_embedding_loss(p, q, t, 0.1, reduction=reduction),
            lambda p, q, t: TF.cosine_embedding_loss(p, q, t, 0.1, reduction=reduction), [a, b, y], dtype, (0, 1))
    compare(device, rng, lambda p, q, t: F.margin_ranking_loss(p, q, t, 0.3, reduction=reduction),
            lambda p, q, t: TF.margin_ranking_loss(p, q, t, 0.3, reduction=reduction), [a[:, 0], b[:, 0], y], dtype,
            (0, 1))
    compare(device, rng, lambda p, t: F.hinge_embedding_loss(p, t, 0.5, reduction=reduction),
            lambda p, t: TF.hinge_embedding_loss(p, t, 0.5, reduction=reduction), [a[:, 0], y], dtype)
    compare(device, rng, lambda p, t: F.multilabel_soft_margin_loss(p, t, reduction=reduction),
            lambda p, t: TF.multilabel_soft_margin_loss(p, t, reduction=reduction),
            [a, (b > 0).astype(np.float64)], dtype)


@pytest.mark.parametrize("kw", [{}, {"p": 1}, {"swap": True}, {"margin": 0.2, "reduction": "none"},
                                {"reduction": "sum"}])
def test_triplet_margin_loss(device, rng, kw):
    a, p, n = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    compare(device, rng, lambda x, y, z: F.triplet_margin_loss(x, y, z, **kw),
            lambda x, y, z: TF.triplet_margin_loss(x, y, z, **kw), [a, p, n], tl.float64, (0, 1, 2))


def test_half_precision_losses_average_in_float32(device, rng):
    x = tl.tensor(rng.uniform(-1, 1, 3000), dtype=tl.bfloat16, device=device)
    t = tl.zeros(3000, dtype=tl.bfloat16, device=device)
    ref = np.abs(x.numpy().astype(np.float64)).mean()
    got = F.l1_loss(x, t)
    assert got.dtype == tl.bfloat16
    assert_close(got, ref, tl.bfloat16)  # a bfloat16 running sum would be far off


def test_legacy_size_average_and_reduce(device):
    x, t = tl.tensor([1.0, 3.0], device=device), tl.zeros(2, device=device)
    with pytest.warns(UserWarning, match="deprecated"):
        assert F.l1_loss(x, t, size_average=False).item() == 4.0
    with pytest.warns(UserWarning, match="deprecated"):
        assert F.mse_loss(x, t, reduce=False).tolist() == [1.0, 9.0]


def test_loss_errors(device):
    x, t = tl.ones(2, 3, device=device), tl.ones(2, 3, device=device)
    for fn in (F.l1_loss, F.mse_loss, F.smooth_l1_loss, F.binary_cross_entropy, F.binary_cross_entropy_with_logits,
               F.kl_div, F.soft_margin_loss, F.poisson_nll_loss, F.hinge_embedding_loss):
        with pytest.raises(tl.ArgumentError, match="reduction must be one of"):
            fn(x * 0.5, t, reduction="average")
    with pytest.raises(tl.ArgumentError, match="reduction must be one of"):
        F.huber_loss(x, t, reduction="batchmean")
    with pytest.raises(tl.ShapeError, match=r"binary_cross_entropy\(input: shape=\(2, 3\).*target must have"):
        F.binary_cross_entropy(x * 0.5, tl.ones(3, device=device))
    with pytest.raises(tl.ShapeError, match="binary_cross_entropy_with_logits.*target must have"):
        F.binary_cross_entropy_with_logits(x, tl.ones(2, 1, device=device))
    if device == "cpu":  # checked on cpu only: on a GPU the check would wait for the device at every call
        with pytest.raises(tl.ArgumentError, match="between 0 and 1"):
            F.binary_cross_entropy(x * 2.0, t)
    else:
        assert F.binary_cross_entropy(x * 2.0, t).isnan().item()
    with pytest.warns(UserWarning, match="differs from input size"):
        F.l1_loss(x, tl.ones(3, device=device))
    with pytest.raises(tl.ShapeError, match="l1_loss: "), pytest.warns(UserWarning):
        F.l1_loss(x, tl.ones(4, device=device))
    with pytest.raises(tl.ShapeError, match=r"mse_loss\(input: shape=\(2, 3\).*weight must have the input's shape"):
        F.mse_loss(x, t, weight=tl.ones(3, device=device))
    with pytest.raises(tl.ArgumentError, match="beta must be non-negative"):
        F.smooth_l1_loss(x, t, beta=-1.0)
    with pytest.raises(tl.ArgumentError, match="delta must be positive"):
        F.huber_loss(x, t, delta=0.0)
    with pytest.raises(tl.ShapeError, match="nll_loss.*weight must be 1-D"):
        F.nll_loss(x, tl.tensor([0, 1], device=device), weight=tl.ones(2, device=device))
    with pytest.raises(tl.IndexOutOfRange, match="nll_loss: a target is not a class id"):
        F.nll_loss(x, tl.tensor([0, 3], device=device))
    with pytest.raises(tl.DTypeError, match="nll_loss.*class ids"):
        F.nll_loss(x, tl.tensor([0.0, 1.0], device=device))
    with pytest.raises(tl.ShapeError, match="var is of incorrect size"):
        F.gaussian_nll_loss(x, t, tl.ones(3, 3, device=device))
    with pytest.raises(tl.ArgumentError, match="var has negative"):
        F.gaussian_nll_loss(x, t, -tl.ones(2, 3, device=device))
    with pytest.raises(tl.ShapeError, match="cosine_embedding_loss.*same number of dims"):
        F.cosine_embedding_loss(x, tl.ones(3, device=device), tl.ones(2, device=device))
    with pytest.raises(tl.ArgumentError, match="label_smoothing"):
        F.cross_entropy(x, tl.tensor([0, 1], device=device), label_smoothing=1.5)
