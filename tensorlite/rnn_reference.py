"""The recurrent cells' pointwise step in numpy: the reference of the storage contract's
rnn_cell and rnn_cell_backward (tensorlite.backend), which the GPU backend runs as one kernel a
step (kernels/rnn.hip, whose header states the operands). Arrays are (N, F); half types are
computed in float32 and rounded once by the caller's store, as the kernels do.

Modes and gate order as torch's: LSTM (i, f, g, o), GRU (r, z, n) with n = tanh(gi_n + r gh_n),
RNN_TANH, RNN_RELU. What a step saves for its backward: LSTM the activated gates (N, 4H), GRU
(r, z, n, gh_n) (N, 4H), RNN nothing (its backward reads h)."""
from __future__ import annotations

import numpy as np

MODES = ("LSTM", "GRU", "RNN_TANH", "RNN_RELU")  # kernels/rnn.hip's TL_RNN_* are these positions
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}  # gate blocks of weight_ih / weight_hh per mode
SAVED = {"LSTM": 4, "GRU": 4, "RNN_TANH": 0, "RNN_RELU": 0}  # blocks of H a step saves for its backward


def _sigmoid(a):
    return 0.5 * np.tanh(0.5 * a) + 0.5  # as the kernels: no overflow for large |a|


def _wide(a):
    """a in its arithmetic type: float64 stays, every other float computes in float32."""
    return None if a is None else a.astype(np.float64 if a.dtype == np.float64 else np.float32)


def cell_forward(mode, gi, gh, b_hh, state):
    """(h, c, saved) of one step from gi = x W_ih^T + b_ih, gh = h W_hh^T, b_hh (or None) and the
    state before (c for LSTM, h for GRU, unused by RNN); c and saved None where the mode has none."""
    gi, gh, state = _wide(gi), _wide(gh), _wide(state)
    if b_hh is not None:
        gh = gh + _wide(b_hh)
    if mode == "LSTM":
        i, f, g, o = np.split(gi + gh, 4, axis=1)
        i, f, g, o = _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)
        c = f * state + i * g
        return o * np.tanh(c), c, np.concatenate([i, f, g, o], axis=1)
    if mode == "GRU":
        (ir, iz, i_n), (hr, hz, h_n) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
        r, z = _sigmoid(ir + hr), _sigmoid(iz + hz)
        n = np.tanh(i_n + r * h_n)
        return n + z * (state - n), None, np.concatenate([r, z, n, h_n], axis=1)
    a = gi + gh
    return (np.tanh(a) if mode == "RNN_TANH" else np.maximum(a, 0)), None, None


def cell_backward(mode, saved, state, cell, g_out, dh_rec, carry):
    """(carry, dgi, dgh) of one step back: the gradient reaching h is g_out + dh_rec (+ carry for
    GRU: z dh of the step after), any of them None for none; carry is LSTM's dc from the step
    after (returned: to the step before) or GRU's z dh; `saved` what the forward saved (RNN: h);
    `cell` LSTM's c of this step; `state` as cell_forward's. dgh (GRU's gradient of gh) is None
    elsewhere (it equals dgi); carry None for RNN."""
    saved, state, cell, carry = _wide(saved), _wide(state), _wide(cell), _wide(carry)
    dh = np.zeros_like(saved if state is None else state)  # (N, H): RNN's saved is its h
    for g in (g_out, dh_rec):
        if g is not None:
            dh = dh + _wide(g)
    if mode == "LSTM":
        i, f, g, o = np.split(saved, 4, axis=1)
        tc = np.tanh(cell)
        dc = carry + dh * o * (1 - tc * tc)
        dgi = np.concatenate([dc * g * i * (1 - i), dc * state * f * (1 - f), dc * i * (1 - g * g),
                              dh * tc * o * (1 - o)], axis=1)
        return dc * f, dgi, None
    if mode == "GRU":
        dh = dh + carry
        r, z, n, h_n = np.split(saved, 4, axis=1)
        dn = dh * (1 - z) * (1 - n * n)
        dr, dz = dn * h_n * r * (1 - r), dh * (state - n) * z * (1 - z)
        return dh * z, np.concatenate([dr, dz, dn], axis=1), np.concatenate([dr, dz, dn * r], axis=1)
    return None, (dh * (1 - saved * saved) if mode == "RNN_TANH" else np.where(saved > 0, dh, 0)), None
