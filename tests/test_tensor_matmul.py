"""matmul / @ with PyTorch's rules (1-D operands, batch broadcasting), on every device."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite.backends.rocm.ops import matmul as matmul_ops
from conftest import FLOAT_DTYPES, as_f64, assert_close, random_array

SHAPES = [
    ((3,), (3,)),                 # dot product -> 0-d
    ((3,), (3, 4)),               # 1-D lhs: prepend, then drop
    ((2, 3), (3,)),               # 1-D rhs: append, then drop
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),          # batch on one side
    ((2, 3), (5, 3, 4)),
    ((5, 1, 2, 3), (4, 3, 6)),    # batch dims broadcast against each other
    ((4,), (2, 4, 3)),
    ((2, 3, 4), (4,)),
    ((1, 1), (1, 1)),
    ((0, 3), (3, 4)),             # empty rows
    ((2, 0), (0, 4)),             # empty contraction: zeros
    ((2, 3), (3, 0)),
    ((0, 2, 3), (3, 4)),          # empty batch
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("sa, sb", SHAPES, ids=str)
def test_matmul_shapes(device, rng, dtype, sa, sb):
    a, b = random_array(rng, sa, dtype), random_array(rng, sb, dtype)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    expected = np.matmul(as_f64(a), as_f64(b))
    k = sa[-1]
    assert_close(x @ y, expected, dtype, terms=k)
    assert_close(tl.matmul(x, y), expected, dtype, terms=k)
    assert_close(x.matmul(y), expected, dtype, terms=k)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_matmul_transposed_and_strided_operands(device, rng, dtype):
    a = random_array(rng, (3, 7, 5), dtype)
    b = random_array(rng, (3, 6, 7), dtype)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    fa, fb = as_f64(a), as_f64(b)
    cases = [
        (x.mT, y.mT, fa.swapaxes(1, 2) @ fb.swapaxes(1, 2)),          # both transposed views
        (x.mT @ x, None, fa.swapaxes(1, 2) @ fa),
        (x[:, 1:6:2], y.mT[:, :5], fa[:, 1:6:2] @ fb.swapaxes(1, 2)[:, :5]),  # row step + offset
        (x[1:, :, 1:4], y[1:, 1:4], fa[1:, :, 1:4] @ fb[1:, 1:4]),     # column slices
        # batch stride 0
        (x[0:1].expand(4, 7, 5), y[0, :, :5].mT, np.broadcast_to(fa[0:1], (4, 7, 5)) @ fb[0, :, :5].T),
        (x.permute(1, 0, 2)[2], y[:, :5, 3].T, fa.transpose(1, 0, 2)[2] @ fb[:, :5, 3].T),
    ]
    for lhs, rhs, expected in cases:
        got = lhs if rhs is None else lhs @ rhs
        assert_close(got, expected, dtype, terms=7)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("m", [1, 2, 4, 5])
def test_few_rows_times_a_row_major_weight(device, rng, dtype, m, monkeypatch):
    """Decoding's linear layers: x (m, k) . W^T for W (n, k) row-major, which the GPU backend
    gives its GEMV kernels (when GEMV_MAX_ROWS lets it, as here) up to 4 rows (16-byte runs where k, the row
    strides and the offsets allow, one element at a time otherwise; one row: a warp per row of W; 2-4 rows: a
    block per four rows of W, n's tail reading its last row again), the BLAS past that."""
    monkeypatch.setattr(matmul_ops, "GEMV_MAX_ROWS", 4)
    for k, n in [(64, 37), (67, 300), (1, 5), (256, 1)]:
        a, w = random_array(rng, (m, k + 1), dtype), random_array(rng, (n + 2, k + 1), dtype)
        x, wt = tl.tensor(a, device=device), tl.tensor(w, device=device)
        fa, fw = as_f64(a), as_f64(w)
        cases = [
            (x[:, :k], wt[:n, :k], fa[:, :k], fw[:n, :k]),            # rows strided by k + 1
            (x[:, 1:], wt[1:n + 1, 1:], fa[:, 1:], fw[1:n + 1, 1:]),  # offset by one element: no runs
        ]
        if k % 2 == 0:  # contiguous operands
            xc, wc = x[:, :k].contiguous(), wt[:n, :k].contiguous()
            cases.append((xc, wc, fa[:, :k], fw[:n, :k]))
            cases.append((xc.reshape(1, m, k), wc, fa[:, :k][None], fw[:n, :k]))  # (b, t, k) input
        for lhs, weight, ref_x, ref_w in cases:
            assert_close(tl.nn.functional.linear(lhs, weight), ref_x @ ref_w.T, dtype, terms=k)
            assert_close(lhs @ weight.mT, ref_x @ ref_w.T, dtype, terms=k)
    if m <= 4:  # a decode step's k (2048-5632): each thread loops over several passes, the last partial
        a, w = random_array(rng, (m, 4104), dtype), random_array(rng, (9, 4104), dtype)
        got = tl.nn.functional.linear(tl.tensor(a, device=device), tl.tensor(w, device=device))
        assert_close(got, as_f64(a) @ as_f64(w).T, dtype, terms=4104)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("m", [1, 3, 5])
def test_addmm_adds_in_the_product(device, rng, dtype, m, monkeypatch):
    """tl.addmm(x, a, W^T) without autograd: one storage op (matmul_add), where GPUs add x as
    their GEMV kernels store (a decode step's residual add; up to 4 rows here); strided x,
    alpha/beta and autograd take the composite; all agree with x + a @ W^T."""
    monkeypatch.setattr(matmul_ops, "GEMV_MAX_ROWS", 4)
    k, n = 72, 45
    a, w, x = (random_array(rng, shape, dtype) for shape in [(m, k), (n, k), (m, n + 1)])
    at, wt, xt = (tl.tensor(v, device=device) for v in (a, w, x))
    fa, fw, fx = as_f64(a), as_f64(w), as_f64(x)
    with tl.no_grad():
        for addend, ref in [(xt[:, :n].contiguous(), fx[:, :n]), (xt[:, 1:], fx[:, 1:]),  # contiguous, row stride
                            (xt[:, :n].mT.contiguous().mT, fx[:, :n])]:                 # column-major: composite
            assert_close(tl.addmm(addend, at, wt.mT), ref + fa @ fw.T, dtype, terms=k)
        assert_close(tl.addmm(xt[:, :n], at, wt.mT, beta=0.5, alpha=2), 0.5 * fx[:, :n] + 2 * fa @ fw.T, dtype,
                     terms=k)
        for rows, cols in [(0, n), (m, 0)]:  # empty products: nothing launched, nothing written
            got = tl.addmm(xt[:rows, :cols], at[:rows], wt[:cols].mT)
            assert got.shape == (rows, cols)
    ag = at.detach().requires_grad_()
    tl.addmm(xt[:, :n], ag, wt.mT).sum().backward()
    assert_close(ag.grad, np.broadcast_to(fw.sum(0), (m, k)), dtype, terms=n)


def test_matmul_larger_accuracy(device, rng):
    a = random_array(rng, (2, 96, 160), tl.float32)
    b = random_array(rng, (160, 72), tl.float32)
    got = tl.tensor(a, device=device) @ tl.tensor(b, device=device)
    assert_close(got, as_f64(a) @ as_f64(b), tl.float32, terms=160)


def test_matmul_result_feeds_further_ops(device, rng):
    a = random_array(rng, (4, 3), tl.float32)
    x = tl.tensor(a, device=device)
    got = (x @ x.T).sum(1) + x.T.matmul(x).mean()
    ref = (as_f64(a) @ as_f64(a).T).sum(1) + (as_f64(a).T @ as_f64(a)).mean()
    assert_close(got, ref, tl.float32, terms=12)


def test_storage_matmul_refuses_layouts_other_than_its_bmnk(device):
    """The contract's matmul takes (b, m, k) x (b, k, n): on every device (one check,
    tensorlite.backend.check_matmul) other shapes raise naming both operands."""
    from tensorlite.layout import Layout
    a, b = tl.zeros(2, 3, device=device), tl.zeros(4, 5, device=device)
    with pytest.raises(tl.ShapeError, match=r"matmul\(lhs: shape=\(1, 2, 3\) float32 .*rhs: shape=\(1, 4, 5\)"):
        a._storage.matmul(b._storage, (1, 2, 5, 3), Layout((1, 2, 3), (0, 3, 1), 0), Layout((1, 4, 5), (0, 5, 1), 0))
