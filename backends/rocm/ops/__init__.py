"""GpuStorage's ops, one module per kernel family; each is a mixin of GpuStorage methods
(storage.py assembles them) that reads alone: its kernels, its launch geometry, its checks.

    elementwise  unary, binary, compare, where, casts, affine/powf/elu, unary backward
    reduce       sum/min/max/argmin/argmax over any dims (rows or columns)
    index        index_select, gather, scatter_add, index_add (ids checked on the device)
    matmul       matmul and its BLAS epilogues; `gemm`, the routing every GEMM takes
    conv         conv, conv_transpose, pooling, upsampling, batch norm (DNN library or im2col + gemm)
    fused        softmax, norms, rope, their backwards, cross-entropy, AdamW
    attention    sdpa and its backward (flash kernels, matrix-core tiers, or GEMM + softmax)
    random       random_fill (Philox)
    sort         sort of rows (bitonic), cumsum/cumprod (scans), searchsorted
    rnn          a recurrent cell's pointwise step and its backward (LSTM, GRU, RNN)
"""
