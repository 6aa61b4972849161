"""The compiled launch shim: every kernel launch's call into the driver, through cffi's API mode.

cffi's ABI mode (how the platforms call the HIP and CUDA runtimes) converts a call's arguments
through libffi: measured on an H200 host, a bare cuLaunchKernel call cost 7.1 us from Python
against 5.0 us in a C loop. API mode compiles the conversion into C. `setup.py` builds this
module's C source into `_launch_shim` at install where cffi and a C compiler are present; without
them the install succeeds and launches stay in ABI mode (TENSORLITE_LAUNCH_SHIM=0 forces that).

The shim is one C function with the launch call's arguments in the driver's order, plus the
driver entry point's address in the slot of the driver's `extra` argument (always NULL here):
cuLaunchKernel and hipModuleLaunchKernel have the same C signature, so one shim serves both.

The launch queue (LaunchQueue, C below): a kernel launch costs the driver 3.8-4.6 us of host
time on the lent H100 hosts (a C loop, the shim), about half of a whole tiny op. With the queue, the
calling thread copies the launch (arguments included) into a ring of slots and returns; a
worker thread of its own, in C without the GIL, makes the driver calls in the order they were
put. Every other call that puts work on a stream or waits for one first drains the queue
(PlatformBase.call and the library entry points call drain_launches), so the stream sees the
work in program order; a drain (or a put into a full ring) launches the records the worker has
not taken yet on the calling thread itself, so no caller waits for the worker to be scheduled
(on a host whose cores are all busy it may not be soon). A failed launch is reported at the
next launch or device call.

This file imports nothing from tensorlite: setup.py loads it on its own.
"""
from __future__ import annotations

import atexit
import os
import threading

MODULE = "tensorlite.backends.rocm._launch_shim"
# f, grid x/y/z, block x/y/z, dynamic shared memory, stream, kernel parameters, and where
# the driver's `extra` would be, its launch entry point
CDEF = """
int tl_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
              unsigned shared_mem, void* stream, void** params, void* launch);
typedef struct tl_queue tl_queue;
tl_queue* tl_queue_new(void);
int tl_put(tl_queue* q, void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
           unsigned shared_mem, void* stream, void** params, unsigned nargs, void* base, unsigned nbytes,
           void* launch);
int tl_drain(tl_queue* q, int help);
int tl_take_error(tl_queue* q, void** f, unsigned* dims);
void tl_worker(tl_queue* q);
void tl_stop(tl_queue* q);
void tl_abandon(tl_queue* q);
"""
SOURCE = """
typedef int (*tl_launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void*, void**, void**);
static int tl_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared_mem, void* stream, void** params, void* launch)
{
    return ((tl_launch_t)launch)(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, 0);
}

/* ---- the launch queue: a ring of TL_SLOTS launch records, put by the Python threads (under
   `put`), launched in order under `run`, by the worker thread or, at a drain or a full ring, by
   the calling thread itself (so no caller depends on the worker being scheduled: on a host
   with every core busy it may not be). head: records put; tail: records launched. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TL_SLOTS 512
#define TL_ARG_BYTES 2048    /* larger argument buffers are not queued (tl_put returns -1) */
#define TL_MAX_ARGS 64
#define TL_PAUSE_NS 20000    /* the worker polls an empty queue this long with pause instructions, */
#define TL_SPIN_NS 200000    /* then this long yielding its core between polls, then it sleeps */

#if defined(__x86_64__) || defined(__i386__)
#define TL_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define TL_RELAX() __asm__ __volatile__("yield")
#else
#define TL_RELAX() ((void)0)
#endif

typedef struct {
    void* f; void* stream; void* launch;
    unsigned dims[7];                 /* grid x, y, z, block x, y, z, dynamic shared memory */
    void* params[TL_MAX_ARGS];        /* into bytes: the record's own copy of the arguments */
    unsigned char bytes[TL_ARG_BYTES] __attribute__((aligned(16)));
} tl_record;

typedef struct tl_queue tl_queue;
struct tl_queue {
    tl_record slots[TL_SLOTS];
    unsigned long long head, tail;    /* __atomic builtins; tail is written under `run` */
    pthread_mutex_t put, run, lock;   /* put: between producers; run: who launches; lock, wake: the worker's sleep */
    pthread_cond_t wake;
    int sleeping, stop, helping;      /* helping: callers launching records themselves (the worker steps aside) */
    int error; void* error_f; unsigned error_dims[7];  /* the first failed launch not yet taken */
};

static void tl_init_locks(tl_queue* q)
{
    pthread_mutex_init(&q->put, 0); pthread_mutex_init(&q->run, 0); pthread_mutex_init(&q->lock, 0);
    pthread_cond_init(&q->wake, 0);
}

static tl_queue* tl_queue_new(void)
{
    tl_queue* q = (tl_queue*)calloc(1, sizeof(tl_queue));
    if (q) tl_init_locks(q);
    return q;
}

/* Launch the records put before `until` that are not launched yet; the caller holds `run`. */
static void tl_run_until(tl_queue* q, unsigned long long until)
{
    for (unsigned long long t = q->tail; t < until; ++t) {
        tl_record* r = &q->slots[t % TL_SLOTS];
        int err = ((tl_launch_t)r->launch)(r->f, r->dims[0], r->dims[1], r->dims[2], r->dims[3], r->dims[4],
                                           r->dims[5], r->dims[6], r->stream, r->params, 0);
        if (err && !__atomic_load_n(&q->error, __ATOMIC_ACQUIRE)) {
            q->error_f = r->f;
            memcpy(q->error_dims, r->dims, sizeof r->dims);
            __atomic_store_n(&q->error, err, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&q->tail, t + 1, __ATOMIC_RELEASE);
    }
}

/* The calling thread launches what was put before `until` (its thread has the device current). */
static void tl_help(tl_queue* q, unsigned long long until)
{
    __atomic_add_fetch(&q->helping, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&q->run);
    tl_run_until(q, until);
    pthread_mutex_unlock(&q->run);
    __atomic_sub_fetch(&q->helping, 1, __ATOMIC_SEQ_CST);
}

/* 0: queued; 1: queued, and an earlier launch failed (tl_take_error); -1: not queued (too many
   argument bytes, or the worker stopped): the caller drains the queue and launches itself.
   The caller has the device current: on a full ring it launches the oldest record itself. */
static int tl_put(tl_queue* q, void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared_mem, void* stream, void** params, unsigned nargs, void* base,
                  unsigned nbytes, void* launch)
{
    if (nbytes > TL_ARG_BYTES || nargs > TL_MAX_ARGS) return -1;
    pthread_mutex_lock(&q->put);
    if (q->stop) { pthread_mutex_unlock(&q->put); return -1; }
    unsigned long long h = q->head;
    if (h - __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) >= TL_SLOTS) tl_help(q, h - TL_SLOTS + 1);  /* full */
    tl_record* r = &q->slots[h % TL_SLOTS];
    r->f = f; r->stream = stream; r->launch = launch;
    r->dims[0] = gx; r->dims[1] = gy; r->dims[2] = gz; r->dims[3] = bx; r->dims[4] = by; r->dims[5] = bz;
    r->dims[6] = shared_mem;
    memcpy(r->bytes, base, nbytes);
    for (unsigned i = 0; i < nargs; ++i) r->params[i] = r->bytes + ((char*)params[i] - (char*)base);
    __atomic_store_n(&q->head, h + 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&q->put);
    if (__atomic_load_n(&q->sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&q->lock); pthread_cond_signal(&q->wake); pthread_mutex_unlock(&q->lock);
    }
    return __atomic_load_n(&q->error, __ATOMIC_ACQUIRE) != 0;
}

/* Return once everything put before the call has been launched: `help` (the calling thread has
   the device current) launches what the worker has not taken yet, else waits for the worker.
   Returns the status of the first failed launch not yet taken (0: none). */
static int tl_drain(tl_queue* q, int help)
{
    unsigned long long h = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) < h) {
        if (help) {
            tl_help(q, h);
        } else {
            for (unsigned spins = 0; __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) < h; ++spins) {
                if (spins < 4096) TL_RELAX(); else sched_yield();
            }
        }
    }
    return __atomic_load_n(&q->error, __ATOMIC_ACQUIRE);
}

/* The first failed launch's status, function and dims (7), cleared for the next one. */
static int tl_take_error(tl_queue* q, void** f, unsigned* dims)
{
    int err = __atomic_load_n(&q->error, __ATOMIC_ACQUIRE);
    if (err) {
        *f = q->error_f;
        memcpy(dims, q->error_dims, sizeof q->error_dims);
        __atomic_store_n(&q->error, 0, __ATOMIC_RELEASE);
    }
    return err;
}

static long long tl_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The worker's loop (its thread has the device current); returns after tl_stop. */
static void tl_worker(tl_queue* q)
{
    long long idle_since = 0;
    for (;;) {
        unsigned long long h = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) != h && !__atomic_load_n(&q->helping, __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(&q->run);
            if (q->tail < h) tl_run_until(q, q->tail + 1);  /* one at a time: a helper may take over */
            pthread_mutex_unlock(&q->run);
            idle_since = 0;
            continue;
        }
        if (__atomic_load_n(&q->stop, __ATOMIC_ACQUIRE) && __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) == h) return;
        long long now = tl_now_ns();
        if (!idle_since) idle_since = now;
        if (now - idle_since < TL_PAUSE_NS) { TL_RELAX(); continue; }
        if (now - idle_since < TL_SPIN_NS) { sched_yield(); continue; }
        pthread_mutex_lock(&q->lock);
        __atomic_store_n(&q->sleeping, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&q->head, __ATOMIC_SEQ_CST) == __atomic_load_n(&q->tail, __ATOMIC_SEQ_CST)
               && !__atomic_load_n(&q->stop, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&q->wake, &q->lock);
        __atomic_store_n(&q->sleeping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&q->lock);
        idle_since = 0;
    }
}

/* In a child process after fork (no worker there): the records put are dropped, later puts
   return -1 and drains return at once. */
static void tl_abandon(tl_queue* q)
{
    tl_init_locks(q);
    q->stop = 1;
    q->helping = 0;
    q->tail = q->head;
}

/* The worker returns once every record put before has been launched (the queue stays
   allocated; later puts return -1). */
static void tl_stop(tl_queue* q)
{
    pthread_mutex_lock(&q->put);      /* a put either lands before (and is launched) or sees stop */
    __atomic_store_n(&q->stop, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&q->put);
    pthread_mutex_lock(&q->lock);
    pthread_cond_signal(&q->wake);
    pthread_mutex_unlock(&q->lock);
}
"""


def ffibuilder():
    """The cffi builder of the shim (setup.py compiles it)."""
    import cffi
    builder = cffi.FFI()
    builder.cdef(CDEF)
    builder.set_source(MODULE, SOURCE, libraries=["pthread"])
    return builder


def through_shim(ffi, launch):
    """(shim, address of `launch`) where `launch` is a C function of the driver's launch
    signature called through `ffi` in ABI mode and the compiled shim is installed; else None
    (a Python launcher, as the emulated and null platforms have, or no shim)."""
    if os.environ.get("TENSORLITE_LAUNCH_SHIM", "1") == "0":
        return None
    if not isinstance(launch, ffi.CData) or ffi.typeof(launch).kind != "function":
        return None
    shim = _compiled()
    return None if shim is None else (shim.lib.tl_launch, ffi.cast("void*", launch))


class LaunchQueue:
    """One device's launch queue and its worker thread (the module's docstring says why).

    put(queue, f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, nargs, base, nbytes, launch)
    is the C call itself, `queue` this object's `queue`: `params` the driver's argument pointers
    into `base` (nbytes long, copied at once, so the caller may refill it on return), `launch`
    the driver entry point's address; it returns 0, 1 when an earlier launch failed
    (raise_failed), or -1 where it did not queue (too many argument bytes, or the worker
    stopped: drain, then launch directly). The caller has the device current:
    on a full ring it launches the oldest record itself. `ordinal`: the device's; `activate()`
    makes it current in the worker's thread. `failed(status, f, dims)` raises the error of a
    failed launch, f its function's address."""

    def __init__(self, ordinal: int, activate, failed):
        self.ordinal = ordinal
        shim = _compiled()
        self._ffi, self._lib = shim.ffi, shim.lib
        self.queue = self._lib.tl_queue_new()  # the C queue, put's first argument
        if self.queue == self._ffi.NULL:
            raise MemoryError("launch queue: out of host memory")
        self.put = self._lib.tl_put
        self._failed = failed
        self._thread = threading.Thread(target=self._work, args=(activate,), name="tensorlite-launch", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def _work(self, activate):
        try:
            activate()
        finally:  # even without the device current: its launches then fail and are reported, none waits forever
            self._lib.tl_worker(self.queue)  # cffi lets go of the GIL for the call: the loop runs beside Python

    def drain(self, help: bool = False) -> None:
        """Return once every launch put before has reached the driver; raise a failed one's error.
        `help`: the calling thread has the device current, and launches what the worker has not
        taken yet itself instead of waiting for it."""
        if self._lib.tl_drain(self.queue, help):
            self.raise_failed()

    def raise_failed(self) -> None:
        f, dims = self._ffi.new("void**"), self._ffi.new("unsigned[7]")
        status = self._lib.tl_take_error(self.queue, f, dims)
        if status:
            self._failed(status, int(self._ffi.cast("uintptr_t", f[0])), tuple(dims))

    def close(self) -> None:
        """Drain, then end the worker (the queue then takes no more launches)."""
        if self._thread is not None:
            self._lib.tl_stop(self.queue)
            self._thread.join(timeout=30)  # a worker stuck in the driver must not hold the interpreter's exit
            self._thread = None
            _LIVE.discard(self)


_LIVE = set()  # the queues whose workers run (a worker's thread holds its queue anyway)


@atexit.register
def _close_all():  # the launches put last reach the driver before the runtime is torn down
    for q in list(_LIVE):
        q.close()


def _abandon_all():  # a forked child has no worker threads: its devices launch directly
    for q in list(_LIVE):
        q._lib.tl_abandon(q.queue)
        q._thread = None
    _LIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_all)


# The worker needs a core of its own: with fewer the polling worker takes the calling thread's
# time (the null platform's GPT step, 2 cores and 3 busy processes: 13.7-18.0 ms of host time
# with the queue against 13.3-15.1 without)
QUEUE_MIN_CPUS = 4


def queue_enabled() -> bool:
    """Launches go through a LaunchQueue where the shim is installed and the process may run on
    QUEUE_MIN_CPUS cores or more; TENSORLITE_LAUNCH_QUEUE=1 turns it on anyway, =0 off (launches
    then call the driver on the calling thread)."""
    choice = os.environ.get("TENSORLITE_LAUNCH_QUEUE", "")
    if choice == "0" or not installed():
        return False
    return choice == "1" or _usable_cpus() >= QUEUE_MIN_CPUS


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def installed() -> bool:
    """Is the compiled shim importable here?"""
    return _compiled() is not None


def _compiled():
    try:
        from . import _launch_shim
    except ImportError:  # built without a C compiler or cffi: ABI mode
        return None
    return _launch_shim
