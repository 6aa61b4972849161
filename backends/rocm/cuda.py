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

import glob
import os
from threading import get_ident

import cffi

from tensorlite.errors import BackendError, BackendUnavailable

from . import PlatformBase, dlopen_first, env_lib_dirs, nvidia_wheel_lib_dirs
from .dnn import DnnError, DnnLib

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
CUresult cuEventQuery(CUevent hEvent);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuModuleLoadData(CUmodule* module, const void* image);
CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name);
CUresult cuFuncGetAttribute(int* pi, int attrib, CUfunction hfunc);
CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra);
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;
typedef int CUstreamCaptureMode;
typedef int CUgraphExecUpdateResult;
typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph);
CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo* resultInfo);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);
/* cuLaunchKernelEx (CUDA 11.8 on); the attribute value union is declared with its 64-byte pad
   and the one member used (cuda.h's other members lie within the pad); the id's pad is
   cuda.h's 8 - sizeof(CUlaunchAttributeID), which cffi cannot evaluate */
typedef int CUlaunchAttributeID;
typedef union CUlaunchAttributeValue_union {
    char pad[64];
    int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;
typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[4];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute* attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra);
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
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx);
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

# cuBLASLt (cublasLt.h): only what the bias epilogues need. The descriptors are opaque
# structs handled by pointer; the heuristic result is read by value, so its layout is spelled out.
CUBLASLT_CDEFS = """
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType scaleType);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, int attr, const void* buf,
                                              size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, int attr, const void* buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
    const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes, CUstream stream);
"""
# cublasLtMatmulDescAttributes_t, cublasLtMatmulPreferenceAttributes_t, cublasLtEpilogue_t
_LT_TRANSA, _LT_TRANSB, _LT_EPILOGUE, _LT_BIAS_POINTER = 3, 4, 7, 8
_LT_PREF_MAX_WORKSPACE_BYTES = 1
LT_EPILOGUES = {"bias": 4, "bgradb": 512}   # CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB
_LT_ALIGN = 256  # the heuristic's default minimum alignment of A, B, C, D (and here of the bias)

# CUdevice_attribute values
ATTR = {"max_threads_per_block": 1, "max_shared_memory_per_block": 8, "warp_size": 10,
        "multiprocessor_count": 16, "l2_cache_size": 38, "cc_major": 75, "cc_minor": 76}
_CUDA_TYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 14}   # cudaDataType: CUDA_R_32F, _64F, _16F, _16BF
_COMPUTE_32F, _COMPUTE_64F = 68, 70                         # CUBLAS_COMPUTE_32F / _64F
_GEMM_DEFAULT = -1                                          # CUBLAS_GEMM_DEFAULT
_CUDA_DIRS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
_CUDA_DEFAULTS = ("/usr/local/cuda",)
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # cuda.h CUlaunchAttributeID


def _sm_number(arch: str) -> int:
    """90 for sm_90a, 80 for sm_80: the compute capability's digits."""
    return int("".join(ch for ch in arch[3:] if ch.isdigit()) or 0)


class CudaPlatform(PlatformBase):
    name = "cuda"
    CODE_SUFFIX = ".cubin"
    runtime_name = "libcuda"
    CALLS = dict(
        malloc="cuMemAlloc_v2", free="cuMemFree_v2", mem_get_info="cuMemGetInfo_v2",
        htod="cuMemcpyHtoDAsync_v2", dtoh="cuMemcpyDtoHAsync_v2", dtod="cuMemcpyDtoDAsync_v2",
        memset_d8="cuMemsetD8Async", stream_create="cuStreamCreate",
        stream_synchronize="cuStreamSynchronize", event_create="cuEventCreate",
        event_record="cuEventRecord", event_synchronize="cuEventSynchronize",
        event_elapsed="cuEventElapsedTime", event_destroy="cuEventDestroy_v2",
        sync_event_create="cuEventCreate", stream_wait_event="cuStreamWaitEvent", event_query="cuEventQuery",
        module_load="cuModuleLoadData", module_get_function="cuModuleGetFunction",
        func_get_attribute="cuFuncGetAttribute", func_set_attribute="cuFuncSetAttribute",
        launch="cuLaunchKernel", launch_dependent="cuLaunchKernelEx",
        capture_begin="cuStreamBeginCapture_v2", capture_end="cuStreamEndCapture",
        graph_instantiate="cuGraphInstantiateWithFlags", graph_launch="cuGraphLaunch",
        graph_exec_destroy="cuGraphExecDestroy", graph_destroy="cuGraphDestroy")
    HANDLES = dict(devptr="CUdeviceptr", stream="CUstream", event="CUevent", module="CUmodule",
                   function="CUfunction", graph="CUgraph", graph_exec="CUgraphExec")
    # CU_STREAM_NON_BLOCKING: our stream orders all of tensorlite's work by itself and need not
    # wait for the legacy NULL stream (torch's default stream in the same process)
    STREAM_FLAGS = (0x1,)
    EVENT_FLAGS = (0,)   # CU_EVENT_DEFAULT (timing enabled)
    SYNC_EVENT_FLAGS = (0x2,)  # CU_EVENT_DISABLE_TIMING: events that only order streams
    BLAS_WORKSPACE = 32 << 20  # cuBLAS's recommendation for Hopper; PyTorch also gives 32 MiB there
    OOM_CODE = 2         # CUDA_ERROR_OUT_OF_MEMORY
    RTC_PREFIX, RTC_CODE = "nvrtc", "CUBIN"
    MMA_STAGES = 2       # tensor_cores_nvidia.h TL_MMA_STAGES: two K/V stages

    def __init__(self):
        super().__init__(DRIVER_CDEFS, NVRTC_CDEFS, CUBLAS_CDEFS, CUBLASLT_CDEFS)
        self._contexts = {}
        self._lt = None        # libcublasLt, False where it cannot be loaded
        # (thread, GEMM shape) -> (desc, layouts, algo, heuristic result) or None (no algorithm);
        # per thread because each call sets the descriptor's bias pointer before running it
        self._lt_plans = {}

    def matrix_cores(self, arch: str):
        # wgmma exists only in code built for sm_90a (device_properties names Hopper so);
        # mma.sync with f16/bf16 operands from sm_80 on
        if arch == "sm_90a":
            return "wgmma"
        return "mma" if _sm_number(arch) >= 80 else None

    def mma_lds_bytes(self, arch: str) -> int:
        # tensor_cores_nvidia.h TL_MMA_LDS_KIB: the shared memory a block may opt into on the arch
        if not self.matrix_cores(arch):
            return super().mma_lds_bytes(arch)
        sm = _sm_number(arch)
        return (99 if sm in (86, 89) or sm >= 120 else 163 if sm in (80, 87) else 227) * 1024

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
            # libnvrtc dlopens libnvrtc-builtins.so.<version> by soname at the first compile; from a
            # wheel's directory outside the loader path, 13.0 does not find it (13.5 does)
            d = os.path.dirname(self.rtc_path or "")
            _preload_globally(sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so.*"))) if d else [])
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

    def graph_exec_update(self, graph_exec, graph) -> bool:
        info = self.ffi.new("CUgraphExecUpdateResultInfo*")
        err = self.rt.cuGraphExecUpdate_v2(graph_exec, graph, info)
        if err == 910:  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: the graphs differ in more than parameters
            return False
        self.check("cuGraphExecUpdate_v2", err)
        return True

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
        # sm_90a: Hopper's arch-specific instructions (wgmma, kernels/tensor_cores_nvidia.h) exist only in code
        # built for it, which then loads on cc 9.0 alone, as this device is
        arch = f"sm_{cc[0]}{cc[1]}" + ("a" if cc == (9, 0) else "")
        return {"name": self.ffi.string(name).decode(errors="replace"), "arch": arch,
                "total_memory": int(total[0]), "compute_capability": cc, **attrs}

    def activate(self, ordinal: int):
        """Make the device's primary context (shared with the CUDA runtime) current."""
        if self.thread.ordinal != ordinal:
            ctx = self._contexts.get(ordinal)
            if ctx is None:
                p = self.ffi.new("CUcontext*")
                self.check(f"cuDevicePrimaryCtxRetain({ordinal})",
                           self.rt.cuDevicePrimaryCtxRetain(p, self._device(ordinal)))
                ctx = self._contexts[ordinal] = p[0]
            self.check("cuCtxSetCurrent", self.rt.cuCtxSetCurrent(ctx))
            self.thread.ordinal = ordinal

    def dependent_launch_function(self, arch: str):
        # compute capability 9.0 on (sm_90a, sm_100, ...), a driver with cuLaunchKernelEx, and not
        # switched off (TENSORLITE_DEPENDENT_LAUNCH=0, to compare)
        if _sm_number(arch) < 90 or os.environ.get("TENSORLITE_DEPENDENT_LAUNCH", "1") == "0":
            return None
        try:
            launch_ex = self.rt.cuLaunchKernelEx
        except AttributeError:
            return None
        ffi = self.ffi

        def launch(func, gx, gy, gz, bx, by, bz, shared_mem, stream, params):
            attr = ffi.new("CUlaunchAttribute*")
            attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            config = ffi.new("CUlaunchConfig*", {
                "gridDimX": gx, "gridDimY": gy, "gridDimZ": gz, "blockDimX": bx, "blockDimY": by,
                "blockDimZ": bz, "sharedMemBytes": shared_mem, "hStream": stream, "attrs": attr, "numAttrs": 1})
            return launch_ex(config, func, params, ffi.NULL)
        return launch

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
        cast = self.ffi.cast  # cuBLAS takes void*, not CUdeviceptr
        err = self.blaslib.cublasGemmStridedBatchedEx(
            handle, int(trans_a), int(trans_b), m, n, k, alpha,  # CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
            cast("void*", a), dt, lda, stride_a, cast("void*", b), dt, ldb, stride_b, beta,
            cast("void*", c), dt, ldc, stride_c, batch, compute, _GEMM_DEFAULT)
        self._blas_check("cublasGemmStridedBatchedEx", err)

    # ---- cuBLASLt: GEMMs with a bias epilogue ---------------------------------------
    @property
    def ltlib(self):
        """libcublasLt from cuBLAS's own directory (the two ship together), or False."""
        if self._lt is None:
            self.blaslib  # noqa: B018 (loads cuBLAS: its directory, blas_path, is searched first)
            try:
                self._lt = dlopen_first(self.ffi, "libcublasLt (cuBLASLt)",
                                        ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"),
                                        [os.path.dirname(self.blas_path)] + self._dirs())[0]
            except BackendUnavailable:
                self._lt = False
        return self._lt

    @ltlib.setter
    def ltlib(self, lib):
        """Use `lib` (a library object, or False for none) instead of loading libcublasLt."""
        self._lt = lib

    def has_gemm_epilogues(self) -> bool:
        return bool(self.ltlib)

    def blas_gemm_epilogue(self, handle, stream, dtype_short, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                           beta, c, ldc, bias, epilogue, workspace, workspace_bytes) -> bool:
        """One column-major GEMM D = C = alpha op(A) op(B) through cuBLASLt with `epilogue`
        (LT_EPILOGUES: "bias" adds bias[m] to every column; "bgradb" writes the sums of
        op(B) over k, one per column of D, to bias[n]). False, with nothing enqueued, where
        cuBLASLt or an algorithm for the case is missing or a pointer is less aligned than
        the algorithms assume: the caller then runs the unfused path. The cuBLAS handle
        serves as the cuBLASLt handle (cuBLAS documents the cast), with cuBLAS's workspace."""
        lt = self.ltlib
        if not lt or any(p % _LT_ALIGN for p in (a, b, c, bias)):
            return False
        key = (dtype_short, trans_a, trans_b, m, n, k, lda, ldb, ldc, epilogue)
        plan = self._lt_plans.get((get_ident(), key), False)
        if plan is False:
            plan = self._lt_plans[get_ident(), key] = self._lt_plan(lt, handle, key, bias, workspace_bytes)
        if plan is None:
            return False
        desc, la, lb, lc, algo, _ = plan
        ffi = self.ffi
        ptr = ffi.new("void**", ffi.cast("void*", bias))
        self._blas_check("cublasLtMatmulDescSetAttribute",
                         lt.cublasLtMatmulDescSetAttribute(desc, _LT_BIAS_POINTER, ptr, ffi.sizeof("void*")))
        vp = lambda p: ffi.cast("void*", p)  # noqa: E731
        self._blas_check("cublasLtMatmul", lt.cublasLtMatmul(
            ffi.cast("cublasLtHandle_t", handle), desc, alpha, vp(a), la, vp(b), lb, beta, vp(c), lc, vp(c), lc,
            algo, vp(workspace), workspace_bytes, stream))
        return True

    def _lt_plan(self, lt, handle, key, bias, workspace_bytes):
        """Descriptors and the heuristic's first algorithm for one GEMM shape (kept for the
        life of the platform: a model has a few dozen shapes), or None without one."""
        dtype_short, trans_a, trans_b, m, n, k, lda, ldb, ldc, epilogue = key
        ffi, dt = self.ffi, _CUDA_TYPES[dtype_short]
        compute, scale = (_COMPUTE_64F, 1) if dtype_short == "f64" else (_COMPUTE_32F, 0)  # CUDA_R_64F / _32F
        desc = ffi.new("cublasLtMatmulDesc_t*")
        self._blas_check("cublasLtMatmulDescCreate", lt.cublasLtMatmulDescCreate(desc, compute, scale))
        desc = desc[0]
        for attr, ctype, value in ((_LT_TRANSA, "int32_t", int(trans_a)), (_LT_TRANSB, "int32_t", int(trans_b)),
                                   (_LT_EPILOGUE, "uint32_t", LT_EPILOGUES[epilogue]),
                                   (_LT_BIAS_POINTER, "void*", ffi.cast("void*", bias))):
            self._blas_check("cublasLtMatmulDescSetAttribute", lt.cublasLtMatmulDescSetAttribute(
                desc, attr, ffi.new(ctype + "*", value), ffi.sizeof(ctype)))
        layouts = []
        for rows, cols, ld in ((k if trans_a else m, m if trans_a else k, lda),
                               (n if trans_b else k, k if trans_b else n, ldb), (m, n, ldc)):
            lay = ffi.new("cublasLtMatrixLayout_t*")
            self._blas_check("cublasLtMatrixLayoutCreate", lt.cublasLtMatrixLayoutCreate(lay, dt, rows, cols, ld))
            layouts.append(lay[0])
        pref = ffi.new("cublasLtMatmulPreference_t*")
        self._blas_check("cublasLtMatmulPreferenceCreate", lt.cublasLtMatmulPreferenceCreate(pref))
        ws = ffi.new("uint64_t*", workspace_bytes)
        self._blas_check("cublasLtMatmulPreferenceSetAttribute", lt.cublasLtMatmulPreferenceSetAttribute(
            pref[0], _LT_PREF_MAX_WORKSPACE_BYTES, ws, 8))
        result, count = ffi.new("cublasLtMatmulHeuristicResult_t[1]"), ffi.new("int*")
        err = lt.cublasLtMatmulAlgoGetHeuristic(ffi.cast("cublasLtHandle_t", handle), desc, *layouts, layouts[2],
                                                pref[0], 1, result, count)
        lt.cublasLtMatmulPreferenceDestroy(pref[0])
        if err or count[0] < 1 or result[0].state:
            return None  # e.g. CUBLAS_STATUS_NOT_SUPPORTED for this epilogue / type / layout
        # the algorithm is read in place: `result` stays alive with the plan
        return desc, layouts[0], layouts[1], layouts[2], ffi.addressof(result[0], "algo"), result

    # ---- DNN library (cuDNN, loaded on first use; see dnn.py) ---------------------
    def dnn_lib(self):
        if getattr(self, "_dnn", None) is None:
            self._dnn = CudnnLib(self)
        return self._dnn


# ---- cuDNN (legacy API) ---------------------------------------------------------------
# Signatures and enum values after cuDNN 9's cudnn_graph.h, cudnn_ops.h and cudnn_cnn.h
# (the legacy API, deprecated but exported by libcudnn.so.9, which loads its
# sub-libraries itself); cuDNN 8 exports the same functions. Enums are passed as int.
CUDNN_CDEFS = """
typedef int cudnnStatus_t;
typedef struct cudnnContext* cudnnHandle_t;
typedef struct cudnnTensorStruct* cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct* cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct* cudnnConvolutionDescriptor_t;
typedef struct cudnnPoolingStruct* cudnnPoolingDescriptor_t;
typedef struct {
    int algo; cudnnStatus_t status; float time; size_t memory; int determinism; int mathType; int reserved[3];
} cudnnConvolutionFwdAlgoPerf_t;
typedef struct {
    int algo; cudnnStatus_t status; float time; size_t memory; int determinism; int mathType; int reserved[3];
} cudnnConvolutionBwdDataAlgoPerf_t;
size_t cudnnGetVersion(void);
const char* cudnnGetErrorString(cudnnStatus_t status);
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, void* streamId);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* tensorDesc);
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc, int dataType, int nbDims,
                                         const int dimA[], const int strideA[]);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* filterDesc);
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc, int dataType, int format,
                                         int nbDims, const int filterDimA[]);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* convDesc);
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc, int arrayLength,
                                              const int padA[], const int filterStrideA[], const int dilationA[],
                                              int mode, int computeType);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, int mathType);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t* perfResults);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, int algo, size_t* sizeInBytes);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
    const void* x, const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    int algo, void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
    const cudnnTensorDescriptor_t yDesc, void* y);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
    const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc,
    const int requestedAlgoCount, int* returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t* perfResults);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle,
    const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, int algo,
    size_t* sizeInBytes);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, int algo, void* workSpace, size_t workSpaceSizeInBytes,
    const void* beta, const cudnnTensorDescriptor_t dxDesc, void* dx);
cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* poolingDesc);
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc, int mode, int maxpoolingNanOpt,
    int windowHeight, int windowWidth, int verticalPadding, int horizontalPadding, int verticalStride,
    int horizontalStride);
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc);
cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
    const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x, const void* beta,
    const cudnnTensorDescriptor_t yDesc, void* y);
cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
    const cudnnTensorDescriptor_t xDesc, int mode);
cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, int mode, const void* alpha,
    const void* beta, const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    const void* estimatedMean, const void* estimatedVariance, double epsilon);
cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle, int mode, const void* alpha,
    const void* beta, const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    double exponentialAverageFactor, void* resultRunningMean, void* resultRunningVariance, double epsilon,
    void* resultSaveMean, void* resultSaveInvVariance);
"""

_CUDNN_DT = {"f32": 0, "f64": 1, "f16": 2, "bf16": 9}          # cudnnDataType_t
_CUDNN_CROSS_CORRELATION = 1                                   # cudnnConvolutionMode_t
_CUDNN_TENSOR_NCHW = 0                                         # cudnnTensorFormat_t
_CUDNN_TENSOR_OP_MATH, _CUDNN_FMA_MATH = 1, 3                  # cudnnMathType_t (1, 2 use tensor cores)
_CUDNN_POOL = {"max": 0, "avg_include": 1, "avg_exclude": 2}   # cudnnPoolingMode_t
_CUDNN_PROPAGATE_NAN = 1
_CUDNN_BATCHNORM_SPATIAL = 1
_CUDNN_ALGO_COUNT = 16   # more than CUDNN_CONVOLUTION_FWD_ALGO_COUNT (8) / BWD_DATA (6)


def _preload_globally(paths):
    """Load these libraries globally, in order, so that a library that dlopens them by
    soname finds them although their directory (a pip wheel's) is outside the loader path.
    One that fails to load is left to the library that needs it to report."""
    import ctypes
    for p in paths:
        try:
            ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


def _preload_cudnn_sublibraries(path):
    """cuDNN 9's libcudnn.so.9 dlopens its sub-libraries by soname: load the ones next to it
    first, in dependency order (_preload_globally)."""
    d = os.path.dirname(path)
    if not d:
        return
    found = []
    for name in ("libcudnn_graph", "libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled",
                 "libcudnn_heuristic", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv"):
        found += [p for p in (os.path.join(d, f"{name}.so.{v}") for v in (9, 8)) if os.path.exists(p)][:1]
    _preload_globally(found)


class CudnnLib(DnnLib):
    """cuDNN behind backends.rocm.dnn.DnnLib's interface (see dnn.py for the contract)."""
    name = "cuDNN"
    DTYPES = ("f32", "f64", "f16", "bf16")
    BN_DTYPES = ("f32", "f64", "f16", "bf16")
    HAS_CONV_BWD_DATA = True

    def __init__(self, platform):
        super().__init__(platform)
        self.ffi = None
        self._error = None
        self._fma = {}   # conv descriptor address -> FMA-only math (f32/f64)

    def load(self):
        if self.lib is not None:
            return
        if self._error is not None:
            raise BackendUnavailable(self._error)
        ffi = cffi.FFI()
        ffi.cdef(CUDNN_CDEFS)
        try:
            lib, path = dlopen_first(ffi, "libcudnn (cuDNN)", ("libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"),
                                     self.platform._dirs())
            _preload_cudnn_sublibraries(path)
            # creating a handle and a conv descriptor loads the ops and cnn sub-libraries
            # (cuDNN 9 opens them lazily): a broken install shows up here, not mid-model
            h = ffi.new("cudnnHandle_t*")
            self._check_with(lib, ffi, "cudnnCreate", lib.cudnnCreate(h))
            cd = ffi.new("cudnnConvolutionDescriptor_t*")
            self._check_with(lib, ffi, "cudnnCreateConvolutionDescriptor", lib.cudnnCreateConvolutionDescriptor(cd))
            lib.cudnnDestroyConvolutionDescriptor(cd[0])
            lib.cudnnDestroy(h[0])
        except (BackendUnavailable, BackendError, AttributeError, OSError) as e:
            self._error = f"cuDNN unusable: {e}"
            raise BackendUnavailable(self._error) from None
        self.lib, self.ffi, self.path = lib, ffi, path

    def version(self) -> str:
        v = int(self.lib.cudnnGetVersion())          # 9.x: major*10000 + minor*100 + patch
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 9000 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"

    def features(self):
        return {"conv2d": True, "conv_transpose2d": True, "pool2d": True, "batch_norm": True}

    # ---- checked calls ----------------------------------------------------------
    @staticmethod
    def _check_with(lib, ffi, call, code):
        if code:
            name = ffi.string(lib.cudnnGetErrorString(code)).decode()
            # 2xxx BAD_PARAM and 3xxx NOT_SUPPORTED: the library rejects the problem
            raise DnnError(f"{call} failed: {name} ({int(code)})", unsupported=2000 <= int(code) < 4000)

    def _check(self, call, code):
        self._check_with(self.lib, self.ffi, call, code)

    def _new(self, kind, create, destroy):
        p = self.ffi.new(f"{kind}*")
        self._check(create, getattr(self.lib, create)(p))
        return self.ffi.gc(p[0], getattr(self.lib, destroy))

    def _vp(self, addr):
        return self.ffi.cast("void*", addr)

    def _scalars(self, dt):
        kind = "double*" if dt == "f64" else "float*"
        return self.ffi.new(kind, 1.0), self.ffi.new(kind, 0.0)

    # ---- descriptors ------------------------------------------------------------
    def create(self, stream_addr):
        h = self.ffi.new("cudnnHandle_t*")
        self._check("cudnnCreate", self.lib.cudnnCreate(h))
        self._check("cudnnSetStream", self.lib.cudnnSetStream(h[0], self._vp(stream_addr)))
        return h[0]   # lives as long as the device (one per device)

    def tensor(self, dt, dims, strides):
        d = self._new("cudnnTensorDescriptor_t", "cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor")
        self._check("cudnnSetTensorNdDescriptor", self.lib.cudnnSetTensorNdDescriptor(
            d, _CUDNN_DT[dt], len(dims), self.ffi.new("int[]", list(dims)), self.ffi.new("int[]", list(strides))))
        return d

    def filter(self, dt, dims):
        d = self._new("cudnnFilterDescriptor_t", "cudnnCreateFilterDescriptor", "cudnnDestroyFilterDescriptor")
        self._check("cudnnSetFilterNdDescriptor", self.lib.cudnnSetFilterNdDescriptor(
            d, _CUDNN_DT[dt], _CUDNN_TENSOR_NCHW, len(dims), self.ffi.new("int[]", list(dims))))
        return d

    def conv(self, dt, pad, stride, dilation, groups):
        d = self._new("cudnnConvolutionDescriptor_t", "cudnnCreateConvolutionDescriptor",
                      "cudnnDestroyConvolutionDescriptor")
        ia = lambda v: self.ffi.new("int[]", list(v))  # noqa: E731
        compute = _CUDNN_DT["f64"] if dt == "f64" else _CUDNN_DT["f32"]   # f16/bf16 accumulate in f32
        self._check("cudnnSetConvolutionNdDescriptor", self.lib.cudnnSetConvolutionNdDescriptor(
            d, len(pad), ia(pad), ia(stride), ia(dilation), _CUDNN_CROSS_CORRELATION, compute))
        self._check("cudnnSetConvolutionGroupCount", self.lib.cudnnSetConvolutionGroupCount(d, int(groups)))
        # f32/f64: FMA only, no TF32, so results match the cpu reference at f32 tolerance
        math = _CUDNN_TENSOR_OP_MATH if dt in ("f16", "bf16") else _CUDNN_FMA_MATH
        self._check("cudnnSetConvolutionMathType", self.lib.cudnnSetConvolutionMathType(d, math))
        self._fma[int(self.ffi.cast("uintptr_t", d))] = math == _CUDNN_FMA_MATH
        return d

    def _pick(self, call, perf, n, cd, ws_size, limit):
        """The first (fastest by heuristic) algorithm that is usable, keeps the descriptor's
        math type class and fits the workspace limit: (algo, workspace bytes)."""
        fma = self._math_is_fma(cd)
        for i in range(n):
            p = perf[i]
            if p.status != 0 or (fma and p.mathType in (1, 2)):
                continue
            size = ws_size(p.algo)
            if size <= limit:
                if not fma:
                    self._check("cudnnSetConvolutionMathType", self.lib.cudnnSetConvolutionMathType(cd, p.mathType))
                return int(p.algo), size
        raise DnnError(f"{call}: no usable algorithm among {n} (workspace limit {limit} bytes)", unsupported=True)

    def _math_is_fma(self, cd):
        return self._fma.get(int(self.ffi.cast("uintptr_t", cd)), True)

    def conv_fwd_algo(self, handle, xd, wd, cd, yd, ptrs, alloc, limit):
        perf = self.ffi.new("cudnnConvolutionFwdAlgoPerf_t[]", _CUDNN_ALGO_COUNT)
        n = self.ffi.new("int*")
        self._check("cudnnGetConvolutionForwardAlgorithm_v7", self.lib.cudnnGetConvolutionForwardAlgorithm_v7(
            handle, xd, wd, cd, yd, _CUDNN_ALGO_COUNT, n, perf))
        size = self.ffi.new("size_t*")

        def ws(algo):
            self._check("cudnnGetConvolutionForwardWorkspaceSize",
                        self.lib.cudnnGetConvolutionForwardWorkspaceSize(handle, xd, wd, cd, yd, algo, size))
            return int(size[0])
        return self._pick("cudnnGetConvolutionForwardAlgorithm_v7", perf, n[0], cd, ws, limit)

    def conv_fwd(self, handle, dt, xd, x, wd, w, cd, algo, ws, ws_bytes, yd, y):
        alpha, beta = self._scalars(dt)
        self._check("cudnnConvolutionForward", self.lib.cudnnConvolutionForward(
            handle, alpha, xd, self._vp(x), wd, self._vp(w), cd, algo, self._vp(ws), ws_bytes, beta, yd, self._vp(y)))

    def conv_bwd_data_algo(self, handle, wd, dyd, cd, dxd, ptrs, alloc, limit):
        perf = self.ffi.new("cudnnConvolutionBwdDataAlgoPerf_t[]", _CUDNN_ALGO_COUNT)
        n = self.ffi.new("int*")
        self._check("cudnnGetConvolutionBackwardDataAlgorithm_v7",
                    self.lib.cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, wd, dyd, cd, dxd,
                                                                         _CUDNN_ALGO_COUNT, n, perf))
        size = self.ffi.new("size_t*")

        def ws(algo):
            self._check("cudnnGetConvolutionBackwardDataWorkspaceSize",
                        self.lib.cudnnGetConvolutionBackwardDataWorkspaceSize(handle, wd, dyd, cd, dxd, algo, size))
            return int(size[0])
        return self._pick("cudnnGetConvolutionBackwardDataAlgorithm_v7", perf, n[0], cd, ws, limit)

    def conv_bwd_data(self, handle, dt, wd, w, dyd, dy, cd, algo, ws, ws_bytes, dxd, dx):
        alpha, beta = self._scalars(dt)
        self._check("cudnnConvolutionBackwardData", self.lib.cudnnConvolutionBackwardData(
            handle, alpha, wd, self._vp(w), dyd, self._vp(dy), cd, algo, self._vp(ws), ws_bytes, beta, dxd,
            self._vp(dx)))

    def pool(self, mode, kernel, pad, stride):
        d = self._new("cudnnPoolingDescriptor_t", "cudnnCreatePoolingDescriptor", "cudnnDestroyPoolingDescriptor")
        self._check("cudnnSetPooling2dDescriptor", self.lib.cudnnSetPooling2dDescriptor(
            d, _CUDNN_POOL[mode], _CUDNN_PROPAGATE_NAN, kernel[0], kernel[1], pad[0], pad[1], stride[0], stride[1]))
        return d

    def pool_fwd(self, handle, dt, pd, xd, x, yd, y):
        alpha, beta = self._scalars(dt)
        self._check("cudnnPoolingForward", self.lib.cudnnPoolingForward(
            handle, pd, alpha, xd, self._vp(x), beta, yd, self._vp(y)))

    def bn_param(self, xd):
        d = self._new("cudnnTensorDescriptor_t", "cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor")
        self._check("cudnnDeriveBNTensorDescriptor", self.lib.cudnnDeriveBNTensorDescriptor(
            d, xd, _CUDNN_BATCHNORM_SPATIAL))
        return d

    def bn_fwd_inference(self, handle, dt, xd, x, yd, y, pd, scale, bias, mean, var, eps):
        alpha, beta = self._scalars(dt)
        vp = self._vp
        self._check("cudnnBatchNormalizationForwardInference", self.lib.cudnnBatchNormalizationForwardInference(
            handle, _CUDNN_BATCHNORM_SPATIAL, alpha, beta, xd, vp(x), yd, vp(y), pd, vp(scale), vp(bias),
            vp(mean), vp(var), float(eps)))

    def bn_fwd_training(self, handle, dt, xd, x, yd, y, pd, scale, bias, factor, run_mean, run_var, eps,
                        save_mean, save_invstd):
        alpha, beta = self._scalars(dt)
        vp = self._vp
        self._check("cudnnBatchNormalizationForwardTraining", self.lib.cudnnBatchNormalizationForwardTraining(
            handle, _CUDNN_BATCHNORM_SPATIAL, alpha, beta, xd, vp(x), yd, vp(y), pd, vp(scale), vp(bias),
            float(factor), vp(run_mean), vp(run_var), float(eps), vp(save_mean), vp(save_invstd)))
