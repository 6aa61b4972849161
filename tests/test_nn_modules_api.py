"""torch.nn modules a PyTorch user expects (losses, attention, transformers, recurrent layers,
normalisation, transposed convolutions, activations, parameter containers) and the Module
API around them (hooks, get_submodule, named_modules): each built with the same arguments
in torch.nn and tensorlite.nn, torch's state_dict loaded into ours, outputs and gradients
(inputs and parameters) compared on every device."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite import nn

torch = pytest.importorskip("torch")


def _flat(out):
    """Tensors of a (nested) output, Nones left out."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [] if out is None else [out]


class Const:
    """An input given to both sides without a gradient (float masks, targets)."""

    def __init__(self, a):
        self.a = a


def _tl_input(a, device):
    if isinstance(a, Const):
        return tl.tensor(a.a, device=device)
    return tl.tensor(a, device=device, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a


def _torch_input(a):
    if isinstance(a, Const):
        return torch.tensor(a.a)
    return torch.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a


def compare(device, build, inputs, call=None, train=False, tol=1e-4, rng=None):
    """Build the module in torch.nn and tensorlite.nn, load torch's state_dict into ours,
    and compare the outputs, then the gradients of a random weighting of every output with
    respect to the float inputs and to every parameter. Returns (ours, torch's) modules."""
    call = call or (lambda m, *a: m(*a))
    tm, m = build(torch.nn), build(nn)
    assert list(m.state_dict()) == list(tm.state_dict())
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    m.to(device).train(train), tm.train(train)
    xs, txs = [_tl_input(a, device) for a in inputs], [_torch_input(a) for a in inputs]
    outs, touts = _flat(call(m, *xs)), _flat(call(tm, *txs))
    assert len(outs) == len(touts)
    rng = rng or np.random.default_rng(0)
    loss, tloss = 0.0, 0.0
    for o, to in zip(outs, touts):
        assert tuple(o.shape) == tuple(to.shape)
        np.testing.assert_allclose(o.numpy(), to.detach().numpy(), rtol=tol, atol=tol)
        if to.requires_grad:
            w = rng.standard_normal(tuple(to.shape)).astype(np.float32)
            loss, tloss = loss + (o * tl.tensor(w, device=device)).sum(), tloss + (to * torch.tensor(w)).sum()
    if isinstance(loss, tl.Tensor):
        loss.backward(), tloss.backward()
        for x, tx in zip(xs, txs):
            if isinstance(tx, torch.Tensor) and tx.requires_grad:
                np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)
        tgrads = {k: p.grad for k, p in tm.named_parameters()}
        for k, p in m.named_parameters():
            if tgrads[k] is not None:
                np.testing.assert_allclose(p.grad.numpy(), tgrads[k].numpy(), rtol=tol, atol=tol, err_msg=k)
    return m, tm


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- state-dict names ----------------------------------------------------------------------------

STRUCTURES = {
    "mha": lambda nn: nn.MultiheadAttention(8, 2),
    "mha_kdim_vdim_nobias": lambda nn: nn.MultiheadAttention(8, 4, bias=False, kdim=3, vdim=5),
    "encoder_layer": lambda nn: nn.TransformerEncoderLayer(8, 2, 16),
    "decoder_layer_gelu": lambda nn: nn.TransformerDecoderLayer(8, 2, 16, activation=nn.GELU(), bias=False),
    "encoder": lambda nn: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, norm=nn.LayerNorm(8),
                                               enable_nested_tensor=False),
    "decoder": lambda nn: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2),
    "transformer": lambda nn: nn.Transformer(8, 2, 2, 1, 16, bias=False),
    "lstm_proj": lambda nn: nn.LSTM(4, 5, 2, bidirectional=True, proj_size=3),
    "gru_nobias": lambda nn: nn.GRU(4, 5, 3, bias=False),
    "rnn_relu": lambda nn: nn.RNN(4, 5, 2, "relu"),
    "cells": lambda nn: nn.ModuleList([nn.RNNCell(3, 4), nn.LSTMCell(3, 4), nn.GRUCell(3, 4, bias=False)]),
    "norms_convs": lambda nn: nn.Sequential(nn.GroupNorm(2, 4), nn.ConvTranspose2d(4, 6, 3, groups=2),
                                            nn.ConvTranspose1d(2, 3, 2, bias=False), nn.PReLU(3)),
}


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_state_dict_names_and_shapes_match_torch(name):
    ours, theirs = STRUCTURES[name](nn).state_dict(), STRUCTURES[name](torch.nn).state_dict()
    assert [(k, tuple(v.shape)) for k, v in ours.items()] == [(k, tuple(v.shape)) for k, v in theirs.items()]


def test_initialisation_is_torchs():
    """Distributions as torch's: MHA in_proj xavier, zero biases; RNN weights U(+-1/sqrt(hidden));
    ConvTranspose's fan_in from weight dim 1 (out_channels / groups) times the kernel."""
    tl.manual_seed(0)
    up = nn.ConvTranspose2d(4, 64, 3, groups=2)
    assert 0.9 / (32 * 9) ** 0.5 < abs(up.weight.numpy()).max() <= 1 / (32 * 9) ** 0.5
    mha, lstm = nn.MultiheadAttention(64, 4), nn.LSTM(8, 16)
    bound = (6 / (64 + 192)) ** 0.5
    w = mha.in_proj_weight.numpy()
    assert abs(w).max() <= bound and abs(w).max() > 0.9 * bound
    assert not mha.in_proj_bias.numpy().any() and not mha.out_proj.bias.numpy().any()
    for p in lstm.parameters():
        assert abs(p.numpy()).max() <= 0.25 and abs(p.numpy()).max() > 0.2


# ---- attention -----------------------------------------------------------------------------------

MHA_CASES = {
    "plain": dict(kw={}, call={}),
    "batch_first_bool_masks": dict(kw=dict(batch_first=True), call=dict(attn_mask="causal", key_padding_mask="bool")),
    "float_masks_per_head": dict(kw={}, call=dict(attn_mask="float3d", key_padding_mask="float",
                                                  average_attn_weights=False)),
    "no_weights_kdim_vdim": dict(kw=dict(kdim=3, vdim=5, bias=False), call=dict(need_weights=False)),
    "is_causal_hint": dict(kw={}, call=dict(attn_mask="causal", is_causal=True, need_weights=False)),
    "unbatched": dict(kw={}, call=dict(attn_mask="causal"), unbatched=True),
}


@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention_matches_torch(device, rng, case):
    spec = MHA_CASES[case]
    E, H, L, S, N = 8, 2, 5, 6, 3
    kw, bf = spec["kw"], spec["kw"].get("batch_first", False)
    shape = (lambda n, d: (n, d)) if spec.get("unbatched") else (lambda n, d: (N, n, d) if bf else (n, N, d))
    q, k, v = (randn(rng, *shape(n, d)) for n, d in ((L, E), (S, kw.get("kdim", E)), (S, kw.get("vdim", E))))
    extra = dict(spec["call"])
    masks = {"causal": np.triu(np.ones((L, S), bool), 1), "bool": np.arange(S)[None, :] >= np.array([[6], [4], [3]]),
             "float3d": randn(rng, N * H, L, S), "float": np.where(np.arange(S)[None] >= [[6], [4], [3]], -1e9,
                                                                   0).astype(np.float32)}
    names = [n for n in ("attn_mask", "key_padding_mask") if n in extra]
    mask_arrays = [Const(masks[extra.pop(n)]) for n in names]  # no gradient for float masks

    def call(m, q, k, v, *ms):
        return m(q, k, v, **dict(zip(names, ms)), **extra)
    compare(device, lambda nn: nn.MultiheadAttention(E, H, **kw), [q, k, v] + mask_arrays, call, rng=rng)


def test_multihead_attention_dropout_train_and_eval(device, rng):
    """In training the returned weights are the dropped-out ones (zeros or scaled by 1/(1-p));
    in eval mode dropout is off and matches torch."""
    x = randn(rng, 4, 2, 8)
    m, _ = compare(device, lambda nn: nn.MultiheadAttention(8, 2, dropout=0.5), [x, x, x])
    xt = tl.tensor(x, device=device)
    _, w_eval = m(xt, xt, xt, average_attn_weights=False)
    m.train()
    tl.manual_seed(1)
    _, w_train = m(xt, xt, xt, average_attn_weights=False)
    we, wt = w_eval.numpy(), w_train.numpy()
    dropped = wt == 0
    assert dropped.any() and (~dropped).any()
    np.testing.assert_allclose(wt[~dropped], 2 * we[~dropped], rtol=1e-5)


def test_multihead_attention_bad_input():
    with pytest.raises(tl.ShapeError, match="embed_dim .10. must be divisible by num_heads .3."):
        nn.MultiheadAttention(10, 3)
    m = nn.MultiheadAttention(8, 2)
    with pytest.raises(tl.ShapeError, match="MultiheadAttention.*expected \\(L, N, E\\)"):
        m(tl.ones(2, 3, 4, 8), tl.ones(2, 3, 4, 8), tl.ones(2, 3, 4, 8))
    with pytest.raises(tl.ShapeError, match="E = 8"):
        m(tl.ones(3, 2, 6), tl.ones(3, 2, 6), tl.ones(3, 2, 6))
    with pytest.raises(tl.ShapeError, match="attn_mask.*expected shape \\(3, 3\\)"):
        m(tl.ones(3, 2, 8), tl.ones(3, 2, 8), tl.ones(3, 2, 8), attn_mask=tl.ones(3, 4, dtype=tl.bool))
    with pytest.raises(tl.ShapeError, match="key_padding_mask.*expected shape \\(2, 3\\)"):
        m(tl.ones(3, 2, 8), tl.ones(3, 2, 8), tl.ones(3, 2, 8), key_padding_mask=tl.ones(3, 2, dtype=tl.bool))
    with pytest.raises(tl.DTypeError, match="key_padding_mask.*int64.*masks must be bool or floating point"):
        m(tl.ones(3, 2, 8), tl.ones(3, 2, 8), tl.ones(3, 2, 8), key_padding_mask=tl.zeros(2, 3, dtype=tl.int64))
    with pytest.raises(tl.ShapeError, match="query and key batch sizes differ"):
        m(tl.ones(3, 2, 8), tl.ones(3, 4, 8), tl.ones(3, 4, 8))
    with pytest.raises(tl.ArgumentError, match="add_bias_kv"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)


# ---- transformers --------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first, activation, batch_first", [(False, "relu", False), (True, "gelu", True)])
def test_transformer_encoder_matches_torch(device, rng, norm_first, activation, batch_first):
    N, L, E = 2, 5, 8
    x = randn(rng, *((N, L, E) if batch_first else (L, N, E)))
    causal = np.triu(np.ones((L, L), bool), 1)
    pad = np.array([[False] * L, [False] * 3 + [True] * 2])

    def build(nn):
        layer = nn.TransformerEncoderLayer(E, 2, 16, dropout=0.1, activation=activation, batch_first=batch_first,
                                           norm_first=norm_first)
        return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E), enable_nested_tensor=False)
    compare(device, build, [x, causal, pad],
            lambda m, x, mask, pad: m(x, mask=mask, src_key_padding_mask=pad), rng=rng)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decoder_matches_torch(device, rng, norm_first):
    N, L, S, E = 2, 4, 6, 8
    tgt, mem = randn(rng, L, N, E), randn(rng, S, N, E)
    causal = np.triu(np.ones((L, L), bool), 1)
    mem_pad = np.array([[False] * S, [False] * 4 + [True] * 2])

    def build(nn):
        return nn.TransformerDecoder(nn.TransformerDecoderLayer(E, 2, 16, norm_first=norm_first, activation="gelu"), 2)
    compare(device, build, [tgt, mem, causal, mem_pad],
            lambda m, t, mem, c, p: m(t, mem, tgt_mask=c, memory_key_padding_mask=p), rng=rng)
    # an activation module (not in a TransformerDecoder: torch's deepcopy of such a layer turns
    # its activation into relu, torch's __setstate__ default, which tensorlite does not copy)
    compare(device, lambda nn: nn.TransformerDecoderLayer(E, 2, 16, norm_first=norm_first, activation=nn.GELU()),
            [tgt, mem], rng=rng)


def test_transformer_model_matches_torch(device, rng):
    src, tgt = randn(rng, 2, 6, 8), randn(rng, 2, 4, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    pad = np.array([[False] * 6, [False] * 5 + [True]])

    def build(nn):
        return nn.Transformer(8, 2, 2, 1, 16, batch_first=True, norm_first=True, activation="gelu")
    compare(device, build, [src, tgt, Const(mask.numpy()), pad], lambda m, s, t, mask, pad: m(
        s, t, tgt_mask=mask, src_key_padding_mask=pad, memory_key_padding_mask=pad), rng=rng)
    with pytest.raises(tl.ShapeError, match="src and tgt need d_model = 8 features and one batch size"):
        build(nn)(tl.ones(2, 6, 8), tl.ones(3, 4, 8))


def test_transformer_dropout_only_in_training(device, rng):
    x = tl.tensor(randn(rng, 4, 2, 8), device=device)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5).to(device)
    layer.eval()
    a, b = layer(x), layer(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    layer.train()
    c, d = layer(x), layer(x)
    assert not np.allclose(c.numpy(), d.numpy()) and not np.allclose(a.numpy(), c.numpy())


def test_transformer_layer_bad_input():
    with pytest.raises(tl.ArgumentError, match="activation should be 'relu', 'gelu' or a callable, not 'tanh'"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(tl.ShapeError, match="divisible by num_heads"):
        nn.TransformerDecoderLayer(8, 3)


# ---- recurrent layers ----------------------------------------------------------------------------

RNN_CASES = {
    "lstm_2layer_bidir": (lambda nn: nn.LSTM(3, 4, 2, bidirectional=True), {}),
    "lstm_batch_first_h0_proj": (lambda nn: nn.LSTM(3, 5, 2, batch_first=True, proj_size=2), {"h0": True}),
    "gru_bidir_batch_first_h0": (lambda nn: nn.GRU(3, 4, 2, batch_first=True, bidirectional=True), {"h0": True}),
    "gru_nobias": (lambda nn: nn.GRU(3, 4, bias=False), {}),
    "rnn_relu_bidir": (lambda nn: nn.RNN(3, 4, 2, "relu", bidirectional=True), {}),
    "rnn_tanh_unbatched_h0": (lambda nn: nn.RNN(3, 4, 2), {"unbatched": True, "h0": True}),
    "lstm_unbatched": (lambda nn: nn.LSTM(3, 4, bidirectional=True), {"unbatched": True, "h0": True}),
}


@pytest.mark.parametrize("case", list(RNN_CASES))
def test_recurrent_layers_match_torch(device, rng, case):
    build, opt = RNN_CASES[case]
    proto = build(nn)
    L, N, D = 5, 2, 2 if proto.bidirectional else 1
    x = randn(rng, L, 3) if opt.get("unbatched") else randn(rng, *((N, L, 3) if proto.batch_first else (L, N, 3)))
    inputs = [x]
    if opt.get("h0"):
        batch = () if opt.get("unbatched") else (N,)
        inputs.append(randn(rng, D * proto.num_layers, *batch, proto.proj_size or proto.hidden_size))
        if proto.mode == "LSTM":
            inputs.append(randn(rng, D * proto.num_layers, *batch, proto.hidden_size))

    def call(m, x, *h):
        return m(x) if not h else m(x, tuple(h) if len(h) == 2 else h[0])
    compare(device, build, inputs, call, rng=rng)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(device, rng, kind, batched):
    batch = (3,) if batched else ()
    inputs = [randn(rng, *batch, 4), randn(rng, *batch, 5)] + ([randn(rng, *batch, 5)] if kind == "LSTMCell" else [])

    def call(m, x, *h):  # two steps: from zeros, then from the given state
        first = m(x)
        return first, m(x, tuple(h) if len(h) == 2 else h[0])
    compare(device, lambda nn: getattr(nn, kind)(4, 5), inputs, call, rng=rng)


def test_rnn_dropout_between_layers(device, rng):
    x = tl.tensor(randn(rng, 6, 2, 3), device=device)
    m = nn.GRU(3, 8, 3, dropout=0.5).to(device)
    m.eval()
    np.testing.assert_array_equal(m(x)[0].numpy(), m(x)[0].numpy())
    m.train()
    assert not np.allclose(m(x)[0].numpy(), m(x)[0].numpy())
    with pytest.warns(UserWarning, match="dropout applies between layers only"):
        nn.LSTM(3, 4, dropout=0.2)


def test_recurrent_bad_input():
    m = nn.LSTM(3, 4, 2)
    with pytest.raises(tl.ShapeError, match="LSTM.*expected \\(L, N, 3\\)"):
        m(tl.ones(5, 2, 4))
    with pytest.raises(tl.ShapeError, match="LSTM.*expected \\(L, N, 3\\)"):
        m(tl.ones(5))
    with pytest.raises(tl.ArgumentError, match="hx must be a pair"):
        m(tl.ones(5, 2, 3), tl.zeros(2, 2, 4))
    with pytest.raises(tl.ShapeError, match="expected hidden state \\(2, 2, 4\\)"):
        m(tl.ones(5, 2, 3), (tl.zeros(1, 2, 4), tl.zeros(2, 2, 4)))
    with pytest.raises(tl.ArgumentError, match="nonlinearity must be 'tanh' or 'relu'"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(tl.ArgumentError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(tl.ArgumentError, match="proj_size"):
        nn.RNNBase("GRU", 3, 4, proj_size=2)
    with pytest.raises(tl.ShapeError, match="GRUCell.*expected \\(N, 4\\)"):
        nn.GRUCell(4, 5)(tl.ones(2, 3))
    with pytest.raises(tl.ShapeError, match="expected a hidden state \\(2, 5\\)"):
        nn.GRUCell(4, 5)(tl.ones(2, 4), tl.ones(3, 5))


# ---- normalisation, convolutions, small layers -------------------------------------------------

def test_conv_transpose_match_torch(device, rng):
    compare(device, lambda nn: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
            [randn(rng, 2, 4, 5, 5)], rng=rng)
    compare(device, lambda nn: nn.ConvTranspose1d(3, 2, 3, stride=2, dilation=2), [randn(rng, 2, 3, 7)], rng=rng)
    compare(device, lambda nn: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1), [randn(rng, 1, 2, 4, 4)],
            lambda m, x: m(x, output_size=[8, 8]), rng=rng)


def test_conv_transpose_bad_output_size():
    m = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    with pytest.raises(tl.ShapeError, match="requested output size \\(9, 8\\).*range from \\(7, 7\\) to \\(8, 8\\)"):
        m(tl.ones(1, 2, 4, 4), output_size=(9, 8))
    with pytest.raises(tl.ArgumentError, match="padding_mode='zeros'"):
        nn.ConvTranspose2d(2, 3, 3, padding_mode="reflect")


def test_group_norm_and_prelu_match_torch(device, rng):
    compare(device, lambda nn: nn.GroupNorm(3, 6), [randn(rng, 2, 6, 4, 3)], rng=rng)
    compare(device, lambda nn: nn.GroupNorm(2, 4, affine=False), [randn(rng, 3, 4, 5)], rng=rng)
    compare(device, lambda nn: nn.PReLU(3, init=0.1), [randn(rng, 2, 3, 4)], rng=rng)
    compare(device, lambda nn: nn.PReLU(), [randn(rng, 5)], rng=rng)
    with pytest.raises(tl.ShapeError, match="prelu.*weight must have 1 or 4 elements"):
        nn.PReLU(3)(tl.ones(2, 4))
    with pytest.raises(tl.ShapeError, match="num_channels \\(6\\) must be divisible by num_groups \\(4\\)"):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("track", [False, True])
def test_instance_norm_matches_torch(device, rng, track):
    for build, shape in ((lambda nn: nn.InstanceNorm2d(3, affine=True, track_running_stats=track), (2, 3, 4, 5)),
                         (lambda nn: nn.InstanceNorm1d(3, momentum=0.3, track_running_stats=track), (3, 6))):
        m, tm = compare(device, build, [randn(rng, *shape)], train=True, rng=rng)
        for k, v in tm.state_dict().items():  # the running statistics after one training step
            np.testing.assert_allclose(m.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
        if track:  # eval normalises with the running statistics
            compare(device, build, [randn(rng, *shape)], rng=rng)
    with pytest.raises(tl.ShapeError, match="InstanceNorm2d: expected a 3-D or 4-D input"):
        nn.InstanceNorm2d(3)(tl.ones(2, 3))


@pytest.mark.parametrize("name, args", [("ZeroPad2d", (1,)), ("ConstantPad1d", ((1, 2), 3.5)),
                                        ("ConstantPad2d", ((1, 0, 2, 1), -1.0)), ("ReflectionPad1d", (2,)),
                                        ("ReflectionPad2d", ((1, 2, 0, 1),)), ("ReplicationPad1d", ((0, 3),)),
                                        ("ReplicationPad2d", (2,)), ("ZeroPad1d", ((2, 1),))])
def test_padding_modules_match_torch(device, rng, name, args):
    shape = (2, 3, 4, 5) if name.endswith("2d") else (2, 3, 5)
    m, tm = compare(device, lambda nn: getattr(nn, name)(*args), [randn(rng, *shape)], rng=rng)
    assert m.padding == tm.padding


def test_pooling_upsample_unflatten_match_torch(device, rng):
    compare(device, lambda nn: nn.AdaptiveAvgPool2d((2, 3)), [randn(rng, 2, 3, 5, 7)], rng=rng)
    compare(device, lambda nn: nn.AdaptiveAvgPool1d(3), [randn(rng, 2, 3, 7)], rng=rng)
    compare(device, lambda nn: nn.AdaptiveMaxPool2d(2), [randn(rng, 2, 3, 5, 4)], rng=rng)
    compare(device, lambda nn: nn.AdaptiveMaxPool1d(3), [randn(rng, 2, 3, 7)], rng=rng)
    compare(device, lambda nn: nn.AvgPool1d(3, stride=2, padding=1), [randn(rng, 2, 3, 8)], rng=rng)
    compare(device, lambda nn: nn.MaxPool1d(2), [randn(rng, 2, 3, 8)], rng=rng)
    compare(device, lambda nn: nn.PixelShuffle(2), [randn(rng, 1, 8, 2, 3)], rng=rng)
    compare(device, lambda nn: nn.PixelUnshuffle(2), [randn(rng, 1, 2, 4, 6)], rng=rng)
    compare(device, lambda nn: nn.Upsample(scale_factor=2, mode="nearest"), [randn(rng, 1, 2, 3, 3)], rng=rng)
    compare(device, lambda nn: nn.Upsample(size=(5, 4), mode="bilinear", align_corners=False),
            [randn(rng, 1, 2, 3, 3)], rng=rng)
    compare(device, lambda nn: nn.Unflatten(1, (2, 3)), [randn(rng, 4, 6, 2)], rng=rng)


ACTIVATIONS = [("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.5,)), ("CELU", (1.5,)), ("SELU", ()),
               ("SiLU", ()), ("Mish", ()), ("Softplus", (2.0, 1.0)), ("Hardtanh", (-0.5, 1.5)), ("Hardswish", ()),
               ("Hardsigmoid", ()), ("LogSigmoid", ()), ("Softsign", ()), ("Tanhshrink", ()), ("Sigmoid", ()),
               ("Tanh", ()), ("LogSoftmax", (1,)), ("Softmin", (1,)), ("Softshrink", (0.7,)), ("Hardshrink", ()),
               ("Threshold", (0.5, -2.0)), ("GLU", (0,)), ("RReLU", (0.1, 0.3))]  # RReLU: eval mode


@pytest.mark.parametrize("name, args", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_modules_match_torch(device, rng, name, args):
    x = randn(rng, 4, 6) * 3
    compare(device, lambda nn: getattr(nn, name)(*args), [x], rng=rng)


def test_activation_inplace_writes_its_input(device):
    x = tl.tensor([-1.0, 2.0, 7.0], device=device)
    assert nn.ReLU(inplace=True)(x) is x and x.tolist() == [0.0, 2.0, 7.0]
    assert nn.ReLU6(inplace=True)(x).tolist() == [0.0, 2.0, 6.0] and x.tolist() == [0.0, 2.0, 6.0]
    assert repr(nn.LeakyReLU(0.2, inplace=True)) == "LeakyReLU(negative_slope=0.2, inplace=True)"
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    with pytest.raises(tl.ArgumentError, match="LeakyReLU: takes \\(negative_slope, inplace\\)"):
        nn.LeakyReLU(0.1, slope=2)
    with pytest.raises(tl.ArgumentError, match="Threshold: missing \\['value'\\]"):
        nn.Threshold(0.5)


def test_dropout_modules(device):
    for m in (nn.Dropout(0.5), nn.Dropout1d(0.5), nn.Dropout2d(0.5)):
        x = tl.ones(4, 16, 64, device=device) if type(m) is nn.Dropout1d else tl.ones(4, 16, 8, 8, device=device)
        y = m(x).numpy()
        assert set(np.unique(y)) == {0.0, 2.0}
        if type(m) is not nn.Dropout:  # whole channels are zeroed or kept
            assert (y.reshape(64, 64).std(1) == 0).all()
        m.eval()
        np.testing.assert_array_equal(m(x).numpy(), x.numpy())
    assert repr(nn.Dropout2d(0.2, inplace=True)) == "Dropout2d(p=0.2, inplace=True)"
    with pytest.raises(tl.ArgumentError, match="Dropout2d: probability must be in \\[0, 1\\], got 1.5"):
        nn.Dropout2d(1.5)


# ---- losses --------------------------------------------------------------------------------------

def _loss_inputs(rng, kind):
    x = randn(rng, 4, 3)
    if kind == "classes":
        return [x, np.array([0, 2, 1, 2])]
    if kind == "probs":
        return [1 / (1 + np.exp(-x)), rng.uniform(size=(4, 3)).astype(np.float32)]
    if kind == "logprobs":
        return [x - np.log(np.exp(x).sum(1, keepdims=True)), rng.dirichlet(np.ones(3), 4).astype(np.float32)]
    return [x, randn(rng, 4, 3)]


W3 = np.array([0.2, 1.0, 3.0], np.float32)
LOSSES = {
    "cross_entropy": (lambda nn: nn.CrossEntropyLoss(), "classes"),
    "cross_entropy_weighted_ignore_smooth": (lambda nn: nn.CrossEntropyLoss(
        weight=_w(nn), ignore_index=1, label_smoothing=0.1), "classes"),
    "cross_entropy_sum": (lambda nn: nn.CrossEntropyLoss(reduction="sum"), "classes"),
    "nll_weighted": (lambda nn: nn.NLLLoss(weight=_w(nn)), "classes"),
    "nll_legacy_reduce": (lambda nn: nn.NLLLoss(reduce=False), "classes"),
    "mse": (lambda nn: nn.MSELoss(), "pair"),
    "mse_legacy_size_average": (lambda nn: nn.MSELoss(size_average=False), "pair"),
    "l1_none": (lambda nn: nn.L1Loss(reduction="none"), "pair"),
    "smooth_l1": (lambda nn: nn.SmoothL1Loss(beta=0.5), "pair"),
    "huber": (lambda nn: nn.HuberLoss(delta=0.7), "pair"),
    "bce_weighted": (lambda nn: nn.BCELoss(weight=_w(nn)), "probs"),
    "bce_logits_pos_weight": (lambda nn: nn.BCEWithLogitsLoss(pos_weight=_w(nn)), "pair_probs"),
    "kl_div": (lambda nn: nn.KLDivLoss(reduction="batchmean"), "logprobs"),
    "kl_div_log_target": (lambda nn: nn.KLDivLoss(reduction="sum", log_target=True), "pair"),
}


def _w(nn):
    return torch.tensor(W3) if nn is torch.nn else tl.tensor(W3)


@pytest.mark.parametrize("case", list(LOSSES))
def test_loss_modules_match_torch(device, rng, case):
    build, kind = LOSSES[case]
    inputs = _loss_inputs(rng, kind)
    if kind == "pair_probs":
        inputs[1] = rng.uniform(size=(4, 3)).astype(np.float32)
    inputs[1] = Const(inputs[1])  # targets get no gradient
    compare(device, build, inputs, rng=rng, tol=2e-4)


def test_loss_buffers_and_cosine_similarity(device, rng):
    assert list(nn.CrossEntropyLoss(weight=tl.ones(3)).state_dict()) == ["weight"]
    assert list(nn.BCEWithLogitsLoss(pos_weight=tl.ones(3)).state_dict()) == ["pos_weight"]
    assert list(nn.CrossEntropyLoss().state_dict()) == []
    m = nn.CrossEntropyLoss(weight=tl.tensor(W3)).to(device)
    assert m.weight.device == tl.tensor(W3, device=device).device
    compare(device, lambda nn: nn.CosineSimilarity(dim=1), [randn(rng, 4, 5), randn(rng, 4, 5)], rng=rng)
    compare(device, lambda nn: nn.PairwiseDistance(p=1.0, keepdim=True), [randn(rng, 4, 5), randn(rng, 4, 5)], rng=rng)
    with pytest.warns(UserWarning, match="size_average and reduce are deprecated: use reduction='sum'"):
        assert nn.MSELoss(size_average=False).reduction == "sum"


# ---- containers and the Module API ----------------------------------------------------------------

def test_parameter_list_and_dict(device):
    ps = nn.ParameterList([tl.ones(2), nn.Parameter(tl.zeros(3))])
    ps.append(tl.full((1,), 5.0))
    assert [k for k, _ in ps.named_parameters()] == ["0", "1", "2"] and len(ps) == 3
    assert all(isinstance(p, nn.Parameter) for p in ps) and ps[-1].tolist() == [5.0] and len(ps[1:]) == 2
    pd = nn.ParameterDict({"a": tl.ones(2)})
    pd["b"] = tl.zeros(1)
    assert list(pd) == ["a", "b"] and "b" in pd and len(pd) == 2 and isinstance(pd["b"], nn.Parameter)
    holder = nn.Module()
    holder.ps, holder.pd = ps, pd
    assert list(holder.state_dict()) == ["ps.0", "ps.1", "ps.2", "pd.a", "pd.b"]
    holder.to(device)
    assert ps[0].device == pd["a"].device == tl.ones(1, device=device).device
    tps, tpd = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2))]), torch.nn.ParameterDict({"a": torch.ones(2)})
    assert list(tps.state_dict()) == list(nn.ParameterList([tl.ones(2)]).state_dict())
    assert list(tpd.state_dict()) == list(nn.ParameterDict({"a": tl.ones(2)}).state_dict())
    with pytest.raises(tl.IndexOutOfRange, match="index 3 out of range for length 3"):
        ps[3]


def test_forward_hooks(device):
    m = nn.Linear(2, 2).to(device)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre") or (args[0] * 0,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append("post") or out + 1)
    h3 = m.register_forward_hook(lambda mod, args, out: calls.append("first"), prepend=True)
    out = m(tl.ones(1, 2, device=device))
    assert calls == ["pre", "first", "post"]
    np.testing.assert_allclose(out.numpy(), m.bias.numpy()[None] + 1, rtol=1e-6)
    for h in (h1, h2, h3):
        h.remove()
    calls.clear()
    np.testing.assert_allclose(m(tl.ones(1, 2, device=device)).numpy(),
                               (tl.ones(1, 2, device=device) @ m.weight.mT + m.bias).numpy(), rtol=1e-6)
    assert calls == []
    seen = []
    with m.register_forward_hook(lambda mod, a, kw, out: seen.append((len(a), sorted(kw))), with_kwargs=True):
        with m.register_forward_pre_hook(lambda mod, a, kw: ((kw["x"],), {}), with_kwargs=True):
            m(x=tl.ones(1, 2, device=device))  # the pre-hook moves x into args
        m(x=tl.ones(1, 2, device=device))
    assert seen == [(1, []), (0, ["x"])] and not m._forward_hooks and not m._forward_pre_hooks


@pytest.mark.parametrize("case", ["linear", "linear_no_input_grad", "gru_two_outputs", "mha_three_inputs"])
def test_full_backward_hooks_match_torch(device, rng, case):
    """grad_input / grad_output as torch gives them, and a replaced grad_input flows on."""
    build, shapes = {"linear": (lambda nn: nn.Linear(3, 2), [(4, 3)]),
                     "linear_no_input_grad": (lambda nn: nn.Linear(3, 2), [(4, 3)]),
                     "gru_two_outputs": (lambda nn: nn.GRU(3, 4), [(5, 2, 3)]),
                     "mha_three_inputs": (lambda nn: nn.MultiheadAttention(4, 2),
                                          [(3, 2, 4), (5, 2, 4), (5, 2, 4)])}[case]
    arrays = [randn(rng, *s) for s in shapes]
    seen = {}

    def run(m, lib, wrap):
        records = seen.setdefault(lib.__name__, [])

        def hook(mod, gin, gout):
            records.append([None if g is None else g.detach().numpy() * 1 for g in gin + gout])
            return tuple(None if g is None else g * 2 for g in gin)
        m.register_full_backward_hook(hook)
        xs = [wrap(a, case != "linear_no_input_grad") for a in arrays]
        out = m(*[x * 1.5 for x in xs])
        (out[0] if isinstance(out, tuple) else out).square().sum().backward()
        return [None if x.grad is None else x.grad.numpy() for x in xs]
    tm, m = build(torch.nn), build(nn)
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    ours = run(m.to(device), tl, lambda a, g: tl.tensor(a, device=device, requires_grad=g))
    theirs = run(tm, torch, lambda a, g: torch.tensor(a, requires_grad=g))
    assert len(seen["tensorlite"]) == len(seen["torch"]) == 1
    for got, want in zip(seen["tensorlite"][0] + ours, seen["torch"][0] + theirs):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_hooks_see_submodule_outputs_in_a_network():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    shapes = []
    for _, mod in net.named_children():
        mod.register_forward_hook(lambda m, args, out: shapes.append((type(m).__name__, tuple(out.shape))))
    net(tl.ones(5, 3))
    assert shapes == [("Linear", (5, 4)), ("ReLU", (5, 4)), ("Linear", (5, 2))]


def test_get_submodule_parameter_buffer():
    net = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.BatchNorm1d(3)))
    assert net.get_submodule("") is net and net.get_submodule("1.0") is net[1][0]
    assert net.get_parameter("0.weight") is net[0].weight
    assert net.get_buffer("1.0.running_mean") is net[1][0].running_mean
    with pytest.raises(tl.ArgumentError, match="Sequential at 1 has no submodule '3'"):
        net.get_submodule("1.3.x")
    with pytest.raises(tl.ArgumentError, match="no parameter 'nope' in 0"):
        net.get_parameter("0.nope")
    with pytest.raises(tl.ArgumentError, match="no buffer 'weight'"):
        net.get_buffer("0.weight")


def test_named_modules_apply_and_repr():
    shared = nn.Linear(2, 2)
    net = nn.Sequential(shared, nn.GELU(), shared)
    assert [n for n, _ in net.named_modules()] == ["", "0", "1"]
    assert [n for n, _ in net.named_modules(remove_duplicate=False)] == ["", "0", "1", "2"]
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "GELU", "Sequential"] and repr(net).count("Linear") == 2  # listed twice, as torch's
    text = repr(nn.Sequential(nn.GroupNorm(2, 4), nn.LSTM(3, 4, batch_first=True), nn.MultiheadAttention(8, 2)))
    assert "(0): GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)" in text  # torch's text
    assert "(1): LSTM(3, 4, batch_first=True)" in text
    assert "(out_proj): Linear(in_features=8, out_features=8, bias=True)" in text
