"""tensorlite.distributed: collectives, DistributedDataParallel, DistributedSampler, failure
handling, and the NCCL/RCCL bindings.

- In this process (a world of one rank, no launcher): every collective on every dtype and
  device is an identity (on `cuda` through an NCCL communicator of one rank), DDP of one rank
  trains exactly as the plain module, bad input raises tensorlite errors.
- Under `mpiexec -n 2` (PyPI's `mpich` wheel, or a system MPI; skipped naming mpi4py or
  mpiexec where absent), and `-n 4` on a machine of four GPUs: every collective on every
  dtype against numpy, DDP's gradients against each rank's own full-batch computation,
  examples/train_gpt.py on the ranks against one process, (two ranks) a rank that raises,
  exits or hangs ends the job within its timeout, and a rank that stops mid-backward is raised
  by the other within the timeout + 10 s (on two GPUs by the device collectives' watchdog). The
  job scripts are in tests/distributed/.
- NCCL/RCCL without a GPU: the cdefs against the headers where installed, the enum values
  and struct sizes pinned from the upstream headers, the loader's error.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.distributed as dist
from tensorlite import nn
from tensorlite.backends.rocm import nccl
from tensorlite.errors import ArgumentError, BackendUnavailable, DTypeError, ShapeError
from conftest import ALL_DTYPES

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOBS = ROOT / "tests" / "distributed"
sys.path.insert(0, str(JOBS))
import dist_cases  # noqa: E402


@pytest.fixture(autouse=True)
def world_of_one():
    """Each test starts from an initialized world of one (a test may tear it down)."""
    dist.init()
    yield
    dist.init()


# ---- launching several ranks -----------------------------------------------------------------

def _mpiexec() -> str:
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        pytest.skip(f"mpi4py is not installed ({e}): pip install 'tensorlite[distributed]'")
    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found beside the interpreter or on PATH: pip install mpich (or a system MPI)")
    return exe


def _launch(*args, n=2, timeout=90, env=None):
    """(completed process, seconds) of `mpiexec -n n python *args` run from the repository root."""
    full_env = {k: v for k, v in os.environ.items() if k != "TENSORLITE_DIST_TIMEOUT"}
    full_env.update(env or {})
    start = time.monotonic()
    proc = subprocess.run([_mpiexec(), "-n", str(n), sys.executable, *map(str, args)], cwd=ROOT, env=full_env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def _ranks_of(kind: str, n: int) -> None:
    """Skip unless `kind` can give n ranks a device each (cpu always can)."""
    if kind == "cpu":
        return
    status = tl.backends.available().get(kind)
    if status is not True:
        pytest.skip(f"{kind} is unavailable here: {status}")
    device = tl.backend.get_device(f"{kind}:0")
    count = device.platform.init()
    if count < n:
        pytest.skip(f"{n} ranks on {kind} need {n} devices; this machine has {count}")
    # every kernel compiled here into the disk cache first (a second at most once cached): on a fresh
    # machine each rank would otherwise compile them, all ranks at once, inside the job's timeout
    device.warmup()


def _expected_dtype(values, dtype):
    """numpy's expectation rounded to the dtype, as float64 / int64 / bool (how the job saves results)."""
    if dtype == "bool":
        return np.asarray(values, bool)
    if dtype in dist_cases.FLOATS:
        return np.asarray(values, np.float64).astype(getattr(tl, dtype).np).astype(np.float64)
    return np.asarray(values).astype(np.int64)


# cpu: two ranks (CI's two cores); cuda: two and four GPUs, where the machine has them
RANKS = [("cpu", 2), ("cuda", 2), ("cuda", 4)]


@pytest.mark.parametrize("kind, world", RANKS)
def test_ranks_every_collective_every_dtype(tmp_path, kind, world):
    _ranks_of(kind, world)
    proc, _ = _launch(JOBS / "collectives_job.py", kind, tmp_path, n=world)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    per_rank = [[dist_cases.rank_values(r, dt) for r in range(world)] for dt in dist_cases.DTYPES]
    for r in range(world):
        got = np.load(tmp_path / f"rank{r}.npz")
        expected = {}
        for dt, values in zip(dist_cases.DTYPES, per_rank):
            for op in dist_cases.ops_of(dt):
                expected[f"all_reduce/{dt}/{op}"] = dist_cases.reduce(values, op, dt)
            expected[f"all_reduce_noncontig/{dt}"] = dist_cases.reduce(values, "sum", dt)
            expected[f"broadcast/{dt}"] = values[world - 1]
            expected[f"all_gather_into_tensor/{dt}"] = np.stack(values)
            expected[f"all_gather/{dt}"] = np.stack(values)
            big = [dist_cases.rank_values(q, dt, (world * 2, 5), salt=1)[2 * r:2 * r + 2] for q in range(world)]
            for op in ["sum", "avg" if dt in ("float32", "bfloat16") else "max"]:
                expected[f"reduce_scatter_tensor/{dt}/{op}"] = dist_cases.reduce(big, op, dt)
            expected[f"reduce_scatter/{dt}/min"] = dist_cases.reduce(big, "min", dt)
        expected["async/float32/max"] = dist_cases.reduce(per_rank[0], "max", "float32")
        assert sorted(got.files) == sorted(expected)
        for key, want in expected.items():
            dt = key.split("/")[1]
            if key.endswith("/product") and dt in ("float16", "bfloat16") and world > 2:
                # a product of more than two inputs is not exact in 16 bits: NCCL rounds each partial
                # product (the module's documented semantics), numpy's expectation once
                ulp = 2.0 ** -(11 if dt == "float16" else 8)
                np.testing.assert_allclose(got[key], _expected_dtype(want, dt), rtol=world * ulp, atol=0,
                                           err_msg=f"rank {r}: {key}")
                continue
            np.testing.assert_array_equal(got[key], _expected_dtype(want, dt), err_msg=f"rank {r}: {key}")
        errors = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert set(errors) == {"shape", "dtype", "op", "collective"}
        for name, message in errors.items():
            assert message.startswith("CollectiveMismatchError: "), (r, name, message)
            assert "rank 0: " in message and "rank 1: " in message
        assert "float32[2]" in errors["shape"] and "float32[3]" in errors["shape"]
        assert "float64[2]" in errors["dtype"] and "op=max" in errors["op"] and "op=sum" in errors["op"]
        assert "barrier()" in errors["collective"] and "broadcast(" in errors["collective"]


@pytest.mark.parametrize("kind, world", RANKS)
def test_ranks_ddp_gradients_are_the_global_batch_average(tmp_path, kind, world):
    _ranks_of(kind, world)
    proc, _ = _launch(JOBS / "ddp_job.py", kind, tmp_path, n=world)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [np.load(tmp_path / f"rank{r}.npz") for r in range(world)]
    for r, got in enumerate(results):
        pairs = [k for k in got.files if "/ddp/" in k]
        assert {k.split("/")[0] for k in pairs} == {"buckets_default", "buckets_tiny", "no_sync", "find_unused"}
        for key in pairs:
            np.testing.assert_allclose(got[key], got[key.replace("/ddp/", "/ref/")], rtol=1e-5, atol=1e-6,
                                       err_msg=f"rank {r}: {key}")
        errors = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert errors["unused"].startswith("DistributedError: ") and "'extra.weight'" in errors["unused"]
        assert "find_unused_parameters=True" in errors["unused"]
        assert errors["layout"].startswith("CollectiveMismatchError: ")
        assert "a.weight:float32[8, 4]" in errors["layout"] and "a.weight:float32[9, 4]" in errors["layout"]
    # construction gave every rank rank 0's parameters and buffers (they were initialized differently)
    for key in [k for k in results[0].files if k.startswith("after_construction/")]:
        np.testing.assert_array_equal(results[0][key], results[1][key], err_msg=key)
    np.testing.assert_array_equal(results[1]["after_construction/scale"], [1.0, 1.0])
    # inside no_sync nothing was reduced: each rank held its own gradient
    assert not np.allclose(results[0]["no_sync/local/b.weight"], results[1]["no_sync/local/b.weight"])


@pytest.mark.parametrize("kind, graph, world", [("cpu", [], 2), ("cuda", ["--graph"], 2), ("cuda", ["--no-graph"], 2),
                                                ("cuda", ["--graph"], 4)])
def test_train_gpt_on_ranks_equals_one_process(tmp_path, kind, graph, world):
    """examples/train_gpt.py under mpiexec -n 2 or 4 (each rank its share of every batch; on cuda a GPU
    each, the training step captured as a graph with its all-reduces, or eager) logs the loss
    curve of one process training on the whole batch (on one GPU) and ends with its parameters.
    AdamW divides each gradient element by its running RMS, so where a gradient is near zero
    the reduction's rounding (an average of two halves instead of one mean, ~1e-7 relative)
    moves a step by up to ~1e-5: hence the tolerance, far below a step's size (lr 5e-3)."""
    _ranks_of(kind, world)
    _mpiexec()  # skips, naming what is missing, before the one-process run
    pytest.importorskip("safetensors", reason="train_gpt.py writes its checkpoint with safetensors "
                                              "(pip install 'tensorlite[examples]')")
    args = ["--device", kind, "--steps", "8", "--batch-size", "32", "--d-model", "32", "--layers", "1",
            "--heads", "2", "--stop-at", "0", "--heldout", "64", "--target", "0", "--log-every", "1", *graph]
    single = subprocess.run([sys.executable, "examples/train_gpt.py", *args, "--out", tmp_path / "one.safetensors"],
                            cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stdout + single.stderr
    proc, _ = _launch("examples/train_gpt.py", *args, "--out", tmp_path / "two.safetensors", n=world)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("held-out exact match:") == 1  # rank 0 alone reports
    assert f"ranks={world} (batch {32 // world} per rank)" in proc.stdout
    curve = re.compile(r"^step +(\d+) +loss ([0-9.]+)", re.MULTILINE)
    curve_one, curve_two = curve.findall(single.stdout), curve.findall(proc.stdout)
    assert [s for s, _ in curve_one] == [s for s, _ in curve_two] == [str(i) for i in range(1, 9)], proc.stdout
    np.testing.assert_allclose([float(v) for _, v in curve_two], [float(v) for _, v in curve_one], rtol=1e-4)
    one, two = tl.load_safetensors(tmp_path / "one.safetensors"), tl.load_safetensors(tmp_path / "two.safetensors")
    assert sorted(one) == sorted(two)
    for name in one:
        np.testing.assert_allclose(two[name].numpy(), one[name].numpy(), rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("mode, what", [
    ("raise", "ValueError: rank 1 fails on purpose"),
    ("exit", None),  # rank 1 vanishes without a word: the launcher ends rank 0
    ("hang", "DistributedTimeoutError: all_reduce"),
])
def test_a_failing_rank_ends_the_job(mode, what):
    proc, seconds = _launch(JOBS / "failure_job.py", mode, env={"TENSORLITE_DIST_TIMEOUT": "2"}, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "finished the all_reduce" not in out
    assert seconds < 30, f"the job took {seconds:.1f} s to end"
    if what is not None:
        assert what in out, f"mpiexec exited {proc.returncode} after {seconds:.1f} s; its output:\n{out}"
        rank = 1 if mode == "raise" else 0
        assert f"tensorlite.distributed: uncaught exception on rank {rank} of 2; aborting the job" in out


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_a_peer_lost_mid_backward_is_raised_by_the_other_rank_within_the_timeout(kind):
    """issue 48's watchdog on real ranks (tests/distributed/lost_peer_job.py): rank 1 stops in
    the middle of a DDP backward; rank 0's gradient read raises DistributedTimeoutError within
    TENSORLITE_DIST_TIMEOUT + 10 s, and it exits. cuda (two GPUs): the bucket's NCCL all-reduce
    never finishes, so it is the device watchdog that raises (ncclCommAbort); cpu: MPI's host wait."""
    _ranks_of(kind, 2)
    timeout = 5
    proc, _ = _launch(JOBS / "lost_peer_job.py", kind, env={"TENSORLITE_DIST_TIMEOUT": str(timeout)}, timeout=180)
    out = proc.stdout + proc.stderr
    stopped = re.search(r"^rank 1 stops at ([0-9.]+)$", out, re.MULTILINE)
    raised = re.search(r"^rank 0 raised (\w+) at ([0-9.]+): (.*)$", out, re.MULTILINE)
    assert stopped and raised and "finished the step\n" not in out, out
    took = float(raised[2]) - float(stopped[1])
    assert raised[1] == "DistributedTimeoutError" and 0 < took < timeout + 10, (took, out)
    assert f"timeout of {timeout} s" in raised[3] or f"waited {timeout} s" in raised[3], raised[3]
    if kind != "cpu":
        assert "all_reduce(" in raised[3] and "ncclCommAbort" in raised[3], raised[3]
    assert "rank 0 exits" in out, out


# ---- one rank, in this process ------------------------------------------------------------------

def test_a_world_of_one_without_a_launcher():
    if dist.launched_by_mpi():
        pytest.skip("this test process was itself started by an MPI launcher")
    assert (dist.get_rank(), dist.get_world_size(), dist.local_rank(), dist.get_backend()) == (0, 1, 0, "local")
    assert dist.is_initialized() and dist.device("cpu") == "cpu"
    dist.destroy_process_group()
    assert not dist.is_initialized()
    with pytest.raises(dist.DistributedError, match=r"init\(\)"):
        dist.get_rank()
    with pytest.raises(dist.DistributedError, match="not initialized"):
        dist.all_reduce(tl.ones(1))
    dist.init_process_group("mpi", world_size=1, rank=0)
    with pytest.raises(dist.DistributedError, match="already initialized"):
        dist.init_process_group()
    dist.destroy_process_group()
    with pytest.raises(ArgumentError, match="rank=3"):
        dist.init_process_group(rank=3)
    assert not dist.is_initialized()


def test_a_launched_rank_without_mpi4py_is_told_to_install_it(monkeypatch):
    dist.destroy_process_group()
    monkeypatch.setenv("PMI_SIZE", "2")  # what mpiexec (hydra) gives each rank
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails
    assert dist.launched_by_mpi()
    with pytest.raises(dist.DistributedError, match=r"MPI launcher, which needs mpi4py.*tensorlite\[distributed\]"):
        dist.init()
    assert not dist.is_initialized() and tl.distributed is dist


@pytest.mark.parametrize("size_var, rank_var", [("PMI_SIZE", "PMI_RANK"),
                                                ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")])
def test_a_launcher_of_another_mpi_is_refused(size_var, rank_var):
    """mpiexec of one MPI starting processes whose mpi4py loads another: each process is a world
    of one (MPI says rank 0 of 1) while the launcher's variables say rank 1 of 2. Simulated by a
    process started without a launcher but given rank 1's variables (its own process: importing
    mpi4py initializes MPI for good)."""
    _mpiexec()  # skips where mpi4py is absent
    code = "import tensorlite.distributed as dist; dist.init(); print('ranks', dist.get_world_size())"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MV2_", "PMIX_"))}
    library = subprocess.run(  # not imported here: importing mpi4py.MPI initializes MPI in this process
        [sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_library_version().strip().splitlines()[0])"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60).stdout.strip()
    if not library.startswith("MPICH"):
        # Open MPI's MPI_Init, given a launcher's variables without its daemon, aborts inside MPI
        # before tensorlite can look (seen on the lent GPU machine's Debian Open MPI 4.1)
        pytest.skip(f"simulating a foreign launcher needs MPICH's singleton init; mpi4py loads {library or 'no MPI'!r}")
    wrong = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, size_var: "2", rank_var: "1"},
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "ranks" not in wrong.stdout, wrong.stdout + wrong.stderr
    error = wrong.stderr.strip().splitlines()[-1]
    assert error.startswith("tensorlite.distributed._world.DistributedError: "), wrong.stderr
    assert "rank 1 of 2 (" in error and f"{size_var}=2 {rank_var}=1" in error and "MPI reports rank 0 of 1" in error
    assert f"mpi4py loaded {library!r}" in error
    assert "MPI4PY_LIBMPI=" in error and "mpi4py.bench helloworld" in error
    # a launcher that agrees with MPI (a world of one) passes
    right = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, size_var: "1", rank_var: "0"},
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert right.returncode == 0 and "ranks 1" in right.stdout, right.stdout + right.stderr


def _device_collectives_or_skip(device):
    """On a GPU platform with a collective library, skip with its loader's reason where it is missing."""
    platform = getattr(tl.backend.get_device(device), "platform", None)
    if platform is not None:
        try:
            nccl.collective_library(platform.name)
        except BackendUnavailable as e:
            pytest.skip(f"{device} collectives need their library: {e}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_collectives_of_one_rank_are_identities(device, dtype, rng):
    """On cuda / rocm: an NCCL / RCCL communicator of one rank runs every collective."""
    _device_collectives_or_skip(device)
    values = dist_cases.rank_values(0, dtype.name, (4, 3))
    ref = _expected_dtype(values, dtype.name)

    def t(v=values):
        return tl.tensor(np.asarray(v), dtype=dtype, device=device)

    def same(x, want=ref):
        got = x.numpy()
        np.testing.assert_array_equal(got.astype(want.dtype) if got.dtype != bool else got, want)
    for op in dist_cases.ops_of(dtype.name):
        x = t()
        dist.all_reduce(x, op=op)
        same(x)
    x = t(values.T.copy()).mT  # non-contiguous
    dist.all_reduce(x)
    same(x)
    x = t()
    dist.broadcast(x, src=0)
    same(x)
    out = tl.zeros(1, 4, 3, dtype=dtype, device=device)
    dist.all_gather_into_tensor(out, t())
    same(out[0])
    outs = [tl.zeros(4, 3, dtype=dtype, device=device)]
    dist.all_gather(outs, t())
    same(outs[0])
    out = tl.zeros(4, 3, dtype=dtype, device=device)
    dist.reduce_scatter_tensor(out, t(), op="max")
    same(out)
    out = tl.zeros(4, 3, dtype=dtype, device=device)
    dist.reduce_scatter(out, [t()], op="sum")
    same(out)
    x = t()
    work = dist.all_reduce(x, async_op=True)
    assert work.wait() is True
    tl.synchronize(device)  # a device Work's wait() orders the stream; the host waits here (torch's semantics)
    assert work.is_completed()
    same(x)
    dist.barrier()


def _tiny_net(device):
    tl.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(device)


def test_ddp_of_one_rank_trains_as_the_plain_module(device, rng):
    _device_collectives_or_skip(device)
    plain, wrapped = _tiny_net(device), _tiny_net(device)
    ddp = dist.DistributedDataParallel(wrapped, bucket_cap_mb=1e-4)  # several buckets
    assert ddp.module is wrapped and list(ddp.state_dict()) == [f"module.{k}" for k in plain.state_dict()]
    opts = [tl.optim.SGD(m.parameters(), lr=0.1) for m in (plain, wrapped)]
    for _ in range(3):
        x = tl.tensor(rng.standard_normal((6, 5)).astype(np.float32), device=device)
        for model, opt in zip((plain, ddp), opts):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for (name, p), q in zip(plain.named_parameters(), wrapped.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)


def test_ddp_no_sync_and_bad_input():
    net = dist.DistributedDataParallel(nn.Linear(2, 1))
    with net.no_sync():
        net(tl.ones(1, 2)).sum().backward()
    net(tl.ones(1, 2)).sum().backward()
    assert net.module.bias.grad.tolist() == [2.0]  # both backwards, accumulated
    with pytest.raises(DTypeError, match="nn.Module"):
        dist.DistributedDataParallel(tl.ones(2))
    with pytest.raises(ArgumentError, match="device_ids"):
        dist.DistributedDataParallel(nn.Linear(2, 1), device_ids=["cuda:1"])
    with pytest.raises(ArgumentError, match="bucket_cap_mb"):
        dist.DistributedDataParallel(nn.Linear(2, 1), bucket_cap_mb=0)
    from tensorlite.nn.parallel import DistributedDataParallel
    assert DistributedDataParallel is dist.DistributedDataParallel


def test_collectives_refuse_bad_input(monkeypatch):
    x = tl.ones(2, 3)
    with pytest.raises(ArgumentError, match="unknown reduce op 'mean'"):
        dist.all_reduce(x, op="mean")
    with pytest.raises(DTypeError, match=r"all_reduce\(tensor: shape=\(2,\) int64 cpu\).*AVG needs a floating"):
        dist.all_reduce(tl.tensor([1, 2]), op=dist.ReduceOp.AVG)
    with pytest.raises(DTypeError, match="must be a tensorlite Tensor, got ndarray"):
        dist.all_reduce(np.ones(2))
    with pytest.raises(ShapeError, match=r"output: shape=\(3,\).*input: shape=\(2, 3\).*world_size \(1\) x 6"):
        dist.all_gather_into_tensor(tl.zeros(3), x)
    with pytest.raises(DTypeError, match="one dtype"):
        dist.all_gather_into_tensor(tl.zeros(2, 3, dtype=tl.float64), x)
    with pytest.raises(ArgumentError, match=r"src must be a rank in \[0, 1\), got 1"):
        dist.broadcast(x, src=1)
    with pytest.raises(ArgumentError, match="expanded view"):
        dist.all_reduce(tl.ones(3).expand(2, 3))
    with pytest.raises(ArgumentError, match="list of world_size \\(1\\) tensors"):
        dist.all_gather([], x)
    with pytest.raises(ArgumentError, match="only the default group"):
        dist.all_reduce(x, group="other")
    with pytest.raises(dist.DistributedError, match="only the default group"):
        dist.new_group([0])
    dist.all_reduce(x, group=dist.group.WORLD)  # the world is the default group
    dist.destroy_process_group()
    monkeypatch.setenv("TENSORLITE_DIST_TIMEOUT", "soon")
    with pytest.raises(ArgumentError, match="TENSORLITE_DIST_TIMEOUT='soon'"):
        dist.init()
    with pytest.raises(ArgumentError, match="positive number of seconds"):
        dist.init(timeout=-1)
    monkeypatch.delenv("TENSORLITE_DIST_TIMEOUT")


def test_all_reduce_of_a_parameter_is_seen_by_autograd():
    """An all_reduce writes memory in place: a backward that saved the tensor refuses it."""
    w = tl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    dist.all_reduce(w)
    with pytest.raises(tl.TensorliteError, match="modified by an in-place operation"):
        y.backward()


# ---- DistributedSampler ---------------------------------------------------------------------------

def test_sampler_matches_pytorch_without_shuffle():
    torch_data = pytest.importorskip("torch.utils.data.distributed", reason="PyTorch is not installed")
    for n, replicas, drop_last in [(10, 3, False), (10, 3, True), (2, 5, False), (12, 4, True), (7, 1, False)]:
        for r in range(replicas):
            ours = dist.DistributedSampler(range(n), num_replicas=replicas, rank=r, shuffle=False, drop_last=drop_last)
            theirs = torch_data.DistributedSampler(range(n), num_replicas=replicas, rank=r, shuffle=False,
                                                   drop_last=drop_last)
            assert list(ours) == list(theirs) and len(ours) == len(theirs), (n, replicas, r, drop_last)


def test_sampler_shuffles_one_permutation_per_epoch():
    shards = [dist.DistributedSampler(range(11), num_replicas=3, rank=r, seed=5) for r in range(3)]
    epoch0 = [list(s) for s in shards]
    assert set(sum(epoch0, [])) == set(range(11)) and all(len(e) == 4 for e in epoch0)  # 12 = 11 + 1 repeated
    assert epoch0 == [list(s) for s in shards]  # the same epoch gives the same shards
    for s in shards:
        s.set_epoch(1)
    assert [list(s) for s in shards] != epoch0
    with pytest.raises(ArgumentError, match=r"invalid rank 3.*\[0, 2\]"):
        dist.DistributedSampler(range(4), num_replicas=3, rank=3)
    with pytest.raises(DTypeError, match="len"):
        dist.DistributedSampler(iter(range(4)), num_replicas=1, rank=0)
    assert len(dist.DistributedSampler(range(5))) == 5  # this process's world: one rank


# ---- the autograd hook DDP uses -----------------------------------------------------------------

def test_post_accumulate_grad_hook_sees_the_accumulated_grad():
    w = tl.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    handle = tl.autograd.register_post_accumulate_grad_hook(w, lambda p: seen.append(p.grad.tolist()))
    (w * w).sum().backward()         # w used twice: the hook runs once, after the sum
    (w * 3).sum().backward()         # accumulates onto the first
    tl.autograd.backward([(w * 1).sum()], inputs=[w])
    assert seen == [[2.0, 4.0], [5.0, 7.0], [6.0, 8.0]]
    handle.remove()
    (w * 3).sum().backward()
    assert len(seen) == 3
    tl.autograd.grad((w * w).sum(), w)  # no .grad accumulated: no hook
    assert len(seen) == 3
    with pytest.raises(tl.TensorliteError, match="leaf"):
        tl.autograd.register_post_accumulate_grad_hook(w * 2, print)


# ---- NCCL / RCCL without a GPU --------------------------------------------------------------------

def _ffi(vendor):
    import cffi
    ffi = cffi.FFI()
    ffi.cdef(nccl.cdefs(vendor))
    return ffi


@pytest.mark.parametrize("vendor", ["nccl", "rccl"])
def test_nccl_enum_values_and_sizes_are_the_headers(vendor):
    """Pinned from NVIDIA/nccl src/nccl.h.in and ROCm/rccl src/nccl.h.in (installed as rccl/rccl.h)."""
    ffi = _ffi(vendor)
    dtypes = ffi.typeof("ncclDataType_t").relements  # enumerator -> value
    assert {n: dtypes[n] for n in ("ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
                                   "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclNumTypes")} == \
        {"ncclInt8": 0, "ncclUint8": 1, "ncclInt32": 2, "ncclUint32": 3, "ncclInt64": 4, "ncclUint64": 5,
         "ncclFloat16": 6, "ncclFloat32": 7, "ncclFloat64": 8, "ncclBfloat16": 9, "ncclNumTypes": 12}
    ops = ffi.typeof("ncclRedOp_t").relements
    assert {n: ops[n] for n in ("ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg")} == \
        {"ncclSum": 0, "ncclProd": 1, "ncclMax": 2, "ncclMin": 3, "ncclAvg": 4}
    results = ffi.typeof("ncclResult_t").relements
    assert results["ncclInvalidUsage"] == 5 and results["ncclInProgress"] == 7
    assert "ncclNumResults" not in results  # 8 in NCCL 2.28 and RCCL, 9 in NCCL 2.32: not declared
    assert ffi.sizeof("ncclUniqueId") == nccl.UNIQUE_ID_BYTES == 128
    assert ffi.sizeof("ncclDataType_t") == ffi.sizeof("ncclRedOp_t") == 4
    # the frontend's tables name real enumerators, one per tensorlite dtype / reduce op
    assert set(nccl.DTYPES.values()) <= set(dtypes) and set(nccl.OPS.values()) <= set(ops)
    assert set(nccl.DTYPES) == {d.name for d in ALL_DTYPES} - {"int16", "bool"}
    assert set(nccl.OPS) == {"sum", "product", "max", "min", "avg"}


def _header_or_skip(vendor):
    """(the header, include dirs) of NCCL (nccl.h + the CUDA runtime headers it includes) or
    RCCL (rccl/rccl.h + HIP's), or skip naming what is missing."""
    from tensorlite.backends.rocm import site_dirs
    if vendor == "nccl":
        roots = [os.path.join(os.environ[v], "include") for v in ("NCCL_HOME", "CUDA_HOME", "CUDA_PATH")
                 if os.environ.get(v)]
        roots += [os.path.join(sp, "nvidia", sub, "include") for sp in site_dirs() for sub in ("nccl", "cu13", "cu12")]
        roots += ["/usr/local/cuda/include", "/usr/include"]
        header, needs = "nccl.h", ["cuda_runtime.h", os.path.join("crt", "host_config.h"), os.path.join("nv", "target")]
        hint = "pip install nvidia-nccl-cu13 nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl, or a CUDA toolkit"
    else:
        roots = [os.path.join(os.environ[v], "include") for v in ("ROCM_PATH", "HIP_PATH") if os.environ.get(v)]
        roots += ["/opt/rocm/include", "/usr/include"]
        header, needs, hint = os.path.join("rccl", "rccl.h"), [os.path.join("hip", "hip_runtime.h")], "ROCm's rccl-dev"
    dirs = [d for d in roots if os.path.isdir(d)]
    found = next((os.path.join(d, header) for d in dirs if os.path.exists(os.path.join(d, header))), None)
    if found is None:
        pytest.skip(f"{header} is not installed ({hint}); searched {', '.join(roots)}")
    for need in needs:
        if not any(os.path.exists(os.path.join(d, need)) for d in dirs):
            pytest.skip(f"{found} includes {need}, which is not installed ({hint})")
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler (cc) to check the cdefs against the header")
    return found, dirs


def _check_against_header(tmp_path, vendor, cdef_text):
    """Compile static assertions of every cdef against the header: each function's type, each
    typedef (pointer typedefs against our struct, enums value by value, sizes)."""
    import cffi
    header, dirs = _header_or_skip(vendor)
    ffi = cffi.FFI()
    ffi.cdef(cdef_text)
    lines = [f'#include "{header}"']
    for key, (tp, _) in ffi._parser._declarations.items():
        kind, _, name = key.partition(" ")
        if kind == "function":
            lines.append(f"_Static_assert(__builtin_types_compatible_p(__typeof__(&{name}), {tp.get_c_name('')}), "
                         f'"{name}: the cdef signature differs from {header}");')
        elif kind == "typedef" and hasattr(tp, "enumerators"):
            for e, v in zip(tp.enumerators, tp.enumvalues):
                lines.append(f'_Static_assert({e} == {v}, "{e}: the cdef value {v} differs from {header}");')
            lines.append(f'_Static_assert(sizeof({name}) == {ffi.sizeof(name)}, "sizeof({name}) differs");')
        elif kind == "typedef" and type(tp).__name__ == "PointerType":
            lines.append(f"_Static_assert(__builtin_types_compatible_p({name}, {tp.get_c_name('')}), "
                         f'"{name}: the cdef typedef differs from {header}");')
        elif kind == "typedef":
            lines.append(f'_Static_assert(sizeof({name}) == {ffi.sizeof(name)}, "sizeof({name}) differs");')
    src = tmp_path / f"{vendor}_check.c"
    src.write_text("\n".join(lines) + "\n")
    cmd = [os.environ.get("CC", "cc"), "-fsyntax-only", "-D__HIP_PLATFORM_AMD__=1", *(f"-I{d}" for d in dirs), str(src)]
    return subprocess.run(cmd, capture_output=True, text=True), len(lines) - 1


@pytest.mark.parametrize("vendor", ["nccl", "rccl"])
def test_nccl_cdefs_match_the_installed_header(tmp_path, vendor):
    proc, checks = _check_against_header(tmp_path, vendor, nccl.cdefs(vendor))
    assert proc.returncode == 0, proc.stderr
    assert checks >= 40


@pytest.mark.parametrize("vendor", ["nccl", "rccl"])
def test_a_cdef_drift_fails_the_header_check(tmp_path, vendor):
    """The check above is only worth having if a wrong cdef fails it."""
    wrong = nccl.cdefs(vendor).replace("ncclBfloat16 = 9", "ncclBfloat16 = 8").replace(
        "ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount",
        "ncclAllGather(const void* sendbuff, void* recvbuff, int sendcount")
    proc, _ = _check_against_header(tmp_path, vendor, wrong)
    assert proc.returncode != 0
    assert "ncclBfloat16: the cdef value 8 differs" in proc.stderr
    assert "ncclAllGather: the cdef signature differs" in proc.stderr


@pytest.mark.parametrize("platform, library", [("cuda", "libnccl"), ("rocm", "librccl")])
def test_a_missing_collective_library_is_named(monkeypatch, platform, library):
    vendor, what, sonames, _ = nccl._LIBRARIES[platform]
    monkeypatch.setitem(nccl._LIBRARIES, platform, (vendor, what, sonames, lambda: []))
    monkeypatch.setattr(nccl, "_LOADED", {})
    try:
        lib = nccl.collective_library(platform)
    except BackendUnavailable as e:
        assert library in str(e) and sonames[0] in str(e)
    else:
        pytest.skip(f"{library} is on the loader path here ({lib.path}): the missing-library error cannot be produced")
    assert nccl.collective_library("amdemu") is None  # no collective library: staged through the host


def test_nccl_library_version_and_unique_id():
    """The library itself, without a GPU: ncclGetVersion and ncclGetUniqueId need no device."""
    try:
        lib = nccl.collective_library("cuda")
    except BackendUnavailable as e:
        pytest.skip(str(e))
    assert lib.version() >= 21000  # ncclAvg needs 2.10
    uid = lib.unique_id()
    assert len(uid) == 128 and any(uid) and uid != lib.unique_id()
    with pytest.raises(DTypeError, match="NCCL has no data type for int16"):
        lib.datatype("all_reduce", tl.int16)


class _RecordingNccl(nccl.CollectiveLibrary):
    """NCCL's cdefs with a recorder for a library: each call is kept as (name, args) and
    succeeds; enumerators read as the cdefs' values. What a Communicator enqueues, without a GPU."""

    def __init__(self):
        import cffi
        self.vendor, self.path, self.stream_type, self.calls = "nccl", "libnccl (recorded)", "cudaStream_t", []
        self.ffi = cffi.FFI()
        self.ffi.cdef(nccl.cdefs("nccl"))
        enums = {}
        for name in ("ncclDataType_t", "ncclRedOp_t", "ncclResult_t"):
            enums.update(self.ffi.typeof(name).relements)
        outer = self

        class Lib:
            def __getattr__(self, name):
                if name in enums:
                    return enums[name]

                def call(*args):
                    outer.calls.append((name, args))
                    return 0
                return call
        self.lib = Lib()

    def unique_id(self) -> bytes:
        return bytes(range(128))


def test_device_collectives_enqueue_nccl_calls_without_waiting(null_backend, monkeypatch):
    """The NCCL path on a GpuDevice that runs nothing (the null platform): which calls, with
    which types, counts, ops, buffers and stream, and that the host never reads the device."""
    fake = _RecordingNccl()
    monkeypatch.setitem(nccl._LIBRARIES, "null", nccl._LIBRARIES["cuda"])
    monkeypatch.setattr(nccl, "_LOADED", {"null": fake})
    dev = tl.backend.get_device(null_backend)
    counts = dev.platform.counts
    reads = counts["dtoh"]
    f32 = tl.zeros(2, 3, device=null_backend)
    dist.all_reduce(f32, op=dist.ReduceOp.AVG)
    dist.all_reduce(tl.zeros(5, dtype=tl.int16, device=null_backend))
    dist.all_reduce(tl.zeros(4, dtype=tl.bool, device=null_backend), op="min")
    dist.broadcast(tl.zeros(3, dtype=tl.int16, device=null_backend), src=0)
    out = tl.zeros(1, 4, dtype=tl.bfloat16, device=null_backend)
    dist.all_gather_into_tensor(out, tl.zeros(4, dtype=tl.bfloat16, device=null_backend))
    dist.reduce_scatter_tensor(tl.zeros(3, device=null_backend), tl.zeros(3, device=null_backend), op="max")
    dist.all_reduce(tl.zeros(3, 2, device=null_backend).mT)  # non-contiguous: a contiguous copy is reduced
    assert counts["dtoh"] == reads  # nothing waited for the device
    names = [name for name, _ in fake.calls]
    assert names == ["ncclCommInitRank", "ncclAllReduce", "ncclAllReduce", "ncclAllReduce", "ncclBroadcast",
                     "ncclAllGather", "ncclReduceScatter", "ncclAllReduce"]
    init_args = fake.calls[0][1]
    assert init_args[1:] == (1, init_args[2], 0) and bytes(fake.ffi.buffer(init_args[2].internal)) == bytes(range(128))
    stream = fake.ffi.cast("cudaStream_t", dev.stream_handle(dev.communication_stream()))
    assert dev.communication_stream() != dev.stream
    addr = lambda p: int(fake.ffi.cast("uintptr_t", p))  # noqa: E731
    calls = [args for _, args in fake.calls[1:]]
    for args in calls:
        assert args[-1] == stream  # enqueued on the device's communication stream
    # (send, recv, count, datatype, op): f32 AVG in place; int16 as int32 in a widened copy;
    # bool as uint8 with min = logical and; broadcast and gather move bytes
    assert addr(calls[0][0]) == addr(calls[0][1]) == f32.data_ptr() and calls[0][2:5] == (6, 7, 4)
    assert addr(calls[1][0]) == addr(calls[1][1]) and calls[1][2:5] == (5, 2, 0)
    assert calls[2][2:5] == (4, 1, 3)
    assert calls[3][2:5] == (6, 1, 0)  # 3 int16 = 6 bytes, root 0
    assert calls[4][2:4] == (8, 1) and addr(calls[4][1]) == out.data_ptr()
    assert calls[5][2:5] == (3, 7, 2)
    assert calls[6][2:5] == (6, 7, 0)
    dist.destroy_process_group()  # frees the communicator
    assert fake.calls[-1][0] == "ncclCommDestroy"


# ---- the communication stream (null platform: calls in the order the host issued them) ---------

def _null_nccl(null_backend, monkeypatch):
    """(the recording NCCL, the null GpuDevice): NCCL's calls and the device's stream-ordered
    calls (launches, copies, event records and waits) in one list, fake.calls, in host order."""
    fake = _RecordingNccl()
    monkeypatch.setitem(nccl._LIBRARIES, "null", nccl._LIBRARIES["cuda"])
    monkeypatch.setattr(nccl, "_LOADED", {"null": fake})
    dev = tl.backend.get_device(null_backend)
    dist.all_reduce(tl.zeros(1, device=null_backend))  # makes the communicator and the communication stream
    dev.platform.log = fake.calls
    del fake.calls[:]
    return fake, dev


def _streams(fake, dev):
    """(compute, communication) stream ids as the log names them, and NCCL's stream argument -> id."""
    def stream_of(args):
        return int(fake.ffi.cast("uintptr_t", args[-1]))
    compute, comm = dev.stream_handle(), dev.stream_handle(dev.communication_stream())
    assert compute != comm
    return compute, comm, stream_of


def _no_host_wait(log):
    return not [k for k, _ in log if k in ("dtoh", "stream_synchronize", "event_synchronize")]


def _check_bucket_streams(log, compute, comm, stream_of, nbuckets, captured=False):
    """Each bucket: an event recorded on the compute stream after its flatten (a copy there; a
    capture records its copies instead of logging them), the communication stream waiting for
    it, the all-reduce there, an event after it; the compute stream waits for each such event
    once, after the last bucket's all-reduce; the host never waits. Returns the all-reduces'
    positions in the log."""
    assert _no_host_wait(log)
    reduces = [i for i, (k, _) in enumerate(log) if k == "ncclAllReduce"]
    assert len(reduces) == nbuckets
    for i in reduces:
        (k0, (s0, ready)), (k1, (s1, waited)), (_, args), (k3, (s3, done)) = log[i - 2:i + 2]
        assert (k0, s0) == ("event_record", compute) and (k1, s1, waited) == ("stream_wait_event", comm, ready)
        assert stream_of(args) == comm and (k3, s3) == ("event_record", comm)
        assert captured or (log[i - 3][0] in ("launch", "dtod") and log[i - 3][1][0] == compute)
        waits = [j for j, (k, a) in enumerate(log) if k == "stream_wait_event" and a == (compute, done) and j > i]
        assert len(waits) == 1 and waits[0] > reduces[-1]
    return reduces


def test_ddp_backward_runs_its_all_reduces_on_the_communication_stream(null_backend, monkeypatch, rng):
    fake, dev = _null_nccl(null_backend, monkeypatch)
    compute, comm, stream_of = _streams(fake, dev)
    tl.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3), nn.Tanh(), nn.Linear(3, 2)).to(null_backend)
    ddp = dist.DistributedDataParallel(net, bucket_cap_mb=1e-4)  # 104 bytes: several buckets
    nbuckets = len(ddp._buckets)
    assert nbuckets >= 3
    log = fake.calls
    for _ in range(2):  # the second step: events come from the pool, parameters' grads are bucket views
        del log[:]
        x = tl.tensor(rng.standard_normal((4, 5)).astype(np.float32), device=null_backend)
        ddp(x).square().mean().backward()
        reduces = _check_bucket_streams(log, compute, comm, stream_of, nbuckets)
        # each .grad is its slice of the buffer the all-reduce wrote in place
        flats = {int(fake.ffi.cast("uintptr_t", log[i][1][0])) for i in reduces}
        assert {p.grad._storage.buffer.ptr for p in net.parameters()} == flats
        for p in net.parameters():
            assert p.grad.shape == p.shape and p.grad.dtype is p.dtype and p.grad.is_contiguous()
        net.zero_grad()
    assert len(dev._sync_events) >= 2 * nbuckets  # both events of every bucket went back to the pool


def test_ddp_buckets_in_flight_do_not_hold_up_backward(null_backend, monkeypatch, rng):
    """Gradients arriving bucket by bucket (a backward per bucket, `inputs=` its parameters: what
    the walk's order does for a model whose layers' gradients come as backward reaches them):
    each bucket's all-reduce is in flight while the next backward's kernels are enqueued on the
    compute stream, which waits for the all-reduces only once the last has started."""
    fake, dev = _null_nccl(null_backend, monkeypatch)
    compute, comm, stream_of = _streams(fake, dev)
    tl.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3), nn.Tanh(), nn.Linear(3, 2)).to(null_backend)
    ddp = dist.DistributedDataParallel(net, bucket_cap_mb=1e-4)
    log = fake.calls
    x = tl.tensor(rng.standard_normal((4, 5)).astype(np.float32), device=null_backend)
    loss = ddp(x).square().mean()
    del log[:]
    for b in ddp._buckets:
        tl.autograd.backward([loss], inputs=list(b.params), retain_graph=True)
    reduces = _check_bucket_streams(log, compute, comm, stream_of, len(ddp._buckets))
    between = [sum(k == "launch" and a[0] == compute for k, a in log[i:j]) for i, j in zip(reduces, reduces[1:])]
    assert min(between) > 0, between
    assert all(p.grad._storage.buffer.ptr != 0 for p in net.parameters())


def test_a_collective_waited_for_orders_the_compute_stream_not_the_host(null_backend, monkeypatch):
    fake, dev = _null_nccl(null_backend, monkeypatch)
    compute, comm, stream_of = _streams(fake, dev)
    log = fake.calls
    x = tl.zeros(300, device=null_backend)
    buffer = x._storage.buffer
    del log[:]
    work = dist.all_reduce(x, async_op=True)
    kinds = [k for k, _ in log]
    assert kinds == ["event_record", "stream_wait_event", "ncclAllReduce", "event_record"]
    done = log[-1][1][1]
    assert stream_of(log[2][1]) == comm
    # the Work holds the tensor: freed now, its block would go to the next compute-stream allocation
    del x
    assert buffer.ptr not in dev.allocator.cached_blocks(buffer.size)
    with monkeypatch.context() as m:  # is_completed asks the device about the collective's event
        m.setattr(dev.platform, "event_query", lambda event: event != done)
        assert not work.is_completed()
    assert work.is_completed()
    assert work.wait() is True and work.wait() is True  # a second wait adds nothing
    assert log[4:] == [("stream_wait_event", (compute, done))]
    del work
    ptr, size, buffer = buffer.ptr, buffer.size, None
    assert ptr in dev.allocator.cached_blocks(size)
    # without async_op: the compute stream's wait is enqueued before all_reduce returns
    del log[:]
    dist.all_reduce(tl.zeros(3, device=null_backend))
    assert [k for k, _ in log][-3:] == ["ncclAllReduce", "event_record", "stream_wait_event"]
    assert log[-1][1] == (compute, log[-2][1][1])
    # a Work dropped unwaited orders the compute stream before its buffers are freed
    del log[:]
    y = tl.zeros(5, 4, device=null_backend)
    ptr, size = y._storage.buffer.ptr, y._storage.buffer.size
    dist.all_reduce(y, async_op=True)
    del y
    assert log[-1] == ("stream_wait_event", (compute, log[-2][1][1])) and ptr in dev.allocator.cached_blocks(size)
    # int16 is reduced in an int32 copy: the copy outlives the collective, the result is copied back after the wait
    del log[:]
    z = tl.zeros(7, dtype=tl.int16, device=null_backend)
    work = dist.all_reduce(z, async_op=True)
    reduce_at = [k for k, _ in log].index("ncclAllReduce")
    wide = int(fake.ffi.cast("uintptr_t", log[reduce_at][1][0]))
    assert wide != z.data_ptr() and wide not in dev.allocator.cached_blocks(512)
    n = len(log)
    work.wait()
    assert log[n][0] == "stream_wait_event" and any(k == "launch" for k, _ in log[n + 1:])  # the copy back, after
    assert _no_host_wait(log) and dev.platform.counts["stream_synchronize"] == 0
    assert dev.platform.counts["stream_wait_event"] >= 4
    dev.synchronize()  # as torch.cuda.synchronize: both streams
    assert [a for k, a in log if k == "stream_synchronize"] == [(compute,), (comm,)]


def test_collectives_inside_a_graph_capture_fork_onto_the_communication_stream(null_backend, monkeypatch):
    """Inside a capture a collective goes to the communication stream as eagerly: the stream
    joins the capture by waiting for an event recorded on the captured stream, and the
    compute stream waits for it at wait(); a Work never waited for is joined when the
    capture ends (a capture must end with every stream it reached joined back)."""
    fake, dev = _null_nccl(null_backend, monkeypatch)
    compute, comm, stream_of = _streams(fake, dev)
    log = fake.calls
    x = tl.ones(4, device=null_backend)
    g = tl.graphs.Graph()
    with tl.graphs.graph(g, device=null_backend):
        y = x * 2
        dist.all_reduce(y)
        assert {dev.platform.stream_id(s) for s in dev.platform._recording.streams} == {compute, comm}  # joined
        kept = dist.all_reduce(y, async_op=True)
        assert not kept._done
    assert kept._done and _no_host_wait(log)
    reduces = [i for i, (k, _) in enumerate(log) if k == "ncclAllReduce"]
    assert len(reduces) == 2
    for i in reduces:
        (k0, (s0, ready)), (k1, (s1, waited)), (_, args), (k3, (s3, done)), (k4, (s4, joined)) = log[i - 2:i + 3]
        assert (k0, s0) == ("event_record", compute) and (k1, s1, waited) == ("stream_wait_event", comm, ready)
        assert stream_of(args) == comm and (k3, s3) == ("event_record", comm)
        assert (k4, s4, joined) == ("stream_wait_event", compute, done)
    g.replay()
    # a collective started before the capture and still pending: neither waited for nor joined inside one
    pending = dist.all_reduce(x, async_op=True)
    for body in (lambda: pending.wait(), lambda: dist.all_reduce(x * 2)):
        with pytest.raises(tl.CaptureError, match="before the capture"):
            with tl.graphs.graph(tl.graphs.Graph(), device=null_backend):
                body()
    assert dev.capture is None
    pending.wait()
    with tl.graphs.graph(tl.graphs.Graph(), device=null_backend):
        dist.all_reduce(x * 2)


def test_device_collectives_names_the_devices_with_a_collective_library(null_backend, monkeypatch):
    """What train_gpt.py asks before capturing a DDP step: cpu and a GPU platform without
    NCCL/RCCL (null, the emulated AMD platform) stage collectives through the host."""
    assert not dist.device_collectives("cpu") and not dist.device_collectives(null_backend)
    monkeypatch.setitem(nccl._LIBRARIES, "null", nccl._LIBRARIES["cuda"])
    assert dist.device_collectives(null_backend)


def test_a_ddp_training_step_captures_its_all_reduces_into_the_graph(null_backend, monkeypatch, rng):
    """A whole DDP step (forward, backward with its bucket all-reduces, AdamW(capturable=True))
    captured as one graph, as bench_ddp.py's tensorlite-graph row and train_gpt.py --graph on
    several ranks do: the buckets fork onto the communication stream as in an eager step, so
    the graph overlaps them with backward; nothing in the capture waits for the host, and the
    optimizer reads the gradients that the all-reduces wrote (the buckets' buffers)."""
    fake, dev = _null_nccl(null_backend, monkeypatch)
    compute, comm, stream_of = _streams(fake, dev)
    tl.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(null_backend)
    ddp = dist.DistributedDataParallel(net, bucket_cap_mb=1e-4)
    opt = tl.optim.AdamW(net.parameters(), capturable=True)
    x = tl.tensor(rng.standard_normal((4, 5)).astype(np.float32), device=null_backend)

    def step():
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()

    step()  # eager: the optimizer's state
    log = fake.calls
    del log[:]
    g = tl.graphs.Graph()
    with tl.graphs.graph(g, device=null_backend):
        step()
    assert len(ddp._buckets) >= 2
    reduces = _check_bucket_streams(log, compute, comm, stream_of, len(ddp._buckets), captured=True)
    flats = {int(fake.ffi.cast("uintptr_t", log[i][1][0])) for i in reduces}
    assert {p.grad._storage.buffer.ptr for p in net.parameters()} == flats
    launches = dev.platform.counts["launch"]
    g.replay()
    assert dev.platform.counts["launch"] > launches


@pytest.mark.parametrize("platform_name", ["cuda", "rocm"])
def test_stream_ordering_calls_are_the_vendor_functions(platform_name):
    """sync_event_create / stream_wait_event / event_query through a recording runtime: the
    vendor function, its arguments (timing off, wait flags 0) and the not-ready code; each one
    is declared in the platform's cdefs (HIP's are checked against the headers by
    tests/test_gpu_runtime.py::test_hip_cdefs_match_the_hip_headers)."""
    from tensorlite.backends.rocm.cuda import CudaPlatform
    from tensorlite.backends.rocm.hip import HipPlatform
    plat = CudaPlatform() if platform_name == "cuda" else HipPlatform()
    calls, codes = [], {}

    class Runtime:
        def __getattr__(self, name):
            def call(*args):
                calls.append((name, args))
                return codes.get(name, 0)
            return call
    plat._rt = Runtime()
    declared = plat.ffi._parser._declarations
    for op in ("sync_event_create", "stream_wait_event", "event_query"):
        assert f"function {plat.CALLS[op]}" in declared, op
    plat.sync_event_create()
    name, (out, flags) = calls[-1]
    assert name == {"cuda": "cuEventCreate", "rocm": "hipEventCreateWithFlags"}[platform_name] and flags == 0x2
    assert plat.ffi.typeof(out) is plat.ffi.typeof(plat.HANDLES["event"] + "*")
    stream, event = plat.ffi.cast(plat.HANDLES["stream"], 8), plat.ffi.cast(plat.HANDLES["event"], 16)
    plat.stream_wait_event(stream, event)
    assert calls[-1] == ({"cuda": "cuStreamWaitEvent", "rocm": "hipStreamWaitEvent"}[platform_name],
                         (stream, event, 0))
    query = plat.CALLS["event_query"]
    assert plat.event_query(event) is True
    codes[query] = 600  # CUDA_ERROR_NOT_READY, hipErrorNotReady
    assert plat.event_query(event) is False
    codes[query] = 700
    with pytest.raises(tl.TensorliteError, match=f"{query} failed"):
        plat.event_query(event)
