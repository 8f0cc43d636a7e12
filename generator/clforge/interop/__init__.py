"""The arrays users hold, taken as they are: PyTorch tensors and other DLPack producers (a view
of their memory, on a CPU device a host-pointer buffer without a copy, results given back as
the caller's type), device arrays of the user's own OpenCL context (run on their queue), and
NumPy's `out=`."""
