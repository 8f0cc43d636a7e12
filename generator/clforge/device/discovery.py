"""Finding an OpenCL device that can actually build kernels, and builds them for the whole CPU.

Listing a device is not enough. PoCL 3.0 from PyPI (LLVM 14) lists CPUs newer than LLVM 14
knows, and then either fails every build ("unknown target CPU 'generic'": Zen 5, recent Xeons)
or compiles for the nearest CPU it knows: on Zen 4 that is znver3, AVX2 only, on a CPU with
AVX-512 (half the vector width; some kernels come back from a "successful" build with no kernel
in them). So the probe builds and runs a tiny kernel, checks its result, and reads which vector
ISA the device's compiler targets (the predefined `__AVX512F__`/`__AVX2__`/... macros, see
:mod:`clforge.device.isa`); on a CPU device that is compared with the host CPU's flags. The
probe runs once per device and process; the device's profile reads its ISA from it. The
default device is the first one, in platform order, that builds for the host's full width;
failing that, the first that builds at all (with a warning). $CLFORGE_DEVICE picks one by a
substring of its platform or device name.
"""

from __future__ import annotations

import os
import platform
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyopencl as cl

from clforge.device.isa import isa_by_code, probe_source
from clforge.device.threads import pin_pocl_workers
from clforge.errors import ClforgeWarning, DeviceError

DEVICE_ENV = "CLFORGE_DEVICE"
_PROBE = f"""
__kernel void clforge_probe(__global float* a, __global int* isa) {{
    a[0] = exp(a[1]);
{probe_source("isa[0]")}
}}
"""
FALLBACK_HINT = (
    "PoCL 3.0 from PyPI cannot build for CPUs that its LLVM 14 does not know (it reports "
    "\"unknown target CPU 'generic'\", or compiles for an older CPU); install Debian's PoCL 3.1 "
    "with `apt-get install pocl-opencl-icd` (the Makefile's setup does this when it can), or "
    "any other OpenCL driver"
)
_X86 = {"x86_64", "amd64", "i386", "i686"}


def host_simd_bits(cpuinfo: Path = Path("/proc/cpuinfo")) -> int:
    """The widest x86 vector extension of this machine's CPU, in bits (0: not x86, or unknown)."""
    if platform.machine().lower() not in _X86:
        return 0
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return 0
    flags = next(
        (ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []
    )
    for flag, bits in (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128)):
        if flag in flags:
            return bits
    return 0


@dataclass(frozen=True)
class DeviceStatus:
    device: cl.Device
    builds: bool
    problem: str  # first line of the build error, "" when it builds
    compiled_simd: int = 0  # x86 vector bits the device's compiler targets (0: not x86/unknown)
    host_simd: int = 0  # the host CPU's widest, for CPU devices (0: not compared)
    compiled_isa: str = ""  # the vector ISA it targets (clforge.device.isa.ISAS; "": none known)

    @property
    def label(self) -> str:
        return (
            f"{self.device.platform.name} {self.device.platform.version.strip()}: "
            f"{self.device.name}"
        )

    @property
    def under_targets(self) -> bool:
        """Builds, but for narrower vectors than the host CPU has (a compiler older than it)."""
        return self.builds and 0 < self.compiled_simd < self.host_simd

    @property
    def builds_fully(self) -> bool:
        """Builds, for the host CPU's full vector width where that was compared."""
        return self.builds and not self.under_targets

    @property
    def verdict(self) -> str:
        if not self.builds:
            return f"cannot build kernels: {self.problem}"
        if self.under_targets:
            return (
                f"builds kernels, but for {self.compiled_simd}-bit vectors on a CPU with "
                f"{self.host_simd}-bit ones (its compiler does not know this CPU)"
            )
        return "builds kernels"


def all_devices() -> list[cl.Device]:
    pin_pocl_workers()  # before PoCL starts its devices: one speed per process (threads.py)
    try:
        return [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as exc:
        raise DeviceError(
            f"no OpenCL platform found ({exc}): no OpenCL driver is installed; "
            f'`pip install "clforge[pocl]"` adds PoCL\'s CPU device from PyPI. {FALLBACK_HINT}'
        ) from None


def _run_probe(device: cl.Device) -> tuple[float, int]:
    """exp(1) as the device computes it, and the code of the vector ISA its compiler targets."""
    ctx = cl.Context([device])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = cl.Program(ctx, _PROBE).build().clforge_probe
    queue = cl.CommandQueue(ctx)
    values = np.array([0.0, 1.0], np.float32)
    code = np.zeros(1, np.int32)
    rw = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
    a = cl.Buffer(ctx, rw, hostbuf=values)
    b = cl.Buffer(ctx, rw, hostbuf=code)
    kernel(queue, (1,), (1,), a, b)
    cl.enqueue_copy(queue, values, a)
    cl.enqueue_copy(queue, code, b)
    queue.finish()
    return float(values[0]), int(code[0])


@cache
def probe(device: cl.Device) -> DeviceStatus:
    """Build and run a tiny kernel on `device`: does its compiler work, and for which vectors
    (once per device and process)."""
    try:
        value, code = _run_probe(device)
    except (cl.Error, cl.RuntimeError, AttributeError) as exc:  # AttributeError: no kernel built
        lines = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()]
        return DeviceStatus(device, False, (lines[-1] if lines else str(exc))[:200])
    if abs(value - np.e) > 1e-5:
        return DeviceStatus(device, False, f"the probe kernel computed exp(1) = {value}")
    host = host_simd_bits() if device.type & cl.device_type.CPU else 0
    isa = isa_by_code(code)
    x86_bits = isa.bits if isa is not None and isa.family == "x86" else 0
    return DeviceStatus(
        device,
        True,
        "",
        compiled_simd=x86_bits,
        host_simd=host,
        compiled_isa=isa.name if isa else "",
    )


def survey() -> list[DeviceStatus]:
    return [probe(d) for d in all_devices()]


@cache
def default_device() -> cl.Device:
    """$CLFORGE_DEVICE's match if set, else the first device whose compiler works for the whole
    CPU (else the first whose compiler works at all, with a warning)."""
    want = os.environ.get(DEVICE_ENV, "").strip().lower()
    devices = all_devices()
    if want:
        matches = [
            d
            for d in devices
            if want in d.name.lower()
            or want in d.platform.name.lower()
            or want in d.platform.version.lower()
        ]
        if not matches:
            names = "; ".join(f"{d.platform.name}: {d.name}" for d in devices)
            raise DeviceError(f"${DEVICE_ENV}={want!r} matches no device; devices: {names}")
        devices = matches
    statuses = []
    for d in devices:
        status = probe(d)
        if status.builds_fully:
            return d
        statuses.append(status)
    narrow = next((s for s in statuses if s.builds), None)
    if narrow is not None:
        warnings.warn(
            f"clforge: using {narrow.label}, which {narrow.verdict}. {FALLBACK_HINT}",
            ClforgeWarning,
            stacklevel=2,
        )
        return narrow.device
    found = "; ".join(f"{s.label} ({s.problem})" for s in statuses) or "none"
    raise DeviceError(f"no OpenCL device can build kernels (found: {found}). {FALLBACK_HINT}")
