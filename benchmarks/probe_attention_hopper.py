"""The warp-specialised Hopper SDPA forwards (flash_fwd_ws*: TENSORLITE_ATTN_HOPPER=1;
flash_fwd_wsp*, with the pingpong schedule: =pingpong) against the present one (flash_fwd_wg*)
and torch's SDPA backends, in one call on an H100/H200 (about 6 minutes, most of it compiling):

    python3 benchmarks/probe_attention_hopper.py [--reps 15] [--force]
    (or `bash benchmarks/gpu_session.sh attn_hopper`, which installs the project first)

0. A warm-up process compiles every kernel source (in parallel) into the cache.
1. Correctness, each variant in its own process (a kernel fault there, e.g. an illegal address, cannot
   poison what runs after it): small shapes (ragged tiles, GQA, causal top-left and
   bottom-right, L != S, rings of key tiles that wrap, (b, t, h, d) views; f16 and bf16, head
   dims 64 and 128) through tensorlite with the switch on, then off, forward and backward (the
   backward reads the forward's lse), against torch's SDPA computed in float32 on the CPU on
   the same rounded inputs. Per case: the max abs error of each kernel, and which forward
   kernel ran. A new kernel passes a case when its errors are within 2x the present
   kernel's (+ 1e-3). A check process that does not end in 120 s is killed (a kernel that
   hangs: a barrier protocol broken).
2. Speed, one process per shape (b8 h16 s2048, bf16; d128 and d64; causal and not): torch SDPA
   with each backend forced (flash, cuDNN, efficient: torch.nn.attention.sdpa_kernel), the
   present tensorlite kernel, then the new ones (last, so that a fault loses only their rows;
   not run at all when their correctness check failed, unless --force). Forward only, no grad; the
   median ms of --reps repetitions after warm-up, timed by CUDA events on each framework's own
   stream behind a lead of queued copies (bench_gpu.py's time_tl / time_torch). TFLOP/s counts
   4*b*h*s*s*d FLOPs, half of that when causal (bench_gpu.py's sdpa rows, bench_nn.py). Each
   shape also prints the max abs difference of both tensorlite outputs to torch's flash output.
"""
import argparse
import json
import os
import re
import subprocess
import sys

RESULT = "RESULT "  # the prefix of a child's result lines (JSON after it)

# name -> (b, hq, hk, L, S, d, causal, (b, t, h, d) views)
CASES = {
    "tiny_plain_d64": (1, 2, 2, 64, 64, 64, False, False),
    "one_tile_causal_d128": (1, 2, 2, 128, 128, 128, True, False),
    "ragged_causal_d128": (2, 3, 3, 200, 200, 128, True, False),
    "ragged_gqa_plain_d64": (2, 4, 2, 333, 333, 64, False, False),
    "wrapping_ring_plain_d128": (1, 2, 2, 100, 900, 128, False, False),
    "long_causal_d128": (1, 2, 1, 1024, 1024, 128, True, False),
    "long_causal_d64": (1, 4, 2, 1000, 1000, 64, True, False),
    "bottom_right_d128": (1, 2, 2, 150, 600, 128, "bottom_right", False),
    "causal_L_gt_S_d64": (1, 2, 2, 300, 130, 64, True, False),
    "views_causal_d128": (2, 4, 2, 257, 257, 128, True, True),
}
SHAPES = [(128, True), (128, False), (64, True), (64, False)]  # (d, causal) at b8 h16 s2048 bf16
BIG = (8, 16, 2048)
TORCH_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
# TENSORLITE_ATTN_HOPPER -> the forward it selects (on sm_90a, for these cases); "0" first
VARIANTS = {"0": "flash_fwd_wg (present)", "1": "flash_fwd_ws (new)", "pingpong": "flash_fwd_wsp (new, pingpong)"}
KERNEL_PREFIX = {"1": "flash_fwd_ws", "pingpong": "flash_fwd_wsp"}


def emit(**kw):
    print(RESULT + json.dumps(kw), flush=True)


def recorded_kernels():
    """The names of the kernels sdpa looks up from now on (appended to the returned list)."""
    from tensorlite.backends.rocm.ops import attention
    names, lookup = [], attention.kernel_for

    def recording(dev, name, *args, **kwargs):
        names.append(name)
        return lookup(dev, name, *args, **kwargs)
    attention.kernel_for = recording
    return names


def child_check(dtype_names, device):
    import torch
    import tensorlite as tl
    dev = tl.backend.get_device(device)
    if device != "cpu":
        dev.warmup()  # every kernel source compiled at once (in parallel), not one by one below
    names = recorded_kernels()
    gen = torch.Generator().manual_seed(0)
    for dtype_name in dtype_names:
        tdt = getattr(torch, dtype_name)
        for case, (b, hq, hk, L, S, d, causal, views) in CASES.items():
            def rand(h, t, views=views, b=b, d=d, tdt=tdt):
                x = torch.randn((b, t, h, d) if views else (b, h, t, d), generator=gen).to(tdt)
                return x.transpose(1, 2) if views else x
            q, k, v, g = rand(hq, L), rand(hk, S), rand(hk, S), rand(hq, L)
            try:
                errs, fwd_kernels, ref_max = check_case(q, k, v, g, hq, hk, L, S, causal, device, names)
            except Exception as e:  # reported per case; a fault of the GPU ends the process anyway
                emit(kind="check", dtype=dtype_name, case=case, error=f"{type(e).__name__}: {e}"[:300])
                continue
            emit(kind="check", dtype=dtype_name, case=case, kernel=",".join(fwd_kernels), errs=errs, ref_max=ref_max)
    dev.synchronize()


def check_case(q, k, v, g, hq, hk, L, S, causal, device, names):
    """({out, dq, dk, dv: max abs error}, the forward kernels sdpa looked up, max |reference out|)
    of tensorlite on `device` against torch in float32 on the cpu, for cpu tensors q, k, v, g."""
    import torch
    import tensorlite as tl
    import tensorlite.nn.functional as F
    # the reference: float32 on the cpu, from the same rounded values
    ref = [x.float().requires_grad_(True) for x in (q, k, v)]
    kk, vv = (x.repeat_interleave(hq // hk, dim=1) for x in ref[1:])
    mask = None
    if causal == "bottom_right":
        mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    out_ref = torch.nn.functional.scaled_dot_product_attention(
        ref[0], kk, vv, attn_mask=mask, is_causal=causal is True)
    out_ref.backward(g.float())
    refs = [out_ref.detach()] + [x.grad for x in ref]
    def on_device(x):
        return tl.from_dlpack(x.cuda()) if device == "cuda" else tl.from_dlpack(x.contiguous()).to(device)
    leaves = [on_device(x) for x in (q, k, v)]
    for x in leaves:
        x.requires_grad_(True)
    del names[:]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    fwd_kernels = [n for n in names if n.startswith("flash_fwd")]
    out.backward(on_device(g))
    got = [out] + [x.grad for x in leaves]
    errs = {}
    for what, a, r in zip(("out", "dq", "dk", "dv"), got, refs):
        a = torch.from_numpy(a.to(tl.float32).numpy())
        errs[what] = float((a - r).abs().max()) if a.isfinite().all() else float("inf")
    return errs, fwd_kernels, float(refs[0].abs().max())


def child_time(d, causal, reps, switches):
    import torch
    import tensorlite as tl
    import tensorlite.nn.functional as F
    from bench_gpu import time_tl, time_torch
    names = recorded_kernels()
    b, h, s = BIG
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    ql, kl, vl = (tl.from_dlpack(x) for x in (q, k, v))
    dev = tl.backend.get_device("cuda")
    torch.cuda.synchronize()
    iters = 10
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flash_out = None
    for backend in TORCH_BACKENDS:
        impl = f"torch {backend.lower().replace('_attention', '')}"

        def fwd_t(backend=backend):
            with sdpa_kernel(getattr(SDPBackend, backend)), torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            out = fwd_t()
            if backend == "FLASH_ATTENTION":
                flash_out = out.float()
            ms = time_torch(torch, fwd_t, iters, reps)
            emit(kind="time", impl=impl, ms=ms, tflops=flops / ms / 1e9)
        except Exception as e:  # a backend that does not take the case on this build / GPU
            emit(kind="time", impl=impl, error=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    for switch in ["0"] + switches:  # the present kernel first, the new ones last
        os.environ["TENSORLITE_ATTN_HOPPER"] = switch

        def fwd_tl():
            with tl.no_grad():
                return F.scaled_dot_product_attention(ql, kl, vl, is_causal=causal)
        del names[:]
        out = fwd_tl()
        kernel = ",".join(n for n in names if n.startswith("flash_fwd"))
        dev.synchronize()
        diff = None
        if flash_out is not None:
            diff = float((torch.from_dlpack(out).float() - flash_out).abs().max())
        ms = time_tl(dev, fwd_tl, iters, reps)
        emit(kind="time", impl=f"tensorlite {VARIANTS[switch]}", kernel=kernel, ms=ms, tflops=flops / ms / 1e9,
             max_diff_vs_torch_flash=diff)


def run_child(args, env_switch, timeout):
    """(results, rc, tail of the output) of this script run as a child."""
    env = dict(os.environ, TENSORLITE_ATTN_HOPPER=env_switch)
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, env=env, capture_output=True,
                           text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:  # a kernel that never ends (a barrier's protocol broken)
        out = (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or "")
        rc = f"killed after {timeout} s"
    results = [json.loads(line[len(RESULT):]) for line in out.splitlines() if line.startswith(RESULT)]
    tail = "\n".join(line for line in out.splitlines() if not line.startswith(RESULT))[-2000:]
    return results, rc, tail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=("warmup", "check", "time"))
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--switches", default="1,pingpong", help="TENSORLITE_ATTN_HOPPER values to time (time child)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--device", default="cuda", help="the check's device (cpu: a dry run of this script)")
    ap.add_argument("--force", action="store_true", help="time the new kernels even when their check failed")
    args = ap.parse_args()
    if args.child == "warmup":
        import tensorlite as tl
        return tl.backend.get_device(args.device).warmup()
    if args.child == "check":
        return child_check(args.dtypes.split(","), args.device)
    if args.child == "time":
        return child_time(args.d, bool(args.causal), args.reps, [w for w in args.switches.split(",") if w])

    if args.device != "cpu":  # every kernel source compiled (in parallel) and cached, before any kernel runs
        _, rc, tail = run_child(["--child", "warmup", "--device", args.device], "0", 480)
        print(f"warm-up (compiles): rc={rc}" + (f"\n{tail}" if rc != 0 else ""), flush=True)
    print("== correctness: max abs error vs torch SDPA in float32 on the cpu (out, dq, dk, dv) ==", flush=True)
    checks, hung = {}, False
    for switch in VARIANTS:
        if hung:  # the next variant shares the ring protocol that never ended: not worth its timeout
            print(f"TENSORLITE_ATTN_HOPPER={switch}: check skipped")
            checks[switch] = {}
            continue
        res, rc, tail = run_child(["--child", "check", "--dtypes", args.dtypes, "--device", args.device], switch, 120)
        checks[switch] = {(r["dtype"], r["case"]): r for r in res}
        hung = switch != "0" and isinstance(rc, str)
        if rc != 0:
            print(f"TENSORLITE_ATTN_HOPPER={switch} ({VARIANTS[switch]}) check process: rc={rc} after {len(res)} "
                  f"cases\n{tail}")
    passed = [switch for switch in VARIANTS if switch != "0" and report_checks(switch, checks)]

    if args.device == "cpu":
        return
    b, h, s = BIG
    timed = list(VARIANTS)[1:] if args.force else passed
    print(f"\n== forward speed, b{b} h{h} s{s} bf16 (TFLOP/s: 4*b*h*s*s*d, halved when causal; "
          f"median of {args.reps}) ==", flush=True)
    if len(timed) < len(VARIANTS) - 1:
        print("(a new kernel whose correctness check failed is not timed; --force times it anyway)")
    for d, causal in SHAPES:
        res, rc, tail = run_child(["--child", "time", "--d", str(d), "--causal", str(int(causal)),
                                   "--reps", str(args.reps), "--switches", ",".join(timed)], "0", 150)
        print(f"-- d{d} {'causal' if causal else 'non-causal'}")
        best = max((r["tflops"] for r in res if r["impl"].startswith("torch") and "tflops" in r), default=None)
        for r in res:
            if "error" in r:
                print(f"  {r['impl']:38} unavailable: {r['error']}")
                continue
            ratio = f"{r['tflops'] / best:.2f}x best torch" if best else ""
            extra = ""
            if r["impl"].startswith("tensorlite") and r.get("max_diff_vs_torch_flash") is not None:
                extra = f"  max|diff| vs torch flash {r['max_diff_vs_torch_flash']:.2e}  [{r['kernel']}]"
            print(f"  {r['impl']:38} {r['ms']:8.3f} ms {r['tflops']:7.1f} TFLOP/s  {ratio}{extra}")
        if rc != 0:
            print(f"  process rc={rc}:\n{tail}")
        sys.stdout.flush()


def report_checks(switch, checks):
    """Prints variant `switch`'s check table against the present kernel's; whether it passed."""
    new_name = VARIANTS[switch]
    print(f"-- {new_name} (TENSORLITE_ATTN_HOPPER={switch}) against {VARIANTS['0']}")
    print(f"{'dtype':9} {'case':26} {'new out/dq/dk/dv':32} {'present out/dq/dk/dv':32} verdict  new kernel")
    ok = bool(checks[switch])
    for key in sorted(set(checks[switch]) | set(checks["0"])):
        new, old = checks[switch].get(key), checks["0"].get(key)

        def fmt(r):
            return "/".join(f"{r['errs'][w]:.1e}" for w in ("out", "dq", "dk", "dv")) if r and "errs" in r else "-"
        verdict = "missing"
        for r, which in ((new, "new"), (old, "present")):
            if r and "error" in r:
                print(f"{key[0]:9} {key[1]:26} {which} kernel's run raised {r['error']}")
                verdict = "ERROR"
        if verdict == "missing" and new and old:
            good = all(new["errs"][w] <= 2 * old["errs"][w] + 1e-3 for w in new["errs"])
            ran = re.match(KERNEL_PREFIX[switch] + r"\d", new["kernel"]) is not None
            # bottom-right causal with L != S reaches the kernels as a mask, which the new ones do not take
            masked = CASES[key[1]][6] == "bottom_right" and CASES[key[1]][3] != CASES[key[1]][4]
            verdict = ("PASS" if good else "FAIL") + ("" if ran else " (not selected)")
            ok &= good and (ran or masked)
        else:
            ok = False
        print(f"{key[0]:9} {key[1]:26} {fmt(new):32} {fmt(old):32} {verdict:8} {(new or {}).get('kernel', '-')}")
    print(f"{new_name} correctness: {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


if __name__ == "__main__":
    main()
