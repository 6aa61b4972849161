"""Gradients of every nn.functional op against float64 central finite differences (cpu),
and each device's float32 gradients against those."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from gradcheck_util import check_device_grads, gradcheck
from test_autograd_core import NZ, POS, U, ids, make_inputs


def mask(shape, like, seed=0, p=0.7):
    return tl.tensor(np.random.default_rng(seed).random(shape) < p, device=like.device)


_THETA = np.random.default_rng(7).uniform(0, 2 * np.pi, (2, 3, 2))
COS_B, SIN_B = np.cos(_THETA), np.sin(_THETA)  # fixed per-batch rotary tables (b=2, t=3, d/2=2)


def const(a, like):
    return tl.tensor(a, dtype=like.dtype, device=like.device)


CASES = {
    "softmax_last": (lambda x: F.softmax(x, -1), [U(2, 3, 4)]),
    "softmax_dim0": (lambda x: F.softmax(x, 0), [U(3, 4)]),
    "softmax_0d": (lambda x: F.softmax(x.sum(), 0) * x.sum(), [U(2)]),
    "log_softmax_last": (lambda x: F.log_softmax(x, -1), [U(2, 5)]),
    "log_softmax_dim1": (lambda x: F.log_softmax(x, 1), [U(2, 3, 4)]),
    "layer_norm_affine_2d_shape": (lambda x, w, b: F.layer_norm(x, (3, 4), w, b, 1e-5), [U(2, 3, 4), U(3, 4), U(3, 4)]),
    "layer_norm_plain": (lambda x: F.layer_norm(x, 5), [U(3, 5)]),
    "layer_norm_weight_only": (lambda x, w: F.layer_norm(x, [4], w, eps=1e-3), [U(2, 2, 4), U(4)]),
    "rms_norm_weight": (lambda x, w: F.rms_norm(x, 4, w, 1e-6), [U(3, 4), U(4)]),
    # both outputs, each with its own weight in the sum (gradcheck sums the output)
    "add_layer_norm": (lambda x, r, w, b: (lambda n, t: n + 0.5 * t)(*F.add_layer_norm(x, r, (2, 4), w, b, 1e-5)),
                       [U(3, 2, 4), U(3, 2, 4), U(2, 4), U(2, 4)]),
    "rms_norm_2d_shape_default_eps": (lambda x: F.rms_norm(x, (2, 3)), [U(2, 2, 3)]),
    "gelu_erf": (lambda x: F.gelu(x), [U(2, 5)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [U(2, 5)]),
    "silu_sigmoid_tanh": (lambda x: F.silu(x) + F.sigmoid(x) * F.tanh(x), [U(2, 5)]),
    "relu": (lambda x: F.relu(x), [NZ(2, 5)]),
    "embedding": (lambda w: F.embedding(ids([[1, 3, 1], [0, 1, 2]], w), w), [U(4, 3)]),
    "linear_3d": (lambda x, w, b: F.linear(x, w, b), [U(2, 3, 4), U(5, 4), U(5)]),
    "linear_no_bias": (lambda x, w: F.linear(x, w), [U(3, 4), U(2, 4)]),
    "cross_entropy_mean_ignore": (lambda x: F.cross_entropy(x, ids([1, -100, 3, 0], x)), [U(4, 5)]),
    "cross_entropy_sum": (lambda x: F.cross_entropy(x, ids([1, 2, 0], x), reduction="sum"), [U(3, 4)]),
    "cross_entropy_none_spatial": (lambda x: F.cross_entropy(x, ids([[0, 2, 1], [2, 2, 0]], x), reduction="none"),
                                   [U(2, 3, 3)]),
    "cross_entropy_smoothing_ignore": (lambda x: F.cross_entropy(x, ids([1, 3, 7, 0], x), ignore_index=7,
                                                                 label_smoothing=0.2), [U(4, 5)]),
    "cross_entropy_class_weight": (lambda x, w: F.cross_entropy(x, ids([1, 2, 0, 2], x), weight=w), [U(4, 3), POS(3)]),
    "cross_entropy_weight_smoothing": (lambda x: F.cross_entropy(x, ids([1, 2, 0, 2], x), label_smoothing=0.1,
                                                                 weight=const([0.5, 2.0, 1.0], x)), [U(4, 3)]),
    "cross_entropy_prob_targets": (lambda x, t: F.cross_entropy(x, F.softmax(t, 1), label_smoothing=0.1),
                                   [U(3, 4), U(3, 4)]),
    "cross_entropy_1d": (lambda x: F.cross_entropy(x, ids(2, x)), [U(5)]),
    "nll_loss": (lambda x: F.nll_loss(F.log_softmax(x, 1), ids([0, 2], x)), [U(2, 3)]),
    "mse_loss": (lambda a, b: F.mse_loss(a, b) + F.mse_loss(a, b, reduction="sum"), [U(2, 3), U(2, 3)]),
    "normalize": (lambda x: F.normalize(x, dim=1), [NZ(3, 4)]),
    "dropout_eval_is_identity": (lambda x: F.dropout(x, 0.5, training=False) * 2.0, [U(3)]),
    # rotary embeddings: x (b, h, t, d) or (b, t, h, d); cos/sin (t, d/2) or (b, t, d/2)
    "rope": (lambda x, c, s: F.rope(x, c, s), [U(2, 2, 3, 4), U(3, 2), U(3, 2)]),
    "rope_i": (lambda x, c, s: F.rope_i(x, c, s), [U(2, 2, 3, 4), U(3, 2), U(3, 2)]),
    "rope_thd": (lambda x, c, s: F.rope_thd(x, c, s), [U(2, 3, 2, 4), U(3, 2), U(3, 2)]),
    "rope_batched_tables": (lambda x, c, s: F.rope(x, c, s), [U(2, 1, 3, 4), U(2, 3, 2), U(2, 3, 2)]),
    "rope_i_batched_tables": (lambda x, c, s: F.rope_i(x, c, s), [U(2, 2, 3, 4), U(2, 3, 2), U(2, 3, 2)]),
    "rope_thd_x_only": (lambda x: F.rope_thd(x, const(COS_B, x), const(SIN_B, x)), [U(2, 3, 2, 4)]),
    # attention
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [U(1, 2, 3, 4), U(1, 2, 5, 4), U(1, 2, 5, 3)]),
    "sdpa_causal_scale": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                          [U(2, 1, 4, 3), U(2, 1, 4, 3), U(2, 1, 4, 3)]),
    "sdpa_bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask((3, 4), q, 1)),
                       [U(1, 2, 3, 2), U(1, 2, 4, 2), U(1, 2, 4, 2)]),
    "sdpa_additive_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                           [U(2, 2, 3, 2), U(2, 2, 4, 2), U(2, 2, 4, 2), U(2, 1, 3, 4)]),
    "sdpa_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 [U(1, 4, 3, 2), U(1, 2, 3, 2), U(1, 2, 3, 2)]),
    "sdpa_bottom_right_gqa_mask": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask((1, 1, 2, 5), q, 2, 0.8), is_causal="bottom_right"),
        [U(2, 3, 2, 2), U(2, 1, 5, 2), U(2, 1, 5, 2)]),
    "sdpa_3d": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [U(2, 3, 2)] * 3),
    "sdpa_slow": (lambda q, k, v: F.sdpa_slow(q, k, v, is_causal="bottom_right"),
                  [U(1, 2, 2, 3), U(1, 1, 4, 3), U(1, 1, 4, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_nn_op(name, rng):
    fn, specs = CASES[name]
    gradcheck(fn, make_inputs(specs, rng), rng)


@pytest.mark.parametrize("name", sorted(CASES))
def test_device_grads_match_cpu(name, device, rng):
    fn, specs = CASES[name]
    check_device_grads(fn, make_inputs(specs, rng), device, rng)


def test_fully_masked_attention_row_is_zero_with_zero_gradient(device):
    q = tl.randn(1, 1, 2, 3, device=device, requires_grad=True)
    k = tl.randn(1, 1, 3, 3, device=device, requires_grad=True)
    v = tl.randn(1, 1, 3, 3, device=device, requires_grad=True)
    keep = tl.tensor([[False, False, False], [True, False, True]], device=device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    np.testing.assert_array_equal(out.numpy()[0, 0, 0], 0.0)
    out.sum().backward()
    np.testing.assert_array_equal(q.grad.numpy()[0, 0, 0], 0.0)
    assert np.isfinite(k.grad.numpy()).all() and np.isfinite(v.grad.numpy()).all()


def test_dropout_gradient_is_the_scaled_mask(device):
    tl.manual_seed(3)
    x = tl.randn(64, 32, device=device, requires_grad=True)
    y = F.dropout(x, 0.25, training=True)
    y.sum().backward()
    kept = y.numpy() != 0
    assert 0.65 < kept.mean() < 0.85  # 75% kept on average over 2048 draws
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.75, rtol=1e-6)
    np.testing.assert_allclose(y.numpy()[kept], x.numpy()[kept] / 0.75, rtol=1e-6)


def test_embedding_padding_row_gets_no_gradient(device, rng):
    w = tl.tensor(rng.standard_normal((4, 3)), dtype=tl.float32, device=device, requires_grad=True)
    tokens = tl.tensor([[1, 3, 1], [0, 1, 2]], device=device)
    out = F.embedding(tokens, w, padding_idx=1)
    np.testing.assert_array_equal(out.numpy(), w.numpy()[tokens.numpy()])  # forward still reads the row
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[1.0] * 3, [0.0] * 3, [1.0] * 3, [1.0] * 3])
