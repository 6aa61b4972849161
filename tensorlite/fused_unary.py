"""The fused unary ops (GELU in both forms, SiLU), each one unit as candle's CustomOp1 (one
definition holding cpu_fwd, cuda_fwd and bwd): its name, its cpu forward and derivative, the
GPU kernels it runs, and its derivative as Tensor ops for a second derivative.

Fused: the backward is one kernel, storage.unary_backward(op) = g * f'(x), not the Tensor ops of
f' (a GELU's derivative is a dozen of them). The layers read their part from here: the op table's
row (op_table.UNARY), the cpu backend (backends/cpu/elementwise.py: forward and unary_backward), the GPU
backend (the backward's entry point; the forward is the op table's u<name>_<dtype> of
kernels/unary.hip), autograd (the second derivative, under create_graph=True).

Adding one: a FusedUnary here (in UNARIES), its row's place in op_table.UNARY, its device
function and entries in kernels/unary.hip and kernels/fused_grad.hip (<name>_bwd_<dtype>).

This module imports no other part of tensorlite: the cpu formulas are numpy, given the cpu
backend's float ops for what numpy lacks (`ops`: op name -> numpy function: ops["erf"],
ops["sigmoid"]), and `derivative` is written with Tensor methods only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


@dataclass(frozen=True)
class FusedUnary:
    name: str                 # the op table row's name: storage.unary_impl(name) / unary_backward(name)
    method: str               # Tensor method (PyTorch's name)
    cpu_forward: Callable     # (x, ops) -> f(x): numpy on the compute dtype
    cpu_derivative: Callable  # (x, ops) -> f'(x): numpy; the cpu unary_backward returns g * f'(x)
    derivative: Callable      # x -> f'(x) in Tensor ops: what create_graph=True differentiates
    top_level: bool = True    # also tensorlite.<method>(x) (False: PyTorch has it in nn.functional only)

    @property
    def backward_kernel(self) -> str:
        """The GPU backward's entry point, <backward_kernel>_<dtype> of kernels/fused_grad.hip."""
        return f"{self.name}_bwd"


# ---- cpu formulas: in place on one or two buffers (a block of the cpu backend's blockwise runs);
# each step rounds as the written-out formula in its comment does, without a fresh array per operator

def _gelu_tanh_cpu(x, ops):  # 0.5 * x * (1 + tanh(k * (x + 0.044715 * x * x * x)))
    t = np.multiply(x, _GELU_C)
    t *= x
    t *= x
    t += x
    t *= _SQRT_2_OVER_PI
    np.tanh(t, out=t)
    t += 1.0
    t *= x
    t *= 0.5  # exact: the same as (0.5 * x) * (...)
    return t


def _gelu_tanh_cpu_derivative(x, ops):
    """0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3c * x * x), t = tanh(k * (x + c * x^3)), in
    two buffers."""
    k, c = _SQRT_2_OVER_PI, _GELU_C
    x2 = x * x
    t = np.multiply(x2, c)
    t *= x
    t += x
    t *= k
    np.tanh(t, out=t)
    d = np.multiply(t, t)
    np.subtract(1.0, d, out=d)  # 1 - t^2
    d *= x
    d *= 0.5 * k
    x2 *= 3.0 * c
    x2 += 1.0
    d *= x2
    t += 1.0
    t *= 0.5
    t += d
    return t


def _gelu_tanh_derivative(x):
    t = ((x + x * x * x * _GELU_C) * _SQRT_2_OVER_PI).tanh()
    return (t + 1) * 0.5 + x * (1 - t * t) * (x * x * (3 * _GELU_C) + 1) * (0.5 * _SQRT_2_OVER_PI)


def _gelu_erf_cpu(x, ops):  # 0.5 * x * (1 + erf(x / sqrt(2)))
    t = ops["erf"](x / math.sqrt(2.0))
    t += 1.0
    t *= x
    t *= 0.5
    return t


def _gelu_erf_cpu_derivative(x, ops):  # 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-x^2 / 2) / sqrt(2 pi)
    d = x * x
    d *= -0.5
    np.exp(d, out=d)
    d *= x
    d *= 1.0 / math.sqrt(2 * math.pi)
    t = ops["erf"](x / math.sqrt(2.0))
    t += 1.0
    t *= 0.5
    t += d
    return t


def _silu_cpu_derivative(x, ops):  # sigmoid(x) * (1 + x * (1 - sigmoid(x)))
    s = ops["sigmoid"]
    return s(x) * (1.0 + x * (1.0 - s(x)))


GELU_TANH = FusedUnary(  # the tanh approximation (F.gelu(x, approximate="tanh"))
    "gelu_tanh", "gelu_tanh", _gelu_tanh_cpu, _gelu_tanh_cpu_derivative, _gelu_tanh_derivative, top_level=False)
GELU_ERF = FusedUnary(  # exact: PyTorch's default gelu
    "gelu_erf", "gelu", _gelu_erf_cpu, _gelu_erf_cpu_derivative,
    lambda x: ((x * 0.7071067811865476).erf() + 1) * 0.5 + x * (x * x * -0.5).exp() * 0.3989422804014327,
    top_level=False)
SILU = FusedUnary(
    "silu", "silu", lambda x, ops: x * ops["sigmoid"](x), _silu_cpu_derivative,
    lambda x: x.sigmoid() * (x * (1 - x.sigmoid()) + 1))

UNARIES: Tuple[FusedUnary, ...] = (GELU_TANH, GELU_ERF, SILU)
BY_NAME: Dict[str, FusedUnary] = {u.name: u for u in UNARIES}
