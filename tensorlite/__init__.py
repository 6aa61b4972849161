"""tensorlite: a minimal tensor framework with PyTorch's names.

>>> import tensorlite as tl
>>> x = tl.randn(4, 8)              # on TENSORLITE_DEVICE or cpu; device="cuda", "rocm", "cuda:1", ...
>>> y = tl.nn.functional.softmax(x @ x.mT, -1)
>>> y.shape
tensorlite.Size([4, 4])
>>> round(y.sum(-1).mean().item(), 5)
1.0

Backends: `cpu` (numpy, the reference), `rocm` and `cuda` (one GPU backend, two platforms).
`tl.backends.available()` says which can run here, or why not; `tl.backend.best_device()`
names the best of them.
"""
from . import backend, op_table
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .dtype import (DType, bfloat16, bool_, finfo, float16, float32, float64, get_default_dtype, iinfo, int8,
                    int16, int32, int64, promote_types, set_default_dtype, uint8, uint32)
from .errors import (ArgumentError, BackendError, BackendUnavailable, CaptureError, CompileError, DTypeError,
                     DeviceError, FormatError, IndexOutOfRange, OutOfMemoryError, NotSupportedError, ShapeError,
                     StateDictError, StateDictShapeError, TensorliteError, WeightsOnlyError)
from .tensor import Tensor  # first: the submodule tensorlite.tensor must not shadow tl.tensor, bound below
from . import linalg  # tl.linalg
from ._core import get_rng_state, manual_seed, set_rng_state, synchronize
from .ops.conv import avg_pool2d, conv1d, conv2d, conv_transpose1d, conv_transpose2d, max_pool2d, upsample_nearest2d
from .ops.creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full, full_like, is_tensor, linspace,
                           numel, ones, ones_like, rand, rand_like, randint, randint_like, randn, randn_like, randperm,
                           tensor, zeros, zeros_like)
from .ops.elementwise import (allclose, clamp, elu, floor_divide, fmod, isclose, isfinite_ as isfinite, isinf, isnan,
                              isneginf, isposinf, lerp, logical_and, logical_not, logical_or, logical_xor, masked_fill,
                              maximum, minimum, remainder, where)
from .ops.index import (gather, index_add, index_copy, index_fill, index_put, index_select, masked_scatter,
                        masked_select, scatter, scatter_add, scatter_reduce, take_along_dim)
from .ops.joins import (atleast_1d, atleast_2d, atleast_3d, broadcast_tensors, cartesian_prod, cat, column_stack,
                        dstack, foreach_to, hstack, meshgrid, row_stack, stack, vstack)
from .ops.matmul import (addmm, baddbmm, bmm, cdist, cross, dot, einsum, ger, inner, kron, matmul, mm, mv, outer,
                         tensordot, vdot)
from .ops.reduce import (all_ as all, amax, amin, any_ as any, argmax, argmin, count_nonzero, logsumexp, max, mean, min,
                         norm, prod_ as prod, std, std_mean, sum, var, var_mean)
from .ops.shape import (diag, diag_embed, diagonal, diff, flip, fliplr, flipud, repeat_interleave, roll, rot90, tile,
                        trace, tril, triu)
from .ops.sort import (argsort, argwhere, bincount, bucketize, cumprod, cumsum, kthvalue, median, msort, multinomial,
                       nanmedian, nonzero, searchsorted, sort, topk, unique, unique_consecutive)
from .ops.views import (broadcast_to, chunk, expand, flatten, moveaxis, movedim, narrow, permute, reshape, split,
                        squeeze, swapaxes, swapdims, t, transpose, unbind, unsqueeze)
from . import backends  # noqa: F401  (tl.backends.register / available)
from . import cuda, graphs, nn, optim, serialization, utils  # noqa: F401  (tl.cuda, tl.graphs, tl.nn, ...)
from .amp import autocast  # noqa: F401
from .backend import Device as device  # noqa: F401  (torch.device's name)
from .dlpack import from_dlpack  # noqa: F401
from .generator import Generator  # noqa: F401
from .io import load, load_hf_checkpoint, load_safetensors, save, save_safetensors  # noqa: F401
from .nn import quantize_weights  # noqa: F401  (weight-only int8 for decoding)
from .printing import get_printoptions, printoptions, set_printoptions  # noqa: F401
from .size import Size  # noqa: F401
from .threads import get_num_threads, set_num_threads  # noqa: F401  (the cpu backend's threads, numpy's BLAS's)
from . import accelerator, jit, onnx  # noqa: F401  (tl.accelerator; tl.jit and tl.onnx refuse what they cannot do)
from .backends.cuda import get_float32_matmul_precision, set_float32_matmul_precision  # noqa: F401
from .jit import compile_ as compile  # noqa: F401,A001  (torch.compile: refused, naming tl.graphs)

bool = bool_  # noqa: A001  (tl.bool, as torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16


def _register_builtin_backends():
    def cpu(ordinal):
        from .backends.cpu import CpuDevice
        return CpuDevice(ordinal)

    def gpu(platform):
        def factory(ordinal):
            from .backends.rocm import open_device
            return open_device(platform, ordinal)
        return factory

    backend.register("cpu", cpu)
    backend.register("cuda", gpu("cuda"))
    backend.register("rocm", gpu("rocm"))
    backend.register("amdemu", gpu("amdemu"))  # AMD code run by an ISA interpreter (opt-in: TENSORLITE_AMDEMU)


_register_builtin_backends()


def _method_as_function(name):
    def fn(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"tl.{name}(x, ...) is x.{name}(...), as torch.{name}."
    return fn


# tl.exp(x), tl.add(a, b), tl.eq(a, b), ...: Tensor methods that torch also has as functions, made
# from the op table (op_table.FUNCTIONS: adding a row adds its tl.<name>) and the few methods named
# here. A name bound above keeps its own function (tl.maximum, tl.minimum, tl.fmod: ops.elementwise's).
_METHOD_FUNCTIONS = {n: _method_as_function(n) for n in (
    *op_table.FUNCTIONS, "pow", "unflatten", "clip", "fix", "bernoulli", "nan_to_num", "clamp_min", "clamp_max",
    "softmax", "log_softmax") if n not in globals()}
globals().update(_METHOD_FUNCTIONS)

__all__ = [n for n in dir() if not n.startswith("_")]
__version__ = "0.1.0"


def __getattr__(name):  # tl.distributed, as torch.distributed after `import torch`, imported at first use
    if name == "distributed":
        import importlib
        return importlib.import_module(".distributed", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
