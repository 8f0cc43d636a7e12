"""Finding an OpenCL device that can actually build kernels.

Listing a device is not enough: PoCL 3.0 from PyPI (LLVM 14) lists CPUs newer than LLVM 14 knows
(Zen 4/5, recent Xeons) but fails every build with "unknown target CPU 'generic'". So the default
device is the first one, in platform order, on which a probe kernel builds; $CLFORGE_DEVICE picks
one by a substring of its platform or device name.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import cache

import pyopencl as cl

from generator.errors import DeviceError

DEVICE_ENV = "CLFORGE_DEVICE"
_PROBE = "__kernel void clforge_probe(__global float* a) { a[0] = exp(a[1]); }"
FALLBACK_HINT = (
    "PoCL 3.0 from PyPI cannot build for CPUs that its LLVM 14 does not know (it reports "
    "\"unknown target CPU 'generic'\"); install Debian's PoCL 3.1 with "
    "`apt-get install pocl-opencl-icd` (the Makefile's setup does this when it can), or any "
    "other OpenCL driver"
)


@dataclass(frozen=True)
class DeviceStatus:
    device: cl.Device
    builds: bool
    problem: str  # first line of the build error, "" when it builds

    @property
    def label(self) -> str:
        return (
            f"{self.device.platform.name} {self.device.platform.version.strip()}: "
            f"{self.device.name}"
        )


def all_devices() -> list[cl.Device]:
    try:
        return [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as exc:
        raise DeviceError(f"no OpenCL platform found ({exc}); {FALLBACK_HINT}") from None


def probe(device: cl.Device) -> DeviceStatus:
    """Build a tiny kernel on `device` to see whether its compiler works."""
    try:
        ctx = cl.Context([device])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cl.Program(ctx, _PROBE).build()
    except (cl.Error, cl.RuntimeError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()]
        return DeviceStatus(device, False, (lines[-1] if lines else str(exc))[:200])
    return DeviceStatus(device, True, "")


def survey() -> list[DeviceStatus]:
    return [probe(d) for d in all_devices()]


@cache
def default_device() -> cl.Device:
    """$CLFORGE_DEVICE's match if set, else the first device whose compiler works."""
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
        if status.builds:
            return d
        statuses.append(status)
    found = "; ".join(f"{s.label} ({s.problem})" for s in statuses) or "none"
    raise DeviceError(f"no OpenCL device can build kernels (found: {found}). {FALLBACK_HINT}")
