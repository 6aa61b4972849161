"""tl.set_num_threads / tl.get_num_threads (issue 47): the count the cpu backend's pool uses, and
numpy's BLAS's thread count with it; bad counts are refused naming the op."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite import threads
from tensorlite.backends.cpu import parallel


@pytest.fixture
def restore_threads():
    before = tl.get_num_threads()
    yield
    tl.set_num_threads(before)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_set_num_threads_sets_the_pool_and_numpys_blas(restore_threads, n):
    tl.set_num_threads(n)
    assert tl.get_num_threads() == n
    assert parallel.batch_shares(8, 1 << 20) == [(8 * i // n, 8 * (i + 1) // n) for i in range(n)]
    blas = threads.blas_threads()
    if not blas:
        pytest.skip("no BLAS library of numpy's found (neither threadpoolctl nor an OpenBLAS in this process)")
    assert blas == [n] * len(blas)


def test_the_pool_runs_products_on_one_blas_thread_each(restore_threads):
    tl.set_num_threads(2)
    if not threads.blas_threads():
        pytest.skip("no BLAS library of numpy's found (neither threadpoolctl nor an OpenBLAS in this process)")
    seen = []
    parallel.in_parallel([lambda: seen.append(threads.blas_threads()) for _ in range(2)])
    assert seen == [[1] * len(seen[0])] * 2  # inside the pool's tasks
    assert threads.blas_threads() == [2] * len(seen[0])  # and back after
    x = tl.tensor(np.ones((4, 64, 64), np.float32))
    assert np.array_equal((x @ x).numpy(), np.full((4, 64, 64), 64, np.float32))


@pytest.mark.parametrize("bad, error", [(0, tl.ArgumentError), (-2, tl.ArgumentError), (1.5, tl.DTypeError),
                                        ("2", tl.DTypeError), (None, tl.DTypeError)])
def test_bad_counts_are_refused(restore_threads, bad, error):
    before = tl.get_num_threads()
    with pytest.raises(error, match="set_num_threads"):
        tl.set_num_threads(bad)
    assert tl.get_num_threads() == before


def test_openblas_is_reached_without_threadpoolctl():
    # the fallback where threadpoolctl is not installed (it is not a dependency): OpenBLAS's own entry points
    libs = threads._openblas_libs()
    if not libs:
        pytest.skip("numpy's BLAS here is not an OpenBLAS loaded from a file (or /proc/self/maps is missing)")
    (get, set_threads), before = libs[0], libs[0][0]()
    try:
        set_threads(1)
        assert get() == 1
        set_threads(2)
        assert get() == 2
    finally:
        set_threads(before)
