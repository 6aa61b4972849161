"""Rotary position embeddings (fused ops with fused backwards, and their composite
references) and the decode step's fused rotary + key/value cache write.

x is (b, h, t, d) for 'rope' / 'rope_i' and (b, t, h, d) for 'rope_thd'; cos/sin are
(t, d/2) or per batch (b, t, d/2)."""
from __future__ import annotations

from ... import dtype as dtypes
from ...autograd import is_grad_enabled, note_write
from ...custom_op import custom_op, result, storage_and_layout
from ...errors import DeviceError, DTypeError, ShapeError, describe
from ...ops.joins import cat, stack
from .common import check_like, floating

_HEAD_DIM = {"rope": 1, "rope_i": 1, "rope_thd": 2}


def _rope_tables(variant, x, cos, sin):
    if x.ndim != 4 or x.shape[-1] % 2:
        raise ShapeError(f"{describe(variant, x=x, cos=cos, sin=sin)}: x must be 4-D with an even last dim")
    b, d2 = x.shape[0], x.shape[-1] // 2
    t = x.shape[2] if variant != "rope_thd" else x.shape[1]
    if any(tuple(table.shape) not in ((t, d2), (b, t, d2)) for table in (cos, sin)):
        raise ShapeError(f"{describe(variant, x=x, cos=cos, sin=sin)}: cos/sin must be ({t}, {d2}) or "
                         f"({b}, {t}, {d2})")
    check_like(variant, x, cos=cos, sin=sin)
    return [table.unsqueeze(0).expand(b, t, d2) if table.ndim == 2 else table for table in (cos, sin)]


def _rope_pairs(variant, x):
    """The two halves each rotation mixes: (x[2i], x[2i+1]) interleaved, (x[i], x[i+d/2]) half-split."""
    if variant == "rope_i":
        return x.narrow(-1, 0, x.shape[-1] // 2, 2), x.narrow(-1, 1, x.shape[-1] // 2, 2)
    return x.chunk(2, -1)


def _rope(variant, x, cos, sin):
    x = floating(x)
    c, s = _rope_tables(variant, x, cos, sin)
    (xs, xl), (cs, cl), (ss, sl) = storage_and_layout(x), storage_and_layout(c), storage_and_layout(s)
    y = result(xs.rope(xl, cs, cl, ss, sl, variant), x.shape, x.dtype)

    def grad(g):
        g = g._cast(x.dtype)  # a rotation's transpose is the rotation by -theta: the same kernel, sin negated
        gs, gl = storage_and_layout(g)
        gx = result(gs.rope_backward(gl, cs, cl, ss, sl, variant), x.shape, x.dtype)
        if not (c.requires_grad or s.requires_grad):
            return gx, None, None
        (x1, x2), (g1, g2) = _rope_pairs(variant, x), _rope_pairs(variant, g)
        hd = _HEAD_DIM[variant]
        return gx, (g1 * x1 + g2 * x2).sum(hd), (g2 * x1 - g1 * x2).sum(hd)
    return custom_op(y, (x, c, s), grad, variant, (x, c, s))


def _rope_slow(variant, x, cos, sin):
    x = floating(x)
    c, s = (t.unsqueeze(_HEAD_DIM[variant]) for t in _rope_tables(variant, x, cos, sin))
    x1, x2 = _rope_pairs(variant, x)
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
    return stack([r1, r2], -1).reshape(x.shape) if variant == "rope_i" else cat([r1, r2], -1)


def rope(x, cos, sin):
    """Half-split rotary embedding (Hugging Face Llama): pairs (x[i], x[i + d/2]), x (b, h, t, d)."""
    return _rope("rope", x, cos, sin)


def rope_i(x, cos, sin):
    """Interleaved rotary embedding (GPT-J): pairs (x[2i], x[2i+1]), x (b, h, t, d)."""
    return _rope("rope_i", x, cos, sin)


def rope_thd(x, cos, sin):
    """Half-split rotary embedding with x laid out (b, t, h, d)."""
    return _rope("rope_thd", x, cos, sin)


def rope_kv_cache(qkv, cos, sin, k_cache, v_cache, positions):
    """A decode step's rotary embedding and key/value cache write, one kernel on GPUs (what
    vLLM's rotary_embedding and reshape_and_cache do). qkv (b, hq + 2*hkv, t, d): the heads of
    one q/k/v product, queries then keys then values; cos, sin as rope's; k_cache, v_cache
    (b, hkv, S, d); positions (t,) integer ids below S. Writes the caches in place and returns
    the rotated queries (b, hq, t, d). The same as

        q, k, v = qkv.split([hq, hkv, hkv], 1)
        k_cache.index_copy_(2, positions, rope(k, cos, sin)); v_cache.index_copy_(2, positions, v)
        return rope(q, cos, sin)

    which it runs where autograd records or the caches are not contiguous."""
    op = "rope_kv_cache"
    if qkv.ndim != 4 or k_cache.ndim != 4 or tuple(k_cache.shape) != tuple(v_cache.shape) \
            or k_cache.shape[0] != qkv.shape[0] or k_cache.shape[3] != qkv.shape[3] \
            or qkv.shape[1] <= 2 * k_cache.shape[1]:
        raise ShapeError(f"{describe(op, qkv=qkv, k_cache=k_cache, v_cache=v_cache)}: expected qkv (b, hq + 2*hkv, "
                         f"t, d) with hq >= 1 and caches (b, hkv, S, d) of one shape")
    if tuple(positions.shape) != (qkv.shape[2],) or positions.dtype.is_floating_point:
        raise ShapeError(f"{describe(op, qkv=qkv, positions=positions)}: positions must be ({qkv.shape[2]},) "
                         f"integer ids")
    if not qkv.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, qkv=qkv)}: qkv must be floating point")
    check_like(op, qkv, k_cache=k_cache, v_cache=v_cache)
    if positions._device is not qkv._device:
        raise DeviceError(f"{describe(op, qkv=qkv, positions=positions)}: positions must be on qkv's device")
    hkv = k_cache.shape[1]
    hq = qkv.shape[1] - 2 * hkv
    recording = is_grad_enabled() and any(t.requires_grad for t in (qkv, cos, sin, k_cache, v_cache))
    if recording or not (k_cache._layout.is_contiguous() and v_cache._layout.is_contiguous()):
        qk = rope(qkv[:, :hq + hkv], cos, sin)
        k_cache.index_copy_(2, positions, qk[:, hq:])
        v_cache.index_copy_(2, positions, qkv[:, hq + hkv:])
        return qk[:, :hq]
    c, s = _rope_tables("rope", qkv, cos, sin)
    ids = positions if positions.dtype is dtypes.int64 else positions._cast(dtypes.int64)
    (xs, xl), (cs, cl), (ss, sl) = storage_and_layout(qkv), storage_and_layout(c), storage_and_layout(s)
    (ks, kl), (vs, vl), (ps, pl) = storage_and_layout(k_cache), storage_and_layout(v_cache), storage_and_layout(ids)
    qk = result(xs.rope_kv_cache(xl, cs, cl, ss, sl, ks, kl, vs, vl, ps, pl), (qkv.shape[0], hq + hkv) +
                tuple(qkv.shape[2:]), qkv.dtype)
    note_write(ks)
    note_write(vs)
    return qk[:, :hq]


def rope_slow(x, cos, sin):
    return _rope_slow("rope", x, cos, sin)


def rope_i_slow(x, cos, sin):
    return _rope_slow("rope_i", x, cos, sin)


def rope_thd_slow(x, cos, sin):
    return _rope_slow("rope_thd", x, cos, sin)
