"""The `rocm` platform: HIP runtime (libamdhip64), hiprtc and rocBLAS through cffi's ABI mode.

The cdefs follow /usr/include/hip (HIP 5.2) and the upstream rocBLAS headers
(rocblas-types.h, rocblas-functions.h, rocblas-auxiliary.h). RUNTIME_CDEFS and
HIPRTC_CDEFS are compiled against the real headers in cffi's API mode by
tests/test_gpu_runtime.py to catch signature drift; rocBLAS headers are not packaged
on Debian, so ROCBLAS_CDEFS stay separate and small.

`hipGetDeviceProperties` (the plain symbol) fills the R0000 layout below in every
HIP release: ROCm 6 only macro-maps the *header* name onto hipGetDevicePropertiesR0600,
the library keeps the old-layout export. We still hand it a generously sized buffer.
"""
from __future__ import annotations

from tensorlite.errors import BackendError, BackendUnavailable

from . import PlatformBase, dlopen_first, env_lib_dirs

RUNTIME_CDEFS = """
typedef enum hipError_t {
    hipSuccess = 0,
    hipErrorOutOfMemory = 2,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorNotReady = 600
} hipError_t;
typedef int hipDevice_t;
typedef void* hipDeviceptr_t;
typedef struct ihipStream_t* hipStream_t;
typedef struct ihipModule_t* hipModule_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;
typedef struct ihipEvent_t* hipEvent_t;

typedef struct {
    unsigned hasGlobalInt32Atomics : 1;
    unsigned hasGlobalFloatAtomicExch : 1;
    unsigned hasSharedInt32Atomics : 1;
    unsigned hasSharedFloatAtomicExch : 1;
    unsigned hasFloatAtomicAdd : 1;
    unsigned hasGlobalInt64Atomics : 1;
    unsigned hasSharedInt64Atomics : 1;
    unsigned hasDoubles : 1;
    unsigned hasWarpVote : 1;
    unsigned hasWarpBallot : 1;
    unsigned hasWarpShuffle : 1;
    unsigned hasFunnelShift : 1;
    unsigned hasThreadFenceSystem : 1;
    unsigned hasSyncThreadsExt : 1;
    unsigned hasSurfaceFuncs : 1;
    unsigned has3dGrid : 1;
    unsigned hasDynamicParallelism : 1;
} hipDeviceArch_t;

typedef struct hipDeviceProp_t {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    int memoryClockRate;
    int memoryBusWidth;
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    int computeMode;
    int clockInstructionRate;
    hipDeviceArch_t arch;
    int concurrentKernels;
    int pciDomainID;
    int pciBusID;
    int pciDeviceID;
    size_t maxSharedMemoryPerMultiProcessor;
    int isMultiGpuBoard;
    int canMapHostMemory;
    int gcnArch;
    char gcnArchName[256];
    int integrated;
    int cooperativeLaunch;
    int cooperativeMultiDeviceLaunch;
    int maxTexture1DLinear;
    int maxTexture1D;
    int maxTexture2D[2];
    int maxTexture3D[3];
    unsigned int* hdpMemFlushCntl;
    unsigned int* hdpRegFlushCntl;
    size_t memPitch;
    size_t textureAlignment;
    size_t texturePitchAlignment;
    int kernelExecTimeoutEnabled;
    int ECCEnabled;
    int tccDriver;
    int cooperativeMultiDeviceUnmatchedFunc;
    int cooperativeMultiDeviceUnmatchedGridDim;
    int cooperativeMultiDeviceUnmatchedBlockDim;
    int cooperativeMultiDeviceUnmatchedSharedMem;
    int isLargeBar;
    int asicRevision;
    int managedMemory;
    int directManagedMemAccessFromHost;
    int concurrentManagedAccess;
    int pageableMemoryAccess;
    int pageableMemoryAccessUsesHostPageTables;
} hipDeviceProp_t;

const char* hipGetErrorName(hipError_t hip_error);
hipError_t hipInit(unsigned int flags);
hipError_t hipDriverGetVersion(int* driverVersion);
hipError_t hipRuntimeGetVersion(int* runtimeVersion);
hipError_t hipGetDeviceCount(int* count);
hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int deviceId);
hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device);
hipError_t hipSetDevice(int deviceId);
hipError_t hipDeviceSynchronize(void);
hipError_t hipMemGetInfo(size_t* free, size_t* total);
hipError_t hipMalloc(void** ptr, size_t size);
hipError_t hipFree(void* ptr);
hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t sizeBytes, hipStream_t stream);
hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream);
hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream);
hipError_t hipMemsetD8Async(hipDeviceptr_t dest, unsigned char value, size_t count, hipStream_t stream);
hipError_t hipStreamCreate(hipStream_t* stream);
hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags);
hipError_t hipStreamDestroy(hipStream_t stream);
hipError_t hipStreamSynchronize(hipStream_t stream);
hipError_t hipEventCreate(hipEvent_t* event);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop);
hipError_t hipEventDestroy(hipEvent_t event);
hipError_t hipModuleLoadData(hipModule_t* module, const void* image);
hipError_t hipModuleUnload(hipModule_t module);
hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname);
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                 unsigned int gridDimZ, unsigned int blockDimX,
                                 unsigned int blockDimY, unsigned int blockDimZ,
                                 unsigned int sharedMemBytes, hipStream_t stream,
                                 void** kernelParams, void** extra);
"""

HIPRTC_CDEFS = """
typedef enum hiprtcResult {
    HIPRTC_SUCCESS = 0,
    HIPRTC_ERROR_COMPILATION = 6
} hiprtcResult;
typedef struct _hiprtcProgram* hiprtcProgram;
const char* hiprtcGetErrorString(hiprtcResult result);
hiprtcResult hiprtcVersion(int* major, int* minor);
hiprtcResult hiprtcCreateProgram(hiprtcProgram* prog, const char* src, const char* name,
                                 int numHeaders, const char** headers, const char** includeNames);
hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int numOptions, const char** options);
hiprtcResult hiprtcDestroyProgram(hiprtcProgram* prog);
hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t* logSizeRet);
hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char* log);
hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t* codeSizeRet);
hiprtcResult hiprtcGetCode(hiprtcProgram prog, char* code);
"""

# rocblas-types.h: rocblas_int is int32_t (LP64 build), rocblas_stride is int64_t.
ROCBLAS_CDEFS = """
typedef struct _rocblas_handle* rocblas_handle;
typedef int32_t rocblas_int;
typedef int64_t rocblas_stride;
typedef enum rocblas_operation_ {
    rocblas_operation_none = 111,
    rocblas_operation_transpose = 112,
    rocblas_operation_conjugate_transpose = 113
} rocblas_operation;
typedef enum rocblas_datatype_ {
    rocblas_datatype_f16_r = 150,
    rocblas_datatype_f32_r = 151,
    rocblas_datatype_f64_r = 152,
    rocblas_datatype_bf16_r = 168,
    rocblas_datatype_invalid = 255
} rocblas_datatype;
typedef enum rocblas_status_ {
    rocblas_status_success = 0,
    rocblas_status_memory_error = 5
} rocblas_status;
typedef enum rocblas_gemm_algo_ {
    rocblas_gemm_algo_standard = 0,
    rocblas_gemm_algo_solution_index = 1
} rocblas_gemm_algo;
rocblas_status rocblas_create_handle(rocblas_handle* handle);
rocblas_status rocblas_destroy_handle(rocblas_handle handle);
rocblas_status rocblas_set_stream(rocblas_handle handle, hipStream_t stream);
const char* rocblas_status_to_string(rocblas_status status);
rocblas_status rocblas_gemm_strided_batched_ex(rocblas_handle handle,
    rocblas_operation trans_a, rocblas_operation trans_b,
    rocblas_int m, rocblas_int n, rocblas_int k, const void* alpha,
    const void* a, rocblas_datatype a_type, rocblas_int lda, rocblas_stride stride_a,
    const void* b, rocblas_datatype b_type, rocblas_int ldb, rocblas_stride stride_b,
    const void* beta,
    const void* c, rocblas_datatype c_type, rocblas_int ldc, rocblas_stride stride_c,
    void* d, rocblas_datatype d_type, rocblas_int ldd, rocblas_stride stride_d,
    rocblas_int batch_count, rocblas_datatype compute_type, rocblas_gemm_algo algo,
    int32_t solution_index, uint32_t flags);
"""

_ROCM_DIRS = ("ROCM_PATH", "HIP_PATH")
_ROCM_DEFAULTS = ("/opt/rocm",)
_ROCBLAS_TYPES = {"f32": 151, "f64": 152, "f16": 150, "bf16": 168}   # rocblas_datatype
_OP = (111, 112)                                                    # none, transpose
_PROPS_BUFFER = 8192  # bytes handed to hipGetDeviceProperties (sizeof(R0000) is ~800)


def strip_arch_features(gcn_arch_name: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a' (what --offload-arch takes for a generic build)."""
    return gcn_arch_name.split(":", 1)[0].strip()


class HipPlatform(PlatformBase):
    name = "rocm"
    runtime_name = "libamdhip64"
    CALLS = dict(
        malloc="hipMalloc", free="hipFree", mem_get_info="hipMemGetInfo",
        htod="hipMemcpyHtoDAsync", dtoh="hipMemcpyDtoHAsync", dtod="hipMemcpyDtoDAsync",
        memset_d8="hipMemsetD8Async", stream_create="hipStreamCreateWithFlags",
        stream_synchronize="hipStreamSynchronize", event_create="hipEventCreate",
        event_record="hipEventRecord", event_synchronize="hipEventSynchronize",
        event_elapsed="hipEventElapsedTime", event_destroy="hipEventDestroy",
        module_load="hipModuleLoadData", module_get_function="hipModuleGetFunction",
        launch="hipModuleLaunchKernel")
    HANDLES = dict(devptr="void*", stream="hipStream_t", event="hipEvent_t", module="hipModule_t",
                   function="hipFunction_t")
    # hipStreamNonBlocking: our stream orders all of tensorlite's work by itself and need not
    # wait for the legacy NULL stream (which other libraries in the process may use)
    STREAM_FLAGS = (0x01,)
    OOM_CODE = 2  # hipErrorOutOfMemory
    RTC_PREFIX, RTC_CODE = "hiprtc", "Code"
    RTC_THREAD_SAFE = False  # HIP 5.2's hiprtc crashes when two programs compile at once

    def __init__(self):
        super().__init__(RUNTIME_CDEFS, HIPRTC_CDEFS, ROCBLAS_CDEFS)

    def devptr(self, ptr: int):
        return self.ffi.cast("void*", ptr)  # hipDeviceptr_t is void*

    # ---- library loading ------------------------------------------------------------
    def _dirs(self):
        return env_lib_dirs(_ROCM_DIRS, _ROCM_DEFAULTS)

    @property
    def rt(self):
        if self._rt is None:
            self._rt, self.runtime_path = dlopen_first(
                self.ffi, "libamdhip64 (HIP runtime)", ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"),
                self._dirs())
        return self._rt

    @property
    def rtc(self):
        """hiprtc: its own library since ROCm 6; inside libamdhip64 in ROCm 5."""
        if self._rtc is None:
            try:
                lib, path = dlopen_first(self.ffi, "libhiprtc", ("libhiprtc.so", "libhiprtc.so.6"), self._dirs())
                lib.hiprtcVersion  # a libhiprtc without the API would be useless
            except (BackendUnavailable, AttributeError):
                lib, path = self.rt, self.runtime_path
                try:
                    lib.hiprtcVersion
                except AttributeError:
                    raise BackendUnavailable(f"hiprtc not found: no libhiprtc, and {path} "
                                             "does not export hiprtcCreateProgram") from None
            self._rtc, self.rtc_path = lib, path
        return self._rtc

    @property
    def blaslib(self):
        if self._blas is None:
            self._blas, self.blas_path = dlopen_first(
                self.ffi, "librocblas (rocBLAS)", ("librocblas.so", "librocblas.so.4", "librocblas.so.3",
                                                     "librocblas.so.0"), self._dirs())
        return self._blas

    def error_name(self, code: int) -> str:
        try:
            return self.ffi.string(self.rt.hipGetErrorName(code)).decode()
        except Exception:
            return f"hipError {int(code)}"

    # ---- devices --------------------------------------------------------------------
    def init(self) -> int:
        """Number of devices; BackendUnavailable naming the library or the no-device error."""
        if self._device_count is not None:
            return self._device_count
        rt = self.rt
        init_err = rt.hipInit(0)  # without a GPU this says hipErrorInvalidDevice; the count says why
        count = self.ffi.new("int*")
        err = rt.hipGetDeviceCount(count)
        if err:
            raise BackendUnavailable(
                f"libamdhip64: hipGetDeviceCount returned {self.error_name(err)} ({int(err)})")
        if init_err:
            raise BackendUnavailable(f"libamdhip64: hipInit returned {self.error_name(init_err)} ({int(init_err)})")
        if count[0] <= 0:
            raise BackendUnavailable("libamdhip64: hipGetDeviceCount reports 0 devices")
        self._device_count = count[0]
        return self._device_count

    def device_properties(self, ordinal: int) -> dict:
        buf = self.ffi.new("char[]", max(_PROPS_BUFFER, self.ffi.sizeof("hipDeviceProp_t")))
        p = self.ffi.cast("hipDeviceProp_t*", buf)
        self.check(f"hipGetDeviceProperties(device={ordinal})", self.rt.hipGetDeviceProperties(p, ordinal))
        gcn = self.ffi.string(p.gcnArchName).decode(errors="replace")
        return {
            "name": self.ffi.string(p.name).decode(errors="replace"),
            "arch": strip_arch_features(gcn),
            "gcn_arch_name": gcn,
            "total_memory": int(p.totalGlobalMem),
            "warp_size": int(p.warpSize),
            "multiprocessor_count": int(p.multiProcessorCount),
            "max_threads_per_block": int(p.maxThreadsPerBlock),
            "max_shared_memory_per_block": int(p.sharedMemPerBlock),
            "l2_cache_size": int(p.l2CacheSize),
            "compute_capability": (int(p.major), int(p.minor)),
        }

    def activate(self, ordinal: int):
        if getattr(self._tls, "ordinal", None) != ordinal:
            self.check(f"hipSetDevice({ordinal})", self.rt.hipSetDevice(ordinal))
            self._tls.ordinal = ordinal

    def synchronize_device(self):
        self.check("hipDeviceSynchronize", self.rt.hipDeviceSynchronize())

    def rtc_options(self, arch: str):
        return [f"--offload-arch={arch}", "-O3", "-std=c++17"]

    # ---- rocBLAS --------------------------------------------------------------------
    def _blas_check(self, call, code):
        if code:
            name = self.ffi.string(self.blaslib.rocblas_status_to_string(code)).decode()
            raise BackendError(f"{call} failed: {name} ({int(code)})")

    def blas_create(self, stream, workspace_ptr: int = 0, workspace_bytes: int = 0):
        """rocBLAS manages its own workspace (BLAS_WORKSPACE = 0), so none is passed."""
        h = self.ffi.new("rocblas_handle*")
        self._blas_check("rocblas_create_handle", self.blaslib.rocblas_create_handle(h))
        self._blas_check("rocblas_set_stream", self.blaslib.rocblas_set_stream(h[0], stream))
        return h[0]

    def blas_gemm(self, handle, dtype_short, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                  b, ldb, stride_b, beta, c, ldc, stride_c, batch):
        """Column-major C = alpha op(A) op(B) + beta C (D = C in place); alpha/beta point at
        f64 for f64, else at f32 (the compute type of f32/f16/bf16)."""
        dt = _ROCBLAS_TYPES[dtype_short]
        compute = _ROCBLAS_TYPES["f64"] if dtype_short == "f64" else _ROCBLAS_TYPES["f32"]
        cptr = self.devptr(c)
        err = self.blaslib.rocblas_gemm_strided_batched_ex(
            handle, _OP[trans_a], _OP[trans_b], m, n, k, alpha,
            self.devptr(a), dt, lda, stride_a, self.devptr(b), dt, ldb, stride_b, beta,
            cptr, dt, ldc, stride_c, cptr, dt, ldc, stride_c,
            batch, compute, 0, 0, 0)  # rocblas_gemm_algo_standard, solution_index 0, no flags
        self._blas_check("rocblas_gemm_strided_batched_ex", err)
