"""Functional nn ops with PyTorch names and signatures, one submodule per family:

activation (and the softmax family), attention, conv (and unfold / fold), dense (linear),
distance, fused (tensorlite's fused ops PyTorch lacks), loss, normalization, pooling, quantized,
regularization (dropout), rnn (a recurrent layer over a whole sequence as one op), rotary
(rope), sparse (embedding, one_hot), vision (pad, interpolate, pixel shuffle).
`import tensorlite.nn.functional as F` gives them all.

The fused ops (softmax, log_softmax, layer_norm, rms_norm, rope, rope_i, rope_thd,
scaled_dot_product_attention, cross_entropy) follow candle's CustomOp pattern: the forward
is one storage-level op of the device's backend, so is the backward (`*_backward` storage
ops: one row kernel for dx, column sums for the norms' parameters), and a `*_slow`
composite built from primitive Tensor ops is the reference the tests hold the fused op to
(forward and gradients). Every other op here is a composite of Tensor ops,
so autograd differentiates it without a rule of its own.
"""
from .activation import (  # noqa: F401
    celu, elu, gelu, glu, hardshrink, hardsigmoid, hardswish, hardtanh, leaky_relu, log_softmax, log_softmax_slow,
    logsigmoid, mish, prelu, relu, relu6, rrelu, selu, sigmoid, silu, softmax, softmax_slow, softmin, softplus,
    softshrink, softsign, tanh, tanhshrink, threshold)
from .attention import causal_mask, scaled_dot_product_attention, sdpa_slow  # noqa: F401
from .conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d, fold, unfold  # noqa: F401
from .dense import linear  # noqa: F401
from .distance import cosine_similarity, pairwise_distance  # noqa: F401
from .fused import add_layer_norm, add_rms_norm, rms_norm_linear, silu_mul  # noqa: F401
from .loss import (  # noqa: F401
    binary_cross_entropy, binary_cross_entropy_with_logits, cosine_embedding_loss, cross_entropy, cross_entropy_slow,
    gaussian_nll_loss, hinge_embedding_loss, huber_loss, kl_div, l1_loss, margin_ranking_loss, mse_loss,
    multilabel_soft_margin_loss, nll_loss, poisson_nll_loss, smooth_l1_loss, soft_margin_loss, triplet_margin_loss)
from .normalization import (  # noqa: F401
    batch_norm, group_norm, instance_norm, layer_norm, layer_norm_slow, normalize, rms_norm, rms_norm_slow)
from .pooling import (  # noqa: F401
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool1d, adaptive_max_pool2d,
    adaptive_max_pool3d, avg_pool1d, avg_pool2d, max_pool1d, max_pool2d)
from .quantized import linear_int8, quantize_per_channel_int8  # noqa: F401
from .regularization import dropout, dropout1d, dropout2d, dropout3d  # noqa: F401
from .rnn import rnn_cell, rnn_layer, rnn_layer_slow  # noqa: F401
from .rotary import rope, rope_i, rope_i_slow, rope_kv_cache, rope_slow, rope_thd, rope_thd_slow  # noqa: F401
from .sparse import embedding, one_hot  # noqa: F401
from .vision import (  # noqa: F401
    interpolate, pad, pixel_shuffle, pixel_unshuffle, upsample, upsample_bilinear, upsample_nearest)
