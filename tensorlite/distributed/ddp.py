"""DistributedDataParallel: one model replica per rank, gradients averaged across ranks in
buckets that start while backward still runs, as torch.nn.parallel.DistributedDataParallel.

How it works:
- construction: the ranks compare their parameter and buffer layouts once (names, shapes,
  dtypes, device kinds; CollectiveMismatchError naming the first difference), then rank 0's
  values are broadcast to every rank. Later collectives skip the per-call check: their layout
  is this one.
- buckets: the parameters, in reverse registration order (roughly the order backward produces
  their gradients), grouped by device and dtype into buckets of at most `bucket_cap_mb` (the
  first one 1 MiB, so communication starts early).
- backward: a post-accumulate-grad hook on each parameter (tensorlite.autograd) counts the
  bucket's ready gradients; a full bucket is flattened into one buffer and its all-reduce
  (AVG) starts at once: on a GPU on the device's communication stream (NCCL/RCCL), after an
  event that follows the flatten on the compute stream, so backward's kernels run on while
  the collective waits for the other ranks; on cpu a non-blocking MPI request. Buckets start
  in index order on every rank, so every rank issues the same collectives in the same order.
  When the last one has started, each parameter's .grad becomes its slice of the reduced
  buffer (a view: no copy back); on cpu the host waits for the MPI requests there, on a GPU
  the compute stream waits for the communication stream (the host does not).
- no_sync(): forwards inside skip the reduction, so gradients accumulate locally; the first
  backward after it reduces the accumulated .grad.
- broadcast_buffers: each training forward broadcasts rank 0's buffers (BatchNorm's running
  statistics stay the same on every rank).
"""
from __future__ import annotations

import collections
import contextlib
import hashlib

from .._core import as_view
from ..autograd import is_grad_enabled, no_grad, register_post_accumulate_grad_hook, topo_order
from ..errors import ArgumentError, DTypeError
from ..layout import Layout
from ..nn.modules import Module
from ..ops.creation import empty, zeros
from ..tensor import Tensor
from ._world import CollectiveMismatchError, DistributedError, world
from .collectives import all_reduce_unchecked, broadcast_unchecked

_FIRST_BUCKET_BYTES = 1 << 20  # as torch's: a small first bucket gets communication going early


class _Bucket:
    __slots__ = ("params", "offsets", "numels", "layouts", "numel", "dtype", "device", "ready", "flat", "work")

    def __init__(self, params):
        self.params, self.offsets, self.layouts, n = params, [], [], 0
        self.numels = [p.numel() for p in params]
        for p, size in zip(params, self.numels):
            self.offsets.append(n)
            self.layouts.append(Layout.contiguous(tuple(p.shape), n))  # p.grad's view of the flat buffer
            n += size
        self.numel, self.dtype, self.device = n, params[0].dtype, params[0].device
        self.ready, self.flat, self.work = 0, None, None


class DistributedDataParallel(Module):
    """Wrap `module` (already on this rank's device) for data-parallel training: call it as the
    module; after backward, every parameter's .grad is the average over the ranks.

    `device_ids` / `output_device`: torch's, for a module on one device: None, or [the
    module's device]. `bucket_cap_mb`: the bucket size. `find_unused_parameters`: parameters
    the forward's output does not depend on get zeros instead of stalling the reduction.
    `gradient_as_bucket_view` is always the behavior here (each .grad is a view of its
    bucket); `static_graph` is accepted and changes nothing. `state_dict()` keys start with
    'module.' as torch's; `ddp.module.state_dict()` has the module's own keys.

    >>> import tensorlite as tl, tensorlite.distributed as dist
    >>> dist.init()
    >>> net = dist.DistributedDataParallel(tl.nn.Linear(3, 1))
    >>> net(tl.ones(2, 3)).sum().backward()
    >>> net.module.weight.grad.shape
    tensorlite.Size([1, 3])
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers: bool = True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False, static_graph: bool = False):
        super().__init__()
        if not isinstance(module, Module):
            raise DTypeError(f"DistributedDataParallel: module must be a tensorlite nn.Module, got "
                             f"{type(module).__name__}")
        if process_group is not None:
            from ._world import check_default_group
            check_default_group("DistributedDataParallel", process_group)
        if dim != 0:
            raise ArgumentError(f"DistributedDataParallel: dim={dim}: inputs are never scattered here (one device "
                                "per rank); dim must be 0")
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
            raise ArgumentError(f"DistributedDataParallel: bucket_cap_mb must be a positive number, got "
                                f"{bucket_cap_mb!r}")
        self.module = module
        w = world()
        self._named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not self._named:
            raise ArgumentError("DistributedDataParallel: the module has no parameter that requires a gradient")
        self._check_devices(device_ids, output_device)
        self.broadcast_buffers, self.find_unused_parameters = bool(broadcast_buffers), bool(find_unused_parameters)
        self.require_backward_grad_sync = True
        self._verify_layout(w)
        with no_grad():  # every rank starts from rank 0's values
            for t in [p for _, p in module.named_parameters()] + self._buffers_list():
                broadcast_unchecked(w, t, 0).wait()
        self._buckets = self._make_buckets(float(bucket_cap_mb) * (1 << 20))
        self._slot = {}  # id(param) -> (bucket, index in it)
        for b in self._buckets:
            for i, p in enumerate(b.params):
                self._slot[id(p)] = (b, i)
        self._handles = [register_post_accumulate_grad_hook(p, self._grad_ready) for _, p in self._named]
        self._expecting = False   # a backward of a synced forward is to come
        self._marked = set()      # id(param): its gradient of this backward is in
        self._fired = False       # a hook ran in this backward
        self._next = 0            # the next bucket to start (buckets start in index order)
        self._host_pending = collections.deque()  # started cpu buckets' MPI Works, oldest first

    # ---- construction ----------------------------------------------------------------------------
    def _check_devices(self, device_ids, output_device):
        devices = {p.device for _, p in self._named}
        if len(devices) > 1:
            raise ArgumentError(f"DistributedDataParallel: the module's parameters are on several devices "
                                f"{sorted(devices)}; one device per rank is supported")
        here = devices.pop()
        for what, ids in (("device_ids", device_ids), ("output_device", output_device)):
            if ids is None:
                continue
            ids = list(ids) if isinstance(ids, (list, tuple)) else [ids]
            ok = len(ids) == 1 and (str(ids[0]) == here or (isinstance(ids[0], int) and here.endswith(f":{ids[0]}")))
            if not ok:
                raise ArgumentError(f"DistributedDataParallel: {what}={ids!r} but the module is on {here}; pass None "
                                    "or the module's device")

    def _buffers_list(self):
        return [b for _, b in self.module.named_buffers() if b is not None]

    def _verify_layout(self, w):
        """One exchange of a digest of (name, dtype, shape, device kind) of every parameter and
        buffer; where they differ, a second exchange of the lists names the first difference."""
        def entry(n, t):
            return f"{n}:{t.dtype.name}{list(t.shape)}@{t.device.split(':')[0]}"
        entries = [entry(n, p) for n, p in self.module.named_parameters()]
        entries += [entry(f"buffer {n}", b) for n, b in self.module.named_buffers() if b is not None]
        digest = hashlib.sha1("\n".join(entries).encode()).hexdigest()[:16]
        try:
            w.check("DistributedDataParallel", f"DistributedDataParallel({len(entries)} tensors, layout {digest})")
        except CollectiveMismatchError:
            lists = [blob.decode().split("\n") for blob in w.allgather_bytes("\n".join(entries).encode(),
                                                                            "DistributedDataParallel")]
            for i in range(max(map(len, lists))):
                seen = [lst[i] if i < len(lst) else "(none)" for lst in lists]
                if any(s != seen[0] for s in seen):
                    per_rank = "; ".join(f"rank {r}: {s}" for r, s in enumerate(seen))
                    raise CollectiveMismatchError(
                        f"DistributedDataParallel: the ranks' models differ at parameter/buffer {i} ({per_rank}); "
                        "every rank must wrap the same model") from None
            raise

    def _make_buckets(self, cap: float):
        buckets, current, size, limit = [], [], 0, min(cap, _FIRST_BUCKET_BYTES)
        for _, p in reversed(self._named):
            nbytes = p.numel() * p.dtype.itemsize
            if current and (size + nbytes > limit or (p.dtype, p.device) != (current[0].dtype, current[0].device)):
                buckets.append(_Bucket(current))
                current, size, limit = [], 0, cap
            current.append(p)
            size += nbytes
        buckets.append(_Bucket(current))
        return buckets

    # ---- forward ------------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """The wrapped module's forward; in training with gradients on, prepares this rank for the
        reduction of the coming backward (and broadcasts rank 0's buffers)."""
        w = world()
        self._check_finished()
        sync = is_grad_enabled() and self.require_backward_grad_sync
        if sync and self.training and self.broadcast_buffers:
            with no_grad():
                for b in self._buffers_list():
                    broadcast_unchecked(w, b, 0).wait()
        out = self.module(*args, **kwargs)
        if sync:
            self._expecting, self._marked, self._fired, self._next = True, set(), False, 0
            self._host_pending.clear()
            for b in self._buckets:
                b.ready, b.flat, b.work = 0, None, None
            if self.find_unused_parameters:
                self._mark_unused(out)
        else:
            self._expecting = False
        return out

    def _mark_unused(self, out):
        """Parameters the output does not depend on are ready now (their gradient: zeros)."""
        roots = [t._node or t for t in _tensors_in(out) if t.requires_grad]
        reached = {id(v) for v in topo_order(roots)} if roots else set()
        for _, p in self._named:
            if id(p) not in reached:
                self._mark(p)

    def _check_finished(self):
        if self._expecting and self._fired and self._next < len(self._buckets):
            missing = [n for n, p in self._named if id(p) not in self._marked]
            raise DistributedError(
                "DistributedDataParallel: the previous backward did not finish the gradient reduction: these "
                f"parameters got no gradient: {missing[:10]}{' ...' if len(missing) > 10 else ''}; pass "
                "find_unused_parameters=True where a forward does not use every parameter")

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards (and their backwards) inside this block do not reduce gradients: they
        accumulate in .grad locally until a backward outside it reduces the sum, as torch's.

        >>> import tensorlite as tl, tensorlite.distributed as dist
        >>> dist.init()
        >>> net = dist.DistributedDataParallel(tl.nn.Linear(2, 1))
        >>> with net.no_sync():
        ...     net(tl.ones(1, 2)).sum().backward()
        >>> net(tl.ones(1, 2)).sum().backward(); net.module.bias.grad.tolist()
        [2.0]
        """
        prev, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = prev

    # ---- backward --------------------------------------------------------------------------------
    def _grad_ready(self, p):
        """The post-accumulate-grad hook of every parameter: p.grad holds this backward's sum."""
        if not self._expecting:
            return
        self._fired = True
        self._mark(p)
        pending = self._host_pending
        # MPI advances non-blocking requests only inside MPI calls: one Test() per hook drives them all
        while pending and pending[0].is_completed():
            pending.popleft()

    def _mark(self, p):
        if id(p) in self._marked:
            raise DistributedError(
                "DistributedDataParallel: a parameter got its gradient twice in one synced backward (a second "
                f"backward through the same forward?): {self._name_of(p)}; run a forward per backward, or use "
                "no_sync()")
        self._marked.add(id(p))
        bucket, _ = self._slot[id(p)]
        bucket.ready += 1
        buckets = self._buckets
        while self._next < len(buckets) and buckets[self._next].ready == len(buckets[self._next].params):
            self._start(buckets[self._next])
            self._next += 1
        if self._next == len(self._buckets):
            self._finish()

    def _start(self, bucket: _Bucket):
        """Copy the bucket's gradients into a fresh flat buffer (a copy: the reduction writes it in
        place, and a gradient may be shared) and start its all-reduce. The copies go straight to
        the storages, as runs of one copy_runs (the GPU backend: one launch for a few dozen
        gradients, where a copy each would add a launch, or a graph node, per parameter)."""
        dtype, total = bucket.dtype, bucket.numel
        with no_grad():
            grads = [p.grad for p in bucket.params]
            if any(g is None for g in grads):  # unused parameters: zeros, in one fill of the whole buffer
                flat = zeros(total, dtype=dtype, device=bucket.device)
            else:
                flat = empty(total, dtype=dtype, device=bucket.device)
            runs = []
            for g, off, size in zip(grads, bucket.offsets, bucket.numels):
                if g is None or not size:
                    continue
                if g.dtype is not dtype or not g._layout.is_contiguous():
                    g = g.to(dtype).contiguous()
                runs.append((g._storage, g._layout.offset, off, size))
            flat._storage.copy_runs(runs)
        bucket.flat = flat
        bucket.work = work = all_reduce_unchecked(world(), flat, "avg")
        if work._request is not None:
            self._host_pending.append(work)

    def _finish(self):
        self._expecting = False
        for b in self._buckets:
            b.work.wait()  # cpu: the host waits for MPI; GPU: the compute stream for the communication stream
            flat = b.flat
            for p, layout in zip(b.params, b.layouts):
                p.grad = as_view(flat, layout)
            b.flat = b.work = None
        self._host_pending.clear()

    def _name_of(self, p):
        return next((n for n, q in self._named if q is p), "?")


def _tensors_in(out):
    """The tensors in a forward's output (a tensor, or nested tuples, lists and dicts of them)."""
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            yield from _tensors_in(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors_in(o)
