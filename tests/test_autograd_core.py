"""Backward rules of the core Tensor ops against float64 central finite differences (cpu),
and every device's float32 gradients against those (the `device` fixture), plus the
autograd engine's semantics (accumulation, retain_graph, no_grad, detach)."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import shares_storage
from gradcheck_util import check_device_grads, gradcheck


# input kinds: values chosen away from the points where an op is not differentiable
def U(*shape):
    return ("uniform", shape)


def POS(*shape):
    return ("positive", shape)


def NZ(*shape):
    return ("nonzero", shape)


def make_inputs(specs, rng):
    out = []
    for kind, shape in specs:
        if kind == "uniform":
            out.append(rng.uniform(-2, 2, shape))
        elif kind == "positive":
            out.append(rng.uniform(0.5, 2, shape))
        else:
            out.append(rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2, shape))
    return out


def ids(values, like, dtype=tl.int64):
    """An index tensor on the device of `like`."""
    return tl.tensor(np.asarray(values), dtype=dtype, device=like.device)


def cond(shape, like, seed=0):
    return tl.tensor(np.random.default_rng(seed).random(shape) < 0.5, device=like.device)


CASES = {
    # elementwise binary, with broadcasting
    "add": (lambda a, b: a + b, [U(3, 1, 4), U(2, 4)]),
    "sub": (lambda a, b: a - b, [U(2, 3), U(3)]),
    "mul": (lambda a, b: a * b, [U(2, 1), U(1, 3)]),
    "div": (lambda a, b: a / b, [U(2, 3), NZ(2, 1)]),
    "maximum": (lambda a, b: tl.maximum(a, b), [U(3, 4), U(4)]),
    "minimum": (lambda a, b: tl.minimum(a, b), [U(3, 4), U(3, 1)]),
    "scalar_ops": (lambda a: (a * 2.5 + 1) - 3 / a + (2 - a) / 4, [NZ(2, 3)]),
    "pow_scalar": (lambda a: a ** 2.5, [POS(2, 3)]),
    "pow_int": (lambda a: a ** 3, [U(5)]),
    "rpow": (lambda a: 2.0 ** a, [U(2, 3)]),
    "pow_tensor": (lambda a, b: a ** b, [POS(2, 3), U(3)]),
    # elementwise unary
    **{f"unary_{n}": (lambda a, n=n: getattr(a, n)(), [U(2, 5)]) for n in
       ("exp", "sin", "cos", "tanh", "neg", "square", "erf", "silu", "sigmoid", "gelu", "gelu_tanh")},
    **{f"unary_{n}": (lambda a, n=n: getattr(a, n)(), [NZ(2, 5)]) for n in ("abs", "reciprocal", "relu")},
    **{f"unary_{n}": (lambda a, n=n: getattr(a, n)(), [POS(2, 5)]) for n in ("log", "sqrt")},
    "elu": (lambda a: tl.elu(a, 0.7), [NZ(2, 5)]),
    "affine": (lambda a: a.affine(-1.5, 0.25), [U(2, 5)]),
    "clamp": (lambda a: a.clamp(-0.25, 0.25) + a.clamp(min=0.3) + a.clamp(max=-0.3),
              [("uniform", (4, 6))]),
    "where": (lambda a, b: tl.where(cond((3, 4), a), a, b), [U(3, 4), U(4)]),
    "where_scalar": (lambda a: tl.where(cond((3, 4), a), a, 0.5) + tl.where(cond((4,), a, 1), -1.0, a), [U(3, 4)]),
    "masked_fill": (lambda a: a.masked_fill(cond((2, 3), a), -1.0), [U(2, 3)]),
    # views and indexing
    "reshape": (lambda a: a.reshape(3, 2, 2).reshape(-1), [U(2, 6)]),
    "reshape_noncontig": (lambda a: a.transpose(0, 1).reshape(6, 2), [U(4, 3)]),
    "view": (lambda a: a.view(4, 3), [U(2, 6)]),
    "permute": (lambda a: a.permute(2, 0, 1), [U(2, 3, 4)]),
    "transpose_T_mT": (lambda a: a.transpose(0, 2) + a.T + a.mT.transpose(-1, 0), [U(3, 3, 3)]),
    "narrow_step": (lambda a: a.narrow(1, 1, 3, 2), [U(2, 7)]),
    "select": (lambda a: a.select(1, -1) * a.select(0, 1)[:2], [U(2, 3)]),
    "unsqueeze_squeeze": (lambda a: a.unsqueeze(1).unsqueeze(-1).squeeze(), [U(2, 3)]),
    "broadcast_to": (lambda a: a.broadcast_to(4, 2, 3), [U(2, 1)]),
    "expand": (lambda a: a.expand(3, -1, 4), [U(2, 1)]),
    "flatten_unflatten": (lambda a: a.flatten(1).unflatten(1, (4, 3)), [U(2, 3, 4)]),
    "split": (lambda a: tl.cat([p * (i + 1) for i, p in enumerate(a.split([1, 3], 1))], 1), [U(2, 4)]),
    "chunk": (lambda a: a.chunk(3, 0)[1] * a.chunk(3, 0)[2], [U(6, 2)]),
    "getitem_slices": (lambda a: a[1:, ::2, -1], [U(3, 5, 2)]),
    "getitem_ellipsis_none": (lambda a: a[..., None, 1:3], [U(2, 4)]),
    "getitem_negative_step": (lambda a: a[::-2], [U(5, 2)]),
    "getitem_int_tensor": (lambda a: a[ids([[2, 0], [2, 1]], a)], [U(3, 2)]),
    "getitem_two_int_tensors": (lambda a: a[:, ids([0, 2, 2], a), ids([1, 0, 1], a)], [U(2, 3, 2)]),
    "getitem_bool_mask": (lambda a: a[cond((3, 4), a, 3)], [U(3, 4)]),
    "contiguous_clone": (lambda a: a.T.contiguous() * a.T.clone(), [U(3, 2)]),
    # reductions
    "sum_all": (lambda a: a.sum(), [U(3, 4)]),
    "sum_dims": (lambda a: a.sum((0, 2)) + a.sum(1, keepdim=True).sum(2).sum(0), [U(2, 3, 4)]),
    "mean": (lambda a: a.mean(-1) + a.mean(), [U(3, 4)]),
    "max_dim": (lambda a: a.max(1).values + a.min(0, keepdim=True).values.sum(), [U(3, 4)]),
    "max_all": (lambda a: a.max() - a.min(), [U(3, 4)]),
    "amax_amin": (lambda a: a.amax(0) * a.amin(1, keepdim=True), [U(3, 3)]),
    "var_std": (lambda a: a.var(1) + a.std(0).sum() + a.var(), [U(3, 4)]),
    "prod": (lambda a: a.prod(1) + tl.prod(a[:2, :2]), [NZ(3, 5)]),
    "logsumexp": (lambda a: a.logsumexp(1) + a.logsumexp((0, 1)), [U(3, 4)]),
    # matmul
    "matmul_2d": (lambda a, b: a @ b, [U(3, 4), U(4, 5)]),
    "matmul_batched_broadcast": (lambda a, b: a @ b, [U(2, 1, 3, 4), U(3, 4, 2)]),
    "matmul_transposed_views": (lambda a, b: a.mT @ b.mT, [U(4, 3), U(5, 4)]),
    "matmul_1d": (lambda a, b: (a @ b) + (b @ a).sum() + a @ a, [U(4), U(4, 4)]),
    # index ops
    "index_select": (lambda a: a.index_select(1, ids([2, 0, 2, 1], a)), [U(2, 3)]),
    "index_select_u32": (lambda a: a.index_select(0, ids([1, 1, 0], a, tl.uint32)), [U(2, 3)]),
    "gather": (lambda a: a.gather(1, ids([[0, 0, 2], [1, 2, 1]], a)), [U(2, 3)]),
    "scatter_add": (lambda a, s: a.scatter_add(0, ids([[1, 0, 1], [1, 1, 0]], a), s), [U(3, 3), U(2, 3)]),
    "index_add": (lambda a, s: a.index_add(1, ids([2, 0, 2], a), s), [U(2, 4), U(2, 3)]),
    # joins
    "cat": (lambda a, b, c: tl.cat([a, b, c], 1), [U(2, 1), U(2, 3), U(2, 2)]),
    "stack": (lambda a, b: tl.stack([a, b], -1), [U(2, 3), U(2, 3)]),
    # convolution and pooling
    "conv1d": (lambda x, w, b: tl.conv1d(x, w, b, stride=2, padding=1, dilation=2), [U(2, 3, 9), U(4, 3, 3), U(4)]),
    "conv1d_groups": (lambda x, w: tl.conv1d(x, w, groups=2, padding=2), [U(1, 4, 6), U(6, 2, 3)]),
    "conv2d": (lambda x, w, b: tl.conv2d(x, w, b, padding=1), [U(2, 3, 5, 5), U(4, 3, 3, 3), U(4)]),
    "conv2d_stride_dilation": (lambda x, w: tl.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
                               [U(1, 2, 6, 6), U(3, 2, 3, 2)]),
    "conv2d_groups": (lambda x, w: tl.conv2d(x, w, groups=2, stride=2), [U(1, 4, 5, 5), U(4, 2, 2, 2)]),
    "conv_transpose1d": (lambda x, w, b: tl.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
                         [U(2, 3, 4), U(3, 2, 3), U(2)]),
    "conv_transpose2d": (lambda x, w: tl.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
                         [U(1, 2, 3, 3), U(2, 3, 3, 3)]),
    "conv_transpose2d_groups_dilation": (lambda x, w: tl.conv_transpose2d(x, w, groups=2, dilation=2),
                                         [U(1, 4, 3, 3), U(4, 1, 2, 2)]),
    "max_pool2d": (lambda x: tl.max_pool2d(x, 2), [U(2, 2, 4, 4)]),
    "max_pool2d_pad_stride_dilation": (lambda x: tl.max_pool2d(x, 3, stride=2, padding=1, dilation=(1, 2)),
                                       [U(1, 2, 6, 7)]),
    "avg_pool2d": (lambda x: tl.avg_pool2d(x, (2, 3), stride=(1, 2)), [U(2, 1, 4, 5)]),
    "avg_pool2d_pad_exclude": (lambda x: tl.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
                               [U(1, 2, 5, 5)]),
    "upsample_nearest2d": (lambda x: tl.upsample_nearest2d(x, size=(5, 7)), [U(1, 2, 3, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_core_op(name, rng):
    fn, specs = CASES[name]
    gradcheck(fn, make_inputs(specs, rng), rng)


@pytest.mark.parametrize("name", sorted(CASES))
def test_device_grads_match_cpu(name, device, rng):
    fn, specs = CASES[name]
    check_device_grads(fn, make_inputs(specs, rng), device, rng)


def test_cast_backward_casts_the_gradient(device):
    x = tl.tensor([1.0, -2.0, 3.0], dtype=tl.float64, device=device, requires_grad=True)
    y = x.float() * tl.tensor([2.0, 3.0, 4.0], device=device)
    y.sum().backward()
    assert x.grad.dtype == tl.float64
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0, 4.0])


def test_to_device_backward_returns_to_source(device):
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    (x.to(device) * 3.0).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


# ---- engine semantics ------------------------------------------------------------------

def test_second_backward_through_freed_graph_raises():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(tl.TensorliteError, match="retain_graph"):
        y.backward()


def test_second_backward_through_ops_that_save_no_tensor_runs_as_torch(device):
    # torch frees the tensors a graph saved, not its nodes: a split, a view or a sum reads none
    x = tl.tensor([1.0, 2.0, 3.0, 4.0], device=device, requires_grad=True)
    a, b = x.chunk(2)
    a.sum().backward()
    b.sum().backward()
    t = x.reshape(2, 2).t()
    t.sum().backward()
    (t * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0, 4.0, 4.0])
    y = x.exp().chunk(2)[1]  # exp saved its output: the second pass through it still raises
    y.sum().backward()
    with pytest.raises(tl.TensorliteError, match="retain_graph"):
        y.sum().backward()


def test_retain_graph_allows_second_backward_and_accumulates():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])  # 2 * (2x)


def test_gradient_accumulates_across_graphs():
    x = tl.tensor([1.0, -1.0, 2.0], requires_grad=True)
    (x * 3.0).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2, 3 - 2, 3 + 4])


def test_reused_input_sums_its_gradient_paths():
    x = tl.tensor([0.5, 1.5], requires_grad=True)
    y = x * x.exp() + x  # x used three times
    y.sum().backward()
    v = np.array([0.5, 1.5])
    np.testing.assert_allclose(x.grad.numpy(), np.exp(v) * (1 + v) + 1, rtol=1e-6)


def test_backward_with_explicit_gradient():
    x = tl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x * 2.0
    y.backward(tl.tensor([[1.0, 0.0], [0.5, 2.0]]))
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 0.0], [1.0, 4.0]])


def test_multi_output_node_gets_each_outputs_summed_gradient(device):
    """attach_many: an op of many outputs, each used several times (one not at all), runs
    its backward once per walk with each output's gradient the sum of what reached it;
    a second walk (retain_graph) starts from nothing again."""
    from tensorlite.autograd import attach_many
    x = tl.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    n = 40
    outs = [(x * float(i)).detach() for i in range(n)]
    seen = []

    def backward_fn(grads):
        seen.append([None if g is None else g.numpy() for g in grads])
        return (sum(g * float(i) for i, g in enumerate(grads) if g is not None),)
    attach_many(outs, (x,), backward_fn, "multi")
    loss = sum((o * float(i + 1)).sum() + (o * 2.0).sum() for i, o in enumerate(outs) if i != 5) + outs[7].sum()
    want = [None if i == 5 else np.full(3, i + 3.0 + (i == 7), np.float32) for i in range(n)]
    loss.backward(retain_graph=True)
    loss.backward()
    assert len(seen) == 2
    for grads in seen:
        for got, w in zip(grads, want):
            assert (got is None) == (w is None)
            if w is not None:
                np.testing.assert_array_equal(got, w)
    per_walk = sum(i * (i + 3.0 + (i == 7)) for i in range(n) if i != 5)
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2 * per_walk), rtol=1e-6)


def test_backward_of_non_scalar_needs_gradient():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(tl.TensorliteError, match="scalar"):
        (x * 2.0).backward()


def test_backward_without_grad_raises():
    with pytest.raises(tl.TensorliteError, match="does not require grad"):
        tl.tensor([1.0]).sum().backward()


def test_no_grad_records_nothing():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    with tl.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.is_leaf
    assert tl.is_grad_enabled()

    @tl.no_grad()
    def f(t):
        return t * 3.0
    assert not f(x).requires_grad


def test_detach_cuts_the_graph_and_shares_storage():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and shares_storage(d, x)
    y = (x * d).sum()  # d is a constant here
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])


def test_integer_ops_do_not_track_gradients():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    assert not (x > 1.0).requires_grad
    assert not x.argmax().requires_grad


def test_backward_frees_the_graphs_tensors_without_the_garbage_collector():
    """softmax and add_layer_norm save their own output for the backward: a cycle through
    the output's node, which backward breaks (else every activation of a training step would
    wait for the garbage collector, and a GPU's memory with them)."""
    import gc
    import weakref
    x = tl.randn(4, 8, requires_grad=True)
    r = tl.randn(4, 8, dtype=tl.bfloat16, requires_grad=True)
    was = gc.isenabled()
    gc.disable()
    try:
        y = tl.nn.functional.softmax(x * 2, -1)
        normed, total = tl.nn.functional.add_layer_norm(x, r, 8, dtype=tl.bfloat16)
        alive = [weakref.ref(t._storage) for t in (y, normed, total)]
        (y.sum() + normed.float().sum() + total.sum()).backward()
        del y, normed, total
        assert [ref() is None for ref in alive] == [True, True, True]
        # an activation while the loss is still referenced (a training loop's last loss, kept
        # through the next step's forward): freed by the backward, as PyTorch frees what it saved
        w = tl.randn(8, 8, requires_grad=True)
        h = (tl.randn(4, 8) @ w).relu()
        activation = weakref.ref(h._storage)
        loss = (h * 2).sum()
        del h
        loss.backward()
        assert activation() is None and w.grad is not None
        with pytest.raises(tl.TensorliteError, match="freed by an earlier backward"):
            loss.backward()
    finally:
        if was:
            gc.enable()
