"""rnn_layer on devices (tensorlite.nn.functional.rnn): the input projection of every step as
one matmul, each step's hidden product as one matmul and the cell's pointwise part as the
storage's rnn_cell (one kernel a step on GPUs, kernels/rnn.hip), the backward through time the
same way (rnn_cell_backward from the gates the forward saved) with the weights' gradients as one
matmul each over the whole sequence. Tensor ops without autograd: rnn.py records the layer as
one node. Launches grow with the steps, not with the steps times the cell's ops."""
from __future__ import annotations

from ...autograd import no_grad
from ...custom_op import storage_and_layout
from ...ops.creation import empty, zeros
from ...ops.joins import cat
from ...rnn_reference import GATES, SAVED
from .dense import linear


def _pair(t):
    """A tensor's (storage, layout), or None: rnn_cell's operands."""
    return None if t is None else storage_and_layout(t)


def _order(L, reverse):
    return range(L - 1, -1, -1) if reverse else range(L)


def forward(mode, input, hx, cx, weight_ih, bias_ih, weight_hh, bias_hh, weight_hr, reverse):
    """(output, h_n, c_n, what backward reads); hx (and cx for LSTM) given."""
    L, N = input.shape[:2]
    H, H_out = weight_hh.shape[0] // GATES[mode], weight_hh.shape[1]
    like = {"dtype": input.dtype, "device": input._device}
    with no_grad():
        gi = linear(input, weight_ih, bias_ih).contiguous()  # (L, N, G): every step's input projection at once
        out = empty(L, N, H_out, **like)
        saved = empty(L, N, SAVED[mode] * H, **like) if SAVED[mode] else out  # RNN's backward reads h
        cs = empty(L, N, H, **like) if mode == "LSTM" else None
        hh = empty(L, N, H, **like) if weight_hr is not None else out  # LSTM's h before the projection
        h, c = hx.contiguous(), (None if cx is None else cx.contiguous())  # the kernel reads contiguous rows
        for t in _order(L, reverse):
            gh = linear(h, weight_hh)  # b_hh: added by the cell (no bias epilogue, a launch a step)
            st, layout = storage_and_layout(gi[t])
            state = {"LSTM": c, "GRU": h}.get(mode)  # what the cell reads of the step before (RNN: nothing)
            st.rnn_cell(mode, layout, _pair(gh), _pair(bias_hh), _pair(state), _pair(hh[t]),
                        _pair(None if cs is None else cs[t]), _pair(saved[t] if SAVED[mode] else None))
            if weight_hr is not None:
                out[t].copy_(linear(hh[t], weight_hr))
            h, c = out[t], (None if cs is None else cs[t])
        last = 0 if reverse else L - 1
        h_n, c_n = out[last].clone(), (None if cs is None else cs[last].clone())
    return out, h_n, c_n, {"saved": saved, "cs": cs, "hh": hh}


def _previous(seq, first, reverse):
    """Each step's incoming state (L, N, F): `first` at the first step run, else the neighbour's."""
    return cat([seq[1:], first[None]]) if reverse else cat([first[None], seq[:-1]])


def backward(mode, tensors, out, kept, grads, wants, reverse):
    """The layer's backward through time: a gradient (or None) per tensor of rnn_layer."""
    input, hx, cx, weight_ih, bias_ih, weight_hh, bias_hh, weight_hr = tensors
    g_out, g_h, g_c = (None if g is None else g.contiguous() for g in grads)
    L, N = input.shape[:2]
    G, H = weight_hh.shape[0], weight_hh.shape[0] // GATES[mode]
    saved, cs, hh = kept["saved"], kept["cs"], kept["hh"]
    like = {"dtype": input.dtype, "device": input._device}
    with no_grad():
        dgi = empty(L, N, G, **like)
        dgh = empty(L, N, G, **like) if mode == "GRU" else dgi  # GRU's n rows differ (r * dgi_n)
        # carry: LSTM's dc, GRU's z dh (see rnn_cell_backward); RNN has none
        carry = g_c.clone() if g_c is not None else zeros(N, H, **like) if mode in ("LSTM", "GRU") else None
        hp = _previous(out, hx, reverse)  # each step's incoming hidden state
        states = _previous(cs, cx, reverse) if mode == "LSTM" else hp if mode == "GRU" else None  # as the cell read
        dhs = zeros(out.shape, **like) if weight_hr is not None else None
        dh_rec = g_h
        for t in _order(L, not reverse):
            g = None if g_out is None else g_out[t]
            if dhs is not None:  # the gradient of h = hh W_hr^T, then of hh
                for part in (g, dh_rec):
                    if part is not None:
                        dhs[t].add_(part)
                g, dh_rec = None, dhs[t].matmul(weight_hr)
            st, layout = storage_and_layout(saved[t])
            st.rnn_cell_backward(mode, layout, _pair(None if states is None else states[t]),
                                 _pair(cs[t] if mode == "LSTM" else None), _pair(g), _pair(dh_rec), _pair(carry),
                                 _pair(dgi[t]), _pair(dgh[t] if mode == "GRU" else None))
            dh_rec = dgh[t].matmul(weight_hh)
        d_h0 = dh_rec + carry if mode == "GRU" else dh_rec
        rows_i, rows_h = dgi.reshape(L * N, G), dgh.reshape(L * N, G)
        return [dgi.matmul(weight_ih) if wants[0] else None,
                d_h0 if wants[1] else None,
                carry if mode == "LSTM" and wants[2] else None,
                rows_i.t().matmul(input.reshape(L * N, input.shape[2])) if wants[3] else None,
                rows_i.sum(0) if wants[4] else None,
                rows_h.t().matmul(hp.reshape(L * N, hp.shape[2])) if wants[5] else None,
                rows_h.sum(0) if wants[6] else None,
                dhs.reshape(L * N, dhs.shape[2]).t().matmul(hh.reshape(L * N, H)) if wants[7] else None]
