"""The watchdog of device collectives, as torch's ProcessGroupNCCL watchdog: a device collective
(NCCL on cuda, RCCL on rocm) that has not finished within the group's timeout
(TENSORLITE_DIST_TIMEOUT, init's timeout) breaks the process group.

Why: a device collective never blocks the host, so a peer lost mid-backward leaves the others'
collectives waiting on the GPU, and the host hangs at its next read (`.item()`, `.cpu()`,
`synchronize()`) inside the driver, where no Python timeout reaches. So each collective
enqueued eagerly is watched: a thread polls the event recorded after it (and the
communicator's ncclCommGetAsyncError) every `interval` seconds, and once one is past its
deadline (or the library reports an error) it records the failure and aborts every
communicator of the group (ncclCommAbort). The abort ends the collective's kernels, so the
host's blocked read returns; the failure is raised on the host at the next wait: that read
(the device checks its `pending_checks` after each host read), Work.wait() or
is_completed(), or the next collective -- which, like every later one, raises instead of
running (torch's TORCH_NCCL_ASYNC_ERROR_HANDLING=2: abort the communicators, keep the process;
torch's default, 3, ends the process instead).
destroy_process_group() (also at exit) waits for a collective in flight until its deadline
at most, then aborts instead of ncclCommDestroy (which waits on the device for ever).

Collectives enqueued inside a graph capture run when the graph replays and are not watched.

The thread never raises: it touches the Python objects it shares with the user's threads
under one lock, a failure of its own is printed once and ends it, and it is a daemon that
destroy_process_group() stops.
"""
from __future__ import annotations

import collections
import sys
import threading
import time

from ._world import DistributedError, DistributedTimeoutError


class InFlight:
    """One watched device collective: its communicator, the event recorded after it on the
    communication stream, what it was (for the error), and its deadline. The event goes back
    to the device's pool once the collective has finished and its Work has let it go (release)."""
    __slots__ = ("comm", "event", "what", "seq", "start", "deadline", "finished", "released", "recycled")

    def __init__(self, comm, event, what: str, seq: int, timeout: float):
        self.comm, self.event, self.what, self.seq = comm, event, what, seq
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.finished = self.released = self.recycled = False

    def recycle_if_done(self) -> None:
        """Give the event back to the device's pool once finished and released (once)."""
        if self.finished and self.released and not self.recycled:
            self.recycled = True
            self.comm.device.recycle_event(self.event)


class Watchdog:
    """The watchdog of one process group (see the module's docstring)."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size
        self.failure = None       # the DistributedError that broke the group, once one did
        self._raised = False      # whether the failure was raised to the user already
        self._lock = threading.RLock()  # RLock: a Work's finalizer may run (GC) while its thread holds it
        self._wake = threading.Condition(self._lock)
        self._pending = {}        # communicator -> deque of its unfinished InFlight, in stream order
        self._seq = collections.Counter()  # communicator -> collectives watched so far
        self._thread = None
        self._stop = False
        self.interval = 0.1

    # ---- the user's side ----------------------------------------------------------------
    def watch(self, comm, event, what: str, timeout: float) -> InFlight:
        """Watch the collective just enqueued on `comm`'s stream, `event` recorded after it."""
        with self._lock:
            self._seq[comm] += 1
            rec = InFlight(comm, event, what, self._seq[comm], timeout)
            self._pending.setdefault(comm, collections.deque()).append(rec)
            # poll often enough to notice a deadline a small fraction of the timeout late
            self.interval = min(0.1, max(0.002, timeout / 20))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tensorlite-dist-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()
        comm.device.pending_checks[self] = None  # the device's next host read calls check_flag()
        return rec

    def release(self, rec: InFlight) -> None:
        """The Work of `rec` is gone: its event may go back to the pool once the collective finished."""
        with self._lock:
            rec.released = True
            if not rec.finished and rec.event.query():
                rec.finished = True
            rec.recycle_if_done()

    def raise_if_failed(self, op: str) -> None:
        """Raise the failure that broke the group (the first time as it was recorded; later ones
        say that the group runs no more collectives), or nothing."""
        failure = self.failure
        if failure is None:
            return
        if not self._raised:
            self._raised = True
            raise failure
        raise type(failure)(f"{op}: the process group runs no more collectives since an earlier one failed: "
                            f"{failure}")

    def check_flag(self) -> None:
        """After a host read of a device (its `pending_checks`): raise the failure, else find
        one now, and stay registered on each device that still has collectives in flight."""
        self._scan()
        self.raise_if_failed("reading a device result back to the host")
        with self._lock:
            devices = {comm.device for comm, q in self._pending.items() if q}
        for dev in devices:
            dev.pending_checks[self] = None

    def close(self, communicators) -> None:
        """Free the communicators (destroy_process_group): each waits for its collectives in
        flight until their deadline at most, then is destroyed -- or aborted, where one did not
        finish or the group had failed -- and the thread stops."""
        for comm in communicators:
            while self.failure is None:
                with self._lock:
                    queue = self._pending.get(comm)
                    rec = queue[0] if queue else None
                if rec is None:
                    break
                self._scan()
                time.sleep(0.001)
            if self.failure is None:
                comm.destroy()
            else:
                comm.abort(f"the process group failed: {self.failure}")
        with self._lock:
            self._stop = True
            self._wake.notify()
            self._forget_all()  # the communicators are gone: no collective is in flight
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    # ---- the polling ----------------------------------------------------------------------
    def _forget_all(self) -> None:  # with the lock held
        for queue in self._pending.values():
            for rec in queue:
                rec.finished = True
                rec.recycle_if_done()
        self._pending.clear()

    def _scan(self) -> None:
        """Retire the finished collectives; fail the group where the oldest unfinished one of a
        communicator is past its deadline, its event reports a device error, or the library
        reports an asynchronous error. Called by the thread and by check_flag/close."""
        failed = None
        with self._lock:
            if self.failure is not None:
                return
            now = time.monotonic()
            for comm, queue in self._pending.items():
                while queue and failed is None:
                    rec = queue[0]
                    try:
                        comm.device.activate()  # this thread's current device (a CUDA context is per thread)
                        done = rec.event.query()  # in stream order: the later ones wait for this one
                    except Exception as e:  # a device error (a kernel that faulted): it will not finish
                        failed = DistributedError(self._describe(rec, now) + f": the device reported an error "
                                                  f"while it ran ({e})")
                        break
                    if not done:
                        if now > rec.deadline:
                            failed = DistributedTimeoutError(self._describe(rec, now) + self._timed_out(rec))
                        break
                    queue.popleft()
                    rec.finished = True
                    rec.recycle_if_done()
                if failed is not None:
                    break
                if queue:
                    try:
                        code = comm.async_error(blocking=False)  # None: the user's thread is in a call on it
                    except Exception:  # freed meanwhile: nothing is in flight on it any more
                        code = None
                    lib = comm.library.lib  # ncclInProgress: a nonblocking communicator at work, no error
                    if code not in (None, lib.ncclSuccess, lib.ncclInProgress):
                        err = comm.library.error("ncclCommGetAsyncError", code, comm.comm)
                        failed = DistributedError(self._describe(queue[0], now) + f": {comm.library.vendor.upper()} "
                                                  f"reported an asynchronous error on the communicator ({err})")
                        break
            if failed is None:
                return
            comms = list(self._pending)
            vendor = comms[0].library.vendor.upper()
            # the whole message before the failure is visible: the user's thread may raise it at once
            failed.args = (f"{failed}. The {vendor} communicators were aborted (ncclCommAbort): the results of the "
                           "collectives in flight are not valid, and the process group runs no more collectives; "
                           "end the process, or destroy_process_group() and init() again",)
            self.failure = failed
            self._forget_all()
        # set before the abort, which lets a host read blocked behind the collective return and look
        sys.stderr.write(f"tensorlite.distributed watchdog: {failed}\n")
        sys.stderr.flush()
        for comm in comms:
            comm.abort(f"the watchdog aborted it: {failed}")

    def _describe(self, rec: InFlight, now: float) -> str:
        group = "the default group (WORLD: ranks 0.." + str(self.size - 1) + ")"
        return (f"{rec.what} on {rec.comm.device} (device collective #{rec.seq} of its communicator; rank "
                f"{self.rank} of {self.size} in {group}), started {now - rec.start:.1f} s ago")

    def _timed_out(self, rec: InFlight) -> str:
        timeout = rec.deadline - rec.start
        return (f": it did not finish within the timeout of {timeout:g} s (TENSORLITE_DIST_TIMEOUT, or "
                "init(timeout=)): another rank hangs, died, or called other collectives")

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._stop and not any(self._pending.values()):
                        self._wake.wait()
                    if self._stop:
                        return
                    self._wake.wait(self.interval)
                    if self._stop:
                        return
                self._scan()
                if self.failure is not None:
                    return
        except Exception as e:  # never let a watchdog's own failure reach the interpreter
            try:
                sys.stderr.write(f"tensorlite.distributed watchdog: stopped by an error of its own, device "
                                 f"collectives are no longer watched: {type(e).__name__}: {e}\n")
            except Exception:
                pass
