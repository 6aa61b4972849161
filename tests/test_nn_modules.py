"""nn.Module behaviour (registration, traversal, state_dict, to, train/eval), the standard
layers against functional/numpy references, and PyTorch-like initialisation."""
import math
from collections import OrderedDict

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import nn
from conftest import shares_storage


class Block(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("steps", tl.zeros(1, dtype=tl.int64))
        self.register_buffer("cache", tl.ones(d), persistent=False)

    def forward(self, x):
        return x + self.proj(self.norm(x))


class Net(nn.Module):
    def __init__(self, vocab=10, d=4, n=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied, as GPT-2
        self.drop = nn.Dropout(0.5)

    def forward(self, ids):
        x = self.drop(self.emb(ids))
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["emb.weight", "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.proj.weight",
                     "blocks.0.proj.bias", "blocks.1.norm.weight", "blocks.1.norm.bias", "blocks.1.proj.weight",
                     "blocks.1.proj.bias"]  # the tied head weight is listed once
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_buffers()] == ["blocks.0.steps", "blocks.0.cache", "blocks.1.steps",
                                                   "blocks.1.cache"]
    assert [n for n, _ in net.named_children()] == ["emb", "blocks", "head", "drop"]
    assert len(list(net.modules())) == 1 + 1 + 1 + 2 * 3 + 1 + 1
    assert [n for n, _ in net.blocks[0].named_parameters(prefix="b")][:1] == ["b.norm.weight"]
    assert net.blocks[-1] is net.blocks[1] and len(net.blocks) == 2
    assert list(net.head.parameters(recurse=False)) == [net.emb.weight]


def test_state_dict_keys_share_storage_and_skip_non_persistent():
    net = Net()
    sd = net.state_dict()
    assert "blocks.0.steps" in sd and "blocks.0.cache" not in sd
    assert "head.weight" in sd and shares_storage(sd["head.weight"], net.emb.weight)
    assert not sd["emb.weight"].requires_grad


def test_load_state_dict_round_trip_and_errors(rng):
    src, dst = Net(), Net()
    ids = tl.tensor(rng.integers(0, 10, (2, 3)))
    src.eval(), dst.eval()
    assert not np.allclose(src(ids).numpy(), dst(ids).numpy())
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_array_equal(src(ids).numpy(), dst(ids).numpy())
    # the parameter objects survive (an optimizer built earlier keeps working)
    assert dst.blocks[0].proj.weight is dict(dst.named_parameters())["blocks.0.proj.weight"]

    sd = {k: v.numpy() for k, v in src.state_dict().items()}  # numpy values are accepted too
    del sd["blocks.1.proj.bias"]
    sd["extra.weight"] = np.zeros(3, np.float32)
    with pytest.raises(KeyError, match=r"missing keys \['blocks.1.proj.bias'\].*unexpected keys \['extra.weight'\]"):
        dst.load_state_dict(sd)
    result = dst.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["blocks.1.proj.bias"] and result.unexpected_keys == ["extra.weight"]
    sd = dict(src.state_dict())
    sd["blocks.0.proj.weight"] = tl.zeros(4, 5)
    with pytest.raises(tl.ShapeError, match=r"'blocks.0.proj.weight' has shape \(4, 5\) in the checkpoint but "
                                            r"\(4, 4\) in the model"):
        dst.load_state_dict(sd)


def test_load_state_dict_keeps_model_dtype():
    lin = nn.Linear(2, 3)
    lin.load_state_dict({"weight": tl.ones(3, 2, dtype=tl.float64), "bias": np.arange(3.0)})
    assert lin.weight.dtype == tl.float32 and lin.bias.dtype == tl.float32
    np.testing.assert_array_equal(lin.bias.numpy(), [0, 1, 2])


def test_setattr_rules():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m.weight = tl.zeros(2, 2)
    m.bias = None
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'nothing'"):
        _ = m.nothing

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tl.zeros(1))
    with pytest.raises(tl.TensorliteError, match=r"super\(\)\.__init__\(\)"):
        Early()
    seq = nn.Sequential(nn.Linear(2, 2))
    seq.extra = nn.ReLU()
    del seq.extra
    assert [n for n, _ in seq.named_children()] == ["0"]


def test_to_dtype_and_device_keep_identity(device):
    net = Net()
    p = net.blocks[0].proj.weight
    net.to(device, tl.float64)
    assert p is net.blocks[0].proj.weight and p.dtype == tl.float64 and p.device.startswith(device)
    assert net.blocks[0].steps.dtype == tl.int64  # integer buffers keep their dtype
    assert net.head.weight is net.emb.weight  # still tied
    net.eval()
    out = net(tl.tensor([[1, 2]], device=device))
    assert out.dtype == tl.float64 and out.shape == (1, 2, 10)
    net.float()
    assert p.dtype == tl.float32


def test_train_eval_zero_grad_apply_requires_grad():
    net = Net()
    assert net.training and net.blocks[1].norm.training
    net.eval()
    assert not any(m.training for m in net.modules())
    x = tl.ones(3, 4)
    assert net.drop(x) is x
    net.train()
    assert all(m.training for m in net.modules())
    net(tl.tensor([[1, 2]])).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and seen.count("Linear") == 3
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_repr():
    text = repr(nn.Sequential(nn.Linear(3, 4), nn.GELU(approximate="tanh"), nn.Dropout(0.1)))
    assert text == ("Sequential(\n  (0): Linear(in_features=3, out_features=4, bias=True)\n"
                    "  (1): GELU(approximate='tanh')\n  (2): Dropout(p=0.1, inplace=False)\n)")  # torch's text
    assert repr(nn.Parameter(tl.tensor([1.0]))).startswith("Parameter containing:\ntensor(")


def test_containers():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert seq[0] is a and seq[-1] is c and isinstance(seq[1:], nn.Sequential) and len(seq[1:]) == 2
    x = tl.tensor([[1.0, -2.0]])
    np.testing.assert_allclose(seq(x).numpy(), c(b(a(x))).numpy())
    named = nn.Sequential(OrderedDict(first=a, act=b))
    assert [n for n, _ in named.named_children()] == ["first", "act"] and named[1] is b
    ml = nn.ModuleList([a])
    ml.append(c)
    ml.insert(1, b)
    assert list(ml) == [a, b, c] and [n for n, _ in ml.named_children()] == ["0", "1", "2"]
    with pytest.raises(IndexError, match="out of range"):
        ml[3]
    md = nn.ModuleDict({"enc": a})
    md["dec"] = c
    assert "dec" in md and list(md.keys()) == ["enc", "dec"] and md["enc"] is a
    assert [n for n, _ in md.named_parameters()] == ["enc.weight", "enc.bias", "dec.weight", "dec.bias"]


def test_layers_match_functional(device, rng):
    x = tl.tensor(rng.standard_normal((2, 3, 8)), dtype=tl.float32, device=device)
    lin = nn.Linear(8, 5, device=device)
    np.testing.assert_allclose(lin(x).numpy(), x.numpy() @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-5,
                               atol=1e-6)
    ln, rms = nn.LayerNorm((3, 8), device=device), nn.RMSNorm(8, eps=1e-6, device=device)
    np.testing.assert_allclose(ln(x).numpy(), F.layer_norm(x, (3, 8)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(rms(x).numpy(), F.rms_norm(x, 8, eps=1e-6).numpy(), rtol=1e-6)
    assert nn.LayerNorm(8, elementwise_affine=False).weight is None and nn.LayerNorm(8, bias=False).bias is None
    img = tl.tensor(rng.standard_normal((2, 3, 6, 6)), dtype=tl.float32, device=device)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, device=device)
    np.testing.assert_allclose(conv(img).numpy(), tl.conv2d(img, conv.weight, conv.bias, 2, 1).numpy(), rtol=1e-6)
    conv1 = nn.Conv1d(3, 2, 2, bias=False, device=device)
    assert conv1(img[:, :, 0]).shape == (2, 2, 5)
    pooled = nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False), nn.Flatten())
    assert pooled(img).shape == (2, 3 * 3 * 3)
    for act, fn in [(nn.ReLU(), F.relu), (nn.SiLU(), F.silu), (nn.Tanh(), F.tanh), (nn.Sigmoid(), F.sigmoid),
                    (nn.GELU(), F.gelu), (nn.Softmax(1), lambda t: F.softmax(t, 1)), (nn.Identity(), lambda t: t)]:
        np.testing.assert_array_equal(act(x).numpy(), fn(x).numpy())


def test_module_gradients_on_device_match_cpu(device, rng):
    tl.manual_seed(0)
    cpu_net = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3))
    dev_net = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3)).to(device)
    dev_net.load_state_dict(cpu_net.state_dict())
    x, y = rng.standard_normal((5, 6)), rng.integers(0, 3, 5)
    for net, dev in ((cpu_net, "cpu"), (dev_net, device)):
        F.cross_entropy(net(tl.tensor(x, dtype=tl.float32, device=dev)), tl.tensor(y, device=dev)).backward()
    for (name, p), q in zip(cpu_net.named_parameters(), dev_net.parameters()):
        assert q.grad.device == q.device
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


# ---- initialisation ------------------------------------------------------------------

def test_linear_and_conv_init_bounds():
    tl.manual_seed(1)
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)  # kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    w = lin.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(lin.bias.numpy()).max() <= bound
    conv = nn.Conv2d(8, 16, 3)
    cb = 1 / math.sqrt(8 * 9)
    assert np.abs(conv.weight.numpy()).max() <= cb and np.abs(conv.bias.numpy()).max() <= cb
    assert conv.weight.shape == (16, 8, 3, 3)


def test_embedding_and_norm_init():
    tl.manual_seed(2)
    emb = nn.Embedding(1000, 64, padding_idx=-1)
    w = emb.weight.numpy()
    assert abs(w[:-1].mean()) < 0.01 and abs(w[:-1].std() - 1) < 0.01
    assert emb.padding_idx == 999 and not w[999].any()
    ln = nn.LayerNorm(5)
    np.testing.assert_array_equal(ln.weight.numpy(), 1.0)
    np.testing.assert_array_equal(ln.bias.numpy(), 0.0)
    np.testing.assert_array_equal(nn.RMSNorm(5).weight.numpy(), 1.0)


def test_init_functions():
    from tensorlite.nn import init
    tl.manual_seed(3)
    t = nn.Parameter(tl.empty(200, 300))
    init.xavier_uniform_(t)
    b = math.sqrt(6 / 500)
    assert np.abs(t.numpy()).max() <= b and t.requires_grad and t.is_leaf
    init.normal_(t, 2.0, 0.5)
    assert abs(t.numpy().mean() - 2) < 0.01 and abs(t.numpy().std() - 0.5) < 0.01
    init.trunc_normal_(t, std=1.0, a=-1.0, b=1.0)
    assert np.abs(t.numpy()).max() <= 1.0
    init.kaiming_normal_(t, nonlinearity="relu")
    assert abs(t.numpy().std() - math.sqrt(2 / 300)) < 0.01 * math.sqrt(2 / 300) * 10
    init.zeros_(t)
    assert not t.numpy().any()
    with pytest.raises(tl.ShapeError, match="at least 2 dims"):
        init.xavier_uniform_(tl.empty(3))
