"""Transformer encoder / decoder layers and stacks, as torch.nn.modules.transformer."""
from __future__ import annotations

import copy

from ...errors import ArgumentError, ShapeError, describe
from ...ops.creation import zeros
from .. import functional as F
from .. import init
from .activation import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm


def _activation_fn(activation):
    if activation in ("relu", "gelu"):
        return getattr(F, activation)
    if isinstance(activation, str) or not callable(activation):
        raise ArgumentError(f"activation should be 'relu', 'gelu' or a callable, not {activation!r}")
    return activation


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual and a LayerNorm (after
    them, or before with norm_first), as torch.nn.TransformerEncoderLayer (same state-dict names).

    >>> import tensorlite as tl
    >>> layer = tl.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
    >>> tuple(layer(tl.ones(2, 5, 8)).shape), sorted(layer.state_dict())[:3]
    ((2, 5, 8), ['linear1.bias', 'linear1.weight', 'linear2.bias'])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first, **kw)
        if self._decoder:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias, **kw)
        self.norm_first = norm_first
        for i in range(1, 4 if self._decoder else 3):
            self.add_module(f"norm{i}", LayerNorm(d_model, layer_norm_eps, bias=bias, **kw))
        for i in range(1, 4 if self._decoder else 3):
            self.add_module(f"dropout{i}", Dropout(dropout))
        self.activation = _activation_fn(activation)

    _decoder = False

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=bool(is_causal))[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """Self-attention then feed-forward, each with a residual and a norm (first if norm_first)."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(TransformerEncoderLayer):
    """Self-attention, attention over `memory`, then a feed-forward block, each with a residual
    and a LayerNorm, as torch.nn.TransformerDecoderLayer (same state-dict names)."""
    _decoder = True

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=bool(is_causal))[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        """Self-attention, attention to memory, then feed-forward, each with a residual and a norm."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))


class TransformerEncoder(Module):
    """num_layers deep copies of encoder_layer (layers.0, layers.1, ...), then `norm` if given.

    >>> import tensorlite as tl
    >>> layer = tl.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    >>> enc = tl.nn.TransformerEncoder(layer, num_layers=2, norm=tl.nn.LayerNorm(8))
    >>> tuple(enc(tl.ones(5, 3, 8)).shape), len([k for k in enc.state_dict() if k.startswith("layers.1.")])
    ((5, 3, 8), 12)
    """

    def __init__(self, encoder_layer, num_layers: int, norm=None, enable_nested_tensor: bool = True,
                 mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """src through each layer (then the final norm, if any), as torch's."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(TransformerEncoder):
    """num_layers deep copies of decoder_layer, then `norm` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        """tgt through each layer with memory (then the final norm, if any), as torch's."""
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                      bool(tgt_is_causal), memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """Encoder-decoder transformer (encoder.*, decoder.* as torch.nn.Transformer's state dict);
    matrices xavier-initialised.

    >>> import tensorlite as tl
    >>> model = tl.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    >>> mask = tl.nn.Transformer.generate_square_subsequent_mask(3)
    >>> tuple(model(tl.ones(5, 2, 8), tl.ones(3, 2, 8), tgt_mask=mask).shape), mask[0].tolist()
    ((3, 2, 8), [0.0, -inf, -inf])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias,
                device, dtype)

        def norm():
            return LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.encoder = custom_encoder or TransformerEncoder(TransformerEncoderLayer(*args), num_encoder_layers, norm())
        self.decoder = custom_decoder or TransformerDecoder(TransformerDecoderLayer(*args), num_decoder_layers, norm())
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        """The decoder's output for tgt given the encoder's memory of src, as torch's."""
        batch = 0 if self.batch_first else 1
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model or (
                src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]):
            raise ShapeError(f"{describe('Transformer', src=src, tgt=tgt)}: src and tgt need d_model = {self.d_model} "
                             "features and one batch size")
        memory = self.encoder(src, src_mask, src_key_padding_mask, src_is_causal)
        return self.decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                            tgt_is_causal, memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """(sz, sz) float mask: 0 where a query may attend, -inf above the diagonal."""
        return zeros(sz, sz, device=device, dtype=dtype).masked_fill(~F.causal_mask(sz, sz, device=device),
                                                                      float("-inf"))
