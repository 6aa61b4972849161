"""Ops that rearrange or combine tensors (tensorlite/shape_ops.py): values and gradients against
PyTorch on the cpu, on every device, for float, integer and bool dtypes; bad input."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import as_f64, assert_close, random_array

torch = pytest.importorskip("torch")

F32, F64, BF16, F16 = tl.float32, tl.float64, tl.bfloat16, tl.float16
I64, BOOL = tl.int64, tl.bool_
# dtypes per kind of op (a few: the kernels these ops reach are tested per dtype in their own files)
ANY = (F32, BF16, I64, BOOL)    # ops that only move elements
NUM = (F32, F64, F16, I64)      # ops that add or multiply
FLOAT = (F32, F64, BF16)


def _torch_input(a, dtype, grad):
    """The PyTorch reference's input: floats in float64 (the reference precision), integers in int64."""
    if dtype.is_floating_point:
        return torch.tensor(as_f64(a), requires_grad=grad)
    return torch.tensor(a.astype(np.int64) if dtype is not BOOL else a)


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_against_torch(fn, shapes, dtype, device, rng, terms=1, grad=True):
    """fn(module, *tensors) with module tl and torch: equal values, and for floats equal
    gradients of sum(out * w) for random weights w."""
    arrays = [random_array(rng, s, dtype) for s in shapes]
    grad = grad and dtype.is_floating_point
    xs = [tl.tensor(a, dtype=dtype, device=device, requires_grad=grad) for a in arrays]
    ts = [_torch_input(a, dtype, grad) for a in arrays]
    outs, refs = _flat(fn(tl, *xs)), _flat(fn(torch, *ts))
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.shape == tuple(r.shape), (o.shape, tuple(r.shape))
        if r.dtype is torch.float64:
            assert o.dtype is dtype
        assert_close(o, r.detach().numpy(), o.dtype, terms=terms)
    if not grad:
        return outs
    ws = [rng.standard_normal(tuple(r.shape)) for r in refs]
    sum((o * tl.tensor(w, dtype=o.dtype, device=device)).sum() for o, w in zip(outs, ws)).backward()
    sum((r * torch.tensor(w)).sum() for r, w in zip(refs, ws)).backward()
    for x, t in zip(xs, ts):
        if t.grad is None:  # an input used for its shape only, or a zero gradient (the 0-norm's)
            assert x.grad is None or not x.grad.numpy().any()
            continue
        assert x.grad is not None and x.grad.shape == x.shape and x.grad.dtype is dtype
        assert_close(x.grad, t.grad.numpy(), dtype, terms=terms * 4)
    return outs


MOVE_CASES = {  # fn(module, *inputs), input shapes: ops that only move (or copy) elements
    "flip": (lambda m, x: m.flip(x, (0, 2)), [(2, 3, 4)]),
    "flip_method_varargs": (lambda m, x: x.flip(0, -1), [(3, 4)]),
    "flip_none": (lambda m, x: x.flip(()), [(3,)]),
    "fliplr": (lambda m, x: m.fliplr(x), [(2, 3)]),
    "flipud": (lambda m, x: x.flipud(), [(3, 2)]),
    "roll_flat": (lambda m, x: m.roll(x, 2), [(2, 3)]),
    "roll_dims": (lambda m, x: m.roll(x, (1, -2), (0, 1)), [(3, 4)]),
    "roll_big_shift": (lambda m, x: x.roll(7, 1), [(2, 3)]),
    "roll_zero": (lambda m, x: x.roll(3, 0), [(3, 2)]),
    "repeat": (lambda m, x: x.repeat(2, 1, 3), [(2, 3)]),
    "repeat_zero": (lambda m, x: x.repeat(0, 2), [(2, 3)]),
    "repeat_0d": (lambda m, x: x.repeat(3), [()]),
    "tile": (lambda m, x: m.tile(x, (2,)), [(2, 3)]),
    "tile_more": (lambda m, x: x.tile(2, 1, 2), [(2, 3)]),
    "repeat_interleave_flat": (lambda m, x: m.repeat_interleave(x, 2), [(2, 3)]),
    "repeat_interleave_dim": (lambda m, x: x.repeat_interleave(3, dim=1), [(2, 3)]),
    "repeat_interleave_tensor": (lambda m, x: x.repeat_interleave(m.tensor([1, 0, 2], device=x.device), dim=0),
                                 [(3, 2)]),
    "repeat_interleave_tensor1": (lambda m, x: x.repeat_interleave(m.tensor([2], device=x.device), dim=-1),
                                  [(3, 2)]),
    "tril": (lambda m, x: m.tril(x), [(3, 4)]),
    "tril_k": (lambda m, x: x.tril(-1), [(2, 3, 3)]),
    "triu": (lambda m, x: m.triu(x, 1), [(4, 3)]),
    "triu_neg": (lambda m, x: x.triu(-2), [(2, 4, 3)]),
    "movedim": (lambda m, x: m.movedim(x, 0, -1), [(2, 3, 4)]),
    "movedim_many": (lambda m, x: x.movedim((0, 1), (2, 0)), [(2, 3, 4)]),
    "moveaxis": (lambda m, x: m.moveaxis(x, -1, 0), [(2, 3, 4)]),
    "swapaxes": (lambda m, x: m.swapaxes(x, 0, 2), [(2, 3, 4)]),
    "swapdims": (lambda m, x: x.swapdims(1, -1), [(2, 3, 4)]),
    "unbind": (lambda m, x: m.unbind(x, 1), [(2, 3)]),
    "unbind_method": (lambda m, x: x.unbind(), [(3, 2)]),
    "t": (lambda m, x: x.t(), [(2, 3)]),
    "t_1d": (lambda m, x: m.t(x), [(3,)]),
    "diag_1d": (lambda m, x: m.diag(x), [(3,)]),
    "diag_1d_offset": (lambda m, x: m.diag(x, 1), [(3,)]),
    "diag_1d_neg": (lambda m, x: x.diag(-2), [(2,)]),
    "diag_2d": (lambda m, x: m.diag(x, 1), [(3, 4)]),
    "diag_2d_neg": (lambda m, x: x.diag(-1), [(3, 4)]),
    "diagonal": (lambda m, x: m.diagonal(x), [(3, 4)]),
    "diagonal_dims": (lambda m, x: m.diagonal(x, 1, 0, 2), [(3, 4, 5)]),
    "diagonal_neg_dims": (lambda m, x: x.diagonal(-1, 2, 1), [(2, 4, 3)]),
    "diagonal_empty": (lambda m, x: x.diagonal(5), [(3, 4)]),
    "diag_embed": (lambda m, x: m.diag_embed(x), [(2, 3)]),
    "diag_embed_dims": (lambda m, x: m.diag_embed(x, 1, 0, 2), [(2, 3)]),
    "diag_embed_neg": (lambda m, x: x.diag_embed(-1, -1, 0), [(3,)]),
    "rot90": (lambda m, x: m.rot90(x), [(2, 3)]),
    "rot90_k2": (lambda m, x: x.rot90(2, (1, 2)), [(2, 3, 4)]),
    "rot90_k3": (lambda m, x: m.rot90(x, 3, (0, 1)), [(2, 3)]),
    "rot90_kneg": (lambda m, x: m.rot90(x, -1, (1, 0)), [(2, 3)]),
    "rot90_k0": (lambda m, x: m.rot90(x, 4), [(2, 3)]),
    "atleast_1d": (lambda m, x: m.atleast_1d(x), [()]),
    "atleast_2d": (lambda m, x, y: m.atleast_2d(x, y), [(), (3,)]),
    "atleast_3d": (lambda m, x, y, z: m.atleast_3d((x, y, z)), [(), (3,), (2, 3)]),
    "atleast_3d_keep": (lambda m, x: m.atleast_3d(x), [(2, 3, 1, 2)]),
    "hstack_1d": (lambda m, x, y: m.hstack([x, y]), [(2,), (3,)]),
    "hstack_2d": (lambda m, x, y: m.hstack((x, y)), [(2, 1), (2, 3)]),
    "vstack": (lambda m, x, y: m.vstack([x, y]), [(3,), (2, 3)]),
    "row_stack": (lambda m, x, y: m.row_stack([x, y]), [(3,), (3,)]),
    "dstack": (lambda m, x, y: m.dstack([x, y]), [(2, 3), (2, 3, 2)]),
    "column_stack": (lambda m, x, y, z: m.column_stack([x, y, z]), [(3,), (3, 2), (3,)]),
    "broadcast_tensors": (lambda m, x, y: m.broadcast_tensors(x, y), [(2, 1), (3,)]),
    "meshgrid_ij": (lambda m, x, y, z: m.meshgrid(x, y, z, indexing="ij"), [(2,), (3,), (4,)]),
    "meshgrid_xy": (lambda m, x, y, z: m.meshgrid([x, y, z], indexing="xy"), [(2,), (3,), (4,)]),
    "meshgrid_one": (lambda m, x: m.meshgrid(x, indexing="xy"), [(3,)]),
    "cartesian_prod": (lambda m, x, y: m.cartesian_prod(x, y), [(2,), (3,)]),
    "cartesian_prod_one": (lambda m, x: m.cartesian_prod(x), [(3,)]),
    "view_as": (lambda m, x, y: x.view_as(y), [(6,), (2, 3)]),
    "reshape_as": (lambda m, x, y: x.t().reshape_as(y), [(2, 3), (6,)]),
    "expand_as": (lambda m, x, y: x.expand_as(y), [(1, 3), (2, 3)]),
}

ARITH_CASES = {  # ops that add or multiply: (fn, input shapes, terms of the largest sum)
    "diff": (lambda m, x: m.diff(x), [(3, 4)], 1),
    "diff_n2_dim0": (lambda m, x: x.diff(2, 0), [(4, 3)], 2),
    "diff_n_large": (lambda m, x: x.diff(5), [(2, 3)], 8),
    "diff_n0": (lambda m, x: m.diff(x, 0), [(2, 3)], 1),
    "diff_prepend_append": (lambda m, x, p, a: m.diff(x, dim=1, prepend=p, append=a), [(2, 3), (2, 1), (2, 2)], 1),
    "outer": (lambda m, x, y: m.outer(x, y), [(3,), (4,)], 1),
    "ger": (lambda m, x, y: x.ger(y), [(2,), (3,)], 1),
    "mm": (lambda m, x, y: m.mm(x, y), [(2, 3), (3, 4)], 3),
    "mm_method": (lambda m, x, y: x.mm(y), [(3, 2), (2, 1)], 2),
    "bmm": (lambda m, x, y: m.bmm(x, y), [(2, 3, 4), (2, 4, 2)], 4),
    "mv": (lambda m, x, y: m.mv(x, y), [(3, 4), (4,)], 4),
    "dot": (lambda m, x, y: m.dot(x, y), [(5,), (5,)], 5),
    "vdot": (lambda m, x, y: x.vdot(y), [(4,), (4,)], 4),
    "inner": (lambda m, x, y: m.inner(x, y), [(2, 3), (4, 3)], 3),
    "inner_scalar": (lambda m, x, y: m.inner(x, y), [(), (2, 3)], 1),
    "addmm": (lambda m, i, x, y: m.addmm(i, x, y), [(2, 4), (2, 3), (3, 4)], 4),
    "addmm_broadcast_scaled": (lambda m, i, x, y: m.addmm(i, x, y, beta=3, alpha=2), [(4,), (2, 3), (3, 4)], 4),
    "baddbmm": (lambda m, i, x, y: m.baddbmm(i, x, y, alpha=2), [(2, 1, 4), (2, 2, 3), (2, 3, 4)], 4),
    "trace": (lambda m, x: m.trace(x), [(3, 4)], 3),
    "cross": (lambda m, x, y: m.cross(x, y, dim=1), [(2, 3), (2, 3)], 2),
    "cross_first_dim3": (lambda m, x, y: x.cross(y), [(4, 3, 2), (4, 3, 2)], 2),
    "linalg_cross_broadcast": (lambda m, x, y: m.linalg.cross(x, y), [(2, 3), (1, 3)], 2),
    "kron": (lambda m, x, y: m.kron(x, y), [(2, 3), (2, 2)], 1),
    "kron_ndims": (lambda m, x, y: x.kron(y), [(2,), (3, 2)], 1),
}


@pytest.mark.parametrize("dtype", ANY, ids=lambda d: d.name)
@pytest.mark.parametrize("case", MOVE_CASES, ids=str)
def test_moving_ops_match_torch(device, rng, dtype, case):
    fn, shapes = MOVE_CASES[case]
    check_against_torch(fn, shapes, dtype, device, rng)


@pytest.mark.parametrize("dtype", NUM, ids=lambda d: d.name)
@pytest.mark.parametrize("case", ARITH_CASES, ids=str)
def test_arithmetic_ops_match_torch(device, rng, dtype, case):
    fn, shapes, terms = ARITH_CASES[case]
    check_against_torch(fn, shapes, dtype, device, rng, terms=terms)


def test_diff_of_bool_is_inequality(device):
    x = tl.tensor([True, False, False, True], device=device)
    assert x.diff().tolist() == [True, False, True]


def test_flip_and_roll_copy_and_views_share(device):
    x = tl.tensor([[1, 2], [3, 4]], device=device)
    for y in (x.flip(()), x.roll(0, 0), x.rot90(0), x.repeat(1, 1), x.tile(1), x.repeat_interleave(1, 0)):
        y += 10
    assert x.tolist() == [[1, 2], [3, 4]]
    d = x.diagonal()  # a view, as PyTorch's: writes through it reach x
    d.fill_(0)
    assert x.tolist() == [[0, 2], [3, 0]]
    a, b = x.unbind(1)
    assert a.data_ptr_id() == x.data_ptr_id()


def test_repeat_interleave_of_repeats_alone(device):
    r = tl.tensor([2, 0, 1], device=device)
    assert tl.repeat_interleave(r).tolist() == [0, 0, 2]
    assert tl.tensor([5, 6], device=device).repeat_interleave(2, output_size=4).tolist() == [5, 5, 6, 6]


def test_unbind_gradient_with_unused_slices(device):
    x = tl.tensor([[1.0, 2.0], [3.0, 4.0]], device=device, requires_grad=True)
    a, b = x.unbind(0)
    (b * 3).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0], [3.0, 3.0]]


def test_addmm_beta_zero_ignores_nan(device):
    i = tl.full((2, 2), float("nan"), device=device)
    a = tl.eye(2, device=device)
    assert tl.addmm(i, a, a, beta=0).tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_tensor_creation_conveniences(device):
    x = tl.tensor([[1, 2]], dtype=tl.uint8, device=device)
    for y, shape, value in ((x.new_zeros(2, 3), (2, 3), 0), (x.new_ones((2,)), (2,), 1),
                            (x.new_full((3,), 7), (3,), 7), (x.new_empty(4), (4,), None)):
        assert y.shape == shape and y.dtype is tl.uint8 and y.device == x.device
        assert value is None or set(y.numpy().reshape(-1).tolist()) == {value}
    f = x.new_zeros(2, dtype=tl.float32, requires_grad=True)
    assert f.dtype is tl.float32 and f.requires_grad
    n = x.new_tensor([[3.9, 4.0]])
    assert n.tolist() == [[3, 4]] and n.dtype is tl.uint8 and n.device == x.device
    assert x.type_as(tl.zeros(1)).dtype is tl.float32
    assert tl.as_tensor(x) is x and tl.as_tensor(x, dtype=tl.int64).dtype is tl.int64
    assert tl.as_tensor([1.5, 2], device=device).tolist() == [1.5, 2.0]
    assert tl.is_tensor(x) and not tl.is_tensor(np.zeros(2)) and tl.numel(x) == 2


def test_random_like(device):
    x = tl.zeros(3, 4, dtype=tl.float64, device=device)
    for fn in (tl.rand_like, tl.randn_like):
        y = fn(x)
        assert y.shape == (3, 4) and y.dtype is tl.float64 and y.device == x.device
    u = tl.rand_like(x, dtype=tl.float32).numpy()
    assert u.dtype == np.float32 and ((u >= 0) & (u < 1)).all()
    r = tl.randint_like(tl.zeros(200, dtype=tl.int64, device=device), 3, 6).numpy()
    assert set(r.tolist()) == {3, 4, 5}
    with pytest.raises(tl.DTypeError, match=r"randn_like\(input: shape=\(3, 4\).*floating dtype, got int64"):
        tl.randn_like(x, dtype=tl.int64)
    r = tl.randint_like(x, 4)
    assert r.dtype is tl.float64 and set(r.numpy().reshape(-1).tolist()) <= {0.0, 1.0, 2.0, 3.0}


@pytest.mark.parametrize("dtype", FLOAT, ids=lambda d: d.name)
@pytest.mark.parametrize("args, kwargs", [((), {}), ((1,), {}), ((0, True), {}), ((1,), {"keepdim": True}),
                                          (((0, 1),), {"correction": 0}), ((), {"unbiased": False})], ids=str)
def test_std_mean_var_mean(device, rng, dtype, args, kwargs):
    for name in ("std_mean", "var_mean"):
        check_against_torch(lambda m, x, name=name: getattr(m, name)(x, *args, **kwargs), [(3, 4)], dtype, device, rng,
                            terms=12)


@pytest.mark.parametrize("dtype", FLOAT, ids=lambda d: d.name)
@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, float("inf")], ids=str)
def test_cdist(device, rng, dtype, p):
    check_against_torch(lambda m, x, y: m.cdist(x, y, p), [(2, 3, 4), (2, 5, 4)], dtype, device, rng, terms=8,
                        grad=p != 0)


def test_cdist_gradient_is_zero_at_zero_distance(device):
    x = tl.tensor([[1.0, 2.0]], device=device, requires_grad=True)
    tl.cdist(x, tl.tensor([[1.0, 2.0]], device=device)).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0]]


# =====================================================================================
# einsum
# =====================================================================================

EINSUM = [  # equation, operand shapes
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("iij->ji", [(2, 2, 3)]),
    ("i,i->", [(4,), (4,)]),
    ("i,i", [(4,), (4,)]),
    ("i,i->i", [(4,), (4,)]),
    ("i,j->ij", [(2,), (3,)]),
    ("i,j", [(2,), (3,)]),
    ("ba", [(2, 3)]),
    ("i,i->i", [(3,), (1,)]),          # size-1 dims broadcast
    ("ij,ij->ij", [(2, 1), (2, 3)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i...,i...", [(2, 3), (2, 3)]),
    ("...ij->ij", [(2, 3, 4)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    ("i,ij,j->", [(2,), (2, 3), (3,)]),
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
    ("ijk->kij", [(2, 3, 4)]),
    (" i j , j k -> i k ", [(2, 3), (3, 2)]),
    ("ij,kl->ijkl", [(2, 3), (2, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ij,jk->ik", [(0, 3), (3, 4)]),
    ("ij,jk->ik", [(2, 0), (0, 4)]),
]


@pytest.mark.parametrize("dtype", NUM, ids=lambda d: d.name)
@pytest.mark.parametrize("equation, shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_matches_torch(device, rng, dtype, equation, shapes):
    check_against_torch(lambda m, *xs: m.einsum(equation, *xs), shapes, dtype, device, rng, terms=16)


def test_einsum_operands_as_a_list(device):
    a = tl.tensor([[1, 2], [3, 4]], device=device)
    assert tl.einsum("ij,jk->ik", [a, a]).tolist() == [[7, 10], [15, 22]]


def test_einsum_matmul_case_is_one_matmul(device):
    a, b = tl.ones(2, 3, 4, device=device, requires_grad=True), tl.ones(2, 4, 5, device=device)
    assert tl.einsum("bij,bjk->bik", a, b).grad_fn.name in ("matmul", "reshape")


# =====================================================================================
# bad input
# =====================================================================================

BAD = [  # fn, error class, message pattern
    (lambda x: x.fliplr(), tl.ShapeError, r"fliplr\(input: shape=\(3,\).*at least 2-D"),
    (lambda x: x.flip(3), tl.IndexOutOfRange, r"flip.*dimension 3 out of range"),
    (lambda x: x.flip(0.5), tl.DTypeError, r"flip.*sizes must be integers"),
    (lambda x: x.roll((1, 2)), tl.ArgumentError, r"roll.*dims None takes one shift"),
    (lambda x: x.roll((1, 2), (0,)), tl.ArgumentError, r"roll.*same length"),
    (lambda x: x.reshape(3, 1).repeat(2), tl.ShapeError, r"repeat.*at least one per dim"),
    (lambda x: x.repeat(-1), tl.ShapeError, r"repeat.*non-negative"),
    (lambda x: x.repeat_interleave(-1), tl.ArgumentError, r"repeat_interleave.*non-negative"),
    (lambda x: x.repeat_interleave(tl.tensor([1, 2], device=x.device)), tl.ShapeError,
     r"repeat_interleave.*1 or 3 elements"),
    (lambda x: x.repeat_interleave(tl.tensor([1.0], device=x.device)), tl.ShapeError, r"integer tensor"),
    (lambda x: x.repeat_interleave(2, output_size=5), tl.ArgumentError, r"output_size 5.*6 elements"),
    (lambda x: x.tril(), tl.ShapeError, r"tril.*at least 2 dims"),
    (lambda x: x.reshape(1, 3).triu(0.5), tl.DTypeError, r"triu.*diagonal must be an integer"),
    (lambda x: x.diff(-1), tl.ArgumentError, r"diff.*n must be an integer >= 0"),
    (lambda x: tl.diff(x[0]), tl.ShapeError, r"diff.*at least 1 dim"),
    (lambda x: x.diff(prepend=1), tl.ShapeError, r"diff.*prepend must be a tensor"),
    (lambda x: x.movedim((0, 0), (0, 0)), tl.ArgumentError, r"movedim.*distinct"),
    (lambda x: x.movedim(0, 1), tl.IndexOutOfRange, r"movedim.*out of range"),
    (lambda x: x.reshape(1, 1, 3).t(), tl.ShapeError, r"t\(self.*at most 2 dims"),
    (lambda x: tl.mm(x, x), tl.ShapeError, r"mm\(self: shape=\(3,\).*2 and 2 dims"),
    (lambda x: tl.mm(x.reshape(1, 3), x.reshape(3, 1).double()), tl.DTypeError, r"mm.*same dtype"),
    (lambda x: tl.mm(x.reshape(1, 3), x.reshape(1, 3)), tl.ShapeError, r"matmul.*not aligned"),
    (lambda x: tl.bmm(x.reshape(1, 1, 3), x.reshape(1, 3, 1).expand(2, 3, 1)), tl.ShapeError, r"bmm.*batch sizes"),
    (lambda x: tl.dot(x, x[:2]), tl.ShapeError, r"matmul.*not aligned"),
    (lambda x: tl.mv(x, x), tl.ShapeError, r"mv.*2 and 1 dims"),
    (lambda x: tl.dot(x, [1, 2, 3]), tl.DTypeError, r"dot.*must be tensors"),
    (lambda x: tl.outer(x.reshape(3, 1), x), tl.ShapeError, r"outer.*two 1-d"),
    (lambda x: tl.addmm(tl.zeros(3, 3, device=x.device), x.reshape(1, 3), x.reshape(3, 1)), tl.ShapeError,
     r"addmm.*does not broadcast to the product's shape \(1, 1\)"),
    (lambda x: x.diag_embed(0, 0, -1).diagonal(0, 1, 1), tl.ArgumentError, r"diagonal.*must differ"),
    (lambda x: x.reshape(1, 1, 3).diag(), tl.ShapeError, r"diag.*1-d or 2-d"),
    (lambda x: x.trace(), tl.ShapeError, r"trace.*2-d"),
    (lambda x: tl.diag_embed(x[0]), tl.ShapeError, r"diag_embed.*at least 1 dim"),
    (lambda x: tl.cross(x.reshape(1, 3), x.reshape(1, 3), dim=0), tl.ShapeError, r"cross.*dim 0 must have size 3"),
    (lambda x: tl.cross(x, x.double()), tl.DTypeError, r"cross.*same dtype"),
    (lambda x: tl.linalg.cross(x[:2], x[:2]), tl.ShapeError, r"linalg.cross.*size 3"),
    (lambda x: x.reshape(3, 1).rot90(1, (0, 0)), tl.ArgumentError, r"rot90.*must differ"),
    (lambda x: x.rot90(), tl.ShapeError, r"rot90.*at least 2 dims"),
    (lambda x: tl.hstack([]), tl.ArgumentError, r"hstack.*non-empty"),
    (lambda x: tl.broadcast_tensors(x, x[:2]), tl.ShapeError, r"broadcast_tensors.*do not broadcast"),
    (lambda x: tl.meshgrid(x, x, indexing="yx"), tl.ArgumentError, r"meshgrid.*'ij' or 'xy'"),
    (lambda x: tl.meshgrid(x, x.reshape(3, 1)), tl.ShapeError, r"meshgrid.*0-d or 1-d"),
    (lambda x: tl.cartesian_prod(x.reshape(3, 1)), tl.ShapeError, r"cartesian_prod.*1-d"),
    (lambda x: x.view_as(tl.zeros(2)), tl.ShapeError, r"view.*invalid for 3 elements"),
    (lambda x: tl.cdist(x, x), tl.ShapeError, r"cdist.*\(\.\.\., P, M\)"),
    (lambda x: tl.cdist(x.reshape(1, 3), x.reshape(1, 3), -1), tl.ArgumentError, r"cdist.*non-negative"),
    (lambda x: tl.einsum("ij,jk", x), tl.ArgumentError, r"einsum.*2 subscripts for 1 operands"),
    (lambda x: tl.einsum("ij", x), tl.ShapeError, r"einsum.*operand 0 has 1 dims"),
    (lambda x: tl.einsum("i->j", x), tl.ArgumentError, r"einsum.*output subscripts 'j'"),
    (lambda x: tl.einsum("i->ii", x), tl.ArgumentError, r"einsum.*must be distinct"),
    (lambda x: tl.einsum("i,i", x, x[:2]), tl.ShapeError, r"einsum.*subscript i has size 2 in operand 1"),
    (lambda x: tl.einsum("ii", x.reshape(1, 3)), tl.ShapeError, r"einsum.*repeated in operand 0"),
    (lambda x: tl.einsum("i1", x), tl.ArgumentError, r"einsum.*invalid subscripts 'i1'"),
    (lambda x: tl.einsum("....i", x), tl.ArgumentError, r"einsum.*invalid subscripts"),
    (lambda x: tl.einsum("i,i", x, x.double()), tl.DTypeError, r"einsum.*same dtype"),
    (lambda x: tl.einsum(3, x), tl.DTypeError, r"einsum.*must be a string"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input_raises(device, case):
    fn, cls, pattern = BAD[case]
    x = tl.tensor([1.0, 2.0, 3.0], device=device)
    with pytest.raises(cls, match=pattern):
        fn(x)
