"""In-place ops with PyTorch's semantics, on every device: the tensor's memory changes (views
and aliases see it), autograd records them or refuses them with a clear error, and a tensor
that a backward reads and that was modified in place since is caught at backward."""
import operator

import numpy as np
import pytest

import tensorlite as tl
from tensorlite.op_table import UNARY

from conftest import assert_close

AUGMENTED = [("+=", operator.iadd, np.add), ("-=", operator.isub, np.subtract), ("*=", operator.imul, np.multiply),
             ("/=", operator.itruediv, np.true_divide), ("//=", operator.ifloordiv, np.floor_divide),
             ("%=", operator.imod, np.mod), ("**=", operator.ipow, np.power)]


@pytest.mark.parametrize("sym,iop,ref", AUGMENTED, ids=[a[0] for a in AUGMENTED])
def test_augmented_assignment_changes_the_tensor_and_its_aliases(device, rng, sym, iop, ref):
    a = rng.uniform(1, 3, (3, 4)).astype(np.float32)
    b = rng.uniform(1, 3, (4,)).astype(np.float32)
    x = tl.tensor(a, device=device)
    alias, row = x, x[1]
    x2 = iop(x, tl.tensor(b, device=device))
    assert x2 is x is alias
    assert_close(x, ref(a, b))
    assert_close(row, ref(a, b)[1])


def test_integer_and_bool_augmented_assignment(device):
    i = tl.tensor([5, 7, 9], device=device)
    i += 2
    i //= 2
    i %= 3
    assert i.tolist() == [0, 1, 2]
    m = tl.tensor([True, False, True], device=device)
    m &= tl.tensor([True, True, False], device=device)
    m |= tl.tensor([False, True, False], device=device)
    m ^= True
    assert m.tolist() == [False, False, True]


@pytest.mark.parametrize("make_view", [
    lambda x: x[1:], lambda x: x.T, lambda x: x[:, ::2], lambda x: x[::2, ::2], lambda x: x.reshape(-1)[3:9],
], ids=["narrow", "transpose", "strided-columns", "strided-both", "reshaped"])
def test_inplace_through_a_view_writes_the_base(device, rng, make_view):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    x = tl.tensor(a, device=device)
    v = make_view(x)
    assert v.mul_(2).add_(1) is v
    expect = a.copy()
    nv = make_view(_NumpyLike(expect)).arr  # the same view of a numpy copy, changed the same way
    nv[...] = nv * 2 + 1
    assert_close(x, expect)
    assert_close(v, nv)


class _NumpyLike:
    """Just enough of the Tensor view API over a numpy array (views stay numpy views)."""
    def __init__(self, arr):
        self.arr = arr

    def __getitem__(self, idx):
        return _NumpyLike(self.arr[idx])

    @property
    def T(self):
        return _NumpyLike(self.arr.T)

    def reshape(self, *shape):
        return _NumpyLike(self.arr.reshape(*shape))


def test_unary_inplace_methods_match_out_of_place(device, rng):
    a = rng.uniform(0.5, 2.0, (5,)).astype(np.float32)
    for row in (r for r in UNARY if r.floats):  # bitwise_not has no float form
        x = tl.tensor(a, device=device)
        y = x.clone()
        assert getattr(y, f"{row.method}_")() is y
        assert_close(y, getattr(x, row.method)().numpy())


def test_no_grad_update_of_a_parameter_keeps_it_a_leaf(device):
    w = tl.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    (w * w).sum().backward()
    with tl.no_grad():
        w -= 0.5 * w.grad
    assert w.requires_grad and w.is_leaf
    assert w.tolist() == [0.0, 0.0, 0.0]


def test_inplace_on_a_leaf_that_requires_grad_is_refused(device):
    w = tl.ones(3, device=device, requires_grad=True)
    for op in (lambda: w.add_(1), lambda: w.mul_(2), lambda: w.exp_(), lambda: w.fill_(0),
               lambda: w.__setitem__(0, 5.0)):
        with pytest.raises(tl.TensorliteError, match="leaf tensor that requires grad"):
            op()
    assert w.tolist() == [1.0, 1.0, 1.0]  # nothing written


def test_modified_saved_tensor_is_caught_at_backward(device):
    x = tl.randn(3, device=device, requires_grad=True)
    y = x.exp()          # exp's backward reads its output
    y.mul_(2)
    with pytest.raises(tl.TensorliteError, match="backward of exp.*modified by an in-place operation"):
        y.sum().backward()
    a = tl.randn(2, 3, device=device)
    w = tl.randn(3, 4, device=device, requires_grad=True)
    out = a @ w          # matmul's backward reads a
    a.add_(1)
    with pytest.raises(tl.TensorliteError, match="backward of matmul"):
        out.sum().backward()


def test_a_view_whose_base_changed_history_is_refused(device):
    x = tl.randn(2, 3, device=device, requires_grad=True)
    h = x * 1
    row = h[0]           # taken before the in-place ops below
    h[0] = h[0] * 3      # a view used before the write: fine (PyTorch's `x[i] = f(x[i])`)
    h.mul_(2)
    with pytest.raises(tl.TensorliteError, match="sum: an input .* is a view of a tensor"):
        row.sum()
    h[0].sum().backward()  # a view taken again
    assert x.grad.tolist() == [[6.0] * 3, [0.0] * 3]


def test_inplace_results_differentiate_like_the_out_of_place_ops(device, rng):
    a = rng.uniform(0.2, 0.8, (4,))
    x = tl.tensor(a, dtype=tl.float64, device=device, requires_grad=True)
    w = tl.tensor(a[::-1].copy(), dtype=tl.float64, device=device, requires_grad=True)
    y = x * 3
    y.mul_(w).add_(x, alpha=2).clamp_(0.3, 2.0).sigmoid_()
    y.sum().backward()
    x2 = tl.tensor(a, dtype=tl.float64, device=device, requires_grad=True)
    w2 = tl.tensor(a[::-1].copy(), dtype=tl.float64, device=device, requires_grad=True)
    ((x2 * 3 * w2 + x2 * 2).clamp(0.3, 2.0).sigmoid()).sum().backward()
    assert_close(x.grad, x2.grad.numpy())
    assert_close(w.grad, w2.grad.numpy())


def test_earlier_uses_keep_their_history(device):
    x = tl.ones(3, device=device, requires_grad=True)
    h = x * 1
    z = h * 3            # uses h before the in-place change
    h.mul_(2)
    (z.sum() + h.sum()).backward()
    assert x.grad.tolist() == [5.0, 5.0, 5.0]  # 3 through z, 2 through the changed h


def test_setitem_and_copy_differentiate_both_sides(device):
    w = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    buf = tl.zeros(4, device=device)
    buf[1:3] = w * 2                    # buf did not require grad: it does now
    assert buf.requires_grad and not buf.is_leaf
    (buf * tl.tensor([1.0, 2.0, 3.0, 4.0], device=device)).sum().backward()
    assert w.grad.tolist() == [4.0, 6.0]
    a = tl.tensor([1.0, 1.0, 1.0], device=device, requires_grad=True)
    b = tl.tensor([5.0], device=device, requires_grad=True)
    h = a * 2
    h[0] = b                            # broadcast from (1,)
    h.copy_(h * 3)                      # copy_: the old h gets no gradient, the source all of it
    h.sum().backward()
    assert a.grad.tolist() == [0.0, 6.0, 6.0] and b.grad.tolist() == [3.0]


def test_inplace_on_a_view_while_recording_is_refused(device):
    x = tl.ones(2, 3, device=device, requires_grad=True)
    h = x * 1
    with pytest.raises(tl.TensorliteError, match="on a view while gradients are recorded"):
        h[0].mul_(2)
    with tl.no_grad():
        h[0].mul_(2)                    # nothing recorded: a plain write
    assert h.tolist() == [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]


def test_inplace_result_must_fit_the_tensor(device):
    i = tl.tensor([1, 2], device=device)
    with pytest.raises(tl.DTypeError, match="add_.*can't be cast"):
        i += 1.5
    with pytest.raises(tl.DTypeError):
        i /= 2                          # true division gives floats
    x = tl.zeros(3, device=device)
    with pytest.raises(tl.ShapeError, match="add_"):
        x += tl.ones(2, 3, device=device)
    with pytest.raises(tl.ShapeError, match="single memory location"):
        tl.zeros(3, device=device).expand(2, 3).add_(1)
    assert i.tolist() == [1, 2] and x.tolist() == [0.0, 0.0, 0.0]


def test_overlapping_copy_reads_before_it_writes(device):
    x = tl.arange(6, dtype=tl.float32, device=device)
    x[1:].copy_(x[:-1])
    assert x.tolist() == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]


def test_version_counts_writes_and_views_share_it(device):
    x = tl.zeros(4, device=device)
    v = x[1:3]
    assert x._version == v._version == 0
    v.add_(1)
    x[0] = 2.0
    assert x._version == v._version == 2
    assert x.detach()._version == 2


def test_backward_checks_the_gradient_shape(device):
    x = tl.ones(3, device=device, requires_grad=True)
    with pytest.raises(tl.ShapeError, match="backward"):
        (x * 2).backward(tl.ones(4, device=device))
    assert x.grad is None


def test_same_program_as_pytorch():
    torch = pytest.importorskip("torch", reason="needs torch (the optional reference package)")
    a = np.random.default_rng(0).uniform(0.2, 0.9, (3, 4))
    results = []
    for lib, mk in ((tl, lambda v: tl.tensor(v, dtype=tl.float64, requires_grad=True)),
                    (torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))):
        x, w = mk(a), mk(a.T.copy())
        h = x * 2
        h += 1
        h.mul_(x)
        h[1] = h[1] * 0 + 7
        z = h @ w
        z.relu_()                       # matmul's backward reads h and w, not z
        z = z.tanh()
        z.sum().backward()
        bad = (h.detach() @ w).tanh()   # tanh's backward reads its output: both refuse
        bad.relu_()
        with pytest.raises((tl.TensorliteError, RuntimeError), match="modified by an inplace|in-place"):
            bad.sum().backward()
        with lib.no_grad():
            w -= 0.1 * w.grad
        results.append([t.detach().numpy() for t in (z, x.grad, w)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_an_operand_that_requires_grad_makes_the_inplace_op_recorded(device):
    w = tl.tensor([2.0, 3.0], device=device, requires_grad=True)
    y = tl.ones(2, device=device)       # needs no gradient itself
    y.mul_(w).add_(w, alpha=2)          # mul_'s backward reads y's old values: kept, not the new ones
    assert y.requires_grad and y.grad_fn is not None
    (y * y).sum().backward()
    assert w.grad.tolist() == [2 * 6.0 * 3, 2 * 9.0 * 3]
    with pytest.raises(tl.TensorliteError, match="on a view while gradients are recorded"):
        tl.zeros(4, device=device)[:2].add_(w)


def test_an_optimizer_step_before_backward_is_caught(device):
    for opt_class in (tl.optim.SGD, tl.optim.AdamW):
        w = tl.ones(3, device=device, requires_grad=True)
        loss = (w * w).sum()               # mul's backward reads w
        loss.backward(retain_graph=True)
        opt_class([w], lr=0.1).step()
        with pytest.raises(tl.TensorliteError, match="backward of mul"):
            loss.backward()


def test_a_refused_setitem_changes_nothing(device):
    x = tl.ones(2, 3, device=device, requires_grad=True)
    h = x * 1
    row = h[0]
    h.mul_(2)                              # row's base has a new history now
    before, history = h.tolist(), h.grad_fn
    with pytest.raises(tl.TensorliteError, match="is a view of a tensor"):
        h[1] = row
    assert h.tolist() == before and h.grad_fn is history


def test_detach_keeps_nothing_of_the_graph_alive(device):
    import gc
    import weakref
    x = tl.randn(3, device=device, requires_grad=True)
    h = x * 2
    y = h.exp()                         # y's graph holds h
    graph = weakref.ref(h)
    kept = y.detach()                   # e.g. losses.append(loss.detach()) in a training loop
    del h, y
    gc.collect()
    assert graph() is None and kept.grad_fn is None
