"""The autograd API a PyTorch user reaches for, on every device against torch (CPU, float64):
retain_grad, tensor hooks, tl.autograd.grad / backward, create_graph (higher derivatives and a
gradient penalty), custom autograd.Function, grad modes; and the errors of each."""
import gc

import numpy as np
import pytest

import tensorlite as tl
from conftest import assert_close
from tensorlite import autograd as ag

torch = pytest.importorskip("torch")


def pair(a, device, dtype=tl.float32):
    """(tensorlite leaf on device, torch float64 leaf) of the same values, both requiring grad."""
    a = np.asarray(a, dtype=np.float64)
    return (tl.tensor(a, dtype=dtype, device=device, requires_grad=True),
            torch.tensor(a, dtype=torch.float64, requires_grad=True))


def close(t, ref, terms=4):
    assert t is not None, "no gradient"
    assert_close(t, ref.detach().numpy(), dtype=t.dtype, terms=terms, check_dtype=False)


# ---- retain_grad and .grad ------------------------------------------------------------------

def test_retain_grad_gives_non_leaf_grad_and_accumulates(device, rng):
    v = rng.uniform(-1, 1, (3, 4))
    (x, tx) = pair(v, device)
    y, ty = (x * 2).tanh(), (tx * 2).tanh()
    z, tz = y * 3, ty * 3
    assert y.grad is None and not y.retains_grad and not x.retains_grad
    y.retain_grad()
    ty.retain_grad()
    assert y.retains_grad and not z.retains_grad
    for _ in range(2):  # a retained grad accumulates, as a leaf's
        (z * z).sum().backward(retain_graph=True)
        (tz * tz).sum().backward(retain_graph=True)
    close(y.grad, ty.grad)
    close(x.grad, tx.grad)
    assert z.grad is None  # not retained: None, without a warning
    assert y.grad.requires_grad is False


def test_retain_grad_follows_an_in_place_op_and_hooks_stay(device):
    """As PyTorch: retain_grad gives the gradient of the tensor's new value, a hook registered
    before the in-place op gets the old value's."""
    seen = []
    x = tl.ones(2, device=device, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: seen.append(g.tolist()))
    y.mul_(3.0)
    (y * y).sum().backward()
    assert y.retains_grad and y.grad.tolist() == [12.0, 12.0] and seen == [[36.0, 36.0]]


def test_retain_grad_on_leaf_is_a_no_op_and_needs_grad(device):
    x = tl.ones(2, device=device, requires_grad=True)
    x.retain_grad()
    assert not x.retains_grad and x.is_leaf
    with pytest.raises(tl.TensorliteError, match="retain_grad.*does not require grad"):
        tl.ones(2, device=device).retain_grad()


def test_leaf_grads_are_distinct_contiguous_tensors(device):
    """A first gradient that another leaf, the seed or a broadcast shares is copied (in-place
    updates of one .grad never show in another)."""
    x = tl.ones(3, device=device, requires_grad=True)
    w = tl.ones(3, device=device, requires_grad=True)
    (x + w).sum().backward()
    assert x.grad is not w.grad and x.grad.is_contiguous()
    x.grad.mul_(3.0)
    assert w.grad.tolist() == [1.0, 1.0, 1.0] and x.grad.tolist() == [3.0, 3.0, 3.0]
    s = tl.tensor([1.0, 2.0, 3.0], device=device)
    x.grad = None
    x.backward(s)
    s.add_(1.0)
    assert x.grad.tolist() == [1.0, 2.0, 3.0]


# ---- hooks ------------------------------------------------------------------------------

def test_hooks_order_replacement_and_retain_against_torch(device, rng):
    v = rng.uniform(-1, 1, (2, 3))
    x, tx = pair(v, device)
    seen, tseen, ys = [], [], []
    for t, s in ((x, seen), (tx, tseen)):
        t.register_hook(lambda g, s=s: s.append(("x", g.tolist())) or g * 10)
        y = t.sin() * 2
        y.retain_grad()
        y.register_hook(lambda g, s=s: s.append(("y1", g.tolist())) or g + 1)
        y.register_hook(lambda g, s=s: s.append(("y2", g.tolist())))  # None: keeps the gradient
        y.register_hook(lambda g, s=s: g * 3)
        (y * y).sum().backward()
        ys.append(y)
    assert [n for n, _ in seen] == [n for n, _ in tseen] == ["y1", "y2", "x"]
    for (_, a), (_, b) in zip(seen, tseen):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    close(ys[0].grad, ys[1].grad)  # the retained grad is the hooks' result
    close(x.grad, tx.grad)      # a leaf's hook runs before accumulation


def test_hook_handle_remove_and_context(device):
    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    h = x.register_hook(lambda g: g * 0)
    with x.register_hook(lambda g: g + 5):  # after the first: (g * 0) + 5
        x.sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]
    h.remove()
    h.remove()  # twice is fine
    x.grad = None
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_hook_on_input_of_autograd_grad_runs(device):
    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    x.register_hook(lambda g: g * 10)
    assert ag.grad((x * x).sum(), x)[0].tolist() == [20.0, 40.0]
    assert x.grad is None


def test_hook_errors(device):
    with pytest.raises(tl.TensorliteError, match="register_hook.*does not require grad"):
        tl.ones(2, device=device).register_hook(lambda g: g)
    x = tl.ones(2, device=device, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: tl.ones(3, device=device))
    with pytest.raises(tl.ShapeError, match=r"hook '<lambda>' returned a gradient of shape \(3,\) for a tensor "
                                            r"of shape \(2,\)"):
        y.sum().backward()


def test_hooks_die_with_their_tensor(device):
    gc.collect()
    before = len(ag._HOOKS)
    x = tl.ones(2, device=device, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g)
    y.retain_grad()
    x.register_hook(lambda g: g)
    assert len(ag._HOOKS) == before + 2 and len(ag._RETAINED) == 1
    del x, y
    gc.collect()
    assert len(ag._HOOKS) == before and len(ag._RETAINED) == 0


# ---- autograd.grad and autograd.backward --------------------------------------------------------

def test_grad_matches_torch_and_leaves_grad_alone(device, rng):
    xv, wv = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 2))
    (x, tx), (w, tw) = pair(xv, device), pair(wv, device)
    h, th = (x @ w).tanh(), (tx @ tw).tanh()
    out, tout = [h.sum(), (h * h).mean()], [th.sum(), (th * th).mean()]
    g = ag.grad(out, [w, h, x], grad_outputs=[None, tl.tensor(2.0, device=device)], retain_graph=True)
    tg = torch.autograd.grad(tout, [tw, th, tx], grad_outputs=[None, torch.tensor(2.0, dtype=torch.float64)],
                             retain_graph=True)
    assert isinstance(g, tuple) and len(g) == 3
    for a, b in zip(g, tg):
        close(a, b)
    assert x.grad is None and w.grad is None and h.grad is None
    assert not any(t.requires_grad for t in g)  # no create_graph: plain values
    # the same tensor twice, and a non-scalar output with its gradient
    g2 = ag.grad(h, (x, x), tl.ones_like(h))
    close(g2[0], torch.autograd.grad(th, tx, torch.ones_like(th))[0])
    assert g2[0].tolist() == g2[1].tolist()


def test_grad_unused_inputs(device):
    x, y = (tl.tensor([1.0, 2.0], device=device, requires_grad=True) for _ in range(2))
    out = (x * 3).sum()
    with pytest.raises(tl.TensorliteError, match="differentiated tensor at index 1 was not used in the graph; "
                                                 "pass allow_unused=True"):
        ag.grad(out, [x, y], retain_graph=True)
    gx, gy = ag.grad(out, [x, y], retain_graph=True, allow_unused=True)
    assert gx.tolist() == [3.0, 3.0] and gy is None
    gx, gy = ag.grad(out, [x, y], materialize_grads=True)
    assert gy.tolist() == [0.0, 0.0]


def test_grad_errors(device):
    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(tl.TensorliteError, match="element 0 of tensors does not require grad"):
        ag.grad(tl.ones(1, device=device).sum(), x)
    with pytest.raises(tl.TensorliteError, match="one of the differentiated tensors does not require grad"):
        ag.grad((x * 2).sum(), tl.ones(2, device=device))
    with pytest.raises(tl.TensorliteError, match=r"implicitly created only for scalar \(one-element\) outputs"):
        ag.grad(x * 2, x)
    with pytest.raises(tl.ShapeError, match="the gradient must have the shape of the tensor"):
        ag.grad(x * 2, x, tl.ones(3, device=device))
    with pytest.raises(tl.ArgumentError, match="2 gradients given for 1 outputs"):
        ag.grad(x * 2, x, [None, None])
    with pytest.raises(tl.ArgumentError, match="inputs must be tensors, got a list"):
        ag.grad((x * 2).sum(), [[x]])
    y = (x * x).sum()
    ag.grad(y, x)
    with pytest.raises(tl.TensorliteError, match="graph of .* was freed"):
        ag.grad(y, x)


def test_autograd_backward_and_backward_inputs(device):
    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    w = tl.tensor([3.0, 4.0], device=device, requires_grad=True)
    ag.backward([(x * w).sum(), x * x], [None, tl.tensor([1.0, 10.0], device=device)])
    assert x.grad.tolist() == [3.0 + 2.0, 4.0 + 40.0] and w.grad.tolist() == [1.0, 2.0]
    x.grad = w.grad = None
    (x * w).sum().backward(inputs=[w])  # only w accumulates
    assert x.grad is None and w.grad.tolist() == [1.0, 2.0]


# ---- create_graph: higher derivatives ------------------------------------------------------------

SECOND = {  # name -> (f(x, lib) -> scalar; input shape)
    "cube": (lambda x, m: (x ** 3).sum(), (5,)),
    "sin_exp": (lambda x, m: (x.sin() * x.exp()).sum(), (2, 3)),
    "matmul_sum": (lambda x, m: ((x @ x.mT).tanh() @ x).sum(), (3, 3)),
    "mean_sqrt": (lambda x, m: ((x * x + 1).sqrt().mean(0) ** 2).mean(), (4, 3)),
    "softmax": (lambda x, m: (m.nn.functional.softmax(x, 1) * x).sum(), (3, 4)),
    "log_softmax": (lambda x, m: (m.nn.functional.log_softmax(x, 0) ** 2).sum(), (3, 4)),
    "gelu": (lambda x, m: (m.nn.functional.gelu(x) ** 2).sum(), (6,)),
    "gelu_tanh": (lambda x, m: (m.nn.functional.gelu(x, approximate="tanh") ** 2).sum(), (6,)),
    "silu": (lambda x, m: (m.nn.functional.silu(x) ** 2).sum(), (6,)),
    "sigmoid_div": (lambda x, m: (x.sigmoid() / (x * x + 1)).sum(), (6,)),
    "linear": (lambda x, m: (m.nn.functional.linear(x, x[:2] * 0.5, x[0, :2]) ** 2).sum(), (3, 2)),
    "linear_3d": (lambda x, m: (m.nn.functional.linear(x.reshape(2, 2, 3), x[:2] * 0.5) ** 3).sum(), (4, 3)),
    "vector_norm_2": (lambda x, m: (m.linalg.vector_norm(x, 2, dim=1) ** 3).sum(), (3, 4)),
    "vector_norm_3": (lambda x, m: (m.linalg.vector_norm(x, 3, dim=0) ** 2).sum(), (3, 4)),
    "normalize": (lambda x, m: (m.nn.functional.normalize(x, dim=1) * x).sum(), (3, 4)),
}


@pytest.mark.parametrize("name", SECOND)
def test_second_derivative_matches_torch(device, rng, name):
    f, shape = SECOND[name]
    x, tx = pair(rng.uniform(-1, 1, shape), device)
    g, = ag.grad(f(x, tl), x, create_graph=True)
    tg, = torch.autograd.grad(f(tx, torch), tx, create_graph=True)
    assert g.requires_grad and not g.is_leaf
    close(g, tg)
    v = rng.uniform(-1, 1, shape)  # a Hessian-vector product, through .backward
    (g * tl.tensor(v, dtype=tl.float32, device=device)).sum().backward()
    (tg * torch.tensor(v)).sum().backward()
    close(x.grad, tx.grad, terms=16)


def test_third_derivative_of_cube(device):
    x = tl.tensor([1.0, -2.0, 0.5], device=device, requires_grad=True)
    d1, = ag.grad((x ** 3).sum(), x, create_graph=True)
    d2, = ag.grad(d1.sum(), x, create_graph=True)
    d3, = ag.grad(d2.sum(), x)
    assert d1.tolist() == [3.0, 12.0, 0.75] and d2.tolist() == [6.0, -12.0, 3.0] and d3.tolist() == [6.0] * 3


def test_backward_create_graph_gives_differentiable_grad(device):
    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    gx = x.grad
    assert gx.requires_grad and gx.tolist() == [3.0, 12.0]
    x.grad = None
    gx.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


def test_gradient_penalty_of_an_mlp_matches_torch(device, rng):
    """WGAN-GP: the norm of d critic / d input, penalised, trained through (nn.Linear, tanh, relu)."""
    tl.manual_seed(0)
    net = tl.nn.Sequential(tl.nn.Linear(3, 8), tl.nn.Tanh(), tl.nn.Linear(8, 8), tl.nn.ReLU(),
                           tl.nn.Linear(8, 1)).to(device)
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 1)).double()
    with torch.no_grad():
        for p, tp in zip(net.parameters(), tnet.parameters()):
            tp.copy_(torch.tensor(p.numpy().astype(np.float64)))
    x, tx = pair(rng.uniform(-1, 1, (5, 3)), device)
    losses = []
    for m, inp, lib in ((net, x, tl), (tnet, tx, torch)):
        out = m(inp)
        g, = lib.autograd.grad(out.sum(), inp, create_graph=True)
        penalty = ((((g * g).sum(1) + 1e-12).sqrt() - 1) ** 2).mean()
        loss = out.mean() + 10 * penalty
        loss.backward()
        losses.append(loss.item())
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for p, tp in zip(net.parameters(), tnet.parameters()):
        close(p.grad, tp.grad, terms=16)
    close(x.grad, tx.grad, terms=16)


def test_every_fused_unary_row_has_a_differentiable_backward():
    from tensorlite.op_table import FUSED, UNARY
    assert {op.name for op in UNARY if op.grad == FUSED} <= set(ag._TWICE)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "cross_entropy"])
def test_double_backward_through_a_fused_kernel_raises(device, rng, op):
    F = tl.nn.functional
    x = tl.tensor(rng.uniform(-1, 1, (3, 4)), dtype=tl.float32, device=device, requires_grad=True)
    f = {"layer_norm": lambda: F.layer_norm(x, (4,)).pow(3).sum(),
         "rms_norm": lambda: F.rms_norm(x, (4,)).pow(3).sum(),
         "cross_entropy": lambda: F.cross_entropy(x, tl.tensor([0, 3, 1], device=device))}[op]
    g, = ag.grad(f(), x, create_graph=True)  # the first derivative is fine
    assert_close(g, ag.grad(f(), x)[0].numpy())
    with pytest.raises(tl.TensorliteError, match=f"{op}: its backward is a fused kernel that cannot be "
                                                 "differentiated again"):
        ag.grad(g.sum(), x)


# ---- custom Function ----------------------------------------------------------------------------

class ScaledExp(ag.Function):
    """exp(x * k) (k a Python number) and, as a second output, x * y."""

    @staticmethod
    def forward(ctx, x, k, y):
        e = (x * k).exp()
        ctx.save_for_backward(e, x, y)
        ctx.k = k
        ctx.flags = ctx.needs_input_grad
        return e, x * y

    @staticmethod
    def backward(ctx, ge, gp):
        e, x, y = ctx.saved_tensors
        return ge * e * ctx.k + gp * y, None, gp * x if ctx.needs_input_grad[2] else None


def test_function_two_outputs_non_tensor_arg_needs_input_grad(device, rng):
    (x, tx), (y, ty) = pair(rng.uniform(-1, 1, 4), device), pair(rng.uniform(-1, 1, 4), device)
    e, p = ScaledExp.apply(x, 1.5, y)
    assert e.requires_grad and p.requires_grad and e.grad_fn.name == "ScaledExpBackward"
    assert e.grad_fn is not None and not e.is_leaf
    ((e * p).sum() + e.sum()).backward()
    te, tp = (tx * 1.5).exp(), tx * ty
    ((te * tp).sum() + te.sum()).backward()
    close(x.grad, tx.grad)
    close(y.grad, ty.grad)
    # only one output used: the other's gradient is materialized as zeros
    x.grad = y.grad = None
    e, p = ScaledExp.apply(x, 2.0, y.detach())
    assert not p.requires_grad or p.grad_fn is not None
    e.sum().backward()
    assert_close(x.grad, 2.0 * np.exp(2.0 * x.detach().numpy()))
    assert y.grad is None
    ctxs = []

    class Spy(ag.Function):
        @staticmethod
        def forward(ctx, a, n, b):
            ctxs.append(ctx.needs_input_grad)
            return a * n
        backward = staticmethod(lambda ctx, g: (g, None, None))
    Spy.apply(x, 3, tl.ones(4, device=device))
    with tl.no_grad():
        assert not Spy.apply(x, 3, x).requires_grad
    assert ctxs == [(True, False, False), (False, False, False)]


def test_function_non_differentiable_output_and_materialize(device):
    got = []

    class MaxIdx(ag.Function):
        @staticmethod
        def forward(ctx, x):
            v, i = x.max(0)
            ctx.mark_non_differentiable(i)
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(x, i)
            return v, i

        @staticmethod
        def backward(ctx, gv, gi):
            got.append(gi)
            x, i = ctx.saved_tensors
            return (x * 0).scatter_add(0, i.unsqueeze(0), gv.unsqueeze(0))

    x = tl.tensor([[1.0, 5.0], [3.0, 2.0]], device=device, requires_grad=True)
    v, i = MaxIdx.apply(x)
    assert v.requires_grad and not i.requires_grad
    v.sum().backward()
    assert got == [None] and x.grad.tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_function_is_differentiable_twice_when_its_backward_is(device):
    class Cube(ag.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x * x

    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    d1, = ag.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert ag.grad(d1.sum(), x)[0].tolist() == [6.0, 12.0]


def test_function_setup_context_style_and_returned_input(device):
    class Ident(ag.Function):
        @staticmethod
        def forward(x, scale):
            return x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.scale = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.scale, None

    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)
    y = Ident.apply(x, 4.0)
    assert y is not x and x.is_leaf and not y.is_leaf
    y.sum().backward()
    assert x.grad.tolist() == [4.0, 4.0]
    with tl.no_grad():
        assert not ScaledExp.apply(x, 4.0, x)[0].requires_grad


def test_function_errors(device):
    x = tl.tensor([1.0, 2.0], device=device, requires_grad=True)

    class TooFew(ag.Function):
        forward = staticmethod(lambda ctx, a, k: a * k)
        backward = staticmethod(lambda ctx, g: g)

    class BadShape(ag.Function):
        forward = staticmethod(lambda ctx, a: a * 2)
        backward = staticmethod(lambda ctx, g: g.sum())

    class GradForNumber(ag.Function):
        forward = staticmethod(lambda ctx, a, k: a * k)
        backward = staticmethod(lambda ctx, g: (g, g))

    with pytest.raises(tl.TensorliteError, match="TooFew.backward returned 1 gradients; expected 2"):
        TooFew.apply(x, 2.0).sum().backward()
    with pytest.raises(tl.ShapeError, match=r"BadShape.backward\(gradient: shape=\(\) .*index 0 must be None or a "
                                            "tensor of its input's shape"):
        BadShape.apply(x).sum().backward()
    with pytest.raises(tl.ShapeError, match="index 1 must be None or a tensor"):
        GradForNumber.apply(x, 2.0).sum().backward()

    class Saver(ag.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * ctx.saved_tensors[0]

    a = tl.tensor([1.0, 2.0], device=device, requires_grad=True) * 1
    out = Saver.apply(a)
    a.add_(1.0)
    with pytest.raises(tl.TensorliteError, match=r"backward of SaverBackward: the float32 tensor of shape \(2,\) "
                                                 ".* was modified by an in-place operation"):
        out.sum().backward()


# ---- grad modes ---------------------------------------------------------------------------------

def test_set_grad_enabled_and_inference_mode(device):
    x = tl.ones(2, device=device, requires_grad=True)
    tl.set_grad_enabled(False)
    try:
        assert not tl.is_grad_enabled() and not (x * 2).requires_grad
    finally:
        tl.set_grad_enabled(True)
    with tl.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with tl.set_grad_enabled(True):
            assert (x * 2).requires_grad
    assert tl.is_grad_enabled()

    @tl.set_grad_enabled(False)
    def f(t):
        return t * 2
    assert tl.is_grad_enabled() and not f(x).requires_grad and tl.is_grad_enabled()
    with tl.inference_mode():
        assert not (x * 2).requires_grad
    for mode, on in ((tl.no_grad, False), (tl.inference_mode, False), (tl.enable_grad, True)):
        with tl.no_grad():
            assert mode(lambda t: t * 2)(x).requires_grad is on  # bare decorators, as PyTorch's
    with tl.no_grad(), tl.inference_mode(False):
        assert not tl.is_grad_enabled()
    assert tl.autograd.grad is ag.grad and tl.autograd.Function is ag.Function and tl.autograd.no_grad is tl.no_grad


def test_a_layers_weight_gradients_come_right_after_its_backward():
    """Backward visits an op's later inputs (weights, bias) before the graph below its first
    input, so a layer's parameter gradients are final (their post-accumulate-grad hooks fire)
    before the layers under it run their backward: what lets DDP start reducing them early."""
    events = []

    class Mark(ag.Function):  # an identity whose backward says when it ran
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            events.append("below")
            return g

    lin1, lin2 = tl.nn.Linear(3, 4), tl.nn.Linear(4, 2)
    for name, p in [("lin1.weight", lin1.weight), ("lin2.weight", lin2.weight), ("lin2.bias", lin2.bias)]:
        p.register_post_accumulate_grad_hook(lambda p, name=name: events.append(name))
    lin2(Mark.apply(lin1(tl.ones(5, 3)))).sum().backward()
    assert events.index("lin2.weight") < events.index("below") and events.index("lin2.bias") < events.index("below")
    assert events.index("below") < events.index("lin1.weight")
