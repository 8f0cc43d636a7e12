"""The names of the calling conventions (see :mod:`clforge.conventions`), importable without
pyopencl so that the spec schema and the linter stay light."""

CONVENTION_NAMES: tuple[str, ...] = (
    "direct",  # arrays shaped exactly as the spec says
    "flat",  # one dim N; arrays of any (equal) shape are flattened
    "broadcast",  # NumPy broadcasting up to the op's rank
    "axis",  # an `axis` argument: arrays reshaped to [B, R, I] around it
    "trailing",  # normalization over the trailing `axes` axes: arrays reshaped to [B, R]
    "conv2d",  # NCHW or NHWC arrays; stride, padding, dilation as ints or pairs
    "attention",  # q, k, v with or without a heads axis; scale 1/sqrt(D) by default
    "matmul",  # NumPy's matmul: 1-d operands, broadcast batch dims, F-ordered operands
    "gemm",  # BLAS GEMM: trans_a / trans_b as transposed views, a broadcast bias
    "permute",  # numpy.transpose: ranks 0 to 4, `axes`
    "channels",  # PyTorch's (N, C, *) with per-channel vectors: arrays reshaped to [N, C, S]
    "pool2d",  # PyTorch's 2-d pooling: NCHW or CHW, kernel_size, stride, padding, dilation
    "along_axis",  # numpy.take_along_axis: [B, R, I] and indices [B, J, I] around an axis
    "embedding",  # PyTorch's embedding: indices of any shape, a (V, D) table
    "concat",  # numpy.concatenate: a sequence of arrays, joined two at a time around an axis
)
