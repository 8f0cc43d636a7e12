"""The ceiling of compute-bound ops: the device's multiply-add rate, measured by an FMA kernel.

Each work-item keeps independent accumulators of the device's native vectors (lanes from its
vector width for the dtype) and multiply-adds into them over and over; both operands are
by-value kernel arguments, so the loop loads nothing and its chains never wait on each other
(a CPU core needs latency x units of them: 4 x 2 on AVX-512 cores). The rate, two flops per
lane per multiply-add, is what a GEMM-shaped kernel could reach with every load, store,
packing step and launch free: the matmul, conv and attention cases (GFLOP/s) are set against
it, as the memory-bound ones are against a copy of as many bytes (bandwidth.py). Seen here
(2-core Xeon, AVX-512): 460 GFLOP/s f32 and 235 f64, where clforge's, ONNX Runtime's and OpenBLAS's
best matmuls run at 330-370."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from clforge.device.profile import DeviceProfile
from clforge.tools.bench.protocol import Timing
from clforge.tools.bench.timing import seconds

WIDTHS = (2, 4, 8, 16)  # OpenCL's vector sizes
TARGET_S = 0.01  # seconds one launch should last (the loop's count is scaled to it)
MAX_COUNT = 2**28
PROBES = 3  # measurements per dtype; the best counts


@dataclass(frozen=True)
class Peak:
    """The measured multiply-add rate of one dtype: GFLOP/s (two flops per lane per
    multiply-add), and the kernel's shape."""

    dtype: str  # f32 or f64
    gflops: float
    lanes: int  # per vector
    accumulators: int  # independent vectors per work-item
    work_items: int


def lanes(profile: DeviceProfile, dtype_bits: int) -> int:
    """The native vector's lanes for the dtype: the device's vector width (CPUs) over the
    element's, else its preferred OpenCL width; at least 2, at most 16."""
    if profile.vector_bits:
        n = profile.vector_bits // dtype_bits
    else:
        kind = "double" if dtype_bits == 64 else "float"
        n = dict(profile.preferred_vector_widths).get(kind, 4)
    return max(w for w in WIDTHS if w <= max(n, 2))


def accumulators(profile: DeviceProfile) -> int:
    """Independent chains per work-item: the CPU's vector registers less four (the operands
    and the loop's), 8 to 24; 16 where the register file is not known (GPUs)."""
    if profile.vector_registers:
        return max(8, min(24, profile.vector_registers - 4))
    return 16


def source(ctype: str, width: int, count: int) -> str:
    v = f"{ctype}{width}"
    decl = " ".join(f"{v} c{i} = ({v})({i});" for i in range(count))
    step = " ".join(f"c{i} = c{i} * b + a;" for i in range(count))
    total = " + ".join(f"c{i}" for i in range(count))
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if ctype == "double" else ""
    return (
        f"{pragma}__kernel void fma_peak(__global {v}* out, const {v} a, const {v} b, "
        f"const int n) {{\n    {decl}\n    for (int i = 0; i < n; ++i) {{ {step} }}\n"
        f"    out[get_global_id(0)] = {total};\n}}\n"
    )


def measure(queue: cl.CommandQueue, profile: DeviceProfile, dtype: str, timing: Timing) -> Peak:
    """The device's multiply-add rate for `dtype` (f32 or f64)."""
    f64 = dtype == "f64"
    ctype, np_dtype, bits = ("double", np.float64, 64) if f64 else ("float", np.float32, 32)
    width, count = lanes(profile, bits), accumulators(profile)
    cpu = profile.device_type == "cpu"
    items = profile.compute_units * (8 if cpu else 2048)
    # a CPU runs a work-group on one core: work-groups of one spread the items over them
    local = (1,) if cpu else None
    ctx = queue.context
    kernel = cl.Kernel(cl.Program(ctx, source(ctype, width, count)).build(), "fma_peak")
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, items * width * bits // 8)
    # b just under 1 and a small: the chains settle instead of overflowing
    a, b = (np.full(width, v, np_dtype) for v in (1e-3, 0.999))

    def run() -> None:
        cl.enqueue_nd_range_kernel(queue, kernel, (items,), local)

    n = 256
    while True:  # the loop's count, scaled until one launch lasts about TARGET_S
        kernel.set_args(out, a, b, np.int32(n))
        t0 = time.perf_counter()
        run()
        queue.finish()
        once = time.perf_counter() - t0
        if once >= TARGET_S / 4 or n >= MAX_COUNT:
            break
        n = min(MAX_COUNT, n * max(2, int(TARGET_S / max(once, 1e-6))))
    t = seconds(run, queue.finish, timing)
    out.release()
    return Peak(dtype, 2.0 * items * count * width * n / t / 1e9, width, count, items)


def measure_peaks(queue: cl.CommandQueue, profile: DeviceProfile, timing: Timing) -> list[Peak]:
    """The multiply-add peak in f32, and in f64 where the device has it: each the best of
    PROBES measurements, since a ceiling is the fastest the device was seen to go (a neighbour
    on a shared host, or the clock still ramping up, only ever makes a probe slower: seen here,
    one in five at 170 instead of 460 GFLOP/s)."""
    dtypes = ["f32", *(["f64"] if profile.has("cl_khr_fp64") else [])]
    return [
        max((measure(queue, profile, dt, timing) for _ in range(PROBES)), key=lambda p: p.gflops)
        for dt in dtypes
    ]
