"""The watchdog of device collectives (tensorlite/distributed/watchdog.py), on the null platform
with a collective library whose collectives never finish (tests/distributed/hanging_nccl.py):
what a rank sees when a peer is lost mid-collective. A device collective past the group's
timeout raises DistributedTimeoutError at the next wait (a host read, synchronize, Work.wait,
the next collective) within the timeout and a small margin, the communicator is aborted
(ncclCommAbort, not ncclCommDestroy), every later collective raises instead of hanging, and a
process in that state exits at once with a clean status."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

import tensorlite as tl
import tensorlite.distributed as dist
from tensorlite.backends.rocm import nccl

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "distributed"))
import hanging_nccl  # noqa: E402

TIMEOUT = 0.5  # seconds: the group's timeout in these tests
MARGIN = 3.0   # seconds past it that an error may take (the watchdog polls every TIMEOUT / 20; a loaded CI core)


@pytest.fixture
def hung(null_backend):
    """(the fake library, the null device's name): a world of one with TIMEOUT, whose device
    collectives never finish; the default world back afterwards."""
    dist.destroy_process_group()
    dist.init(timeout=TIMEOUT)
    fake = hanging_nccl.HangingNccl()
    nccl.set_collective_library("null", fake)
    hanging_nccl.hang(tl.backend.get_device(null_backend).platform, fake)
    try:
        yield fake, null_backend
    finally:
        dist.destroy_process_group()
        nccl.set_collective_library("null", None)
        dist.init()


def _later_calls_raise(fake, dev, failed: str):
    """Every later collective of the group raises at once (a device one never reaches the
    library, whose communicator was aborted), and leaving the group destroys nothing."""
    n = len(fake.calls)
    for call in (lambda: dist.all_reduce(tl.zeros(2, device=dev)),
                 lambda: dist.broadcast(tl.zeros(2, device=dev), src=0),
                 lambda: dist.all_reduce(tl.zeros(2)),  # a cpu one too: the group is broken
                 dist.barrier):
        t0 = time.monotonic()
        with pytest.raises(dist.DistributedTimeoutError, match="runs no more collectives since an earlier one "
                                                               "failed: " + failed):
            call()
        assert time.monotonic() - t0 < 1.0
    assert fake.names()[n:] == []
    dist.destroy_process_group()
    assert "ncclCommDestroy" not in fake.names() and fake.names().count("ncclCommAbort") == 1


def test_a_hung_collective_raises_at_the_next_host_read(hung):
    fake, dev = hung
    x = tl.ones(4, 3, device=dev)
    t0 = time.monotonic()
    dist.all_reduce(x, op=dist.ReduceOp.AVG)  # returns at once: the host never waits for a device collective
    assert fake.names()[-1] == "ncclAllReduce" and not fake.aborted.is_set()
    with pytest.raises(dist.DistributedTimeoutError) as e:
        x.tolist()  # blocks in the stream's synchronize until the watchdog aborts the communicator
    took = time.monotonic() - t0
    assert TIMEOUT <= took < TIMEOUT + MARGIN, took
    assert fake.aborted.is_set() and "ncclCommAbort" in fake.names() and "ncclCommDestroy" not in fake.names()
    message = str(e.value)
    for part in ("all_reduce(float32[4, 3] null, op=avg)", "on null:0", "rank 0 of 1", "timeout of 0.5 s",
                 "TENSORLITE_DIST_TIMEOUT", "ncclCommAbort", "not valid"):
        assert part in message, (part, message)
    _later_calls_raise(fake, dev, r"all_reduce\(float32\[4, 3\]")


def test_synchronize_and_work_wait_raise(hung):
    fake, dev = hung
    out = tl.zeros(1, 5, dtype=tl.bfloat16, device=dev)
    t0 = time.monotonic()
    work = dist.all_gather_into_tensor(out, tl.zeros(5, dtype=tl.bfloat16, device=dev), async_op=True)
    assert not work.is_completed()
    with pytest.raises(dist.DistributedTimeoutError, match=r"all_gather\(bfloat16\[5\] null\) on null:0"):
        tl.synchronize(dev)
    assert TIMEOUT <= time.monotonic() - t0 < TIMEOUT + MARGIN
    with pytest.raises(dist.DistributedTimeoutError, match=r"wait\(\): the process group runs no more"):
        work.wait()
    with pytest.raises(dist.DistributedTimeoutError):
        work.is_completed()
    del work
    _later_calls_raise(fake, dev, r"all_gather\(bfloat16\[5\]")


def test_work_wait_raises_once_past_the_deadline_without_a_host_read(hung):
    """The host never blocks: the watchdog's thread aborts on its own, the next wait() raises."""
    fake, dev = hung
    work = dist.reduce_scatter_tensor(tl.zeros(3, device=dev), tl.zeros(3, device=dev), async_op=True)
    assert fake.aborted.wait(TIMEOUT + MARGIN)
    with pytest.raises(dist.DistributedTimeoutError, match=r"reduce_scatter\(float32\[3\] null, op=sum\)"):
        work.wait()
    _later_calls_raise(fake, dev, r"reduce_scatter\(float32\[3\]")


def test_an_asynchronous_error_aborts_before_the_timeout(null_backend):
    """ncclCommGetAsyncError reporting an error (a peer's connection lost) breaks the group at the
    watchdog's next poll, long before the timeout."""
    dist.destroy_process_group()
    dist.init(timeout=60)
    fake = hanging_nccl.HangingNccl(async_code="ncclRemoteError")
    nccl.set_collective_library("null", fake)
    hanging_nccl.hang(tl.backend.get_device(null_backend).platform, fake)
    try:
        x = tl.zeros(8, dtype=tl.int64, device=null_backend)
        t0 = time.monotonic()
        dist.all_reduce(x, op="max")
        with pytest.raises(dist.DistributedError, match=r"all_reduce\(int64\[8\] null, op=max\).*NCCL reported an "
                                                        r"asynchronous error.*ncclCommGetAsyncError failed") as e:
            x.tolist()
        assert not isinstance(e.value, dist.DistributedTimeoutError)
        assert time.monotonic() - t0 < MARGIN and "ncclCommAbort" in fake.names()
    finally:
        dist.destroy_process_group()
        nccl.set_collective_library("null", None)
        dist.init()


def test_healthy_collectives_are_not_flagged(null_backend, monkeypatch):
    """Collectives that finish (the null platform's own events are done at once) pass the deadline
    unharmed, and their events go back to the device's pool."""
    dist.destroy_process_group()
    dist.init(timeout=TIMEOUT)
    fake = hanging_nccl.HangingNccl(async_code="ncclSuccess")
    nccl.set_collective_library("null", fake)  # no hang(): the platform's waits are done at once
    try:
        dev = tl.backend.get_device(null_backend)
        x = tl.zeros(4, device=null_backend)
        for _ in range(3):
            dist.all_reduce(x)
        time.sleep(TIMEOUT * 1.5)
        assert x.tolist() == [0.0] * 4 and "ncclCommAbort" not in fake.names()
        assert len(dev._sync_events) >= 2
        dist.destroy_process_group()
        assert fake.names()[-1] == "ncclCommDestroy"
    finally:
        nccl.set_collective_library("null", None)
        dist.init()


# ---- the process ends cleanly --------------------------------------------------------------------

def _run(body: str, bound_s: float):
    """Run `body` in a process of its own (a world of one, the null device with the hanging
    library as `fake`, `dev`; a float32 tensor `x` on it); (the finished process, seconds)."""
    script = textwrap.dedent("""
        import atexit, sys
        sys.path.insert(0, {jobs!r})
        import hanging_nccl
        import tensorlite as tl, tensorlite.distributed as dist
        fake, dev = hanging_nccl.null_device_with_hanging_nccl()
        # registered before init's teardown, so it runs after it (atexit runs the last registered first)
        atexit.register(lambda: print("calls at exit:", ",".join(fake.names()), flush=True))
        dist.init(timeout={timeout})
        x = tl.ones(6, device=dev)
    """).format(jobs=str(ROOT / "tests" / "distributed"), timeout=TIMEOUT) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TENSORLITE_DIST_TIMEOUT", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=bound_s + 60,
                          cwd=str(ROOT), env=env)
    return proc, time.monotonic() - t0


def test_a_process_exits_cleanly_after_a_timeout():
    proc, took = _run("""
        dist.all_reduce(x)
        try:
            x.tolist()
        except dist.DistributedTimeoutError as e:
            print("raised:", type(e).__name__)
    """, 30)
    assert proc.returncode == 0, proc.stderr
    assert "raised: DistributedTimeoutError" in proc.stdout and "ncclCommAbort" in proc.stdout
    assert "ncclCommDestroy" not in proc.stdout and took < 30
    assert "tensorlite.distributed watchdog: all_reduce(float32[6] null, op=sum)" in proc.stderr
    assert "freeing the communicators at exit failed" not in proc.stderr


def test_an_uncaught_timeout_ends_the_process_with_its_traceback():
    proc, took = _run("""
        dist.all_reduce(x)
        print(x.tolist())
    """, 30)
    assert proc.returncode == 1 and "Traceback" in proc.stderr, proc.stderr
    assert "ncclCommAbort" in proc.stdout and "ncclCommDestroy" not in proc.stdout and took < 30
    assert "DistributedTimeoutError: all_reduce(float32[6] null, op=sum) on null:0" in proc.stderr


def test_exiting_with_a_collective_in_flight_ends_by_its_deadline():
    """No host read, no wait: the exit's teardown waits for the collective until its deadline,
    then aborts the communicator (ncclCommDestroy would wait for ever) and the process ends."""
    proc, took = _run("""
        dist.all_reduce(x)
    """, 30)
    assert proc.returncode == 0, proc.stderr
    assert "calls at exit: ncclCommInitRank,ncclAllReduce," in proc.stdout and "ncclCommGetAsyncError" in proc.stdout
    assert "ncclCommAbort" in proc.stdout and "ncclCommDestroy" not in proc.stdout
    assert TIMEOUT <= took < 30
