"""Weight-only int8 inference: Int8Linear, an nn.Linear whose weight is stored as int8 with a
per-output-channel scale, and quantize_weights, which swaps a model's Linear layers for it
(gpt-fast's scheme). Activations stay in their float dtype; the weights are frozen buffers."""
from __future__ import annotations

from ...errors import ArgumentError
from ..functional.quantized import linear_int8, quantize_per_channel_int8
from .linear import Linear
from .module import Module


class Int8Linear(Module):
    """y = x @ (weight * scale[:, None]).T + bias: weight (out, in) int8 and scale (out,) are
    buffers (saved in the state dict, moved by .to(), not trained); bias stays a Parameter."""

    def __init__(self, in_features: int, out_features: int, weight, scale, bias=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale)
        self.bias = bias

    @classmethod
    def from_linear(cls, linear: Linear) -> "Int8Linear":
        q, scale = quantize_per_channel_int8(linear.weight)
        return cls(linear.in_features, linear.out_features, q, scale, linear.bias)

    def forward(self, x):
        return linear_int8(x, self.weight, self.scale, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def quantize_weights(model: Module, dtype="int8", skip=()) -> Module:
    """Replace every nn.Linear of `model` (except those whose qualified names are in `skip`, e.g. a
    tied output head) by an Int8Linear of its weight, in place; returns the model. A Linear whose
    weight is shared with another module (weight tying) is left as it is: its other user reads
    the float weight."""
    if str(dtype).replace("tensorlite.", "") != "int8":
        raise ArgumentError(f"quantize_weights: dtype must be 'int8' (weight-only int8), got {dtype!r}")
    users = {}
    for _, module in model.named_modules():
        for p in module.parameters(recurse=False):
            users[id(p)] = users.get(id(p), 0) + 1
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is Linear and full not in skip and users[id(child.weight)] == 1:
                setattr(module, child_name, Int8Linear.from_linear(child))
    return model
