"""`clforge bench`: clforge against the peers a user would pick instead, as ratios measured side
by side in one run, each peer in its own process, each given the call its users write.

- :mod:`.cases`: what is timed (ops, dtypes, sizes, the work of a call) and, :mod:`.natural`,
  how a peer's user holds it (the label's shapes and axis, not clforge's canonical shapes);
- :mod:`.clforge_side`: each case's chosen instance and its generic fallback on device arrays,
  and the device's copy bandwidth, the ceiling of memory-bound ops;
- :mod:`.peers` and :mod:`.worker`: NumPy (OpenBLAS), ONNX Runtime's CPU kernels and CLBlast on
  the same OpenCL device, each in a process of its own that lives for the run
  (:mod:`.peer_numpy`, :mod:`.peer_ort`, :mod:`.peer_clblast`), speaking :mod:`.protocol`; a
  missing peer is reported, never fatal;
- :mod:`.rounds`: every case timed by every side in every round, the sides of a case back to
  back and the order alternating from round to round; medians, spreads and per-round ratios;
- :mod:`.overhead`: the per-call overhead and the first call in a fresh process;
- :mod:`.report` and :mod:`.chart`: the table, the JSON and the PNG; :mod:`.run` puts it together.

These machines are shared and noisy: every figure is the median of its rounds, shown with its
spread, and a ratio whose rounds fall on both sides of 1 counts as level, not as a win.
"""
