"""The per-rank inputs of the multi-process collective tests and their numpy expectations,
shared by the job the ranks run (collectives_job.py) and the test that checks its output
(tests/test_distributed.py)."""
import numpy as np

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "uint32", "bool"]
FLOATS = {"float32", "float64", "float16", "bfloat16"}
SHAPE = (3, 5)


def ops_of(dtype: str) -> list:
    """The reduce ops every dtype takes (AVG: floats only)."""
    return ["sum", "product", "max", "min"] + (["avg"] if dtype in FLOATS else [])


def rank_values(rank: int, dtype: str, shape=SHAPE, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s input: different on every rank and dtype, never all equal. Floats are
    multiples of 1/8 in [-4, 4] (exact in every float dtype, their sums too, and products of
    two of them up to one rounding, so a mismatch is a bug and not a rounding); integers small
    enough that sums and products of a few ranks fit int8/uint8."""
    rng = np.random.default_rng(1000 + 97 * rank + 13 * DTYPES.index(dtype) + salt)
    if dtype in FLOATS:
        return rng.integers(-32, 33, shape).astype(np.float64) / 8
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("u"):
        return rng.integers(0, 11, shape).astype(np.int64)
    return rng.integers(-9, 10, shape).astype(np.int64)


def reduce(values: list, op: str, dtype: str) -> np.ndarray:
    """What a reduction over the ranks' values must give (bool: sum/max = or, product/min = and;
    integers wrap as their dtype)."""
    stack = np.stack(values)
    if dtype == "bool":
        return stack.any(0) if op in ("sum", "max") else stack.all(0)
    out = {"sum": stack.sum(0), "product": stack.prod(0), "max": stack.max(0), "min": stack.min(0),
           "avg": stack.sum(0) / len(values)}[op]
    if dtype not in FLOATS:  # wrap to the dtype, as its arithmetic does
        out = out.astype(np.dtype(dtype)).astype(np.int64)
    return out
