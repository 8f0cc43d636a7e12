"""`clforge bench`: clforge against the peers a user would pick instead, as ratios measured side
by side in one run, each peer in its own process, medians of repeats.

- :mod:`.cases`: what is timed (ops, dtypes, sizes, the work of a call);
- :mod:`.clforge_side`: each case's chosen instance and its generic fallback on device arrays,
  and the device's copy bandwidth, the ceiling of memory-bound ops;
- :mod:`.peers` and :mod:`.worker`: NumPy (OpenBLAS), ONNX Runtime's CPU kernels and CLBlast on
  the same OpenCL device, each in a process of its own (:mod:`.peer_numpy`, :mod:`.peer_ort`,
  :mod:`.peer_clblast`), speaking :mod:`.protocol`; a missing peer is reported, never fatal;
- :mod:`.overhead`: the per-call overhead and the first call in a fresh process;
- :mod:`.report` and :mod:`.chart`: the table, the JSON and the PNG; :mod:`.run` puts it together.

These machines are shared and noisy: every figure is the median of several repeats, and only
ratios taken in the same run mean much.
"""
