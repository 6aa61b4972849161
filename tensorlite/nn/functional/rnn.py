"""Recurrent layers over a whole sequence as one op: rnn_layer (one layer and direction of
nn.RNN / LSTM / GRU), rnn_cell (one step, the cells' and the reference's), rnn_layer_slow.

rnn_layer is one autograd node. On `cpu` at float32 / float64: the input projection of every step
is one (stacked) matmul call, each step's hidden product one GEMM and the cell's pointwise part a
few numpy passes over the step's gates; the backward through time the same way, with the weights'
gradients as one GEMM each over the whole sequence. On other devices (GPUs, at any float dtype) the
same plan in the backend's ops (rnn_steps.py): the cell's pointwise part is the storage's
rnn_cell, one kernel a step forward and one backward. Elsewhere (cpu half types, autocast) it is
rnn_layer_slow, the cell's Tensor ops step by step, which the tests hold the fused op to. Gate
order and biases as torch's: LSTM (i, f, g, o), GRU (r, z, n) with n = tanh(x W_in + b_in + r (h W_hn + b_hn)).
"""
from __future__ import annotations

import numpy as np

from ... import amp
from ... import dtype as dtypes
from ...autograd import attach_many, grad, is_grad_enabled
from ...custom_op import result
from ...ops.creation import zeros
from ...ops.joins import stack
from ...rnn_reference import GATES
from . import rnn_steps
from .dense import linear


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
    initial hidden state (N, H_out), cx the initial cell state (N, H) for LSTM (zeros where None), weights
    and biases as torch's (weight_hr: LSTM's projection, or None); `reverse` runs from the last step.
    Returns (output (L, N, H_out), h_n, c_n) (c_n None outside LSTM). Not a PyTorch function: its
    modules call it once per layer and direction."""
    tensors = (input, hx, cx, weight_ih, bias_ih, weight_hh, bias_hh, weight_hr)
    present = [t for t in tensors if t is not None]
    if amp.is_autocast_enabled() or any(t._device is not input._device or t.dtype is not input.dtype
                                        for t in present) \
            or not input.dtype.is_floating_point or input.shape[0] == 0 \
            or input.is_cpu and input.dtype not in (dtypes.float32, dtypes.float64):
        return _slow_with_states(mode, tensors, reverse)
    wants = [t is not None and t.requires_grad for t in tensors]
    if input.is_cpu:
        outs, numeric_backward = _numpy_layer(mode, tensors, wants, reverse)
    else:
        hx, cx = _states(mode, input, hx, cx, weight_hh)
        out, h_n, c_n, kept = rnn_steps.forward(mode, input, hx, cx, *tensors[3:], reverse)
        outs = [t for t in (out, h_n, c_n) if t is not None]

        def numeric_backward(grads):
            return rnn_steps.backward(mode, (input, hx, cx, *tensors[3:]), out, kept, grads, wants, reverse)

    def backward(grads):
        if is_grad_enabled():  # create_graph: gradients that can be differentiated again
            return _slow_grads(mode, tensors, grads, reverse)
        return tuple(numeric_backward(list(grads) + [None] * (3 - len(grads))))
    attach_many(outs, tensors, backward, f"rnn_layer({mode})", saved=present + outs[:1])  # backward reads the output
    return outs[0], outs[1], (outs[2] if mode == "LSTM" else None)


def _numpy_layer(mode, tensors, wants, reverse):
    """rnn_layer's outputs on cpu and its backward (gradients from the outputs' gradients), in numpy."""
    input, weight_hh = tensors[0], tensors[5]
    N, H_out, H = input.shape[1], weight_hh.shape[1], weight_hh.shape[0] // GATES[mode]
    arrays = [None if t is None else t.numpy() for t in tensors]
    for k, n in ((1, H_out), (2, H if mode == "LSTM" else 0)):
        if arrays[k] is None and n:
            arrays[k] = np.zeros((N, n), arrays[0].dtype)
    out, h_n, c_n, saved = _forward(mode, *arrays, reverse)

    def backward(grads):
        grads = [None if g is None else g.numpy() for g in grads]
        found = _backward(mode, arrays, saved, grads, wants, reverse)
        return [None if g is None else _tensor(g, input) for g in found]
    return [_tensor(a, input) for a in (out, h_n, c_n) if a is not None], backward


def _states(mode, input, hx, cx, weight_hh):
    """(hx, cx) with zeros for the initial states not given (cx stays None outside LSTM)."""
    N, H_out, H = input.shape[1], weight_hh.shape[1], weight_hh.shape[0] // GATES[mode]
    return tuple(zeros(N, n, dtype=input.dtype, device=input._device) if s is None and (k == 0 or mode == "LSTM")
                 else s for k, (s, n) in enumerate(((hx, H_out), (cx, H))))


def _slow_with_states(mode, tensors, reverse):
    """rnn_layer_slow of rnn_layer's operands, zeros for the initial states not given."""
    input, hx, cx, *params = tensors
    return rnn_layer_slow(mode, input, *_states(mode, input, hx, cx, params[2]), *params, reverse)


def _slow_grads(mode, tensors, grads, reverse):
    """rnn_layer's input gradients as rnn_layer_slow's Tensor ops (recomputed): what a gradient
    of a gradient (create_graph=True) differentiates."""
    outs = _slow_with_states(mode, tensors, reverse)
    pairs = [(o, g) for o, g in zip(outs, grads) if o is not None and g is not None]
    wanted = [t for t in tensors if t is not None and t.requires_grad]
    got = iter(grad([o for o, _ in pairs], wanted, [g for _, g in pairs], create_graph=True, allow_unused=True))
    return tuple(next(got) if t is not None and t.requires_grad else None for t in tensors)


def _tensor(a, like):
    """A cpu tensor over the numpy array `a` (no copy; a fresh array of like's dtype)."""
    a = np.ascontiguousarray(a)
    return result(like._device.wrap_memory(a.reshape(-1), a.size, like.dtype), a.shape, like.dtype)


# The loops keep each step's values as columns (features, batch), so that a gate is a contiguous
# block of rows (numpy's passes over strided slices cost several times more at RNN sizes), with
# the sigmoid gates' rows first: LSTM's in the order o, i, f, g (torch's is i, f, g, o), so that
# the gates that dc multiplies (i, f, g) are contiguous too.
_ORDER = {"LSTM": (3, 0, 1, 2), "GRU": (0, 1, 2), "RNN_TANH": (0,), "RNN_RELU": (0,)}
_SIGMOIDS = {"LSTM": 3, "GRU": 2, "RNN_TANH": 0, "RNN_RELU": 0}


def _rows(mode, H):
    """The rows of torch's gate layout in the loops' order."""
    return np.concatenate([np.arange(k * H, (k + 1) * H) for k in _ORDER[mode]])


def _unpermute(g, rows):
    """A gradient in the loops' row order, back in torch's."""
    out = np.empty_like(g)
    out[rows] = g
    return out


def _previous(seq, first, reverse):
    """Each step's incoming state: `first` at the first step run, else the neighbouring step's."""
    prev = np.empty_like(seq)
    if reverse:
        prev[-1], prev[:-1] = first, seq[1:]
    else:
        prev[0], prev[1:] = first, seq[:-1]
    return prev


def _columns(a):
    """(L, N, F) -> (L, F, N), contiguous."""
    return np.ascontiguousarray(a.transpose(0, 2, 1))


def _forward(mode, x, h0, c0, w_ih, b_ih, w_hh, b_hh, w_hr, reverse):
    """The layer's forward in numpy: (output, h_n, c_n, what backward reads)."""
    L, N = x.shape[:2]
    G, dt = w_hh.shape[0], x.dtype
    H, S = G // GATES[mode], _SIGMOIDS[mode] * G // GATES[mode]
    rows = _rows(mode, H)
    # sigmoid(a) = 0.5 tanh(a / 2) + 0.5 (never overflows): the sigmoid rows' weights and biases
    # halved (exactly), so one tanh pass covers every gate
    half = np.ones((G, 1), dt)
    half[:S] = 0.5
    w_ih_p, w_hh_p = w_ih[rows], w_hh[rows]
    bias = np.zeros((G, 1), dt)
    if b_ih is not None:
        bias += b_ih[rows, None]
    if b_hh is not None and mode != "GRU":  # GRU's b_hn sits inside r * (h W_hn + b_hn)
        bias += b_hh[rows, None]
    # every step's input projection, (L, G, N): one GEMM a step with no transposing copy after it
    # (as fast a GEMM as one over all steps at these sizes, and 1.5x faster with the copy counted)
    gates = np.matmul(w_ih_p * half, x.transpose(0, 2, 1))  # then the activations, in place
    gates += bias * half
    w_hh_s = w_hh_p * half
    b_hh_s = None if b_hh is None or mode != "GRU" else b_hh[rows, None] * half
    outs = np.empty((L, h0.shape[1], N), dt)
    h, c, tmp = np.ascontiguousarray(h0.T), None if c0 is None else np.ascontiguousarray(c0.T), np.empty((G, N), dt)
    saved = {"gates": gates, "outs": outs, "rows": rows, "w_ih": w_ih_p, "w_hh": w_hh_p}
    if mode == "LSTM":
        cs, tcs = np.empty((L, H, N), dt), np.empty((L, H, N), dt)
        hh = np.empty((L, H, N), dt) if w_hr is not None else outs
        saved.update(cs=cs, tcs=tcs, hh=hh)
    elif mode == "GRU":
        saved["gh"] = ghs = np.empty((L, G, N), dt)
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        a = gates[t]
        if mode == "GRU":
            gh = np.matmul(w_hh_s, h, out=ghs[t])
            if b_hh_s is not None:
                gh += b_hh_s
            rz, n = a[:2 * H], a[2 * H:]
            rz += gh[:2 * H]
            np.tanh(rz, out=rz)
            rz *= 0.5
            rz += 0.5
            n += np.multiply(rz[:H], gh[2 * H:], out=tmp[:H])
            np.tanh(n, out=n)
            h = np.subtract(h, n, out=outs[t])
            h *= rz[H:]
            h += n  # (1 - z) n + z h
            continue
        a += np.matmul(w_hh_s, h, out=tmp)
        if mode == "RNN_TANH":
            h = np.tanh(a, out=outs[t])
        elif mode == "RNN_RELU":
            h = np.maximum(a, 0, out=outs[t])
        else:
            np.tanh(a, out=a)
            sig = a[:S]
            sig *= 0.5
            sig += 0.5
            o, i, f, g = a[:H], a[H:2 * H], a[2 * H:3 * H], a[3 * H:]
            c = np.multiply(f, c, out=cs[t])
            c += np.multiply(i, g, out=tmp[:H])
            np.multiply(o, np.tanh(c, out=tcs[t]), out=hh[t])
            h = hh[t] if w_hr is None else np.matmul(w_hr, hh[t], out=outs[t])
    last = 0 if reverse else L - 1
    out = _columns(outs)
    return out, out[last].copy(), (cs[last].T.copy() if mode == "LSTM" else None), saved


def _backward(mode, arrays, saved, grads, wants, reverse):
    """The layer's backward through time in numpy: a gradient (or None) per input of rnn_layer."""
    x, h0, c0, w_ih, b_ih, w_hh, b_hh, w_hr = arrays
    g_out, g_h, g_c = grads
    L, N = x.shape[:2]
    gates, outs, rows, w_hh_p = saved["gates"], saved["outs"], saved["rows"], saved["w_hh"]
    G, dt = gates.shape[1], x.dtype
    H = G // GATES[mode]
    g_out = None if g_out is None else _columns(g_out)
    dh = np.zeros((h0.shape[1], N), dt) if g_h is None else np.ascontiguousarray(g_h.T)
    hp = _previous(outs, h0.T, reverse)  # each step's incoming hidden state
    dgi = np.empty_like(gates)  # the gradient of the pre-activation gates of every step
    dgh = dgi  # and of W_hh h + b_hh (GRU's differs from dgi in the n rows)
    w_back = w_hh_p.T
    # the local derivatives of every step at once (vectorized over time), so that a step's
    # loop body is only the products that depend on the gradient flowing back
    if mode == "LSTM":
        dc = np.zeros((H, N), dt) if g_c is None else np.ascontiguousarray(g_c.T)
        cs, tcs, hh = saved["cs"], saved["tcs"], saved["hh"]
        o, i, f, g = (gates[:, k * H:(k + 1) * H] for k in range(4))
        local = gates * (1 - gates)  # sigmoid' for o, i, f ...
        np.subtract(1, g * g, out=local[:, 3 * H:])  # ... and tanh' for g
        local[:, :H] *= tcs  # d(o tanh c) / d(a_o)
        local[:, H:2 * H] *= g  # d(i g) / d(a_i)
        local[:, 2 * H:3 * H] *= _previous(cs, c0.T, reverse)  # d(f c) / d(a_f)
        local[:, 3 * H:] *= i
        to_c = o * (1 - tcs * tcs)  # d h / d c
        dhs = np.empty_like(outs) if w_hr is not None else None
    elif mode == "GRU":
        dgh = np.empty_like(gates)
        r, z, n, ghn = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:], saved["gh"][:, 2 * H:]
        local = gates[:, :2 * H] * (1 - gates[:, :2 * H])
        to_n = (1 - z) * (1 - n * n)  # d h / d a_n
        local[:, :H] *= ghn  # d a_n / d r, times sigmoid'
        local[:, H:] *= hp - n  # d h / d z, times sigmoid'
    else:
        local = 1 - outs * outs if mode == "RNN_TANH" else (outs > 0).astype(dt)
    for t in (range(L) if reverse else range(L - 1, -1, -1)):
        if g_out is not None:
            dh += g_out[t]
        d = dgi[t]
        if mode == "GRU":
            dn = np.multiply(dh, to_n[t], out=d[2 * H:])
            np.multiply(dh, local[t, H:], out=d[H:2 * H])
            np.multiply(dn, local[t, :H], out=d[:H])
            e = dgh[t]
            e[:2 * H] = d[:2 * H]
            np.multiply(dn, r[t], out=e[2 * H:])
            dh = dh * z[t]
            dh += np.matmul(w_back, e)
            continue
        if mode != "LSTM":
            dh = np.matmul(w_back, np.multiply(dh, local[t], out=d))
            continue
        if dhs is not None:
            dhs[t] = dh
            dh = np.matmul(w_hr.T, dh)
        np.multiply(dh, local[t, :H], out=d[:H])
        dh *= to_c[t]
        dc += dh
        np.multiply(dc, local[t, H:].reshape(3, H, N), out=d[H:].reshape(3, H, N))  # i, f, g
        dc *= f[t]
        dh = np.matmul(w_back, d)
    rows_i = dgi.transpose(1, 0, 2).reshape(G, L * N)  # (gates, steps x batch): the GEMMs' layout
    rows_h = rows_i if dgh is dgi else dgh.transpose(1, 0, 2).reshape(G, L * N)

    def steps_rows(a):  # (L, F, N) -> (L * N, F)
        return a.transpose(0, 2, 1).reshape(L * N, a.shape[1])
    return [(rows_i.T @ saved["w_ih"]).reshape(x.shape) if wants[0] else None,
            dh.T if wants[1] else None,
            dc.T if mode == "LSTM" and wants[2] else None,
            _unpermute(rows_i @ x.reshape(L * N, x.shape[2]), rows) if wants[3] else None,
            _unpermute(rows_i.sum(1), rows) if wants[4] else None,
            _unpermute(rows_h @ steps_rows(hp), rows) if wants[5] else None,
            _unpermute(rows_h.sum(1), rows) if wants[6] else None,
            steps_rows(dhs).T @ steps_rows(hh) if wants[7] else None]
