"""tl.linalg: norms and products of torch.linalg's names, composites of the op families' ops (so they
run on every device, with gradients). Matrix norms that need singular values ('nuc', 2, -2) are
refused. The functions live in tensorlite/ops/linalg.py; this module is the public namespace.
"""
from .ops.linalg import cross, matrix_norm, norm, vecdot, vector_norm
from .ops.matmul import matmul

__all__ = ["cross", "matmul", "matrix_norm", "norm", "vecdot", "vector_norm"]
