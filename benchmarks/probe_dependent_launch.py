"""What programmatic dependent launch (PDL, CUDA compute capability 9.0 on) saves in a captured
graph, on two chains of hand-written kernels (a diagnostic, not a test; needs an NVIDIA GPU):

    python benchmarks/probe_dependent_launch.py

- tiny: 44 one-block kernels in a row (an RMSNorm-like pass over 2048 or 1024 floats);
- decode-like: 22 x (one-block kernel, GEMV-shaped kernel over 1024 rows, one-block kernel,
  GEMV-shaped kernel over 5632 rows) over distinct weights of rows of 2048 floats, of which a
  warp reads the first 512 (a probe of launch overlap, not of GEMV bandwidth).
Modes: plain launches; PDL with each kernel waiting first and then letting the next start
(what tensorlite does: compat.h tl_dependent_start); PDL letting the next start first; PDL
where the GEMV-shaped kernel also loads its weights before waiting (tensorlite does not: a
kernel before it may write them). us per replay (median of 15) and per kernel; every mode's
result is checked against the plain launches'."""
import sys

import numpy as np
import tensorlite as tl
from tensorlite.backends.rocm.compiler import compile_text

SRC = r"""
#define WAIT() if (mode) asm volatile("griddepcontrol.wait;" ::: "memory")
#define TRIG() if (mode) asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
__device__ float block_sum(float v) {
    __shared__ float s[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0.f;
    for (int i = 0; i < blockDim.x / 32; ++i) t += s[i];
    __syncthreads();
    return t;
}
// mode 0 plain, 1 wait then trigger, 2 trigger then wait, 3 = 2 (+ GEMV prefetch)
extern "C" __global__ void norm_like(const float* x, float* y, int n, int mode) {
    if (mode == 1) { WAIT(); TRIG(); } else { TRIG(); WAIT(); }
    float acc = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i] * x[i];
    float r = rsqrtf(block_sum(acc) / n + 1e-6f);
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * r;
}
// a warp per row of W (n x 2048), 4 float4 per lane
extern "C" __global__ void gemv_like(const float* x, const float* w, float* y, int n, int mode) {
    const int lane = threadIdx.x % 32, row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    float4 wv[4];
    if (mode == 3) {
        TRIG();
        if (row < n)
            for (int p = 0; p < 4; ++p) wv[p] = ((const float4*)(w + (long)row * 2048))[p * 32 + lane];
        WAIT();
    } else {
        if (mode == 1) { WAIT(); TRIG(); } else { TRIG(); WAIT(); }
        if (row < n)
            for (int p = 0; p < 4; ++p) wv[p] = ((const float4*)(w + (long)row * 2048))[p * 32 + lane];
    }
    if (row >= n) return;
    float acc = 0.f;
    for (int p = 0; p < 4; ++p) {
        const float4 xv = ((const float4*)x)[p * 32 + lane];
        acc += xv.x * wv[p].x + xv.y * wv[p].y + xv.z * wv[p].z + xv.w * wv[p].w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if (lane == 0) y[row] = acc * 1e-2f;
}
"""

def main():
    dev = tl.backend.get_device("cuda")
    plat = dev.platform
    image = compile_text(plat, SRC, "pdl_probe", dev.arch)
    mod = plat.module_load(image)
    fns = {n: plat.module_get_function(mod, n) for n in ("norm_like", "gemv_like")}
    # the backend's own two launch calls: plain, and as a programmatic dependent
    plain, dependent = plat.launch_function(), plat.dependent_launch_function(dev.arch)
    if dependent is None:
        sys.exit(f"{dev} ({dev.arch}) has no programmatic dependent launch")
    ffi, keep = plat.ffi, []

    def launch(name, grid, block, args, pdl):
        vals = [ffi.new(t + "*", v) for t, v in args]
        params = ffi.new("void*[]", [ffi.cast("void*", v) for v in vals])
        keep.extend([vals, params])
        stream = dev.stream
        err = dependent(fns[name], grid, 1, 1, block, 1, 1, 0, stream, params) if pdl else \
            plain(fns[name], grid, 1, 1, block, 1, 1, 0, stream, params, ffi.NULL)
        assert err == 0, (name, err)

    layers = 22
    h = tl.randn(2048, device="cuda")
    bufs = [tl.empty(11264, device="cuda") for _ in range(4)]
    w_small = [tl.randn(1024, 2048, device="cuda") for _ in range(layers)]   # 8 MB
    w_big = [tl.randn(5632, 2048, device="cuda") for _ in range(layers)]     # 46 MB

    def ptr(t):
        return t._storage.addr(t._layout.offset)

    def step(mode, tiny_only=False):
        pdl = mode > 0
        x = ptr(h)
        for i in range(layers):
            launch("norm_like", 1, 256, [("unsigned long long", x), ("unsigned long long", ptr(bufs[0])),
                                         ("int", 2048), ("int", mode)], pdl)
            if not tiny_only:
                launch("gemv_like", 1024 // 8, 256, [("unsigned long long", ptr(bufs[0])),
                                                     ("unsigned long long", ptr(w_small[i])),
                                                     ("unsigned long long", ptr(bufs[1])), ("int", 1024),
                                                     ("int", mode)], pdl)
            launch("norm_like", 1, 256, [("unsigned long long", ptr(bufs[1]) if not tiny_only else ptr(bufs[0])),
                                         ("unsigned long long", ptr(bufs[2])), ("int", 1024), ("int", mode)], pdl)
            if not tiny_only:
                launch("gemv_like", 5632 // 8, 256, [("unsigned long long", ptr(bufs[2])),
                                                     ("unsigned long long", ptr(w_big[i])),
                                                     ("unsigned long long", ptr(bufs[3])), ("int", 5632),
                                                     ("int", mode)], pdl)
            x = ptr(bufs[3]) if not tiny_only else ptr(bufs[2])

    read_mb = layers * (1024 + 5632) * 512 * 4 / 1e6  # the first 512 floats of every weight row
    print(f"{'case':<34} {'us/replay':>10} {'us/kernel':>10}  result")
    ref = None
    for tiny in (True, False):
        for mode, label in ((0, "plain"), (1, "PDL wait, trigger"), (2, "PDL trigger, wait"),
                            (3, "PDL trigger, prefetch W, wait")):
            if tiny and mode == 3:
                continue
            step(mode, tiny)
            dev.synchronize()
            g = tl.graphs.Graph()
            with tl.graphs.graph(g, device="cuda"):
                step(mode, tiny)
            ts = []
            for _ in range(15):
                e0, e1 = dev.event(), dev.event()
                e0.record()
                g.replay()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_ms(e1) * 1e3)
            out = bufs[3].cpu().numpy() if not tiny else bufs[2].cpu().numpy()
            if mode == 0:
                ref = out
            ok = np.allclose(out, ref, rtol=1e-5, atol=1e-6)
            n = layers * (2 if tiny else 4)
            t = float(np.median(ts))
            print(f"{('tiny ' if tiny else 'decode-like ') + label:<34} {t:10.1f} {t / n:10.2f}  "
                  f"{'same' if ok else 'DIFFERS'}")
            del g
    print(f"the GEMV-shaped kernels read {read_mb:.0f} MB of weights per replay")


if __name__ == "__main__":
    sys.exit(main())
