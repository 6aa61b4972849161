"""The `cpu` backend: numpy, and the reference every other backend is tested against.
(Registered as 'cpu' by tensorlite/__init__.py, which imports this module lazily.)

A `CpuStorage` is a flat 1-D numpy array (`data`) of one tensorlite dtype. Every op
reads its operands through their Layouts as read-only `as_strided` views (strides
converted from elements to bytes, the layout's offset in elements) and returns a
fresh, C-contiguous flat array; only `copy_strided_src`, `copy2d` and `const_set`
write in place.

Numerics (the rules the GPU backend is compared against):
- float16/bfloat16 are computed in float32 and rounded back once (round to nearest
  even), matching "accumulate f16/bf16 in f32"; float32 and float64 compute in their own
  type, except that matmul/conv/reductions of integers accumulate in int64 (erf of float32 is
  a float32 polynomial within 2 ulp of the rounded float64 erf; sdpa_backward runs in f32 too).
- integer arithmetic wraps around like numpy (and like C on the GPU).
- float -> integer casts truncate toward zero; float -> uint8/uint32 goes through int64
  first, so negative values wrap modulo 2**bits (deterministic, unlike a direct C cast).
- sdpa returns 0 for a query row whose keys are all masked out, as torch does.

The modules, one way (each imports only those above it):

    common       numpy's error state per op (`quietly`), views through layouts, compute dtypes
    parallel     the thread pool: formulas over blocks on several cores, batch shares
    erf          erf in float32 (a polynomial) and float64 (scipy, else math.erf)
    elementwise  unary, binary, compare, where, casts, affine/powf/elu, unary backward
    reduce       sum/min/max/argmin/argmax over any dims
    sort         sort of rows, cumsum/cumprod, repeat_ids, searchsorted
    index        index_select, gather, scatter, index_add (ids checked on the host)
    matmul       matmul and its epilogues (bias, row sums)
    conv         conv, conv_transpose, pooling and max pooling's backward, upsampling
    fused        softmax, norms, rope, their backwards, cross-entropy, AdamW
    attention    sdpa and its backward
    storage      CpuStorage: the mixins above assembled, operand reads, result wrapping, copies
    device       CpuDevice: allocation, the generator
"""
from .device import CpuDevice
from .erf import erf_f32, erf_fallback
from .storage import CpuStorage

__all__ = ["CpuDevice", "CpuStorage", "erf_f32", "erf_fallback"]
