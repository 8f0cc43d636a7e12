"""Device profiles: what selection needs to know about a device, live or from a YAML file.

A :class:`DeviceProfile` is read from a live device by :mod:`clforge.device.query`, or loaded
from a YAML file by :mod:`clforge.device.profile_files`, so selection can be worked out for a
device that is not present. The driver strings behind its fields are normalized by
:mod:`clforge.device.vendors`. Nothing here imports pyopencl.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clforge.core.targets import DEVICE_TYPES, PROFILE_VENDORS

__all__ = ["DEVICE_TYPES", "LIMITS", "PROFILE_VENDORS", "DeviceProfile"]

# the numeric fields a spec's `requires:` may bound
LIMITS = ("local_mem_bytes", "max_work_group_size", "compute_units")


@dataclass(frozen=True)
class DeviceProfile:
    """A device as the dispatcher sees it. Built from a live pyopencl device or loaded from YAML
    (so selection can be worked out for devices that are not present)."""

    name: str  # device name without driver prefixes (PoCL's "pthread-", "cpu-<llvm-cpu>-")
    vendor: str  # normalized: nvidia, amd, intel, apple, arm, qualcomm, pocl, or "unknown"
    device_type: str  # cpu, gpu or accelerator
    arch: str | None = None  # sm_90, gfx90a, an Intel GPU generation, PoCL's LLVM CPU target
    extensions: tuple[str, ...] = ()
    local_mem_bytes: int = 0
    local_mem_type: str = "local"  # "local" (dedicated) or "global" (emulated in main memory)
    max_work_group_size: int = 1
    compute_units: int = 1
    opencl_c_version: str = ""
    driver_version: str = ""
    preferred_vector_widths: tuple[tuple[str, int], ...] = ()  # (float|double|half|int, width)
    subgroups: bool = False
    source: str = ""  # where the figures came from (a live query, a vendor page, clinfo output)
    raw: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # e.g. raw device name

    def has(self, extension: str) -> bool:
        return extension in self.extensions

    def limit(self, name: str) -> int:
        """A numeric limit by the name a spec's `requires:` uses (LIMITS)."""
        if name not in LIMITS:
            raise KeyError(f"{name!r} is not a device limit (limits: {', '.join(LIMITS)})")
        return int(getattr(self, name))


# --- vocabularies -------------------------------------------------------------------------------

# "none" is what OpenCL reports for custom devices without local memory (CL_NONE).
LOCAL_MEM_TYPES = ("local", "global", "none")
# The OpenCL scalar types with a CL_DEVICE_PREFERRED_VECTOR_WIDTH_<TYPE> query, in the spec's order.
VECTOR_TYPES = ("char", "short", "int", "long", "float", "double", "half")
SUBGROUP_EXTENSIONS = ("cl_khr_subgroups", "cl_intel_subgroups")
SUBGROUP_FEATURE = "__opencl_c_subgroups"  # OpenCL 3.0's optional core subgroups


def vector_width(profile: DeviceProfile, scalar: str) -> int | None:
    """The preferred vector width for `scalar` ("float", ...), or None when the profile lacks it."""
    return dict(profile.preferred_vector_widths).get(scalar)


def as_dict(profile: DeviceProfile) -> dict[str, Any]:
    """The profile as plain data, in the order profile files list it (YAML and JSON output)."""
    return {
        "name": profile.name,
        "vendor": profile.vendor,
        "device_type": profile.device_type,
        "arch": profile.arch,
        "opencl_c_version": profile.opencl_c_version,
        "driver_version": profile.driver_version,
        "compute_units": profile.compute_units,
        "max_work_group_size": profile.max_work_group_size,
        "local_mem_bytes": profile.local_mem_bytes,
        "local_mem_type": profile.local_mem_type,
        "subgroups": profile.subgroups,
        "preferred_vector_widths": dict(profile.preferred_vector_widths),
        "extensions": list(profile.extensions),
        "source": profile.source,
        "raw": dict(profile.raw),
    }
