// The recurrent cells' pointwise part, one launch a time step (F.rnn_layer on GPUs; the step's
// GEMMs are the backend's matmul): rnn_cell_<t> forward, rnn_cell_bwd_<t> backward from the
// gates the forward saved. One thread an element (n, j) of the (N, H) state; every operand is
// (N, F) contiguous rows. Gate order as torch's: LSTM (i, f, g, o), GRU (r, z, n) with
// n = tanh(gi_n + r * (gh_n + b_hn)). The mode is an argument (ops/rnn.py MODES): the
// step is memory-bound, so one entry per dtype serves the four cells.
//
// Forward: gi = x_t W_ih^T + b_ih and gh = h W_hh^T (N, G = gates * H), b_hh (G) or null added to
// gh here (saving the GEMM's bias epilogue, a launch a step); state = c (LSTM)
// or h (GRU) of the step before, unused by RNN. Writes h_out (N, H), c_out (LSTM) and `saved`:
// LSTM the activated gates (N, 4H), GRU (r, z, n, gh_n) (N, 4H), RNN nothing (its backward reads
// h_out).
//
// Backward: the gradient reaching h is g_out (the output's, or null) + dh_rec (from the step
// after through W_hh, or null) + carry (GRU: z * dh of the step after). `carry` is in place:
// LSTM's dc (in: from the step after; out: to the step before), GRU's z * dh; null for RNN.
// Writes the pre-activation gates' gradients dgi (N, G) and, for GRU, dgh (N, 3H): those of
// gh, whose n block is r * dgi_n.
#include "compat.h"

#define TL_RNN_LSTM 0  // ops/rnn.py MODES
#define TL_RNN_GRU 1
#define TL_RNN_TANH 2
#define TL_RNN_RELU 3

// sigmoid(a) = 0.5 tanh(a / 2) + 0.5: one transcendental, and no overflow for large |a|
template <typename A> TL_DEV A rnn_sigmoid(A a) { return (A)0.5 * tl_tanh((A)0.5 * a) + (A)0.5; }

template <typename T>
TL_DEV void rnn_cell_step(int mode, i64 N, i64 H, const T* gi, const T* gh, const T* b_hh, const T* state,
                          T* h_out, T* c_out, T* saved) {
    typedef Tr<T> R;
    typedef typename R::acc A;
    const i64 gates = mode == TL_RNN_LSTM ? 4 : mode == TL_RNN_GRU ? 3 : 1;
    TL_GRID_LOOP(e, N * H) {
        const i64 j = e % H, row = (e / H) * gates * H + j;  // gate k of element e: row + k * H
        A hb[4];  // gh + b_hh of each gate
        for (int k = 0; k < gates; ++k) hb[k] = R::load(gh[row + k * H]) + (b_hh ? R::load(b_hh[j + k * H]) : (A)0);
        if (mode == TL_RNN_LSTM) {  // saved: the gates' rows, as gi's
            const A i = rnn_sigmoid(R::load(gi[row]) + hb[0]);
            const A f = rnn_sigmoid(R::load(gi[row + H]) + hb[1]);
            const A g = tl_tanh(R::load(gi[row + 2 * H]) + hb[2]);
            const A o = rnn_sigmoid(R::load(gi[row + 3 * H]) + hb[3]);
            const A c = f * R::load(state[e]) + i * g;
            c_out[e] = R::store(c);
            h_out[e] = R::store(o * tl_tanh(c));
            saved[row] = R::store(i); saved[row + H] = R::store(f); saved[row + 2 * H] = R::store(g);
            saved[row + 3 * H] = R::store(o);
        } else if (mode == TL_RNN_GRU) {
            const i64 s = (e / H) * 4 * H + j;
            const A r = rnn_sigmoid(R::load(gi[row]) + hb[0]);
            const A z = rnn_sigmoid(R::load(gi[row + H]) + hb[1]);
            const A ghn = hb[2];
            const A n = tl_tanh(R::load(gi[row + 2 * H]) + r * ghn);
            h_out[e] = R::store(n + z * (R::load(state[e]) - n));  // (1 - z) n + z h
            saved[s] = R::store(r); saved[s + H] = R::store(z); saved[s + 2 * H] = R::store(n);
            saved[s + 3 * H] = R::store(ghn);
        } else {
            const A a = R::load(gi[row]) + hb[0];
            h_out[e] = R::store(mode == TL_RNN_TANH ? tl_tanh(a) : (a > (A)0 ? a : (A)0));
        }
    }
}

template <typename T>
TL_DEV void rnn_cell_back(int mode, i64 N, i64 H, const T* saved, const T* state, const T* cell, const T* g_out,
                          const T* dh_rec, T* carry, T* dgi, T* dgh) {
    typedef Tr<T> R;
    typedef typename R::acc A;
    const i64 gates = mode == TL_RNN_LSTM ? 4 : mode == TL_RNN_GRU ? 3 : 1;
    TL_GRID_LOOP(e, N * H) {
        const i64 j = e % H, row = (e / H) * gates * H + j;
        A dh = (g_out ? R::load(g_out[e]) : (A)0) + (dh_rec ? R::load(dh_rec[e]) : (A)0);
        if (mode == TL_RNN_LSTM) {
            const A i = R::load(saved[row]), f = R::load(saved[row + H]), g = R::load(saved[row + 2 * H]);
            const A o = R::load(saved[row + 3 * H]), tc = tl_tanh(R::load(cell[e]));
            const A dc = R::load(carry[e]) + dh * o * ((A)1 - tc * tc);
            carry[e] = R::store(dc * f);
            dgi[row] = R::store(dc * g * i * ((A)1 - i));
            dgi[row + H] = R::store(dc * R::load(state[e]) * f * ((A)1 - f));
            dgi[row + 2 * H] = R::store(dc * i * ((A)1 - g * g));
            dgi[row + 3 * H] = R::store(dh * tc * o * ((A)1 - o));
        } else if (mode == TL_RNN_GRU) {
            const i64 s = (e / H) * 4 * H + j;
            dh += R::load(carry[e]);
            const A r = R::load(saved[s]), z = R::load(saved[s + H]), n = R::load(saved[s + 2 * H]);
            const A dn = dh * ((A)1 - z) * ((A)1 - n * n);
            const A dr = dn * R::load(saved[s + 3 * H]) * r * ((A)1 - r);
            const A dz = dh * (R::load(state[e]) - n) * z * ((A)1 - z);
            carry[e] = R::store(dh * z);
            dgi[row] = dgh[row] = R::store(dr);
            dgi[row + H] = dgh[row + H] = R::store(dz);
            dgi[row + 2 * H] = R::store(dn);
            dgh[row + 2 * H] = R::store(dn * r);
        } else {
            const A h = R::load(saved[e]);
            dgi[row] = R::store(mode == TL_RNN_TANH ? dh * ((A)1 - h * h) : (h > (A)0 ? dh : (A)0));
        }
    }
}

#define RNN_ENTRIES(T, sfx)                                                                                  \
    extern "C" __global__ void rnn_cell_##sfx(int mode, i64 N, i64 H, const T* gi, const T* gh,            \
                                              const T* b_hh, const T* state, T* h_out, T* c_out, T* saved) { \
        rnn_cell_step<T>(mode, N, H, gi, gh, b_hh, state, h_out, c_out, saved);                            \
    }                                                                                                      \
    extern "C" __global__ void rnn_cell_bwd_##sfx(int mode, i64 N, i64 H, const T* saved, const T* state,  \
                                                  const T* cell, const T* g_out, const T* dh_rec, T* carry, \
                                                  T* dgi, T* dgh) {                                        \
        rnn_cell_back<T>(mode, N, H, saved, state, cell, g_out, dh_rec, carry, dgi, dgh);                  \
    }
TL_FOR_FLOATS(RNN_ENTRIES)
