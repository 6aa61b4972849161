"""The compiled launch shim (backends/rocm/launch_shim.py) passes a launch to the driver exactly
as cffi's ABI mode does, and its launch queue keeps the launches' order, arguments and failures
and the stream's order against every other call: tested on any machine with a C compiler,
through the null platform over a C library that exports cuLaunchKernel and records its arguments."""
import os
import shutil
import subprocess
import threading
import time

import cffi
import numpy as np
import pytest

from tensorlite.errors import BackendError
from tensorlite.layout import Layout
from tensorlite.backends.rocm import launch_shim
from tensorlite.backends.rocm.device import GpuDevice
from tensorlite.backends.rocm.null import LAUNCH_DECL, NullPlatform

RECORDER = LAUNCH_DECL.strip().rstrip(";") + """ {
    seen_dims[0] = gx; seen_dims[1] = gy; seen_dims[2] = gz; seen_dims[3] = bx; seen_dims[4] = by;
    seen_dims[5] = bz; seen_dims[6] = shared_mem;
    seen_ptrs[0] = f; seen_ptrs[1] = stream; seen_ptrs[2] = params; seen_ptrs[3] = extra;
    seen_first_arg = params ? *(long long*)params[0] : -1;
    return status;
}
"""
RECORDER_STATE = "unsigned int seen_dims[7]; void* seen_ptrs[4]; long long seen_first_arg; int status;"


@pytest.fixture(scope="module")
def recorder_lib(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler (cc) to build the recording cuLaunchKernel library")
    work = tmp_path_factory.mktemp("shim")
    src, lib = work / "recorder.c", work / "librecorder.so"
    src.write_text(RECORDER_STATE + "\n" + RECORDER)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return str(lib)


def _device(lib, monkeypatch, tmp_path, shim: bool):
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TENSORLITE_LAUNCH_SHIM", "1" if shim else "0")
    return GpuDevice(NullPlatform(lib), 0)


def _recorded(lib):
    ffi = cffi.FFI()
    ffi.cdef(" ".join("extern " + d + ";" for d in RECORDER_STATE.split(";") if d.strip()))
    rec = ffi.dlopen(lib)  # the same loaded library: its globals are the ones the launch wrote
    ptrs = [int(ffi.cast("uintptr_t", p)) for p in rec.seen_ptrs]
    return list(rec.seen_dims), ptrs, rec.seen_first_arg, rec


def _launch_once(dev, grid, block, shared, first_arg=1234):
    kernel = dev.function("binary.hip", "badd_f32")
    dev.launch(kernel, grid, block, [("int64", first_arg), ("ptr", 0)], shared_mem=shared)
    dev.platform.drain_launches()  # a queued launch has reached the library on return
    return kernel


@pytest.mark.parametrize("grid, block, shared", [(7, 256, 0), ((3, 2, 1), (32, 4), 4096)])
def test_the_shim_passes_what_abi_mode_passes(recorder_lib, monkeypatch, tmp_path, grid, block, shared):
    if not launch_shim.installed():
        pytest.skip("the compiled launch shim is not installed (no C compiler or cffi at install)")
    seen = []
    for shim in (True, False):
        dev = _device(recorder_lib, monkeypatch, tmp_path, shim)
        assert (dev._launch_fn is not dev.platform.launch_function()) == shim
        _launch_once(dev, grid, block, shared)
        dims, ptrs, first_arg, _ = _recorded(recorder_lib)
        stream = int(dev.platform.ffi.cast("uintptr_t", dev.stream))
        assert ptrs[1] == stream and ptrs[2] != 0 and ptrs[3] == 0  # extra is NULL either way
        assert first_arg == 1234
        seen.append(dims)
    g = (grid, 1, 1) if isinstance(grid, int) else grid
    b = (block, 1, 1) if isinstance(block, int) else tuple(block) + (1,)
    assert seen[0] == seen[1] == [*g, *b, shared]


@pytest.mark.parametrize("queue", [False, True])
def test_a_failed_launch_through_the_shim_raises_and_the_device_stays_usable(recorder_lib, monkeypatch, tmp_path,
                                                                             queue):
    if not launch_shim.installed():
        pytest.skip("the compiled launch shim is not installed (no C compiler or cffi at install)")
    monkeypatch.setenv("TENSORLITE_LAUNCH_QUEUE", "1" if queue else "0")
    dev = _device(recorder_lib, monkeypatch, tmp_path, True)
    assert (dev._queue is not None) == queue
    *_, rec = _recorded(recorder_lib)
    rec.status = 700  # CUDA_ERROR_ILLEGAL_ADDRESS's code: the shim must hand the status back
    try:  # at the launch itself, or queued: at the next device call (_launch_once drains)
        with pytest.raises(BackendError, match=r"badd_f32.*grid=\(5, 1, 1\).*failed.*\(700\)"):
            _launch_once(dev, 5, 128, 0)
    finally:
        rec.status = 0
    _launch_once(dev, 9, 128, 0)
    assert _recorded(recorder_lib)[0][:4] == [9, 1, 1, 128]
    x = dev.from_cpu(np.ones(4, np.float32))  # and whole ops still go through
    x.affine(Layout.contiguous((4,)), 2.0, 0.0)


def test_python_launchers_are_called_directly(monkeypatch):
    """The emulated and null platforms' Python launchers take no shim."""
    platform = NullPlatform()
    fn, last = platform.launch_call()
    assert callable(fn) and not isinstance(fn, platform.ffi.CData) and last == platform.ffi.NULL


# ---- the launch queue (launch_shim.LaunchQueue) ------------------------------------------
# records each launch's first argument and grid; takes delay_ns (a driver slower than Python, so
# that a call not waiting for the queue would see launches missing); fails where the first
# argument is fail_arg
QUEUE_RECORDER_STATE = ("long long rec_args[8192]; unsigned int rec_grid[8192]; unsigned long rec_thread[8192]; "
                        "int rec_count; long long fail_arg; long long delay_ns;")
QUEUE_RECORDER = "#include <pthread.h>\n#include <time.h>\n" + LAUNCH_DECL.strip().rstrip(";") + """ {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < delay_ns);
    long long first = params ? *(long long*)params[0] : -1;
    if (rec_count < 8192) {
        rec_args[rec_count] = first; rec_grid[rec_count] = gx; rec_thread[rec_count] = (unsigned long)pthread_self();
    }
    rec_count += 1;
    return first == fail_arg ? 700 : 0;
}
"""


@pytest.fixture
def queued(tmp_path, monkeypatch):
    """(device whose launches go through a LaunchQueue to a recording cuLaunchKernel, its recorder)."""
    if not launch_shim.installed():
        pytest.skip("the compiled launch shim is not installed (no C compiler or cffi at install)")
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler (cc) to build the recording cuLaunchKernel library")
    src, lib = tmp_path / "queue_recorder.c", tmp_path / "libqueue_recorder.so"
    src.write_text(QUEUE_RECORDER_STATE + "\n" + QUEUE_RECORDER)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    monkeypatch.setenv("TENSORLITE_LAUNCH_QUEUE", "1")
    dev = _device(str(lib), monkeypatch, tmp_path, True)
    assert dev._queue is not None
    ffi = cffi.FFI()
    ffi.cdef(" ".join("extern " + d + ";" for d in QUEUE_RECORDER_STATE.split(";") if d.strip()))
    rec = ffi.dlopen(str(lib))
    rec.fail_arg, rec.delay_ns = -2, 20000
    yield dev, rec
    dev._queue.close()


def _put(dev, first_arg, grid=1):
    dev.launch(dev.function("binary.hip", "badd_f32"), grid, 64, [("int64", first_arg), ("ptr", 0)])


def test_queued_launches_reach_the_driver_in_order_with_their_own_arguments(queued):
    dev, rec = queued
    n = 2000  # more than the ring's 512 slots: a put into a full ring launches the oldest record itself
    for i in range(n):
        _put(dev, i, grid=1 + i % 7)  # one argument buffer, refilled for every launch
    dev.synchronize()
    assert rec.rec_count == n
    assert list(rec.rec_args[0:n]) == list(range(n))
    assert list(rec.rec_grid[0:n]) == [1 + i % 7 for i in range(n)]


def test_every_other_stream_call_comes_after_the_launches_queued_before_it(queued):
    dev, rec = queued
    seen, note = [], dev.platform._note

    def noting(kind, stream, *args):  # what the driver had received when the call was made
        note(kind, stream, *args)
        seen.append((kind, rec.rec_count))
    dev.platform._note = noting
    buf = dev.alloc(64)
    for i in range(100):
        _put(dev, i)
    dev.dtod(buf.ptr, buf.ptr, 64)
    for i in range(50):
        _put(dev, i)
    _ = dev.blas.handle  # a library call on the stream takes its handle right before
    assert rec.rec_count == 150
    _put(dev, 0)
    ev = dev.event()
    ev.record()
    host = np.zeros(4, np.float32)
    dev.dtoh(host, buf.ptr)
    assert seen[:3] == [("dtod", 100), ("event_record", 151), ("dtoh", 151)]


def test_a_drain_launches_what_the_worker_has_not_taken_on_the_calling_thread(queued):
    """So that no call waits for the worker thread to be scheduled (a host with every core busy)."""
    dev, rec = queued
    rec.delay_ns = 5000000  # 5 ms a launch: the worker holds one at a time while the drain takes the rest
    for i in range(20):
        _put(dev, i)
    dev.synchronize()
    assert list(rec.rec_args[0:rec.rec_count]) == list(range(20))
    threads = list(rec.rec_thread[0:20])
    assert threads.count(threading.get_ident()) >= 1, threads  # without help the worker makes all 20


def test_a_launch_with_more_argument_bytes_than_a_slot_goes_after_the_queued_ones(queued):
    dev, rec = queued
    rec.delay_ns = 1000000  # the ten queued launches take 10 ms
    for i in range(10):
        _put(dev, i)
    big = dev.function("binary.hip", "bmul_f32")  # the recorder reads the first argument alone
    dev.launch(big, 3, 64, [("int64", 99), ("bytes", bytes(4096))])
    dev.synchronize()
    assert list(rec.rec_args[0:rec.rec_count]) == list(range(10)) + [99]


def test_a_closed_queue_hands_launches_to_the_calling_thread(queued):
    dev, rec = queued
    for i in range(5):
        _put(dev, i)
    dev._queue.close()  # what the interpreter's exit does: the launches put before still reach the driver
    assert rec.rec_count == 5
    _put(dev, 5)
    assert rec.rec_count == 6 and list(rec.rec_args[0:6]) == list(range(6))


def test_a_failed_queued_launch_is_reported_once_and_later_launches_run(queued):
    dev, rec = queued
    rec.fail_arg, rec.delay_ns = 7, 10000000  # launch 7 fails 70 ms on: long after the ten puts returned
    for i in range(10):
        _put(dev, i)
    with pytest.raises(BackendError, match=r"badd_f32.*grid=\(1, 1, 1\).*failed \(a queued launch.*\(700\)"):
        dev.synchronize()
    dev.synchronize()  # reported once
    assert list(rec.rec_args[0:10]) == list(range(10))
    rec.fail_arg = -2
    x = dev.from_cpu(np.ones(4, np.float32))  # whole ops go on
    x.affine(Layout.contiguous((4,)), 2.0, 0.0)
    dev.synchronize()
    assert rec.rec_count == 11


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: not on this platform")
def test_a_forked_child_launches_directly_and_never_waits_for_a_worker(queued):
    dev, rec = queued
    rec.delay_ns = 0
    _put(dev, 1)
    dev.synchronize()
    pid = os.fork()
    if pid == 0:  # the child: no worker thread; a launch and a drain must neither hang nor be lost
        try:
            _put(dev, 2)
            dev.synchronize()
            os._exit(0 if rec.rec_count == 2 and rec.rec_args[1] == 2 else 1)
        except BaseException:
            os._exit(2)
    for _ in range(200):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung on the launch queue")
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("env, cpus, on", [("", 2, False), ("", 16, True), ("0", 16, False), ("1", 2, True)])
def test_the_queue_is_on_with_a_core_to_spare_unless_told(monkeypatch, env, cpus, on):
    if not launch_shim.installed():
        pytest.skip("the compiled launch shim is not installed (no C compiler or cffi at install)")
    monkeypatch.setenv("TENSORLITE_LAUNCH_QUEUE", env)
    monkeypatch.setattr(launch_shim, "_usable_cpus", lambda: cpus)
    assert launch_shim.queue_enabled() == on
