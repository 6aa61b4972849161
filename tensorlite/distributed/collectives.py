"""Collectives on tensors, with torch.distributed's names and in-place semantics: the result is
written into the tensor given (all_reduce, broadcast) or into the output given (all_gather*,
reduce_scatter*), on every rank.

Where the data goes:
- `cpu` tensors: MPI on numpy views of the storage (no copy for contiguous tensors).
- `cuda` / `rocm` tensors: NCCL / RCCL (`backends/rocm/nccl.py`), enqueued on the device's
  communication stream, as torch's ProcessGroupNCCL does: an event recorded on the compute
  stream after the inputs were written makes the communication stream wait for them, the
  collective runs there, and an event recorded after it makes the compute stream wait for it
  when the Work is waited (at once without async_op). Both waits are on the device: the host
  never waits, and until wait() the compute stream runs on while the collective waits for
  the other ranks (DDP's bucket all-reduces overlap backward). Inside a graph capture the same
  events make the communication stream join the capture: the graph overlaps them too. One
  communicator per device, made at its first collective (rank 0's unique id travels over MPI).
- any other device (a plugin backend, the emulated AMD platform): a host copy, MPI, and a copy back.

Before each collective the ranks exchange a short description of the call (op, shape, dtype,
device kind, reduce op, root) on the host and raise CollectiveMismatchError on every rank
where they differ: a mismatch never reaches MPI or NCCL, where it would hang or corrupt.

dtypes: every tensorlite dtype. Data movement (broadcast, all_gather) copies bytes. Reductions:
- float16 / bfloat16 on the host: MPI has no 16-bit float reduction, so the values are widened
  to float32, reduced in float32 and rounded once back (NCCL/RCCL reduce them natively, rounding
  at each step of their algorithm: results may differ from the host's in the last bit).
- bool: SUM and MAX are logical or, PRODUCT and MIN logical and (as torch's NCCL backend).
- int16 on NCCL/RCCL (which have no 16-bit integers): reduced as int32 and cast back (wraps as int16 arithmetic).
- AVG: floating dtypes only (on the host: the sum divided by the world size); integer AVG is refused.

Non-contiguous tensors work: the collective runs on a contiguous copy, which is copied back.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from .. import dtype as dtypes
from ..autograd import no_grad, note_write
from ..errors import ArgumentError, CaptureError, DTypeError, DeviceError, ShapeError, describe
from ..ops.creation import empty, tensor
from ..ops.joins import cat
from ..tensor import Tensor
from ._world import world


class ReduceOp:
    """The reductions of all_reduce / reduce_scatter, as torch.distributed.ReduceOp (the
    lower-case strings 'sum', 'avg', ... are accepted too).

    >>> import tensorlite.distributed as dist
    >>> dist.ReduceOp.SUM, dist.ReduceOp.AVG
    ('sum', 'avg')
    """
    SUM, AVG, PRODUCT, MAX, MIN = "sum", "avg", "product", "max", "min"


_OPS = ("sum", "avg", "product", "max", "min")
_LOGICAL = {"sum": "max", "max": "max", "product": "min", "min": "min"}  # bool as uint8: or / and


class Work:
    """What a collective called with async_op=True returns, as torch's Work: wait() blocks until
    the result is in the tensor (a `cpu` collective). A device collective's Work (_StreamWork)
    never blocks the host: its wait() orders the compute stream after the collective."""

    def __init__(self, world_, request=None, finish=None, what=""):
        self._world, self._request, self._finish, self._what = world_, request, finish, what
        self._done = request is None
        if self._done and finish is not None:
            finish()

    def wait(self, timeout=None) -> bool:
        """Block until done (raising DistributedTimeoutError past the group's timeout); True."""
        if not self._done:
            self._world.wait(self._request, self._what)
            self._done = True
            if self._finish is not None:
                self._finish()
        return True

    def is_completed(self) -> bool:
        """Whether wait() would return at once."""
        return self._done or bool(self._request.Test())


class _StreamWork(Work):
    """A device collective enqueued on the communication stream after it waited for `ready`
    (recorded on the compute stream), with `event` recorded there after it. wait() makes the
    compute stream wait for `event` (on the device) and then runs `finish` (copies of the
    result, on the compute stream). Both events go back to the device's pool when the Work
    dies, after the compute stream's wait: in stream order, any later record of them comes
    after the waits they served.

    Memory: the caching allocator hands a freed block to the next compute-stream allocation at
    once (it knows no other stream), so nothing the collective reads or writes may be freed
    before the compute stream is ordered after it. This Work holds those tensors (`keep`) until
    it has enqueued that wait (in wait(), or in its finalizer when dropped unwaited): every
    later compute-stream use of their blocks then comes after the collective. As torch's, a
    result is the tensor's only after wait(): one that is copied back (a non-contiguous tensor,
    int16) is not copied when the Work is dropped unwaited.

    Failure: `watch` is the group's watchdog's record of the collective (watchdog.py; None
    inside a graph capture): the watchdog gives `event` back to the pool, and wait() and
    is_completed() raise the failure once a device collective of the group timed out."""

    def __init__(self, world_, comm, ready, event, keep, finish, what, watch=None):
        self._world, self._comm, self._ready, self._event, self._keep, self._finish, self._what = \
            world_, comm, ready, event, keep, finish, what
        self._request, self._done, self._watch = None, False, watch
        # started inside a graph capture: the communication stream joined it, and the capture
        # rejoins it at its end unless a wait() did; counted apart from the eager collectives
        self._capture = capture = comm.device.capture
        if capture is None:
            comm.unjoined += 1
        else:
            capture.joins.append(functools.partial(_wait_if_alive, weakref.ref(self)))

    def wait(self, timeout=None) -> bool:
        """Order the compute stream after the collective (the host does not wait); True.
        DistributedTimeoutError where the group's watchdog found a collective past its deadline."""
        self._world.watchdog.raise_if_failed(f"{self._what}: wait()")
        if not self._done:
            dev = self._comm.device
            if dev.capture is not self._capture:
                raise CaptureError(f"{self._what}: wait() inside a graph capture on {dev}: the collective was started "
                                   "before the capture, on the communication stream, and a graph cannot wait for work "
                                   "outside it; wait() for it before capturing")
            self._event.wait(dev.stream)
            finish = self._finish
            self._joined()
            if finish is not None:
                finish()
        return True

    def _joined(self):
        self._done, self._keep, self._finish = True, None, None
        if self._capture is None:
            self._comm.unjoined -= 1

    def is_completed(self) -> bool:
        """Whether the device has finished the collective (torch's NCCL Work); wait() is still what
        orders later compute-stream work after it."""
        self._world.watchdog.raise_if_failed(f"{self._what}: is_completed()")
        return (self._watch is not None and self._watch.finished) or self._event.query()

    def __del__(self):
        try:
            dev = self._comm.device
            if not self._done:  # dropped unwaited: its buffers are freed now, so order the compute stream first
                if dev.capture is not self._capture:
                    self._event.synchronize()  # a captured wait cannot name work outside the graph: the host waits
                else:
                    self._event.wait(dev.stream)
                self._joined()
            dev.recycle_event(self._ready)
            if self._watch is None:
                dev.recycle_event(self._event)
            else:  # back to the pool once the watchdog saw the collective finish
                self._world.watchdog.release(self._watch)
        except Exception:  # interpreter shutdown: nothing runs after
            pass


def _wait_if_alive(ref) -> None:
    work = ref()
    if work is not None:
        work.wait()


class _Then(Work):
    """A Work that, waited for, waits for `first` and then runs finish (all_gather's copies into its list)."""

    def __init__(self, first: Work, finish):
        self._first, self._then, self._done = first, finish, False

    def wait(self, timeout=None) -> bool:
        if not self._done:
            self._first.wait()
            self._done = True
            self._then()
        return True

    def is_completed(self) -> bool:
        return self._done or self._first.is_completed()


def _result(work: Work, async_op: bool):
    """torch's convention: the Work with async_op=True, else wait and return None."""
    if async_op:
        return work
    work.wait()
    return None


def _reduce_op(op_name: str, op) -> str:
    name = op.lower() if isinstance(op, str) else None
    if name not in _OPS:
        raise ArgumentError(f"{op_name}: unknown reduce op {op!r}; expected one of ReduceOp.SUM, AVG, PRODUCT, "
                            "MAX, MIN")
    return name


def _tensor(op_name: str, t, what: str = "tensor"):
    if not isinstance(t, Tensor):
        raise DTypeError(f"{op_name}: {what} must be a tensorlite Tensor, got {type(t).__name__}")
    if any(st == 0 and n > 1 for st, n in zip(t._layout.strides, t.shape)):
        raise ArgumentError(f"{describe(op_name, **{what: t})}: the tensor is an expanded view (elements share "
                            "memory) and cannot receive a collective's result; pass a tensor that owns its elements")
    return t


def _check_reduction(op_name: str, t, op: str) -> None:
    if op == "avg" and not t.dtype.is_floating_point:
        raise DTypeError(f"{describe(op_name, tensor=t)}: ReduceOp.AVG needs a floating dtype (an integer average "
                         "would be truncated); reduce with SUM and divide")


def _kind(t) -> str:
    return t.device.split(":")[0]


def _call(t, **extra) -> str:
    more = "".join(f", {k}={v}" for k, v in extra.items())
    return f"{t.dtype.name}{list(t.shape)} {_kind(t)}{more}"


# ---- where the data goes -------------------------------------------------------------------

def _enqueue(w, comm, keep, call, finish, what: str) -> Work:
    """A device collective: `call(stream)` enqueues the NCCL/RCCL call on `stream`; `finish()`
    (copies of the result on the compute stream) runs once the compute stream is ordered
    after it; `keep`: the tensors whose memory the call reads or writes.

    Every collective of a communicator goes to the one communication stream (NCCL needs one
    order of a communicator's collectives on every rank), after an event recorded on the
    compute stream, where their inputs were written. Inside a graph capture that wait makes
    the communication stream join the capture, so the graph holds the collective beside the
    compute stream's work, as an eager run overlaps them; a collective still pending there
    from before the capture would then be ordered into the graph, so that is refused."""
    dev = comm.device
    w.watchdog.raise_if_failed(what)  # a group whose device collective timed out runs no more
    if dev.capture is not None and comm.unjoined:
        raise CaptureError(f"{what} inside a graph capture on {dev}: {comm.unjoined} collective(s) started "
                           "before the capture were not waited for; wait() for them before capturing")
    dev.activate()
    ready = dev.sync_event().record()
    side = dev.communication_stream()
    ready.wait(side)
    call(side)
    done = dev.sync_event().record(side)
    # a captured collective runs at the graph's replay: nothing to watch now
    watch = w.watchdog.watch(comm, done, what, w.timeout) if dev.capture is None else None
    return _StreamWork(w, comm, ready, done, keep, finish, what, watch)


def device_collectives(device) -> bool:
    """Whether collectives on `device`'s tensors run on the device (NCCL on cuda, RCCL on rocm),
    so that a graph capture holds them; elsewhere (cpu, the emulated AMD platform) they are
    staged through the host, which a capture cannot hold.

    >>> import tensorlite.distributed as dist
    >>> dist.device_collectives("cpu")
    False
    """
    from ..backend import get_device
    from ..backends.rocm.nccl import has_collective_library
    platform = getattr(get_device(device), "platform", None)
    return platform is not None and has_collective_library(platform.name)


def _communicator(w, t):
    """The NCCL/RCCL communicator of t's device, None where t is host data (cpu or a device
    without a collective library: staged through the host)."""
    device = t._storage.device
    platform = getattr(device, "platform", None)
    if platform is None:
        return None
    comm = w.communicators.get(device)
    if comm is not None:
        return comm
    from ..backends.rocm.nccl import UNIQUE_ID_BYTES, Communicator, collective_library
    library = collective_library(platform.name)
    if library is None:
        return None
    w.watchdog.raise_if_failed(f"{library.vendor} bootstrap on {device}")
    uid = np.frombuffer(library.unique_id(), np.uint8).copy() if w.rank == 0 else np.zeros(UNIQUE_ID_BYTES, np.uint8)
    w.wait(w.host.Ibcast(uid, 0), f"{library.vendor} bootstrap (broadcast of rank 0's unique id)")
    comm = w.communicators[device] = Communicator(library, device, w.size, w.rank, uid.tobytes())
    return comm


class _Host:
    """A contiguous tensor's elements as a writable numpy array: a view of a cpu storage, or
    a host copy of another device's tensor that `write_back` uploads."""

    def __init__(self, t):
        self.t = t
        st = t._storage
        if hasattr(st, "data") and isinstance(st.data, np.ndarray) and st.data.ndim == 1:  # the cpu backend's
            off = t._layout.offset
            self.array, self.copied = st.data[off:off + t.numel()], False
        else:
            self.array, self.copied = np.ascontiguousarray(t.numpy()).reshape(-1), True

    def write_back(self):
        if self.copied:
            with no_grad():
                self.t.copy_(tensor(self.array.reshape(self.t.shape), dtype=self.t.dtype, device=self.t.device))
        else:
            note_write(self.t._storage)


def _contiguous(t):
    return t if t._layout.is_contiguous() else t.contiguous().detach()


def _finish_into(target, work):
    """Copy a contiguous working copy's result into the target tensor (nothing when they are one)."""
    if work is not target:
        with no_grad():
            target.copy_(work)


def _wire(dtype, array, op: str):
    """(the host buffer an MPI reduction runs on, its MPI op): bool as uint8 with or/and, 16-bit
    floats widened to a float32 copy (MPI has no 16-bit float sum), AVG as SUM (divided after)."""
    if dtype is dtypes.bool_:
        return array.view(np.uint8), _LOGICAL[op]
    wire_op = "sum" if op == "avg" else op
    return (array.astype(np.float32) if dtype in dtypes.HALVES else array), wire_op


def _unwire(w, dtype, buf, array, op: str) -> None:
    """The reduced wire buffer's values into `array`: AVG's division, the 16-bit floats' one rounding."""
    if op == "avg":
        np.divide(buf, w.size, out=buf)
    if dtype in dtypes.HALVES:
        array[...] = buf.astype(array.dtype)


# ---- the collectives ---------------------------------------------------------------------------

def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over every rank, in place (every rank ends with the result), as
    torch.distributed.all_reduce.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> x = tl.tensor([1.0, 2.0]); dist.all_reduce(x, op=dist.ReduceOp.SUM); x.tolist()
    [1.0, 2.0]
    """
    from ._world import check_default_group
    check_default_group("all_reduce", group)
    op = _reduce_op("all_reduce", op)
    t = _tensor("all_reduce", tensor)
    _check_reduction("all_reduce", t, op)
    w = world()
    w.check("all_reduce", f"all_reduce({_call(t, op=op)})")
    work = all_reduce_unchecked(w, t, op)
    return _result(work, async_op)


def all_reduce_unchecked(w, t, op: str) -> Work:
    """all_reduce without the cross-rank check (DDP's buckets, checked once at construction)."""
    work = _contiguous(t)
    comm = _communicator(w, work)
    if comm is not None:
        what = f"all_reduce({_call(t, op=op)})"
        if work.dtype is dtypes.int16:  # no 16-bit integers in NCCL: reduce as int32
            wide = work.to(dtypes.int32)

            def finish():
                _finish_into(work, wide)
                _finish_into(t, work)
            done = _enqueue(w, comm, (wide,), lambda s: comm.all_reduce(
                _addr(wide), _addr(wide), wide.numel(), dtypes.int32, op, s), finish, what)
        else:
            dtype, red = (dtypes.uint8, _LOGICAL[op]) if work.dtype is dtypes.bool_ else (work.dtype, op)
            done = _enqueue(w, comm, (work,), lambda s: comm.all_reduce(
                _addr(work), _addr(work), work.numel(), dtype, red, s), lambda: _finish_into(t, work), what)
        if work is t:
            note_write(t._storage)
        return done
    host = _Host(work)
    buf, wire_op = _wire(work.dtype, host.array, op)
    request = w.host.Iallreduce(buf, wire_op)

    def finish():
        _unwire(w, work.dtype, buf, host.array, op)
        host.write_back()
        _finish_into(t, work)
    return Work(w, request, finish, f"all_reduce({_call(t, op=op)})")


def broadcast(tensor, src=0, group=None, async_op=False):
    """Overwrite `tensor` on every rank with rank `src`'s, as torch.distributed.broadcast.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> x = tl.tensor([3, 4]); dist.broadcast(x, src=0); x.tolist()
    [3, 4]
    """
    from ._world import check_default_group
    check_default_group("broadcast", group)
    t = _tensor("broadcast", tensor)
    w = world()
    _check_src("broadcast", src, w)
    w.check("broadcast", f"broadcast({_call(t, src=src)})")
    work = broadcast_unchecked(w, t, src)
    return _result(work, async_op)


def _check_src(op_name: str, src, w) -> None:
    if isinstance(src, bool) or not isinstance(src, (int, np.integer)) or not 0 <= src < w.size:
        raise ArgumentError(f"{op_name}: src must be a rank in [0, {w.size}), got {src!r}")


def broadcast_unchecked(w, t, src: int) -> Work:
    work = _contiguous(t)
    comm = _communicator(w, work)
    nbytes = work.numel() * work.dtype.itemsize
    if comm is not None:  # bytes: every dtype, NCCL type or not
        done = _enqueue(w, comm, (work,), lambda s: comm.broadcast(_addr(work), _addr(work), nbytes, dtypes.uint8,
                                                                   int(src), s),
                        lambda: _finish_into(t, work), f"broadcast({_call(t, src=src)})")
        if work is t:
            note_write(t._storage)
        return done
    host = _Host(work)
    request = w.host.Ibcast(host.array.view(np.uint8), int(src))

    def finish():
        host.write_back()
        _finish_into(t, work)
    return Work(w, request, finish, f"broadcast({_call(t, src=src)})")


def _same_kind(op_name: str, out, inp) -> None:
    if out.dtype is not inp.dtype:
        raise DTypeError(f"{describe(op_name, output=out, input=inp)}: output and input must have one dtype")
    if out.device != inp.device:
        raise DeviceError(f"{describe(op_name, output=out, input=inp)}: output and input must be on one device")


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank's `input_tensor`, rank by rank, into `output_tensor` (world_size times its
    elements: stacked (world, ...) or concatenated along dim 0), as torch's.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> out = tl.zeros(1, 2); dist.all_gather_into_tensor(out, tl.tensor([5.0, 6.0])); out.tolist()
    [[5.0, 6.0]]
    """
    from ._world import check_default_group
    check_default_group("all_gather_into_tensor", group)
    out = _tensor("all_gather_into_tensor", output_tensor, "output")
    inp = _tensor("all_gather_into_tensor", input_tensor, "input")
    w = world()
    _same_kind("all_gather_into_tensor", out, inp)
    if out.numel() != w.size * inp.numel():
        raise ShapeError(f"{describe('all_gather_into_tensor', output=out, input=inp)}: the output must hold "
                         f"world_size ({w.size}) x {inp.numel()} elements, it holds {out.numel()}")
    w.check("all_gather_into_tensor", f"all_gather({_call(inp)})")
    work = _all_gather(w, out, inp)
    return _result(work, async_op)


def _all_gather(w, out, inp) -> Work:
    work, src = _contiguous(out), _contiguous(inp)
    comm = _communicator(w, work)
    nbytes = src.numel() * src.dtype.itemsize
    if comm is not None:
        done = _enqueue(w, comm, (src, work), lambda s: comm.all_gather(_addr(src), _addr(work), nbytes, dtypes.uint8,
                                                                        s),
                        lambda: _finish_into(out, work), f"all_gather({_call(inp)})")
        if work is out:
            note_write(out._storage)
        return done
    host_out, host_in = _Host(work), _Host(src)
    request = w.host.Iallgather(host_in.array.view(np.uint8), host_out.array.view(np.uint8).reshape(w.size, nbytes))

    def finish():
        host_out.write_back()
        _finish_into(out, work)
    return Work(w, request, finish, f"all_gather({_call(inp)})")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[i] = rank i's `tensor` (a list of world_size tensors of its shape, dtype and
    device), as torch.distributed.all_gather.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> outs = [tl.zeros(2)]; dist.all_gather(outs, tl.tensor([1.0, 2.0])); outs[0].tolist()
    [1.0, 2.0]
    """
    from ._world import check_default_group
    check_default_group("all_gather", group)
    inp = _tensor("all_gather", tensor)
    w = world()
    outs = _tensor_list("all_gather", tensor_list, inp, w)
    w.check("all_gather", f"all_gather({_call(inp)})")
    stacked = empty((w.size,) + tuple(inp.shape), dtype=inp.dtype, device=inp.device)

    def finish():
        with no_grad():
            for i, o in enumerate(outs):
                o.copy_(stacked[i])
    return _result(_Then(_all_gather(w, stacked, inp), finish), async_op)


def _tensor_list(op_name: str, tensors, like, w) -> list:
    if not isinstance(tensors, (list, tuple)) or len(tensors) != w.size:
        raise ArgumentError(f"{op_name}: expected a list of world_size ({w.size}) tensors, got "
                            f"{len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__}")
    for i, o in enumerate(tensors):
        o = _tensor(op_name, o, f"tensor_list[{i}]")
        _same_kind(op_name, o, like)
        if tuple(o.shape) != tuple(like.shape):
            raise ShapeError(f"{describe(op_name, **{f'tensor_list[{i}]': o, 'tensor': like})}: every tensor of "
                             "the list must have the shape of the rank's tensor")
    return list(tensors)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002 (torch's name)
    """Reduce `input` (world_size x output's elements) over every rank and give rank i block i of
    the result, in `output`, as torch.distributed.reduce_scatter_tensor.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> out = tl.zeros(2); dist.reduce_scatter_tensor(out, tl.tensor([1.0, 2.0])); out.tolist()
    [1.0, 2.0]
    """
    from ._world import check_default_group
    check_default_group("reduce_scatter_tensor", group)
    op = _reduce_op("reduce_scatter_tensor", op)
    out = _tensor("reduce_scatter_tensor", output, "output")
    inp = _tensor("reduce_scatter_tensor", input, "input")
    w = world()
    _same_kind("reduce_scatter_tensor", out, inp)
    _check_reduction("reduce_scatter_tensor", inp, op)
    if inp.numel() != w.size * out.numel():
        raise ShapeError(f"{describe('reduce_scatter_tensor', output=out, input=inp)}: the input must hold "
                         f"world_size ({w.size}) x {out.numel()} elements, it holds {inp.numel()}")
    w.check("reduce_scatter_tensor", f"reduce_scatter({_call(out, op=op)})")
    work = _reduce_scatter(w, out, inp, op)
    return _result(work, async_op)


def _reduce_scatter(w, out, inp, op: str) -> Work:
    work, src = _contiguous(out), _contiguous(inp)
    comm = _communicator(w, work)
    n = work.numel()
    if comm is not None:
        what = f"reduce_scatter({_call(out, op=op)})"
        if src.dtype is dtypes.int16:  # no 16-bit integers in NCCL: reduce as int32
            wide_in, wide_out = src.to(dtypes.int32), work.to(dtypes.int32)

            def finish():
                _finish_into(work, wide_out)
                _finish_into(out, work)
            done = _enqueue(w, comm, (wide_in, wide_out), lambda s: comm.reduce_scatter(
                _addr(wide_in), _addr(wide_out), n, dtypes.int32, op, s), finish, what)
        else:
            dtype, red = (dtypes.uint8, _LOGICAL[op]) if src.dtype is dtypes.bool_ else (src.dtype, op)
            done = _enqueue(w, comm, (src, work), lambda s: comm.reduce_scatter(
                _addr(src), _addr(work), n, dtype, red, s), lambda: _finish_into(out, work), what)
        if work is out:
            note_write(out._storage)
        return done
    host_out, host_in = _Host(work), _Host(src)
    send, wire_op = _wire(src.dtype, host_in.array, op)
    # the receive buffer in the wire's dtype: the output itself, its uint8 view (bool), a float32 one (f16/bf16)
    recv = np.empty(n, np.float32) if src.dtype in dtypes.HALVES else host_out.array.view(send.dtype)
    request = w.host.Ireduce_scatter_block(send, recv, wire_op)

    def finish():
        _unwire(w, src.dtype, recv, host_out.array, op)
        host_out.write_back()
        _finish_into(out, work)
    return Work(w, request, finish, f"reduce_scatter({_call(out, op=op)})")


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce input_list[i] over every rank into rank i's `output` (a list of world_size tensors
    of output's shape), as torch.distributed.reduce_scatter.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> out = tl.zeros(2); dist.reduce_scatter(out, [tl.tensor([1.0, 2.0])]); out.tolist()
    [1.0, 2.0]
    """
    from ._world import check_default_group
    check_default_group("reduce_scatter", group)
    op = _reduce_op("reduce_scatter", op)
    out = _tensor("reduce_scatter", output, "output")
    w = world()
    ins = _tensor_list("reduce_scatter", input_list, out, w)
    _check_reduction("reduce_scatter", out, op)
    w.check("reduce_scatter", f"reduce_scatter({_call(out, op=op)})")
    with no_grad():
        flat = cat([x.reshape(-1) for x in ins])
    work = _reduce_scatter(w, out, flat, op)
    return _result(work, async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank has called barrier(), as torch.distributed.barrier. A host barrier:
    device work queued before it is not waited for (tl.synchronize() does that).

    >>> import tensorlite.distributed as dist
    >>> dist.init(); dist.barrier()
    """
    from ._world import check_default_group
    check_default_group("barrier", group)
    w = world()
    w.check("barrier", "barrier()")
    work = Work(w, w.host.Ibarrier(), None, "barrier")
    return _result(work, async_op)


def _addr(t) -> int:
    return t._storage.addr(t._layout.offset)
