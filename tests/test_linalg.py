"""tl.linalg (vector_norm, matrix_norm, norm, cross, vecdot) and tl.norm / Tensor.norm: values and
gradients against PyTorch on the cpu, on every device; bad input."""
import math

import numpy as np
import pytest

import tensorlite as tl
from test_shape_ops import FLOAT, check_against_torch

torch = pytest.importorskip("torch")
INF = math.inf

VECTOR = [  # ord, dim, keepdim
    (2, None, False), (2, 1, True), (1, (0, 2), False), (0, None, False), (3, -1, False), (0.5, 1, False),
    (-1, 0, True), (-2.5, None, False), (INF, None, False), (INF, (1, 2), True), (-INF, 0, False),
]


@pytest.mark.parametrize("dtype", FLOAT, ids=lambda d: d.name)
@pytest.mark.parametrize("ord, dim, keepdim", VECTOR, ids=str)
def test_vector_norm(device, rng, dtype, ord, dim, keepdim):
    check_against_torch(lambda m, x: m.linalg.vector_norm(x, ord, dim, keepdim), [(2, 3, 4)], dtype, device, rng,
                        terms=24)


@pytest.mark.parametrize("ord", [2, 1, 0.5, 3, INF, -INF, -1], ids=str)
def test_vector_norm_gradient_at_zeros(device, ord):
    # the composite's gradient would be 0 * inf = nan where an element (or the whole norm) is 0
    x = torch.tensor([[0.0, 1.5, -2.0], [0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    y = tl.tensor(x.detach().numpy(), device=device, requires_grad=True)
    w = np.array([0.5, -2.0])
    (torch.linalg.vector_norm(x, ord, 1) * torch.tensor(w)).sum().backward()
    (tl.linalg.vector_norm(y, ord, 1) * tl.tensor(w, device=device)).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_vector_norm_dtype_and_16_bit_inputs(device):
    x = tl.tensor([3, 4], dtype=tl.int64, device=device)
    assert tl.linalg.vector_norm(x, dtype=tl.float64).dtype is tl.float64
    assert tl.linalg.vector_norm(x, dtype=tl.float64).item() == 5.0
    big = tl.full((64,), 1000.0, dtype=tl.float16, device=device)  # the sum of squares overflows float16
    out = tl.linalg.vector_norm(big)
    assert out.dtype is tl.float16 and out.item() == 8000.0


def test_vector_norm_of_empty_and_0d(device):
    assert tl.linalg.vector_norm(tl.zeros(0, device=device)).item() == 0.0
    assert tl.linalg.vector_norm(tl.zeros(0, 3, device=device), INF, 1).shape == (0,)
    assert tl.linalg.vector_norm(tl.tensor(-3.0, device=device)).item() == 3.0


MATRIX = [("fro", (-2, -1)), (INF, (-2, -1)), (-INF, (0, 2)), (1, (1, 2)), (-1, (2, 0)), ("fro", (2, 0))]


@pytest.mark.parametrize("dtype", FLOAT, ids=lambda d: d.name)
@pytest.mark.parametrize("ord, dim", MATRIX, ids=str)
@pytest.mark.parametrize("keepdim", [False, True], ids=str)
def test_matrix_norm(device, rng, dtype, ord, dim, keepdim):
    check_against_torch(lambda m, x: m.linalg.matrix_norm(x, ord, dim, keepdim), [(2, 3, 4)], dtype, device, rng,
                        terms=12)


NORM = [  # linalg.norm(x, ord, dim) on a (3, 4) or (2, 3, 4) input
    ((3, 4), None, None), ((2, 3, 4), None, None), ((3, 4), "fro", None), ((3, 4), INF, None), ((4,), INF, None),
    ((4,), 1, None), ((2, 3, 4), None, 1), ((2, 3, 4), None, (0, 2)), ((2, 3, 4), 3, (1,)), ((2, 3, 4), -1, (0, 1)),
]


@pytest.mark.parametrize("dtype", FLOAT, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, ord, dim", NORM, ids=str)
def test_linalg_norm(device, rng, dtype, shape, ord, dim):
    check_against_torch(lambda m, x: m.linalg.norm(x, ord, dim), [shape], dtype, device, rng, terms=24)


TORCH_NORM = [  # torch.norm(x, p, dim, keepdim) on a (2, 3, 4) input
    ("fro", None, False), ("fro", (0, 1), True), ("fro", 2, False), (2, None, False), (1, (0, 2), False),
    (3.5, -1, True), (INF, None, False), (0, 1, False),
]


@pytest.mark.parametrize("dtype", FLOAT, ids=lambda d: d.name)
@pytest.mark.parametrize("p, dim, keepdim", TORCH_NORM, ids=str)
def test_torch_norm_and_method(device, rng, dtype, p, dim, keepdim):
    check_against_torch(lambda m, x: m.norm(x, p, dim, keepdim), [(2, 3, 4)], dtype, device, rng, terms=24)
    check_against_torch(lambda m, x: x.norm(p, dim, keepdim), [(2, 3, 4)], dtype, device, rng, terms=24)


def test_vecdot(device, rng):
    check_against_torch(lambda m, x, y: m.linalg.vecdot(x, y), [(2, 3), (3,)], tl.float64, device, rng)
    check_against_torch(lambda m, x, y: m.linalg.vecdot(x, y, dim=0), [(2, 3), (2, 1)], tl.float32, device, rng)


def test_normalize_still_uses_the_shared_norm(device):
    x = tl.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=tl.float64, device=device, requires_grad=True)
    y = tl.nn.functional.normalize(x, dim=1)
    assert y.tolist() == [[0.6, 0.8], [0.0, 0.0]]
    y.sum().backward()
    assert not np.isnan(x.grad.numpy()).any()


BAD = [  # fn, error class, message pattern
    (lambda x: tl.linalg.vector_norm(x.long()), tl.DTypeError, r"linalg.vector_norm\(input: shape=\(2, 3\) int64.*"
     r"floating point"),
    (lambda x: tl.linalg.vector_norm(x, "fro"), tl.ArgumentError, r"vector_norm.*ord must be a number"),
    (lambda x: tl.linalg.vector_norm(x, 2, 2), tl.IndexOutOfRange, r"vector_norm.*out of range"),
    (lambda x: tl.linalg.vector_norm(x, 2, (0, 0)), tl.ShapeError, r"vector_norm.*repeated dims"),
    (lambda x: tl.linalg.vector_norm(x[:0], INF), tl.ShapeError, r"vector_norm.*inf norm of an empty"),
    (lambda x: tl.linalg.vector_norm(x[:0], -1), tl.ShapeError, r"vector_norm.*-1 norm of an empty"),
    (lambda x: tl.linalg.vector_norm([1.0]), tl.DTypeError, r"vector_norm: expected a tensor"),
    (lambda x: tl.linalg.matrix_norm(x, "nuc"), tl.ArgumentError, r"matrix_norm.*'nuc' needs a singular value"),
    (lambda x: tl.linalg.matrix_norm(x, 2), tl.ArgumentError, r"matrix_norm.*ord=2 needs a singular value"),
    (lambda x: tl.linalg.matrix_norm(x, 3), tl.ArgumentError, r"matrix_norm.*ord must be 'fro', 'nuc'"),
    (lambda x: tl.linalg.matrix_norm(x[0]), tl.ShapeError, r"matrix_norm.*at least 2 dims"),
    (lambda x: tl.linalg.matrix_norm(x, dim=(0,)), tl.ShapeError, r"matrix_norm.*2-tuple dim"),
    (lambda x: tl.linalg.matrix_norm(x, dim=(1, -1)), tl.ArgumentError, r"matrix_norm.*must differ"),
    (lambda x: tl.linalg.matrix_norm(x[:, :0], 1), tl.ShapeError, r"matrix_norm.*empty matrix"),
    (lambda x: tl.linalg.norm(x.reshape(1, 2, 3), 2), tl.ShapeError, r"linalg.norm.*1-d or 2-d"),
    (lambda x: tl.linalg.norm(x, dim=(0, 1, 1)), tl.ArgumentError, r"linalg.norm.*1 or 2 dims"),
    (lambda x: tl.norm(x.reshape(1, 2, 3), "fro", (0, 1, 2)), tl.ShapeError, r"matrix_norm.*2-tuple"),
    (lambda x: x.norm("nuc"), tl.ArgumentError, r"matrix_norm.*'nuc'"),
    (lambda x: tl.linalg.vecdot(x.long(), x.long()), tl.DTypeError, r"vecdot.*floating point"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input_raises(device, case):
    fn, cls, pattern = BAD[case]
    with pytest.raises(cls, match=pattern):
        fn(tl.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=device))
