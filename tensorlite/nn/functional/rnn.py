"""Recurrent layers over a whole sequence as one op: rnn_layer (one layer and direction of
nn.RNN / LSTM / GRU), rnn_cell (one step, the cells' and the reference's), rnn_layer_slow.

On `cpu` at float32 / float64, rnn_layer is one autograd node: the input projection of every step
is one GEMM, each step's hidden product one GEMM and the cell's pointwise part a few numpy passes
over the step's gates; the backward through time the same way, with the weights' gradients as one
GEMM each over the whole sequence. Elsewhere (GPUs, half types, autocast) it is rnn_layer_slow, the
cell's Tensor ops step by step, which the tests hold the fused op to. Gate order and biases as
torch's: LSTM (i, f, g, o), GRU (r, z, n) with n = tanh(x W_in + b_in + r (h W_hn + b_hn)).
"""
from __future__ import annotations

import numpy as np

from ... import amp
from ... import dtype as dtypes
from ...autograd import attach_many
from ...custom_op import result
from ...ops.joins import stack
from .dense import linear

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}  # gate blocks of weight_ih / weight_hh per mode


def rnn_cell(mode, gi, h, c, w_hh, b_hh, w_hr=None):
    """One time step from gi = x W_ih^T + b_ih: (h', c') (c' None outside LSTM), in Tensor ops."""
    gh = linear(h, w_hh, b_hh)
    if mode == "LSTM":
        i, f, g, o = (gi + gh).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        return (h if w_hr is None else linear(h, w_hr)), c
    if mode == "GRU":
        (ir, iz, i_n), (hr, hz, h_n) = gi.chunk(3, -1), gh.chunk(3, -1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        n = (i_n + r * h_n).tanh()
        return n + z * (h - n), None  # (1 - z) n + z h
    return ((gi + gh).tanh() if mode == "RNN_TANH" else (gi + gh).relu()), None


def rnn_layer_slow(mode, input, hx, cx, weight_ih, bias_ih, weight_hh, bias_hh, weight_hr=None, reverse=False):
    """rnn_layer as the cell's Tensor ops, step by step (autograd records each)."""
    gi = linear(input, weight_ih, bias_ih)  # the input projection of every step at once
    h, c, steps = hx, cx, []
    for t in (range(input.shape[0] - 1, -1, -1) if reverse else range(input.shape[0])):
        h, c = rnn_cell(mode, gi[t], h, c, weight_hh, bias_hh, weight_hr)
        steps.append(h)
    return stack(steps[::-1] if reverse else steps), h, c


def rnn_layer(mode, input, hx, cx, weight_ih, bias_ih, weight_hh, bias_hh, weight_hr=None, reverse=False):
    """One layer and direction of a recurrent stack over a sequence: input (L, N, H_in), hx the
    initial hidden state (N, H_out), cx the initial cell state (N, H) for LSTM (else None), weights
    and biases as torch's (weight_hr: LSTM's projection, or None); `reverse` runs from the last step.
    Returns (output (L, N, H_out), h_n, c_n) (c_n None outside LSTM). Not a PyTorch function: its
    modules call it once per layer and direction."""
    tensors = (input, hx, cx, weight_ih, bias_ih, weight_hh, bias_hh, weight_hr)
    present = [t for t in tensors if t is not None]
    if amp.is_autocast_enabled() or any(t.device.type != "cpu" or t.dtype is not input.dtype for t in present) \
            or input.dtype not in (dtypes.float32, dtypes.float64) or input.shape[0] == 0:
        return rnn_layer_slow(mode, *tensors, reverse)
    arrays = [None if t is None else t.numpy() for t in tensors]
    out, h_n, c_n, saved = _forward(mode, *arrays, reverse)
    outs = [_tensor(a, input) for a in (out, h_n, c_n) if a is not None]
    wants = [t is not None and t.requires_grad for t in tensors]

    def backward(grads):
        grads = [None if g is None else g.numpy() for g in grads] + [None] * (3 - len(grads))
        found = _backward(mode, arrays, saved, grads, wants, reverse)
        return tuple(None if g is None else _tensor(g, input) for g in found)
    attach_many(outs, tensors, backward, f"rnn_layer({mode})", saved=present + outs[:1])  # output: hp below
    return outs[0], outs[1], (outs[2] if mode == "LSTM" else None)


def _tensor(a, like):
    """A cpu tensor over the numpy array `a` (no copy; a fresh array of like's dtype)."""
    a = np.ascontiguousarray(a)
    return result(like._device.wrap_memory(a.reshape(-1), a.size, like.dtype), a.shape, like.dtype)


def _sigmoid_tanh(a, scale, shift):
    """In place: sigmoid where scale is 0.5 and shift 0.5 (as 0.5 tanh(x / 2) + 0.5: no overflow),
    tanh where scale is 1 and shift 0."""
    a *= scale
    np.tanh(a, out=a)
    a *= scale
    a += shift


def _lanes(mode, H, dt):
    """(scale, shift) per gate lane: the sigmoid gates and the tanh one of the mode."""
    sig = {"LSTM": (1, 1, 0, 1), "GRU": (1, 1)}[mode]
    scale = np.repeat(np.array([0.5 if s else 1.0 for s in sig], dt), H)
    return scale, np.repeat(np.array([0.5 * s for s in sig], dt), H)


def _previous(seq, first, reverse):
    """Each step's incoming state: `first` at the first step run, else the neighbouring step's."""
    prev = np.empty_like(seq)
    if reverse:
        prev[-1], prev[:-1] = first, seq[1:]
    else:
        prev[0], prev[1:] = first, seq[:-1]
    return prev


def _forward(mode, x, h0, c0, w_ih, b_ih, w_hh, b_hh, w_hr, reverse):
    """The layer's forward in numpy: (output, h_n, c_n, what backward reads)."""
    L, N = x.shape[:2]
    H = w_hh.shape[0] // GATES[mode]
    gi = (x.reshape(L * N, -1) @ w_ih.T).reshape(L, N, -1)  # becomes the gates' activations in place
    if b_ih is not None:
        gi += b_ih
    if b_hh is not None and mode != "GRU":  # GRU's b_hn sits inside r * (h W_hn + b_hn)
        gi += b_hh
    out = np.empty((L, N, h0.shape[1]), x.dtype)
    w_hh_t, h, c = w_hh.T, h0, c0
    gh = np.empty((L if mode == "GRU" else 1, N, w_hh.shape[0]), x.dtype)
    saved = {"gates": gi, "out": out}
    if mode == "LSTM":
        scale, shift = _lanes(mode, H, x.dtype)
        cs, tcs = np.empty((L, N, H), x.dtype), np.empty((L, N, H), x.dtype)
        hh = np.empty((L, N, H), x.dtype) if w_hr is not None else out
        saved.update(cs=cs, tcs=tcs, hh=hh)
    elif mode == "GRU":
        scale, shift = _lanes(mode, H, x.dtype)
        saved["gh"] = gh
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        a = gi[t]
        if mode == "GRU":
            g = np.matmul(h, w_hh_t, out=gh[t])
            if b_hh is not None:
                g += b_hh
            rz, n = a[:, :2 * H], a[:, 2 * H:]
            rz += g[:, :2 * H]
            _sigmoid_tanh(rz, scale, shift)
            n += rz[:, :H] * g[:, 2 * H:]
            np.tanh(n, out=n)
            h = np.subtract(h, n, out=out[t])
            h *= rz[:, H:]
            h += n  # (1 - z) n + z h
            continue
        a += np.matmul(h, w_hh_t, out=gh[0])
        if mode == "RNN_TANH":
            h = np.tanh(a, out=out[t])
        elif mode == "RNN_RELU":
            h = np.maximum(a, 0, out=out[t])
        else:
            _sigmoid_tanh(a, scale, shift)
            i, f, g, o = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
            c = np.multiply(f, c, out=cs[t])
            c += i * g
            np.multiply(o, np.tanh(c, out=tcs[t]), out=hh[t])
            h = hh[t] if w_hr is None else np.matmul(hh[t], w_hr.T, out=out[t])
    last = 0 if reverse else L - 1
    return out, out[last].copy(), (cs[last].copy() if mode == "LSTM" else None), saved


def _backward(mode, arrays, saved, grads, wants, reverse):
    """The layer's backward through time in numpy: a gradient (or None) per input of rnn_layer."""
    x, h0, c0, w_ih, b_ih, w_hh, b_hh, w_hr = arrays
    g_out, g_h, g_c = grads
    L, N = x.shape[:2]
    H, gates, dt = w_hh.shape[0] // GATES[mode], saved["gates"], x.dtype
    out = saved["out"]
    hp = _previous(out, h0, reverse)  # each step's incoming hidden state
    dh = np.zeros_like(h0) if g_h is None else g_h.copy()
    dgi = np.empty_like(gates)  # the gradient of the pre-activation gates of every step
    dgh = dgi  # and of h W_hh^T + b_hh (GRU's differs from dgi in the n lane)
    # the local derivatives of every step at once (vectorized over time), so that a step's
    # loop body is only the products that depend on the gradient flowing back
    if mode == "LSTM":
        dc = np.zeros((N, H), dt) if g_c is None else g_c.copy()
        cs, tcs, hh = saved["cs"], saved["tcs"], saved["hh"]
        i, f, g, o = (gates[..., k * H:(k + 1) * H] for k in range(4))
        local = gates * (1 - gates)  # sigmoid' for i, f, o ...
        np.subtract(1, g * g, out=local[..., 2 * H:3 * H])  # ... and tanh' for g
        local[..., :H] *= g  # d(i g) / d(a_i)
        local[..., H:2 * H] *= _previous(cs, c0, reverse)  # d(f c) / d(a_f)
        local[..., 2 * H:3 * H] *= i
        local[..., 3 * H:] *= tcs  # d(o tanh c) / d(a_o)
        to_c = o * (1 - tcs * tcs)  # d h / d c
        dhs = np.empty((L, N, h0.shape[1]), dt) if w_hr is not None else None
    elif mode == "GRU":
        dgh = np.empty_like(gates)
        rz, n, ghn = gates[..., :2 * H], gates[..., 2 * H:], saved["gh"][..., 2 * H:]
        local = rz * (1 - rz)
        z = rz[..., H:]
        to_n = (1 - z) * (1 - n * n)  # d h / d a_n
        local[..., :H] *= ghn  # d a_n / d r, times sigmoid'
        local[..., H:] *= hp - n  # d h / d z, times sigmoid'
    else:
        local = 1 - out * out if mode == "RNN_TANH" else (out > 0).astype(dt)
    for t in (range(L) if reverse else range(L - 1, -1, -1)):
        if g_out is not None:
            dh += g_out[t]
        d = dgi[t]
        if mode == "GRU":
            dn = np.multiply(dh, to_n[t], out=d[:, 2 * H:])
            np.multiply(dh, local[t, :, H:], out=d[:, H:2 * H])
            np.multiply(dn, local[t, :, :H], out=d[:, :H])
            e = dgh[t]
            e[:, :2 * H] = d[:, :2 * H]
            np.multiply(dn, rz[t, :, :H], out=e[:, 2 * H:])
            dh = dh * z[t] + e @ w_hh
            continue
        if mode != "LSTM":
            dh = np.multiply(dh, local[t], out=d) @ w_hh
            continue
        if dhs is not None:
            dhs[t] = dh
            dh = dh @ w_hr
        np.multiply(dh, local[t, :, 3 * H:], out=d[:, 3 * H:])
        dh *= to_c[t]
        dc += dh
        np.multiply(dc[:, None], local[t].reshape(N, 4, H)[:, :3], out=d.reshape(N, 4, H)[:, :3])  # i, f, g
        dc *= f[t]
        dh = d @ w_hh
    rows_i, rows_h = dgi.reshape(L * N, -1), dgh.reshape(L * N, -1)
    found = [rows_i @ w_ih if wants[0] else None, dh if wants[1] else None,
             dc if mode == "LSTM" and wants[2] else None,
             rows_i.T @ x.reshape(L * N, -1) if wants[3] else None, rows_i.sum(0) if wants[4] else None,
             rows_h.T @ hp.reshape(L * N, -1) if wants[5] else None, rows_h.sum(0) if wants[6] else None,
             dhs.reshape(L * N, -1).T @ hh.reshape(L * N, -1) if wants[7] else None]
    if found[0] is not None:
        found[0] = found[0].reshape(x.shape)
    return found
