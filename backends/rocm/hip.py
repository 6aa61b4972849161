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

import cffi

from tensorlite.errors import ArgumentError, BackendError, BackendUnavailable

from . import PlatformBase, dlopen_first, env_lib_dirs
from .dnn import DnnError, DnnLib

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
typedef enum hipFunction_attribute { HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0 } hipFunction_attribute;
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
hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags);
hipError_t hipEventQuery(hipEvent_t event);
hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop);
hipError_t hipEventDestroy(hipEvent_t event);
hipError_t hipModuleLoadData(hipModule_t* module, const void* image);
hipError_t hipModuleUnload(hipModule_t module);
hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname);
hipError_t hipFuncGetAttribute(int* value, hipFunction_attribute attrib, hipFunction_t hfunc);
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                 unsigned int gridDimZ, unsigned int blockDimX,
                                 unsigned int blockDimY, unsigned int blockDimZ,
                                 unsigned int sharedMemBytes, hipStream_t stream,
                                 void** kernelParams, void** extra);
typedef struct ihipGraph* hipGraph_t;
typedef struct hipGraphNode* hipGraphNode_t;
typedef struct hipGraphExec* hipGraphExec_t;
typedef enum hipStreamCaptureMode {
    hipStreamCaptureModeGlobal = 0,
    hipStreamCaptureModeThreadLocal,
    hipStreamCaptureModeRelaxed
} hipStreamCaptureMode;
typedef enum hipGraphExecUpdateResult {
    hipGraphExecUpdateSuccess = 0x0,
    hipGraphExecUpdateError = 0x1,
    hipGraphExecUpdateErrorTopologyChanged = 0x2,
    hipGraphExecUpdateErrorNodeTypeChanged = 0x3,
    hipGraphExecUpdateErrorFunctionChanged = 0x4,
    hipGraphExecUpdateErrorParametersChanged = 0x5,
    hipGraphExecUpdateErrorNotSupported = 0x6,
    hipGraphExecUpdateErrorUnsupportedFunctionChange = 0x7
} hipGraphExecUpdateResult;
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* pGraph);
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t* pGraphExec, hipGraph_t graph, unsigned long long flags);
hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream);
hipError_t hipGraphExecUpdate(hipGraphExec_t hGraphExec, hipGraph_t hGraph, hipGraphNode_t* hErrorNode_out,
                              hipGraphExecUpdateResult* updateResult_out);
hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec);
hipError_t hipGraphDestroy(hipGraph_t graph);
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


class AmdArchitectures:
    """What AMD's architectures offer the kernels, for every platform that runs AMD code
    objects (HipPlatform here, the emulated AMD platform).

    Names are LLVM's processors: gfx90a MI200 (CDNA2); gfx940/941 early MI300, gfx942
    MI300X/MI325X (CDNA3); gfx950 MI350X/MI355X (CDNA4); gfx1100 RX 7900 (RDNA3); gfx1151
    Ryzen AI Max "Strix Halo" (RDNA3.5); gfx1200/gfx1201 RX 9060/9070 (RDNA4)."""
    # CDNA2/3/4: v_mfma_f32_16x16x16{f16,bf16_1k} and 16x16x4f32 (matrix_cores_amd.h; gfx942's
    # MFMA are gfx940's, gfx950 adds shapes). RDNA3/3.5/4: v_wmma_f32_16x16x16_{f16,bf16} on wave32,
    # 16-bit operands only (matrix_cores_amd.h; gfx12's operand layout is not gfx11's).
    MFMA_ARCHS = ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
    WMMA_ARCHS = ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1200", "gfx1201")
    MMA_STAGES = 1   # matrix_cores_amd.h TL_MMA_STAGES: one K and one V buffer
    CODE_SUFFIX = ".hsaco"  # the disk cache's name for an AMD code object (shared by the emulated platform)

    def matrix_cores(self, arch: str):
        return "mma" if arch in self.MFMA_ARCHS else "wmma" if arch in self.WMMA_ARCHS else None

    @staticmethod
    def mma_lds_bytes(arch: str) -> int:
        """LDS a workgroup may allocate, which the matrix-core attention's tiles are sized from
        (matrix_cores_amd.h TL_MMA_LDS_KIB): 160 KiB on gfx950 (CDNA4), 64 KiB elsewhere."""
        return (160 if strip_arch_features(arch) == "gfx950" else 64) * 1024

    @staticmethod
    def wavefront_size(arch: str) -> int:
        """Lanes of a wavefront in HIP code for `arch`: 64 on GCN/CDNA (gfx9), 32 on RDNA
        (gfx10+, where HIP compiles wave32 unless told -mwavefrontsize64)."""
        return 64 if isa_version(arch) < 10000 else 32


def isa_version(arch: str) -> int:
    """gfx<major><minor><stepping> -> major * 1000 + minor * 100 + stepping, the number AMD's
    device libraries test (__oclc_ISA_version): gfx90a -> 9010, gfx942 -> 9402, gfx1201 -> 12001.
    Minor and stepping are one hex digit each."""
    name = strip_arch_features(arch)
    try:
        if not name.startswith("gfx") or len(name) < 6:
            raise ValueError
        return int(name[3:-2]) * 1000 + int(name[-2], 16) * 100 + int(name[-1], 16)
    except ValueError:
        raise ArgumentError(f"{arch!r} is not an AMD processor name (gfx<major><minor><stepping>, "
                            "e.g. gfx942)") from None


class HipPlatform(AmdArchitectures, PlatformBase):
    name = "rocm"
    runtime_name = "libamdhip64"
    CALLS = dict(
        malloc="hipMalloc", free="hipFree", mem_get_info="hipMemGetInfo",
        htod="hipMemcpyHtoDAsync", dtoh="hipMemcpyDtoHAsync", dtod="hipMemcpyDtoDAsync",
        memset_d8="hipMemsetD8Async", stream_create="hipStreamCreateWithFlags",
        stream_synchronize="hipStreamSynchronize", event_create="hipEventCreate",
        event_record="hipEventRecord", event_synchronize="hipEventSynchronize",
        event_elapsed="hipEventElapsedTime", event_destroy="hipEventDestroy",
        sync_event_create="hipEventCreateWithFlags", stream_wait_event="hipStreamWaitEvent",
        event_query="hipEventQuery",
        module_load="hipModuleLoadData", module_get_function="hipModuleGetFunction",
        func_get_attribute="hipFuncGetAttribute",
        launch="hipModuleLaunchKernel", capture_begin="hipStreamBeginCapture", capture_end="hipStreamEndCapture",
        graph_instantiate="hipGraphInstantiateWithFlags", graph_launch="hipGraphLaunch",
        graph_exec_destroy="hipGraphExecDestroy", graph_destroy="hipGraphDestroy")
    HANDLES = dict(devptr="void*", stream="hipStream_t", event="hipEvent_t", module="hipModule_t",
                   function="hipFunction_t", graph="hipGraph_t", graph_exec="hipGraphExec_t")
    # hipStreamNonBlocking: our stream orders all of tensorlite's work by itself and need not
    # wait for the legacy NULL stream (which other libraries in the process may use)
    STREAM_FLAGS = (0x01,)
    SYNC_EVENT_FLAGS = (0x2,)  # hipEventDisableTiming: events that only order streams
    OOM_CODE = 2  # hipErrorOutOfMemory
    RTC_PREFIX, RTC_CODE = "hiprtc", "Code"
    RTC_THREAD_SAFE = False  # HIP 5.2's hiprtc crashes when two programs compile at once

    def __init__(self, root: str = None):
        """`root`: a ROCm folder to load the libraries from, before anything else (the
        emulated AMD platform compiles gfx940/gfx1100 with the hiprtc of another ROCm)."""
        super().__init__(RUNTIME_CDEFS, HIPRTC_CDEFS, ROCBLAS_CDEFS)
        self.root = root

    def devptr(self, ptr: int):
        return self.ffi.cast("void*", ptr)  # hipDeviceptr_t is void*

    # ---- library loading ------------------------------------------------------------
    def _dirs(self):
        if self.root:
            return env_lib_dirs((), (self.root,))
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
                lib.hiprtcVersion  # noqa: B018 - a libhiprtc without the API would be useless
            except (BackendUnavailable, AttributeError):
                lib, path = self.rt, self.runtime_path
                try:
                    lib.hiprtcVersion  # noqa: B018 (the runtime's own hiprtc, if it has one)
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

    def graph_exec_update(self, graph_exec, graph) -> bool:
        node, result = self.ffi.new("hipGraphNode_t*"), self.ffi.new("hipGraphExecUpdateResult*")
        err = self.rt.hipGraphExecUpdate(graph_exec, graph, node, result)
        if err == 910:  # hipErrorGraphExecUpdateFailure: the graphs differ in more than parameters
            return False
        self.check("hipGraphExecUpdate", err)
        return True

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
        if self.thread.ordinal != ordinal:
            self.check(f"hipSetDevice({ordinal})", self.rt.hipSetDevice(ordinal))
            self.thread.ordinal = ordinal

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

    # ---- DNN library (MIOpen, loaded on first use; see dnn.py) --------------------
    def dnn_lib(self):
        if getattr(self, "_dnn", None) is None:
            self._dnn = MiopenLib(self)
        return self._dnn


# ---- MIOpen ---------------------------------------------------------------------------
# Signatures and enum values after ROCm/MIOpen include/miopen/miopen.h (MIOpen 3.x);
# enums are passed as int. miopenConvAlgoPerf_t's leading member is a union of three
# int-sized algorithm enums, declared here as its first member (same layout).
# miopenLayerNormForward, miopenT5LayerNormForward (RMSNorm) and miopenRoPEForward are
# MIOPEN_BETA_API additions that not every build exports: each is probed (MiopenLib.provides)
# and used only when present. Their semantics were read in ROCm/MIOpen's sources, not run on
# AMD hardware here (checked against them and by tests/test_gpu_dnn.py's fake library only):
# - miopenNormMode_t (include/miopen/miopen.h; the T5 values in its newer revisions, e.g.
#   ROCm/rocm-libraries projects/miopen/include/miopen/miopen.h): MIOPEN_ELEMENTWISE_AFFINE=0
#   (weight 1, bias 0: neither is read), MIOPEN_WEIGHT_BIAS=1, MIOPEN_ELEMENTWISE_AFFINE_T5=4,
#   MIOPEN_WEIGHT_BIAS_T5=5. The three signatures below match src/{layernorm,t5layernorm,rope}_api.cpp.
# - LayerNorm (src/layernorm_api.cpp, src/solver/layernorm/forward_layernorm*.cpp): every
#   descriptor is dereferenced (none may be NULL) and must be packed; dims from normalized_dim
#   on are normalised; weight/bias are x.dims[normalized_dim:], mean/rstd x.dims[:normalized_dim].
#   Its rank-2 composable-kernel solver reads gamma/beta whatever the mode, so dnn.py hands an
#   x without weight/bias over as (rows, 1, n).
# - T5LayerNorm (src/solver/layernorm/forward_t5layernorm.cpp, src/kernels/MIOpenT5LayerNorm.cpp):
#   y = x * rsqrt(mean(x^2) + eps) * weight over the last dim; rstd per row; all packed.
# - RoPE (src/kernels/MIOpenRoPE.cpp, src/solver/rope/forward_rope.cpp, test/gtest/rope.hpp):
#   all contiguous, x 4-d, cos/sin x.dims[1:] with one value per element, interleaved pairs:
#   y[2k] = x[2k] cos[2k] - x[2k+1] sin[2k], y[2k+1] = x[2k+1] cos[2k+1] + x[2k] sin[2k+1].
MIOPEN_CDEFS = """
typedef int miopenStatus_t;
typedef struct miopenHandle* miopenHandle_t;
typedef struct miopenTensorDescriptor* miopenTensorDescriptor_t;
typedef struct miopenConvolutionDescriptor* miopenConvolutionDescriptor_t;
typedef struct miopenPoolingDescriptor* miopenPoolingDescriptor_t;
typedef struct { int fwd_algo; float time; size_t memory; } miopenConvAlgoPerf_t;
const char* miopenGetErrorString(miopenStatus_t error);
miopenStatus_t miopenGetVersion(size_t* major, size_t* minor, size_t* patch);
miopenStatus_t miopenCreateWithStream(miopenHandle_t* handle, void* stream);
miopenStatus_t miopenDestroy(miopenHandle_t handle);
miopenStatus_t miopenCreateTensorDescriptor(miopenTensorDescriptor_t* tensorDesc);
miopenStatus_t miopenSetTensorDescriptor(miopenTensorDescriptor_t tensorDesc, int dataType, int nbDims,
                                         const int* dimsA, const int* stridesA);
miopenStatus_t miopenDestroyTensorDescriptor(miopenTensorDescriptor_t tensorDesc);
miopenStatus_t miopenCreateConvolutionDescriptor(miopenConvolutionDescriptor_t* convDesc);
miopenStatus_t miopenInitConvolutionNdDescriptor(miopenConvolutionDescriptor_t convDesc, int spatialDim,
                                                 const int* padA, const int* strideA, const int* dilationA,
                                                 int c_mode);
miopenStatus_t miopenSetConvolutionGroupCount(miopenConvolutionDescriptor_t convDesc, int groupCount);
miopenStatus_t miopenDestroyConvolutionDescriptor(miopenConvolutionDescriptor_t convDesc);
miopenStatus_t miopenConvolutionForwardGetWorkSpaceSize(miopenHandle_t handle, const miopenTensorDescriptor_t wDesc,
    const miopenTensorDescriptor_t xDesc, const miopenConvolutionDescriptor_t convDesc,
    const miopenTensorDescriptor_t yDesc, size_t* workSpaceSize);
miopenStatus_t miopenFindConvolutionForwardAlgorithm(miopenHandle_t handle, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t wDesc, const void* w,
    const miopenConvolutionDescriptor_t convDesc, const miopenTensorDescriptor_t yDesc, void* y,
    const int requestAlgoCount, int* returnedAlgoCount, miopenConvAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSize, bool exhaustiveSearch);
miopenStatus_t miopenConvolutionForward(miopenHandle_t handle, const void* alpha,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t wDesc, const void* w,
    const miopenConvolutionDescriptor_t convDesc, int algo, const void* beta,
    const miopenTensorDescriptor_t yDesc, void* y, void* workSpace, size_t workSpaceSize);
miopenStatus_t miopenCreatePoolingDescriptor(miopenPoolingDescriptor_t* poolDesc);
miopenStatus_t miopenSet2dPoolingDescriptor(miopenPoolingDescriptor_t poolDesc, int mode, int windowHeight,
    int windowWidth, int pad_h, int pad_w, int stride_h, int stride_w);
miopenStatus_t miopenDestroyPoolingDescriptor(miopenPoolingDescriptor_t poolDesc);
miopenStatus_t miopenPoolingForward(miopenHandle_t handle, const miopenPoolingDescriptor_t poolDesc,
    const void* alpha, const miopenTensorDescriptor_t xDesc, const void* x, const void* beta,
    const miopenTensorDescriptor_t yDesc, void* y, bool do_backward, void* workSpace, size_t workSpaceSize);
miopenStatus_t miopenDeriveBNTensorDescriptor(miopenTensorDescriptor_t derivedBnDesc,
    const miopenTensorDescriptor_t xDesc, int bn_mode);
miopenStatus_t miopenBatchNormalizationForwardInference(miopenHandle_t handle, int bn_mode, void* alpha,
    void* beta, const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc, void* bnScale, void* bnBias, void* estimatedMean,
    void* estimatedVariance, double epsilon);
miopenStatus_t miopenBatchNormalizationForwardTraining(miopenHandle_t handle, int bn_mode, void* alpha,
    void* beta, const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc, void* bnScale, void* bnBias, double expAvgFactor,
    void* resultRunningMean, void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance);
miopenStatus_t miopenLayerNormForward(miopenHandle_t handle, int mode, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t weightDesc, const void* weight,
    const miopenTensorDescriptor_t biasDesc, const void* bias, const float epsilon, const int32_t normalized_dim,
    const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t meanDesc, void* mean,
    const miopenTensorDescriptor_t rstdDesc, void* rstd);
miopenStatus_t miopenT5LayerNormForward(miopenHandle_t handle, int mode, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t weightDesc, const void* weight, const float epsilon,
    const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t rstdDesc, void* rstd);
miopenStatus_t miopenRoPEForward(miopenHandle_t handle, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t cosDesc, const void* cos, const miopenTensorDescriptor_t sinDesc,
    const void* sin, const miopenTensorDescriptor_t yDesc, void* y);
"""

_MIOPEN_DT = {"f16": 0, "f32": 1, "bf16": 5, "f64": 6}        # miopenDataType_t
_MIOPEN_CONVOLUTION = 0                                      # miopenConvolutionMode_t (cross-correlation)
_MIOPEN_POOL = {"max": 0, "avg_exclude": 1, "avg_include": 2}  # miopenPoolingMode_t
_MIOPEN_BN_SPATIAL = 1                                       # miopenBatchNormMode_t
_MIOPEN_UNSUPPORTED = (2, 3, 6)    # miopenStatusInvalidValue, BadParm, NotImplemented
_MIOPEN_PROBED = {"layer_norm": "miopenLayerNormForward", "rms_norm": "miopenT5LayerNormForward",
                  "rope_i": "miopenRoPEForward"}                # optional op -> its beta-API symbol
_MIOPEN_NORM_MODE = {"layer_norm": (0, 1), "rms_norm": (4, 5)}  # miopenNormMode_t (no weight, weight)
_MIOPEN_FIND_COUNT = 4


class MiopenLib(DnnLib):
    """MIOpen behind backends.rocm.dnn.DnnLib's interface (see dnn.py for the contract).
    Convolutions use find mode (the library times its candidates once per problem; the
    result is cached by Dnn). bf16/f64 are 'partially supported' upstream: left to the
    portable kernels."""
    name = "MIOpen"
    DTYPES = ("f32", "f16")
    BN_DTYPES = ("f32", "f16")
    OPTIONAL_OPS = tuple(_MIOPEN_PROBED)
    NORM_DTYPES = ("f32", "f16")

    def __init__(self, platform):
        super().__init__(platform)
        self.ffi = None
        self._error = None
        self._probed = {}   # symbol -> exported

    def load(self):
        if self.lib is not None:
            return
        if self._error is not None:
            raise BackendUnavailable(self._error)
        ffi = cffi.FFI()
        ffi.cdef(MIOPEN_CDEFS)
        try:
            lib, path = dlopen_first(ffi, "libMIOpen (MIOpen)", ("libMIOpen.so", "libMIOpen.so.1"),
                                     self.platform._dirs())
            lib.miopenCreateWithStream, lib.miopenFindConvolutionForwardAlgorithm  # noqa: B018 - the API we need
        except (BackendUnavailable, AttributeError) as e:
            self._error = f"MIOpen unusable: {e}"
            raise BackendUnavailable(self._error) from None
        self.lib, self.ffi, self.path = lib, ffi, path

    def version(self) -> str:
        v = [self.ffi.new("size_t*") for _ in range(3)]
        if self.lib.miopenGetVersion(*v):
            return "unknown"
        return ".".join(str(int(p[0])) for p in v)

    def features(self):
        """The ops this build runs (the optional ones: whether it exports their symbol)."""
        out = {"conv2d": True, "conv_transpose2d": False, "pool2d": True, "batch_norm": True}
        out.update((op, self.provides(op)) for op in _MIOPEN_PROBED)
        return out

    def provides(self, op):
        sym = _MIOPEN_PROBED.get(op)
        if sym is None or self.lib is None:
            return False
        found = self._probed.get(sym)
        if found is None:
            try:
                getattr(self.lib, sym)   # cffi: AttributeError when the build does not export it
                found = True
            except AttributeError:
                found = False
            self._probed[sym] = found
        return found

    def _check(self, call, code):
        if code:
            name = self.ffi.string(self.lib.miopenGetErrorString(code)).decode()
            raise DnnError(f"{call} failed: {name} ({int(code)})", unsupported=int(code) in _MIOPEN_UNSUPPORTED)

    def _new(self, kind, create, destroy):
        p = self.ffi.new(f"{kind}*")
        self._check(create, getattr(self.lib, create)(p))
        return self.ffi.gc(p[0], getattr(self.lib, destroy))

    def _vp(self, addr):
        return self.ffi.cast("void*", addr)

    def _scalars(self, dt):
        return self.ffi.new("float*", 1.0), self.ffi.new("float*", 0.0)   # MIOpen's alpha/beta are float

    def create(self, stream_addr):
        h = self.ffi.new("miopenHandle_t*")
        self._check("miopenCreateWithStream", self.lib.miopenCreateWithStream(h, self._vp(stream_addr)))
        return h[0]

    def tensor(self, dt, dims, strides):
        d = self._new("miopenTensorDescriptor_t", "miopenCreateTensorDescriptor", "miopenDestroyTensorDescriptor")
        self._check("miopenSetTensorDescriptor", self.lib.miopenSetTensorDescriptor(
            d, _MIOPEN_DT[dt], len(dims), self.ffi.new("int[]", list(dims)), self.ffi.new("int[]", list(strides))))
        return d

    def filter(self, dt, dims):
        strides, acc = [], 1
        for n in reversed(dims):
            strides.append(acc)
            acc *= n
        return self.tensor(dt, dims, tuple(reversed(strides)))

    def conv(self, dt, pad, stride, dilation, groups):
        d = self._new("miopenConvolutionDescriptor_t", "miopenCreateConvolutionDescriptor",
                      "miopenDestroyConvolutionDescriptor")
        ia = lambda v: self.ffi.new("int[]", list(v))  # noqa: E731
        self._check("miopenInitConvolutionNdDescriptor", self.lib.miopenInitConvolutionNdDescriptor(
            d, len(pad), ia(pad), ia(stride), ia(dilation), _MIOPEN_CONVOLUTION))
        self._check("miopenSetConvolutionGroupCount", self.lib.miopenSetConvolutionGroupCount(d, int(groups)))
        return d

    def conv_fwd_algo(self, handle, xd, wd, cd, yd, ptrs, alloc, limit):
        size = self.ffi.new("size_t*")
        self._check("miopenConvolutionForwardGetWorkSpaceSize",
                    self.lib.miopenConvolutionForwardGetWorkSpaceSize(handle, wd, xd, cd, yd, size))
        ws_bytes = min(int(size[0]), limit)
        ws, ws_ptr = alloc(ws_bytes)
        perf = self.ffi.new("miopenConvAlgoPerf_t[]", _MIOPEN_FIND_COUNT)
        n = self.ffi.new("int*")
        x, w, y = ptrs
        self._check("miopenFindConvolutionForwardAlgorithm", self.lib.miopenFindConvolutionForwardAlgorithm(
            handle, xd, self._vp(x), wd, self._vp(w), cd, yd, self._vp(y), _MIOPEN_FIND_COUNT, n, perf,
            self._vp(ws_ptr), ws_bytes, False))
        for i in range(n[0]):
            if perf[i].memory <= ws_bytes:
                return int(perf[i].fwd_algo), int(perf[i].memory)
        raise DnnError(f"miopenFindConvolutionForwardAlgorithm: no algorithm fits {ws_bytes} bytes of workspace",
                       unsupported=True)

    def conv_fwd(self, handle, dt, xd, x, wd, w, cd, algo, ws, ws_bytes, yd, y):
        alpha, beta = self._scalars(dt)
        self._check("miopenConvolutionForward", self.lib.miopenConvolutionForward(
            handle, alpha, xd, self._vp(x), wd, self._vp(w), cd, algo, beta, yd, self._vp(y), self._vp(ws), ws_bytes))

    def pool(self, mode, kernel, pad, stride):
        d = self._new("miopenPoolingDescriptor_t", "miopenCreatePoolingDescriptor", "miopenDestroyPoolingDescriptor")
        self._check("miopenSet2dPoolingDescriptor", self.lib.miopenSet2dPoolingDescriptor(
            d, _MIOPEN_POOL[mode], kernel[0], kernel[1], pad[0], pad[1], stride[0], stride[1]))
        return d

    def pool_fwd(self, handle, dt, pd, xd, x, yd, y):
        alpha, beta = self._scalars(dt)
        # do_backward=False: no index workspace is kept (the backward is the composite's)
        self._check("miopenPoolingForward", self.lib.miopenPoolingForward(
            handle, pd, alpha, xd, self._vp(x), beta, yd, self._vp(y), False, self.ffi.NULL, 0))

    def bn_param(self, xd):
        d = self._new("miopenTensorDescriptor_t", "miopenCreateTensorDescriptor", "miopenDestroyTensorDescriptor")
        self._check("miopenDeriveBNTensorDescriptor", self.lib.miopenDeriveBNTensorDescriptor(
            d, xd, _MIOPEN_BN_SPATIAL))
        return d

    def bn_fwd_inference(self, handle, dt, xd, x, yd, y, pd, scale, bias, mean, var, eps):
        alpha, beta = self._scalars(dt)
        vp = self._vp
        self._check("miopenBatchNormalizationForwardInference", self.lib.miopenBatchNormalizationForwardInference(
            handle, _MIOPEN_BN_SPATIAL, alpha, beta, xd, vp(x), yd, vp(y), pd, vp(scale), vp(bias), vp(mean),
            vp(var), float(eps)))

    def bn_fwd_training(self, handle, dt, xd, x, yd, y, pd, scale, bias, factor, run_mean, run_var, eps,
                        save_mean, save_invstd):
        alpha, beta = self._scalars(dt)
        vp = self._vp
        self._check("miopenBatchNormalizationForwardTraining", self.lib.miopenBatchNormalizationForwardTraining(
            handle, _MIOPEN_BN_SPATIAL, alpha, beta, xd, vp(x), yd, vp(y), pd, vp(scale), vp(bias), float(factor),
            vp(run_mean), vp(run_var), float(eps), vp(save_mean), vp(save_invstd)))

    # addresses of 0 (an absent weight/bias) go in as NULL: the no-weight modes never read them
    def layer_norm_forward(self, handle, affine, xd, x, wd, w, bd, b, eps, normalized_dim, yd, y, md, mean,
                           rd, rstd):
        vp = self._vp
        self._check("miopenLayerNormForward", self.lib.miopenLayerNormForward(
            handle, _MIOPEN_NORM_MODE["layer_norm"][bool(affine)], xd, vp(x), wd, vp(w), bd, vp(b), float(eps),
            int(normalized_dim), yd, vp(y), md, vp(mean), rd, vp(rstd)))

    def rms_norm_forward(self, handle, affine, xd, x, wd, w, eps, yd, y, rd, rstd):
        vp = self._vp
        self._check("miopenT5LayerNormForward", self.lib.miopenT5LayerNormForward(
            handle, _MIOPEN_NORM_MODE["rms_norm"][bool(affine)], xd, vp(x), wd, vp(w), float(eps), yd, vp(y),
            rd, vp(rstd)))

    def rope_forward(self, handle, xd, x, cd, cos, sd, sin, yd, y):
        vp = self._vp
        self._check("miopenRoPEForward", self.lib.miopenRoPEForward(
            handle, xd, vp(x), cd, vp(cos), sd, vp(sin), yd, vp(y)))
