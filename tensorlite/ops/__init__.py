"""The op families: the functions of tl.* and the methods of Tensor, one family per file.

Each file is readable alone and imports only the core (tensorlite/_core.py) and the families
before it in this order, never the Tensor class (whose methods are late-bound: a family may call
`x.split(...)` of a family after it):
    creation    tensor, zeros, arange, rand, ..., *_like, new_*
    joins       cat, stack, hstack, meshgrid, ...: several tensors into one
    views       reshape, permute, narrow, split, ...: a new Layout over the same storage
    inplace     the machinery of in-place ops and writes into a tensor's memory
    elementwise the op table's unary and binary ops, where, clamp, comparisons, ...
    linalg      tl.linalg's norms, cross, vecdot (tensorlite/linalg.py is the public namespace)
    reduce      sum, mean, max, var, logsumexp, norm, ...
    index       indexing (x[i], x[i] = v), gather, scatter, index_* and masked_* ops
    shape       flip, roll, repeat, tile, tril/triu, diagonals: copying rearrangements
    matmul      matmul, mm, bmm, einsum, tensordot, dot, outer, kron, cross, cdist
    conv        convolutions, pooling, upsampling
    sort        sort, topk, median, cumulative sums, searchsorted, unique, nonzero, multinomial
Each ends with its Tensor methods, a mixin class (`ViewMethods`, ...) that tensorlite/tensor.py's
Tensor inherits.
"""
