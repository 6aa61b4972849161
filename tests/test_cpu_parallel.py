"""The cpu backend's multi-core paths (elementwise formulas in blocks over the cores, attention by
shares of the batch) compute what its one-core paths compute, to the bit, whatever the core count."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite.backends.cpu import parallel

from conftest import random_array


def _on_cores(n, fn):
    """fn() with the cpu backend on n threads (tl.set_num_threads), the count restored after."""
    before = tl.get_num_threads()
    tl.set_num_threads(n)
    try:
        return fn()
    finally:
        tl.set_num_threads(before)


@pytest.mark.parametrize("op", ["gelu", "gelu_tanh", "erf"])
def test_blockwise_formulas_agree_across_core_counts(rng, op):
    # sizes around the block edges: one block, a partial last block, several per core
    for n in (7, 1 << 18, (1 << 18) + 5, 3 * (1 << 18) + 11):  # blocks of 1 << 18 on several cores
        x = tl.tensor(random_array(rng, (n,), tl.float32, -5.0, 5.0), requires_grad=True)

        def run(x=x):
            y = {"gelu": lambda: F.gelu(x), "gelu_tanh": lambda: F.gelu(x, approximate="tanh"),
                 "erf": lambda: x.erf()}[op]()
            (g,) = tl.autograd.grad(y.sum(), x)
            return y.numpy(), g.numpy()
        ref = _on_cores(1, run)
        for cores in (2, 3):
            got = _on_cores(cores, run)
            for a, b in zip(got, ref):
                np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))


@pytest.mark.parametrize("mask", [None, "bool", "float"])
@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
def test_attention_batch_shares_agree_across_core_counts(rng, mask, gqa):
    b, hq, hk, L, d = 5, 4, 2 if gqa else 4, 128, 32  # big enough to be split (5: unequal shares)
    assert _on_cores(2, lambda: parallel.batch_shares(b, b * hq * L * L)) == [(0, 2), (2, 5)]
    q = tl.tensor(random_array(rng, (b, hq, L, d), tl.float32), requires_grad=True)
    k, v = (tl.tensor(random_array(rng, (b, hk, L, d), tl.float32), requires_grad=True) for _ in range(2))
    m = None
    if mask == "bool":
        keep = rng.random((b, 1, L, L)) < 0.7
        keep[0, 0, 3] = False  # a row with every key masked
        m = tl.tensor(keep)
    elif mask == "float":
        m = tl.tensor(random_array(rng, (1, hq, L, L), tl.float32))

    def run():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=mask is None, enable_gqa=gqa)
        grads = tl.autograd.grad((out * out).sum(), (q, k, v))
        return [out.numpy()] + [t.numpy() for t in grads]
    ref = _on_cores(1, run)
    got = _on_cores(2, run)
    for a, r in zip(got, ref):
        np.testing.assert_array_equal(a, r)
    assert np.isfinite(ref[0]).all()
