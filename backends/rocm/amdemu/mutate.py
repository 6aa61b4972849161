"""The mutation check of the emulated AMD suite: planted kernel bugs that the suite must catch.

Each entry of MUTATIONS plants one bug (an exact piece of a kernel source replaced) and names
the emulated targets where it is a bug (a wave-size assumption only where the wave has the other
width, an MFMA bug only on the CDNA targets) and the few tests of the emulated suite that must
fail with it. For every mutation the source is edited in a copy of kernels/ (never kernels/
itself: $TENSORLITE_KERNEL_DIR points the compiler at the copy, compiler.kernel_dir), the tests
run on each of its targets in a subprocess with a private kernel cache, and a pass is a
survivor. A baseline run per target (the same tests, the kernels as they are) must pass first, so
that every failure is the mutation's. The private cache starts as hard links to the real cache's
entries (the unchanged families are not compiled again) and is deleted at the end: mutated code
objects never reach the real cache.

    python -m tensorlite.backends.rocm.amdemu.mutate [--targets gfx90a,gfx1100,gfx942] [--only NAME ...]
                                                     [--jobs 2] [--list]

run from the repository root (the tests are read from tests/), with the emulated platform's
environment set (docs/amd-emulation.md). Prints a table (mutation, target, caught, seconds) and
exits 1 when a mutation survives on a target where it is a bug, when a baseline fails, when a
mutation's source text is not in its kernel source exactly once (a kernel changed under it: the
entry must be updated, never skipped), or when a mutated source does not compile (a mutation
must be a bug that runs). Results are emulated: they say what the suite catches on the
interpreter, nothing about AMD hardware.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from .. import compiler

WAVE64 = ("gfx90a",)            # the wave64 target CI checks (CDNA2); gfx942 is wave64 too
WAVE32 = ("gfx1100",)           # the wave32 one (RDNA3)
MFMA_K16 = ("gfx90a", "gfx942")  # MFMA targets whose 16-bit products are 16x16x16: CDNA2 and CDNA3
MFMA_K32 = ("gfx950",)           # CDNA4: 16x16x32 (matrix_cores_amd.h tl_mma_16x16x32)
MFMA = MFMA_K16 + MFMA_K32       # matrix-core (MFMA) targets (hip.py's MFMA_ARCHS)
EVERY = WAVE64 + WAVE32          # a bug whatever the target: checked on one of each wave size
DEFAULT_TARGETS = ("gfx90a", "gfx1100", "gfx942", "gfx950")
TIMEOUT_S = 900                 # one pytest run; a mutation that hangs counts as caught (CI's limit would)


@dataclass(frozen=True)
class Mutation:
    name: str
    source: str                 # a file of kernels/
    find: str                   # exact text, present exactly once in the source
    replace: str
    targets: Tuple[str, ...]    # emulated targets where this is a bug
    tests: Tuple[str, ...]      # pytest node ids that must fail with it (on amdemu)
    why: str                    # what the bug is, and why these targets


MUTATIONS = (
    Mutation(
        "gemv1-wave64-half-shuffle", "gemv.hip",
        "        for (int o = warpSize / 2; o > 0; o >>= 1) {\n",
        "        for (int o = 16; o > 0; o >>= 1) {\n",
        WAVE64, ("tests/test_tensor_matmul.py::test_few_rows_times_a_row_major_weight[amdemu-1-float32]",),
        "gemv1's row sum assumes 32 lanes: on a 64-lane wave lanes 32-63 never reach lane 0"),
    Mutation(
        "gemv-wave32-warp-count", "gemv.hip",
        "warps = blockDim.x / warpSize;",
        "warps = blockDim.x / 64;",
        WAVE32, ("tests/test_tensor_matmul.py::test_few_rows_times_a_row_major_weight[amdemu-2-float32]",),
        "the few-row GEMV counts 64-lane warps: with 32 lanes half the warps' partial sums are dropped"),
    Mutation(
        "gemv1-row-tail-dropped", "gemv.hip",
        "for (i64 p0 = (i64)lane * V; p0 < k; p0 += span * U) {",
        "for (i64 p0 = (i64)lane * V; p0 + V < k; p0 += span * U) {",
        EVERY, ("tests/test_tensor_matmul.py::test_few_rows_times_a_row_major_weight[amdemu-1-float32]",),
        "gemv1 skips a row's last run of V elements (a tail loop bound)"),
    Mutation(
        "scan-carry-lds-index", "sort.hip",
        "carry = Prod ? carry * buf[blockDim.x - 1] : carry + buf[blockDim.x - 1];",
        "carry = Prod ? carry * buf[blockDim.x - 2] : carry + buf[blockDim.x - 2];",
        EVERY, ("tests/test_sorting.py::test_scans_of_rows_longer_than_a_tile_carry_across_tiles[amdemu-float32]",),
        "cumsum/cumprod carry the second-to-last tile element to the next tile (an LDS index off by one)"),
    Mutation(
        "sort-lds-bound", "sort.hip",
        "if (q < len && sort_before(sv[q], si[q], sv[i], si[i], desc)) {",
        "if (q <= len && sort_before(sv[q], si[q], sv[i], si[i], desc)) {",
        EVERY, ("tests/test_sorting.py::test_sort_rows_longer_than_a_block_merge_in_global_memory[amdemu-float32-37]",),
        "the in-block bitonic sort compares with the shared-memory slot just past the row"),
    Mutation(
        "binary-broadcast-tail-dropped", "binary.hip",
        "    if (V > 1)\n"
        "        for (i64 i = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)\n",
        "    if (V < 1)\n"
        "        for (i64 i = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)\n",
        EVERY, ("tests/test_tensor_elementwise.py::test_binary_float_broadcasting[amdemu-()-(3,)-add-float32]",),
        "a bias-broadcast binary op never writes the last n % V elements (the vector loop's tail)"),
    Mutation(
        "gather-bound-check-removed", "index.hip",
        "        const i64 id = tl_to_i64(ids[tl_index(ids_l, e)]);\n"
        "        if (id < 0 || id >= dim_size) { *err = 1; out[e] = tl_zero<T>(); continue; }\n",
        "        const i64 id = tl_to_i64(ids[tl_index(ids_l, e)]);\n",
        EVERY, ("tests/test_kernel_edges.py::test_out_of_range_ids_computed_on_the_device_raise[amdemu-gather]",),
        "gather reads at an out-of-range id instead of reporting it (issue 43: survived the CI suite)"),
    Mutation(
        "mfma-fwd-full-tile-scale", "attention.hip",
        "    float f = p.scale * TL_LOG2E;\n",
        "    float f = p.scale;\n",
        MFMA, ("tests/test_kernel_edges.py::test_attention_on_whole_tensor_core_tiles[amdemu-float16]",),
        "the MMA flash forward's full-tile fast path scales by the softmax scale without log2(e) "
        "(issue 43: survived the CI suite, whose L = S = 6 never fills a tile)"),
    Mutation(
        "mfma-f16-operands-swapped", "matrix_cores_amd.h",
        "__builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(tl_half4, a.x), __builtin_bit_cast(tl_half4, b.x),",
        "__builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(tl_half4, b.x), __builtin_bit_cast(tl_half4, a.x),",
        MFMA_K16, ("tests/test_kernel_edges.py::test_attention_on_whole_tensor_core_tiles[amdemu-float16]",),
        "the f16 MFMA tile takes B as A and A as B: each product comes out transposed (CDNA2/3: "
        "gfx950's f16 tiles take the K-32 product)"),
    Mutation(
        "mfma-k32-b-halves-swapped", "matrix_cores_amd.h",
        "tl_mma_k32_operand(b0.x, b1.x)",
        "tl_mma_k32_operand(b1.x, b0.x)",
        MFMA_K32, ("tests/test_kernel_edges.py::test_attention_on_whole_tensor_core_tiles[amdemu-float16]",),
        "the 16-bit K-32 product puts B's two K chunks in the other order than A's: A0 B1 + A1 B0 (gfx950)"),
    Mutation(
        "rope-inverse-sign", "fused.hip",
        "const A sg = inverse ? -s[g] : s[g];",
        "const A sg = s[g];",
        EVERY, ("tests/test_amdemu_entry_points.py::test_rope_forward_backward[rope-float32]",),
        "rope's backward rotates by +theta, not -theta (the sign of sin in the inverse rotation)"),
    Mutation(
        "philox-offset-dropped", "random.hip",
        "u32 c[4] = {(u32)g, (u32)((u64)g >> 32), (u32)offset, (u32)(offset >> 32)};",
        "u32 c[4] = {(u32)g, (u32)((u64)g >> 32), 0u, 0u};",
        EVERY, ("tests/test_kernel_edges.py::test_successive_random_draws_differ[amdemu]",),
        "the Philox counter ignores the stream offset: every call after a seed draws the same numbers"),
    Mutation(
        "gru-dgh-n-without-r", "rnn.hip",
        "dgh[row + 2 * H] = R::store(dn * r);",
        "dgh[row + 2 * H] = R::store(dn);",
        EVERY, ("tests/test_amdemu_entry_points.py::test_rnn_cell_forward_backward[GRU-True-float32]",),
        "GRU's backward gives the hidden product's n gates the gradient of the input's (r dropped: "
        "wrong weight_hh and h0 gradients)"),
)


def suite_files(root: Path) -> List[str]:
    """The test files CI's emulated run takes on the hiprtc targets (.ci/run)."""
    listed = (root / "tests" / "amdemu_suite.txt").read_text().split()
    return listed + ["tests/test_amdemu_entry_points.py"]


def check_mutations(mutations: Sequence[Mutation], kdir: Path, root: Path) -> List[str]:
    """Problems that stop the check before anything runs: source text missing or repeated, a
    test outside the emulated suite, an unknown target."""
    problems, suite = [], set(suite_files(root))
    for m in mutations:
        path = kdir / m.source
        count = path.read_text().count(m.find) if path.is_file() else 0
        if count != 1:
            problems.append(f"mutation {m.name}: source text not found in kernels/{m.source}" if count == 0 else
                            f"mutation {m.name}: source text found {count} times in kernels/{m.source}, not once")
        for test in m.tests:
            if test.split("::")[0] not in suite:
                problems.append(f"mutation {m.name}: {test} is not in the emulated suite (tests/amdemu_suite.txt)")
    return problems


def seed_cache(real: Path, private: Path) -> int:
    """private/kernels holding hard links to (or, across file systems, copies of) real's entries."""
    dst = private / "kernels"
    dst.mkdir(mode=0o700, parents=True)
    os.chmod(private, 0o700)
    n = 0
    for entry in real.iterdir():
        if entry.is_file() and not entry.name.startswith(".tmp-"):
            try:
                os.link(entry, dst / entry.name)
            except OSError:
                shutil.copy2(entry, dst / entry.name)
            n += 1
    return n


def run_tests(target: str, tests: Sequence[str], env: Dict[str, str], root: Path) -> Tuple[str, float, str]:
    """(status, seconds, detail) of the tests on one emulated target: status 'passed', 'failed',
    'timeout', 'no compile' (the code did not compile) or 'no tests' (none selected); detail:
    pytest's first FAILED line where a test failed, else the output's tail."""
    env = dict(env, TENSORLITE_AMDEMU=target)
    # one process (-o addopts=: not pyproject's -n auto): --jobs runs are the parallelism
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-x", *tests]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start, ""
    seconds, out = time.monotonic() - start, proc.stdout + proc.stderr
    failures = [line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if "CompileError" in out:
        status = "no compile"
    elif proc.returncode == 0:
        status = "passed"
    elif proc.returncode == 1:
        status = "failed"
    else:
        status = "no tests" if proc.returncode == 5 else f"pytest exit {proc.returncode}"
    return status, seconds, (failures[0][:160] if status == "failed" and failures else out[-3000:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help="emulated targets to check (each mutation runs on those of its own targets listed)")
    parser.add_argument("--only", nargs="*", default=None, help="mutation names (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="test runs at once (default 2)")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if not (root / "tests" / "amdemu_suite.txt").is_file():
        sys.exit("mutate: run from the repository root (tests/amdemu_suite.txt not found)")
    if os.environ.get(compiler.KERNEL_DIR_ENV):
        sys.exit(f"mutate: unset {compiler.KERNEL_DIR_ENV}: the mutations are made from the package's kernels")
    mutations = [m for m in MUTATIONS if args.only is None or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTATIONS}
    if unknown:
        sys.exit(f"mutate: no mutation named {', '.join(sorted(unknown))}")
    if args.list:
        for m in mutations:
            print(f"{m.name:30} {m.source:20} {','.join(m.targets):16} {m.why}")
        return 0
    targets = [t for t in args.targets.split(",") if t]
    kdir = compiler.kernel_dir()
    problems = check_mutations(mutations, kdir, root)
    if problems:
        print("\n".join(problems))
        return 1

    work = Path(tempfile.mkdtemp(prefix="tl-mutate-"))
    try:
        seeded = seed_cache(compiler.cache_dir(), work / "cache")
        env = dict(os.environ, TENSORLITE_CACHE_DIR=str(work / "cache"))
        env.pop("TENSORLITE_AMDEMU_COVERAGE", None)  # mutated runs are no coverage record
        # the baseline compiles an unchanged copy the same way, so the copy and the override are checked too
        shutil.copytree(kdir, work / "kernels")
        base_env = dict(env, **{compiler.KERNEL_DIR_ENV: str(work / "kernels")})
        jobs = []  # (mutation name or None for the baseline, target, tests, env)
        for t in targets:
            tests = sorted({test for m in mutations if t in m.targets for test in m.tests})
            if tests:
                jobs.append((None, t, tests, base_env))
        for m in mutations:
            copy = work / f"kernels-{m.name}"
            shutil.copytree(kdir, copy)
            path = copy / m.source
            path.write_text(path.read_text().replace(m.find, m.replace))
            for t in m.targets:
                if t in targets:
                    jobs.append((m.name, t, list(m.tests), dict(env, **{compiler.KERNEL_DIR_ENV: str(copy)})))
        print(f"mutation check: {len(mutations)} mutations, {len(jobs)} runs on {', '.join(targets)} "
              f"(private kernel cache seeded with {seeded} entries)", flush=True)
        def run(job):
            result = run_tests(job[1], job[2], job[3], root)
            print(f"  {job[0] or '(unmutated)'} on {job[1]}: {result[0]} ({result[1]:.0f} s)", flush=True)
            return result
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(run, jobs))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    failed = False
    print(f"\n{'mutation':32} {'target':8} {'caught':14} {'seconds':>8}")
    for (name, target, _, _), (status, seconds, tail) in zip(jobs, results):
        if name is None:
            ok, shown = status == "passed", "baseline " + status
        else:
            ok = status in ("failed", "timeout")
            shown = {"failed": "yes", "timeout": "yes (timeout)", "passed": "NO (survived)"}.get(status, status)
        print(f"{name or '(unmutated)':32} {target:8} {shown:14} {seconds:8.1f}")
        if not ok or status == "failed":  # a catch shows its failure: the mutation's, not a broken run
            print("    " + tail.replace("\n", "\n    ")[-2000:])
        failed = failed or not ok
    print("\nemulated: every mutation caught on every target where it is a bug" if not failed else
          "\nemulated: a baseline failed, or a mutation survived or did not run (above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
