"""Kernel paths the other backend-swap files leave unchecked on the emulated platform, each small
enough for it (issue 43: bugs planted there survived the emulated suite). The mutation check
(backends/rocm/amdemu/mutate.py) plants a bug in each and requires these tests to fail.

- attention whose query and key tiles are whole tensor-core tiles (the MMA forward's fast
  path for unmasked full tiles; the entry-point tour's L = S = 6 never fills one);
- an out-of-range id that the device computed (no host-side bound is known for it, so only
  the kernel's own bound check can report it);
- successive random draws after one seed (the generator's stream offset).
"""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from conftest import assert_close, random_array


def _attention64(q, k, v):
    """softmax(q k^T / sqrt(d)) v in float64."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16], ids=lambda d: d.name)
def test_attention_on_whole_tensor_core_tiles(device, rng, dtype):
    """32 queries and 64 keys at head dim 64: on MFMA targets one warp's 32 rows and one key
    tile of 64 are full, so the forward takes its unmasked fast path (scale folded into the
    exponent); elsewhere the same shapes through the scalar kernels."""
    q, k, v = (random_array(rng, (1, 2, t, 64), dtype, -1.5, 1.5) for t in (32, 64, 64))
    got = F.scaled_dot_product_attention(*(tl.tensor(a, device=device) for a in (q, k, v)))
    want = _attention64(*(a.astype(np.float64) for a in (q, k, v)))
    err = np.abs(got.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < {"float16": 6e-3, "bfloat16": 4e-2}[dtype.name], f"relative error {err:.2e}"


@pytest.mark.parametrize("op", ["gather", "index_select"])
def test_out_of_range_ids_computed_on_the_device_raise(device, rng, op):
    x = tl.tensor(random_array(rng, (3, 4), tl.float32), device=device)
    ids = tl.tensor([0, 1], device=device) + 1  # [1, 2] in range, made on the device
    calls = {"gather": lambda i: x.gather(0, i.reshape(2, 1)), "index_select": lambda i: x.index_select(0, i)}
    want = {"gather": x.numpy()[[1, 2], :1], "index_select": x.numpy()[[1, 2]]}
    assert_close(calls[op](ids), want[op])
    with pytest.raises(IndexError) as err:
        calls[op](ids + 1)  # [2, 3]: 3 is past dim 0
    assert op in str(err.value) and "3" in str(err.value), str(err.value)


def test_successive_random_draws_differ(device):
    """After one seed each draw continues the stream (no two draws alike), and the seed
    replays it."""
    tl.manual_seed(11)
    first = [tl.rand(64, device=device).numpy(), tl.randn(64, device=device).numpy(),
             tl.rand(64, device=device).numpy()]
    assert not np.array_equal(first[0], first[2])
    tl.manual_seed(11)
    again = [tl.rand(64, device=device).numpy(), tl.randn(64, device=device).numpy(),
             tl.rand(64, device=device).numpy()]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
