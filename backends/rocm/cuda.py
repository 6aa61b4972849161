"""The `cuda` platform: CUDA driver API (libcuda), NVRTC and cuBLAS through cffi's ABI mode.

Same interface as hip.py's HipPlatform (see backends/rocm/__init__.py). The driver API
works in the device's *primary* context, the one the CUDA runtime (and so PyTorch) uses,
so tensorlite and torch buffers can meet in one process. Typedefs and enum values
follow cuda.h, nvrtc.h, cublas_api.h and library_types.h.

Libraries are found through CUDA_HOME/CUDA_PATH, /usr/local/cuda, pip-installed NVIDIA
wheels (site-packages/nvidia/*/lib: nvidia/cu13/lib, nvidia/cuda_nvrtc/lib,
nvidia/cublas/lib, ...) and the loader path; newest soname first.
"""
from __future__ import annotations

from tensorlite.errors import BackendError, BackendUnavailable

from . import PlatformBase, dlopen_first, env_lib_dirs, nvidia_wheel_lib_dirs

DRIVER_CDEFS = """
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef int CUdevice_attribute;

CUresult cuGetErrorName(CUresult error, const char** pStr);
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int* driverVersion);
CUresult cuDeviceGetCount(int* count);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDeviceGetName(char* name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo_v2(size_t* free, size_t* total);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuModuleLoadData(CUmodule* module, const void* image);
CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra);
"""

NVRTC_CDEFS = """
typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;
const char* nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int* major, int* minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int numHeaders,
                               const char* const* headers, const char* const* includeNames);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin);
"""

CUBLAS_CDEFS = """
typedef int cublasStatus_t;
typedef struct cublasContext* cublasHandle_t;
typedef int cublasOperation_t;
typedef int cudaDataType;
typedef int cublasComputeType_t;
typedef int cublasGemmAlgo_t;
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, CUstream streamId);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes);
const char* cublasGetStatusName(cublasStatus_t status);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB,
    const void* beta, void* C, cudaDataType Ctype, int ldc, long long int strideC,
    int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo);
"""

# CUdevice_attribute values
ATTR = {"max_threads_per_block": 1, "max_shared_memory_per_block": 8, "warp_size": 10,
        "multiprocessor_count": 16, "l2_cache_size": 38, "cc_major": 75, "cc_minor": 76}
_CUDA_TYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 14}   # cudaDataType: CUDA_R_32F, _64F, _16F, _16BF
_COMPUTE_32F, _COMPUTE_64F = 68, 70                         # CUBLAS_COMPUTE_32F / _64F
_GEMM_DEFAULT = -1                                          # CUBLAS_GEMM_DEFAULT
_CUDA_DIRS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
_CUDA_DEFAULTS = ("/usr/local/cuda",)


class CudaPlatform(PlatformBase):
    name = "cuda"
    runtime_name = "libcuda"
    CALLS = dict(
        malloc="cuMemAlloc_v2", free="cuMemFree_v2", mem_get_info="cuMemGetInfo_v2",
        htod="cuMemcpyHtoDAsync_v2", dtoh="cuMemcpyDtoHAsync_v2", dtod="cuMemcpyDtoDAsync_v2",
        memset_d8="cuMemsetD8Async", stream_create="cuStreamCreate",
        stream_synchronize="cuStreamSynchronize", event_create="cuEventCreate",
        event_record="cuEventRecord", event_synchronize="cuEventSynchronize",
        event_elapsed="cuEventElapsedTime", event_destroy="cuEventDestroy_v2",
        module_load="cuModuleLoadData", module_get_function="cuModuleGetFunction",
        launch="cuLaunchKernel")
    HANDLES = dict(devptr="CUdeviceptr", stream="CUstream", event="CUevent", module="CUmodule",
                   function="CUfunction")
    # CU_STREAM_NON_BLOCKING: our stream orders all of tensorlite's work by itself and need not
    # wait for the legacy NULL stream (torch's default stream in the same process)
    STREAM_FLAGS = (0x1,)
    EVENT_FLAGS = (0,)   # CU_EVENT_DEFAULT (timing enabled)
    BLAS_WORKSPACE = 32 << 20  # cuBLAS's recommendation for Hopper; PyTorch also gives 32 MiB there
    OOM_CODE = 2         # CUDA_ERROR_OUT_OF_MEMORY
    RTC_PREFIX, RTC_CODE = "nvrtc", "CUBIN"

    def __init__(self):
        super().__init__(DRIVER_CDEFS, NVRTC_CDEFS, CUBLAS_CDEFS)
        self._contexts = {}

    # ---- library loading ------------------------------------------------------------
    def _dirs(self):
        # pip wheels first: they are what torch's environment (and `pip install nvidia-*`) brings
        return nvidia_wheel_lib_dirs() + env_lib_dirs(_CUDA_DIRS, _CUDA_DEFAULTS)

    @property
    def rt(self):
        if self._rt is None:
            # the driver belongs to the installed kernel module: the loader's copy comes first
            try:
                self._rt, self.runtime_path = dlopen_first(self.ffi, "libcuda", ("libcuda.so.1", "libcuda.so"), ())
            except BackendUnavailable:
                self._rt, self.runtime_path = dlopen_first(
                    self.ffi, "libcuda (CUDA driver)", ("libcuda.so.1", "libcuda.so"),
                    env_lib_dirs(_CUDA_DIRS, _CUDA_DEFAULTS) + ["/usr/lib/x86_64-linux-gnu", "/usr/lib64"])
        return self._rt

    @property
    def rtc(self):
        if self._rtc is None:
            self._rtc, self.rtc_path = dlopen_first(
                self.ffi, "libnvrtc (NVRTC)",
                ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"), self._dirs())
        return self._rtc

    @property
    def blaslib(self):
        if self._blas is None:
            self._blas, self.blas_path = dlopen_first(
                self.ffi, "libcublas (cuBLAS)", ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                                 "libcublas.so"), self._dirs())
        return self._blas

    def error_name(self, code: int) -> str:
        s = self.ffi.new("const char**")
        if self.rt.cuGetErrorName(code, s) == 0 and s[0] != self.ffi.NULL:
            return self.ffi.string(s[0]).decode()
        return f"CUresult {int(code)}"

    # ---- devices --------------------------------------------------------------------
    def init(self) -> int:
        if self._device_count is not None:
            return self._device_count
        rt = self.rt
        err = rt.cuInit(0)
        if err:
            raise BackendUnavailable(f"libcuda: cuInit returned {self.error_name(err)} ({int(err)})")
        count = self.ffi.new("int*")
        err = rt.cuDeviceGetCount(count)
        if err:
            raise BackendUnavailable(f"libcuda: cuDeviceGetCount returned {self.error_name(err)} ({int(err)})")
        if count[0] <= 0:
            raise BackendUnavailable("libcuda: cuDeviceGetCount reports 0 devices")
        self._device_count = count[0]
        return self._device_count

    def _device(self, ordinal):
        d = self.ffi.new("CUdevice*")
        self.check(f"cuDeviceGet({ordinal})", self.rt.cuDeviceGet(d, ordinal))
        return d[0]

    def device_properties(self, ordinal: int) -> dict:
        dev = self._device(ordinal)
        name = self.ffi.new("char[256]")
        self.check("cuDeviceGetName", self.rt.cuDeviceGetName(name, 256, dev))
        attrs = {}
        val = self.ffi.new("int*")
        for key, attr in ATTR.items():
            self.check(f"cuDeviceGetAttribute({key})", self.rt.cuDeviceGetAttribute(val, attr, dev))
            attrs[key] = int(val[0])
        total = self.ffi.new("size_t*")
        self.check("cuDeviceTotalMem_v2", self.rt.cuDeviceTotalMem_v2(total, dev))
        cc = (attrs.pop("cc_major"), attrs.pop("cc_minor"))
        return {"name": self.ffi.string(name).decode(errors="replace"), "arch": f"sm_{cc[0]}{cc[1]}",
                "total_memory": int(total[0]), "compute_capability": cc, **attrs}

    def activate(self, ordinal: int):
        """Make the device's primary context (shared with the CUDA runtime) current."""
        if getattr(self._tls, "ordinal", None) != ordinal:
            ctx = self._contexts.get(ordinal)
            if ctx is None:
                p = self.ffi.new("CUcontext*")
                self.check(f"cuDevicePrimaryCtxRetain({ordinal})",
                           self.rt.cuDevicePrimaryCtxRetain(p, self._device(ordinal)))
                ctx = self._contexts[ordinal] = p[0]
            self.check("cuCtxSetCurrent", self.rt.cuCtxSetCurrent(ctx))
            self._tls.ordinal = ordinal

    def synchronize_device(self):
        self.check("cuCtxSynchronize", self.rt.cuCtxSynchronize())

    def rtc_options(self, arch: str):
        # IEEE semantics on purpose (no --use_fast_math), so results match the cpu reference
        return [f"-arch={arch}", "-std=c++17"]

    # ---- cuBLAS ---------------------------------------------------------------------
    def _blas_check(self, call, code):
        if code:
            try:
                name = self.ffi.string(self.blaslib.cublasGetStatusName(code)).decode()
            except AttributeError:  # cuBLAS < 11.4 has no cublasGetStatusName
                name = "cublasStatus_t"
            raise BackendError(f"{call} failed: {name} ({int(code)})")

    def blas_create(self, stream, workspace_ptr: int = 0, workspace_bytes: int = 0):
        h = self.ffi.new("cublasHandle_t*")
        self._blas_check("cublasCreate_v2", self.blaslib.cublasCreate_v2(h))
        self._blas_check("cublasSetStream_v2", self.blaslib.cublasSetStream_v2(h[0], stream))
        if workspace_bytes:
            # after SetStream, which resets the workspace to cuBLAS's default pool
            try:
                set_ws = self.blaslib.cublasSetWorkspace_v2
            except AttributeError:  # cuBLAS before 11.x: keep its default
                return h[0]
            self._blas_check("cublasSetWorkspace_v2",
                             set_ws(h[0], self.ffi.cast("void*", workspace_ptr), workspace_bytes))
        return h[0]

    def blas_gemm(self, handle, dtype_short, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                  b, ldb, stride_b, beta, c, ldc, stride_c, batch):
        """Column-major C = alpha op(A) op(B) + beta C; alpha/beta point at f64 for f64,
        else at f32 (the compute type of f32/f16/bf16)."""
        dt = _CUDA_TYPES[dtype_short]
        compute = _COMPUTE_64F if dtype_short == "f64" else _COMPUTE_32F
        vp = lambda ptr: self.ffi.cast("void*", ptr)  # noqa: E731 (cuBLAS takes void*, not CUdeviceptr)
        err = self.blaslib.cublasGemmStridedBatchedEx(
            handle, int(trans_a), int(trans_b), m, n, k, alpha,  # CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
            vp(a), dt, lda, stride_a, vp(b), dt, ldb, stride_b, beta,
            vp(c), dt, ldc, stride_c, batch, compute, _GEMM_DEFAULT)
        self._blas_check("cublasGemmStridedBatchedEx", err)
