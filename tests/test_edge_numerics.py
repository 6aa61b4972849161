"""Edge values where tensorlite once differed from PyTorch, on every device: 16-bit statistics
that overflowed, gradients that were nan where PyTorch's are finite, defaults, silent
broadcasts, out-of-range values that wrapped."""
import math
import warnings

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F

from conftest import assert_close


@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16])
def test_16_bit_mean_var_std_compute_in_f32(device, dtype):
    x = tl.full((70000,), 300.0, dtype=dtype, device=device)  # sum 2.1e7: past float16's range
    assert x.mean().item() == 300.0
    assert x.var().item() == 0.0 and x.std().item() == 0.0
    z = tl.full((70000,), 128.0, dtype=dtype, device=device)
    assert F.mse_loss(z, tl.zeros(70000, dtype=dtype, device=device)).item() == 16384.0
    y = tl.tensor([-150.0, 150.0, -150.0, 150.0], dtype=dtype, device=device)
    assert y.var().item() == tl.tensor(30000.0, dtype=dtype).item()  # the sum of squares, 90000, in f32


def test_std_of_a_constant_row_has_a_zero_gradient(device):
    x = tl.ones(2, 3, device=device, requires_grad=True)
    x.std(1, correction=0).sum().backward()
    assert x.grad.tolist() == [[0.0] * 3] * 2


def test_pow_gradients_at_zero_follow_pytorch(device):
    x = tl.tensor([0.0, 2.0, -1.5], dtype=tl.float64, device=device, requires_grad=True)
    e = tl.tensor([0.0, 3.0, 2.0], dtype=tl.float64, device=device, requires_grad=True)
    (x ** e).sum().backward()
    assert_close(x.grad, [0.0, 12.0, -3.0])
    assert_close(e.grad[:2], [0.0, 8.0 * math.log(2.0)])
    z = tl.zeros(3, device=device, requires_grad=True)
    (z ** 0).sum().backward()
    assert z.grad.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("p", [1, 2, 3, math.inf])
def test_normalize_of_a_zero_vector_has_a_finite_gradient(device, p):
    x = tl.tensor([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], dtype=tl.float64, device=device, requires_grad=True)
    (F.normalize(x, p=p, dim=-1) * tl.tensor([1.0, 2.0, 3.0], dtype=tl.float64, device=device)).sum().backward()
    g = x.grad.numpy()
    np.testing.assert_allclose(g[0], [1e12, 2e12, 3e12])  # x / eps there (PyTorch's too): no 0 * inf
    # the second row against the analytic gradient of x / ||x||_p
    a, w = np.array([3.0, 4.0, 0.0]), np.array([1.0, 2.0, 3.0])
    n = np.abs(a).max() if p == math.inf else (np.abs(a) ** p).sum() ** (1 / p)
    dn = (np.abs(a) == n) * np.sign(a) if p == math.inf else np.sign(a) * np.abs(a) ** (p - 1) / n ** (p - 1)
    np.testing.assert_allclose(g[1], w / n - (w @ a) / n ** 2 * dn, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16, tl.float32])
def test_rms_norm_default_eps_is_float32_epsilon_for_16_bit_inputs(device, dtype):
    y = F.rms_norm(tl.full((1, 8), 1e-4, dtype=dtype, device=device), (8,))
    x = float(tl.tensor(1e-4, dtype=dtype).item())
    assert y.float().tolist()[0][0] == pytest.approx(x / math.sqrt(x * x + 2.0 ** -23), rel=1e-2)


def test_mse_loss_warns_on_broadcasting_shapes(device):
    with pytest.warns(UserWarning, match="mse_loss: target size"):
        F.mse_loss(tl.ones(3, 1, device=device), tl.ones(3, device=device))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.mse_loss(tl.ones(3, device=device), tl.ones(3, device=device))


def test_cross_entropy_weight_must_have_one_value_per_class(device):
    with pytest.raises(tl.ShapeError, match="cross_entropy.*one value per class"):
        F.cross_entropy(tl.randn(3, 4, device=device), tl.tensor([0, 1, 2], device=device),
                        weight=tl.ones(5, device=device))


@pytest.mark.parametrize("data,dtype", [(2 ** 63, None), ([0, 2 ** 33], tl.uint32), (-1, tl.uint32),
                                        (2 ** 32, tl.uint32), (256, tl.uint8)])
def test_integers_that_do_not_fit_raise_instead_of_wrapping(device, data, dtype):
    with pytest.raises(tl.ArgumentError, match="do not fit"):
        tl.tensor(data, dtype=dtype, device=device)


@pytest.mark.parametrize("op", ["//", "%"])
def test_integer_division_by_zero_raises(device, op):
    a, b = tl.tensor([4, 5], device=device), tl.tensor([2, 0], device=device)
    with pytest.raises(tl.ArgumentError, match="integer division by zero"):
        a // b if op == "//" else a % b
    assert (a // tl.tensor([2, 3], device=device)).tolist() == [2, 1]


def test_only_floating_tensors_require_grad(device):
    for make in (lambda: tl.tensor([1, 2], device=device, requires_grad=True),
                 lambda: tl.zeros(2, dtype=tl.int64, device=device, requires_grad=True),
                 lambda: tl.tensor([True], device=device).requires_grad_()):
        with pytest.raises(tl.DTypeError, match="only floating point tensors can require gradients"):
            make()


@pytest.mark.parametrize("value,dtype", [(300, tl.uint8), (-1, tl.uint32), (float("nan"), tl.int64),
                                         (2.0 ** 70, tl.int64)])
def test_fill_values_that_do_not_fit_raise(device, value, dtype):
    with pytest.raises(tl.ArgumentError, match="without overflow"):
        tl.full((2,), value, dtype=dtype, device=device)


def test_state_dict_key_mismatch_is_a_tensorlite_key_error():
    with pytest.raises(tl.StateDictError, match="missing keys") as e:
        tl.nn.Linear(2, 3).load_state_dict({"weight": tl.zeros(3, 2)})
    assert isinstance(e.value, KeyError) and "missing keys ['bias']" in str(e.value)


def test_integer_scalar_operands_wrap_into_the_tensors_dtype_as_pytorch(device):
    t = tl.tensor([0, 255], dtype=tl.uint8, device=device)
    assert (t != -1).tolist() == [True, False] and (t == -1).tolist() == [False, True]  # -1 is 255 in uint8
    assert (t + (-1)).tolist() == [255, 254] and (t < 300).tolist() == [True, False]   # 300 is 44
    with pytest.raises(tl.ArgumentError, match="add"):  # beyond int64 a Python int is refused, as PyTorch
        tl.zeros(2, dtype=tl.int64, device=device) + 10 ** 20
