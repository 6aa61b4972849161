"""Recurrent layers (RNN, LSTM, GRU) and their cells, as torch.nn.modules.rnn."""
from __future__ import annotations

import math
import warnings

from ...errors import ArgumentError, ShapeError, describe
from ...ops.creation import empty, zeros
from ...ops.joins import cat, stack
from .. import functional as F
from ..functional.rnn import GATES, rnn_cell, rnn_layer
from .. import init
from ..parameter import Parameter
from .module import Module

def _reset_uniform(module):
    """Every parameter of the RNN from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch's reset_parameters."""
    bound = 1.0 / math.sqrt(module.hidden_size)
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


class RNNBase(Module):
    """Multi-layer (bi)directional RNN / LSTM / GRU with torch's parameter names
    (weight_ih_l{k}[_reverse], weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, weight_hr_l{k})."""

    def __init__(self, mode, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"{name}: dropout must be in [0, 1], got {dropout}")
        if proj_size < 0 or (proj_size and (mode != "LSTM" or proj_size >= hidden_size)):
            raise ArgumentError(f"{name}: proj_size ({proj_size}) must be 0, or in (0, hidden_size) for LSTM")
        if hidden_size < 1 or num_layers < 1:
            raise ArgumentError(f"{name}: hidden_size and num_layers must be positive")
        if dropout and num_layers == 1:
            warnings.warn(f"{name}: dropout={dropout} and num_layers=1: dropout applies between layers only",
                          UserWarning, stacklevel=3)
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gates, out = GATES[mode] * hidden_size, proj_size or hidden_size
        kw = dict(device=device, dtype=dtype)
        for layer in range(num_layers):
            for sfx in ("", "_reverse")[:2 if bidirectional else 1]:
                sfx = f"_l{layer}{sfx}"
                self.register_parameter("weight_ih" + sfx, Parameter(empty(
                    gates, input_size if layer == 0 else out * (1 + bidirectional), **kw)))
                self.register_parameter("weight_hh" + sfx, Parameter(empty(gates, out, **kw)))
                if bias:
                    self.register_parameter("bias_ih" + sfx, Parameter(empty(gates, **kw)))
                    self.register_parameter("bias_hh" + sfx, Parameter(empty(gates, **kw)))
                if proj_size:
                    self.register_parameter("weight_hr" + sfx, Parameter(empty(proj_size, hidden_size, **kw)))
        _reset_uniform(self)

    reset_parameters = _reset_uniform

    def flatten_parameters(self) -> None:
        """A no-op, as torch's on the cpu: cuDNN's single weight buffer has no counterpart here."""

    def forward(self, input, hx=None):
        """input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)); hx: h_0
        (D * num_layers, N, H_out), or (h_0, c_0) for LSTM, zeros if None. Returns
        (output (L, N, D * H_out), h_n) / (output, (h_n, c_n))."""
        name, lstm, D = type(self).__name__, self.mode == "LSTM", 2 if self.bidirectional else 1
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{describe(name, input=input)}: expected (L, N, {self.input_size}) "
                             f"(N first with batch_first) or unbatched (L, {self.input_size})")
        if lstm and hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise ArgumentError(f"{name}: hx must be a pair (h_0, c_0)")
        batched = input.ndim == 3
        x = (input.transpose(0, 1) if self.batch_first else input) if batched else input.unsqueeze(1)
        N, H_out = x.shape[1], self.proj_size or self.hidden_size
        states = [] if hx is None else [s if batched else s.unsqueeze(1) for s in (hx if lstm else (hx,))]
        for s, size in zip(states, (H_out, self.hidden_size)):
            if tuple(s.shape) != (self.num_layers * D, N, size):
                raise ShapeError(f"{describe(name, input=input, hx=s)}: expected hidden state "
                                 f"({self.num_layers * D}, {N}, {size})" + ("" if batched else " without N"))
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                p = [getattr(self, n + sfx, None) for n in ("weight_ih", "bias_ih", "weight_hh", "bias_hh",
                                                            "weight_hr")]
                h0, c0 = (states[k][layer * D + d] if k < len(states) else None for k in (0, 1))  # None: zeros
                out, h, c = rnn_layer(self.mode, x, h0, c0, *p, reverse=bool(d))
                outs.append(out)
                h_n.append(h), c_n.append(c)
            x = outs[0] if D == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        out = (x.transpose(0, 1) if self.batch_first else x) if batched else x.squeeze(1)
        h_n, c_n = stack(h_n), (stack(c_n) if lstm else None)
        h_n, c_n = (h_n, c_n) if batched else (h_n.squeeze(1), c_n.squeeze(1) if lstm else None)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def extra_repr(self):
        """The sizes and the settings that differ from their defaults, for the repr (as torch's)."""
        changed = [(n, v) for n, v, default in (
            ("proj_size", self.proj_size, 0), ("num_layers", self.num_layers, 1), ("bias", self.bias, True),
            ("batch_first", self.batch_first, False), ("dropout", self.dropout, 0), ("bidirectional",
                                                                                   self.bidirectional, False))
            if v != default]
        return ", ".join([f"{self.input_size}, {self.hidden_size}"] + [f"{n}={v}" for n, v in changed])


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu), as torch.nn.RNN."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o; proj_size projects h), as torch.nn.LSTM.

    >>> import tensorlite as tl
    >>> lstm = tl.nn.LSTM(4, 3, num_layers=2, batch_first=True, bidirectional=True)
    >>> out, (h, c) = lstm(tl.ones(2, 5, 4))
    >>> tuple(out.shape), tuple(h.shape), list(lstm.state_dict())[4]
    ((2, 5, 6), (4, 2, 3), 'weight_ih_l0_reverse')
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n), as torch.nn.GRU."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype)


class RNNCellBase(Module):
    """One step of RNN / LSTM / GRU: weight_ih, weight_hh, bias_ih, bias_hh as torch's cells."""
    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates, kw = GATES[self.mode] * hidden_size, dict(device=device, dtype=dtype)
        self.weight_ih = Parameter(empty(gates, input_size, **kw))
        self.weight_hh = Parameter(empty(gates, hidden_size, **kw))
        self.bias_ih = Parameter(empty(gates, **kw)) if bias else None
        self.bias_hh = Parameter(empty(gates, **kw)) if bias else None
        _reset_uniform(self)

    reset_parameters = _reset_uniform

    def forward(self, input, hx=None):
        """input (N, H_in) or (H_in,); hx h (or (h, c) for LSTMCell), zeros if None."""
        name, lstm = type(self).__name__, self.mode == "LSTM"
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{describe(name, input=input)}: expected (N, {self.input_size}) or ({self.input_size},)")
        x = input if input.ndim == 2 else input.unsqueeze(0)
        if hx is None:
            hx = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x._device)
            hx = (hx, hx) if lstm else hx
        elif input.ndim == 1:
            hx = tuple(s.unsqueeze(0) for s in hx) if lstm else hx.unsqueeze(0)
        h, c = (hx if lstm else (hx, None))
        if tuple(h.shape) != (x.shape[0], self.hidden_size):
            raise ShapeError(f"{describe(name, input=input, hx=h)}: expected a hidden state "
                             f"({x.shape[0]}, {self.hidden_size})" + ("" if input.ndim == 2 else " without N"))
        h, c = rnn_cell(self.mode, F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
        if input.ndim == 1:
            h, c = h.squeeze(0), (c.squeeze(0) if lstm else None)
        return (h, c) if lstm else h

    def extra_repr(self):
        """input_size, hidden_size, and bias and nonlinearity where not the defaults, for the repr (as torch's)."""
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias is True else f", bias={self.bias}") + (
            "" if getattr(self, "nonlinearity", "tanh") == "tanh" else f", nonlinearity={self.nonlinearity}")


class LSTMCell(RNNCellBase):
    """One LSTM step: returns (h', c')."""
    mode = "LSTM"


class GRUCell(RNNCellBase):
    """One GRU step: returns h'."""
    mode = "GRU"


class RNNCell(RNNCellBase):
    """One Elman RNN step (tanh or relu): returns h'."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.__dict__["mode"] = f"RNN_{nonlinearity.upper()}"
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity
