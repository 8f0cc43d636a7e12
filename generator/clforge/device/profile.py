"""Device profiles: what selection needs to know about a device, live or from a YAML file.

A :class:`DeviceProfile` is read from a live device by :mod:`clforge.device.query`, or loaded
from a YAML file by :mod:`clforge.device.profile_files`, so selection can be worked out for a
device that is not present. The driver strings behind its fields are normalized by
:mod:`clforge.device.vendors`. Nothing here imports pyopencl.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from clforge.core.targets import DEVICE_TYPES, PROFILE_VENDORS
from clforge.device.isa import ISAS, Derived, derive, describe

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
    # --- the device model: what parameters depend on, beyond the OpenCL limits above ---------
    # CPU devices: the vector ISA the device's compiler targets (clforge.device.isa.ISAS: avx512,
    # avx2, avx, sse2, neon, sve; "" where unknown or not a CPU), its width and registers
    vector_isa: str = ""
    vector_bits: int = 0
    vector_registers: int = 0
    cores: int = 0  # physical cores (0: unknown)
    l1d_bytes: int = 0  # per core; caches 0 where unknown
    l2_bytes: int = 0  # per core on CPUs; a GPU's L2
    l3_bytes: int = 0  # the last level, shared
    # GPUs: the sub-group (warp, wavefront) size kernels run at (0: unknown)
    sub_group_size: int = 0
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


def isa_of(profile: DeviceProfile) -> Derived | None:
    """The vector ISA of a CPU device: as recorded, else derived from its LLVM CPU or its
    preferred float width (:func:`clforge.device.isa.derive`); None for GPUs and unknown ones."""
    if profile.vector_isa:
        known = ISAS.get(profile.vector_isa)
        width = 32 * (vector_width(profile, "float") or 0)
        bits = profile.vector_bits or (known.bits if known else 0) or width
        regs = profile.vector_registers or (known.registers if known else 0)
        return Derived(profile.vector_isa, bits, regs, "recorded")
    triple = dict(profile.raw).get("device_version", "")
    return derive(profile.device_type, profile.arch, vector_width(profile, "float") or 0, triple)


def isa_text(profile: DeviceProfile) -> str:
    """ "AVX-512 (32 x 512-bit)", or "" where the device has no known vector ISA."""
    isa = isa_of(profile)
    return describe(isa.name, isa.bits, isa.registers) if isa else ""


def with_model(profile: DeviceProfile) -> DeviceProfile:
    """`profile` with the device model's fields it lacks derived: the vector ISA (isa_of), and a
    CPU's cores from its compute units. Caches and sub-group sizes are never guessed."""
    isa = isa_of(profile)
    changes: dict[str, Any] = {}
    if isa is not None:
        changes |= {"vector_isa": isa.name, "vector_bits": isa.bits}
        changes["vector_registers"] = isa.registers
    if profile.device_type == "cpu" and not profile.cores:
        changes["cores"] = profile.compute_units
    return replace(profile, **changes)


# the device model's fields, as `clforge devices` shows them (and its --json keys)
MODEL_FIELDS = (
    "device_type",
    "vector_isa",
    "vector_bits",
    "vector_registers",
    "cores",
    "l1d_bytes",
    "l2_bytes",
    "l3_bytes",
    "compute_units",
    "local_mem_bytes",
    "max_work_group_size",
    "sub_group_size",
)


def model_dict(profile: DeviceProfile) -> dict[str, Any]:
    """The device model's figures (MODEL_FIELDS and the preferred vector widths)."""
    out = {name: getattr(profile, name) for name in MODEL_FIELDS}
    out["preferred_vector_widths"] = dict(profile.preferred_vector_widths)
    return out


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def model_text(profile: DeviceProfile) -> str:
    """The device model in one line: a CPU's ISA, cores and caches, a GPU's limits; both with
    the preferred vector widths."""
    widths = ", ".join(f"{t} {w}" for t, w in profile.preferred_vector_widths)
    if profile.device_type == "cpu":
        parts = [isa_text(profile) or "vector ISA unknown"]
        parts.append(f"{profile.cores or profile.compute_units} cores")
        for label, size in (
            ("L1d", profile.l1d_bytes),
            ("L2", profile.l2_bytes),
            ("L3", profile.l3_bytes),
        ):
            parts.append(f"{label} {_size(size) if size else 'unknown'}")
    else:
        parts = [
            f"{profile.compute_units} compute units",
            f"local memory {_size(profile.local_mem_bytes)}",
            f"work-groups up to {profile.max_work_group_size}",
            f"sub-group size {profile.sub_group_size or 'unknown'}",
        ]
    widths = widths or "unknown"
    return f"{profile.device_type}: {', '.join(parts)}; preferred vector widths {widths}"


def vector_width(profile: DeviceProfile, scalar: str) -> int | None:
    """The preferred vector width for `scalar` ("float", ...), or None when the profile lacks it."""
    return dict(profile.preferred_vector_widths).get(scalar)


def as_dict(profile: DeviceProfile) -> dict[str, Any]:
    """The profile as plain data, in the order profile files list it (YAML and JSON output).
    The device model's fields are left out where unknown (0 or empty), as they load."""
    out = {
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
        "sub_group_size": profile.sub_group_size,
        "vector_isa": profile.vector_isa,
        "vector_bits": profile.vector_bits,
        "vector_registers": profile.vector_registers,
        "cores": profile.cores,
        "l1d_bytes": profile.l1d_bytes,
        "l2_bytes": profile.l2_bytes,
        "l3_bytes": profile.l3_bytes,
        "preferred_vector_widths": dict(profile.preferred_vector_widths),
        "extensions": list(profile.extensions),
        "source": profile.source,
        "raw": dict(profile.raw),
    }
    return {k: v for k, v in out.items() if k not in _MODEL_ONLY or v}


# the fields that only the device model has (the rest are OpenCL's own queries)
_MODEL_ONLY = frozenset(
    (
        "sub_group_size",
        "vector_isa",
        "vector_bits",
        "vector_registers",
        "cores",
        "l1d_bytes",
        "l2_bytes",
        "l3_bytes",
    )
)
