"""Device profiles: what selection needs to know about a device, live or from a YAML file.

A :class:`DeviceProfile` is built from a live pyopencl device by :func:`from_device`, or loaded
from a YAML file by :mod:`generator.device.profile_files` (so selection can be worked out for a device that
is not present). The raw strings OpenCL drivers report are normalized here by pure functions,
testable without a device: :func:`normalize_vendor`, :func:`split_device_name`,
:func:`intel_gpu_arch`.

This module does not import pyopencl at import time: the dispatcher and the CLI's lint can use
profiles without an OpenCL installation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from generator.errors import DeviceError

if TYPE_CHECKING:
    import pyopencl as cl


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

VENDORS = ("amd", "apple", "arm", "intel", "nvidia", "pocl", "qualcomm", "unknown")
DEVICE_TYPES = ("accelerator", "cpu", "gpu")
# "none" is what OpenCL reports for custom devices without local memory (CL_NONE).
LOCAL_MEM_TYPES = ("local", "global", "none")
# The OpenCL scalar types with a CL_DEVICE_PREFERRED_VECTOR_WIDTH_<TYPE> query, in the spec's order.
VECTOR_TYPES = ("char", "short", "int", "long", "float", "double", "half")
SUBGROUP_EXTENSIONS = ("cl_khr_subgroups", "cl_intel_subgroups")
SUBGROUP_FEATURE = "__opencl_c_subgroups"  # OpenCL 3.0's optional core subgroups

# --- vendor -------------------------------------------------------------------------------------

# CPUID vendor strings, which PoCL (and other CPU drivers) report as the device vendor.
_CPU_VENDOR_IDS = ("genuineintel", "authenticamd", "hygongenuine", "centaurhauls", "arm")
# The device-name prefixes of PoCL's CPU drivers ("pthread" until PoCL 5, "cpu" since).
POCL_CPU_DRIVERS = ("cpu-minimal", "cpu-tbb", "pthread", "basic", "cpu", "tbb")

_VENDOR_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"nvidia", "nvidia"),
    (r"advanced micro devices|authenticamd|\bamd\b", "amd"),
    (r"intel", "intel"),
    (r"apple", "apple"),
    (r"\barm\b", "arm"),
    (r"qualcomm", "qualcomm"),
)
# Platform names that say the vendor when the device's vendor string does not.
_PLATFORM_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"nvidia cuda", "nvidia"),
    (r"amd accelerated parallel processing", "amd"),
    (r"intel\(r\) opencl", "intel"),
    (r"^apple$", "apple"),
    (r"^arm platform$", "arm"),
    (r"qualcomm", "qualcomm"),
)


def is_pocl(platform_name: str) -> bool:
    low = platform_name.lower()
    return "portable computing language" in low or "pocl" in low


def _pocl_cpu_driver(raw_name: str) -> str | None:
    """The PoCL CPU driver whose prefix starts `raw_name` ("pthread", "cpu", ...), if any."""
    for driver in POCL_CPU_DRIVERS:
        if raw_name.startswith(driver + "-"):
            return driver
    return None


def normalize_vendor(vendor_string: str, platform_name: str, device_name: str) -> str:
    """One of VENDORS for the vendor string, platform name and raw device name a driver reports.

    PoCL's CPU device is "pocl" whatever CPU it runs on (its vendor string is the CPUID vendor,
    e.g. "AuthenticAMD"); PoCL's GPU back ends (CUDA, Level Zero) keep the GPU's vendor.
    """
    vendor = vendor_string.strip().lower()
    if is_pocl(platform_name) and (
        _pocl_cpu_driver(device_name.strip()) is not None
        or vendor in _CPU_VENDOR_IDS
        or "pocl" in vendor
    ):
        return "pocl"
    for pattern, name in _VENDOR_PATTERNS:
        if re.search(pattern, vendor):
            return name
    platform = platform_name.strip().lower()
    for pattern, name in _PLATFORM_PATTERNS:
        if re.search(pattern, platform):
            return name
    return "unknown"


# --- name and architecture ----------------------------------------------------------------------

_HSTR = re.compile(r"HSTR:\s*(\S+)")
# LLVM triple environments (the optional fourth part of a target triple).
_TRIPLE_ENVS = re.compile(r"(gnu|musl|android|eabi|elf|msvc|macho|cygnus|itanium|ohos)\w*\Z")
# AMD's device names: the LLVM target id, e.g. "gfx90a:sramecc+:xnack-" (older: "gfx906+xnack").
_AMD_GFX = re.compile(r"(gfx[0-9a-f]+)(?:[:+].*)?\Z")
_INTEL_PCI_ID = re.compile(r"\[0x([0-9a-fA-F]{4})\]")


def _llvm_cpu_from_hstr(hstr: str, driver: str) -> str | None:
    """The LLVM CPU in PoCL's "<driver>-<triple>-<cpu>" HSTR, e.g. "skylake-avx512".

    None when the HSTR does not have that shape, or names "generic" (PoCL 3.0 from PyPI on a CPU
    its LLVM does not know).
    """
    if not hstr.startswith(driver + "-"):
        return None
    parts = hstr[len(driver) + 1 :].split("-")
    if len(parts) < 4:
        return None
    # arch-vendor-os[-env]-cpu...: the env is there when the fourth part looks like one.
    rest = parts[4:] if _TRIPLE_ENVS.match(parts[3]) else parts[3:]
    cpu = "-".join(rest)
    return cpu if cpu and cpu != "generic" else None


def split_device_name(
    raw_name: str, device_version: str, *, board_name: str = ""
) -> tuple[str, str | None]:
    """(name, arch) from the raw CL_DEVICE_NAME and CL_DEVICE_VERSION a driver reports.

    - PoCL CPU: "pthread-skylake-avx512-AMD EPYC" with HSTR "pthread-x86_64-pc-linux-gnu-
      skylake-avx512" (PoCL 3.1) → ("AMD EPYC", "skylake-avx512"); "pthread-AMD EPYC" with HSTR
      "...-generic" (PoCL 3.0) → ("AMD EPYC", None); "cpu-haswell-Intel(R) N150" (PoCL 6).
    - PoCL CUDA: HSTR "CUDA-sm_70" → arch "sm_70".
    - AMD: "gfx90a:sramecc+:xnack-" → arch "gfx90a"; the name is `board_name` (from
      CL_DEVICE_BOARD_NAME_AMD) when given, else the gfx name.
    - Intel GPUs: the generation from the marketing name or the PCI id in "[0x56a0]"
      (see :func:`intel_gpu_arch_from_name`); CL_DEVICE_IP_VERSION_INTEL is better where
      available (:func:`intel_gpu_arch`).
    - NVIDIA: the name as is; the architecture comes from the compute capability query.
    """
    name = " ".join(raw_name.split())
    match = _HSTR.search(device_version)
    hstr = match.group(1) if match else ""
    if hstr.startswith("CUDA-sm_"):
        return name, hstr[len("CUDA-") :]
    driver = _pocl_cpu_driver(name)
    if driver is not None and ("pocl" in device_version.lower() or hstr):
        rest = name[len(driver) + 1 :]
        cpu = _llvm_cpu_from_hstr(hstr, driver)
        if cpu and rest.startswith(cpu + "-"):
            rest = rest[len(cpu) + 1 :]
        return rest.strip() or name, cpu
    gfx = _AMD_GFX.match(name)
    if gfx:
        board = " ".join(board_name.split())
        return board or gfx.group(1), gfx.group(1)
    if "intel" in name.lower():
        return name, intel_gpu_arch_from_name(name)
    return name, None


# Intel GPU generations by graphics IP (major, minor), named as Intel's offline compiler (ocloc)
# names releases. Source: compute-runtime's AOT platforms.h (PRODUCT_CONFIG values, RELEASE
# acronyms), which also gives Gen9 (9.x) and Gen11 (11.x) in the current encoding.
_INTEL_IP_ARCH: dict[tuple[int, int], str] = {
    (12, 0): "gen12lp",  # Tiger Lake
    (12, 1): "gen12lp",  # Rocket Lake
    (12, 2): "gen12lp",  # Alder Lake-S
    (12, 3): "gen12lp",  # Alder Lake-P/N
    (12, 4): "gen12lp",  # Raptor Lake
    (12, 10): "gen12lp",  # DG1
    (12, 50): "xe-hp",
    (12, 55): "xe-hpg",  # DG2 (Arc A-series, Flex)
    (12, 56): "xe-hpg",
    (12, 57): "xe-hpg",
    (12, 60): "xe-hpc",  # Ponte Vecchio (Data Center GPU Max)
    (12, 61): "xe-hpc-vg",
    (12, 70): "xe-lpg",  # Meteor Lake
    (12, 71): "xe-lpg",
    (12, 74): "xe-lpgplus",  # Arrow Lake-H
    (20, 1): "xe2-hpg",  # Battlemage (Arc B-series)
    (20, 2): "xe2-hpg",
    (20, 4): "xe2-lpg",  # Lunar Lake
    (30, 0): "xe3-lpg",  # Panther Lake
    (30, 1): "xe3-lpg",
}


def intel_ip_version(value: int) -> tuple[int, int, int]:
    """(major, minor, revision) of a CL_DEVICE_IP_VERSION_INTEL value.

    Current drivers encode the GMD id: architecture in bits 31..22, release in 21..14, revision
    in 5..0 (clinfo prints these values as if they were a cl_version, e.g. 12.224.5 for 12.56.5).
    Older drivers used (major << 16) | (minor << 8) | revision, which leaves bits 31..22 zero.
    """
    if value >> 22:
        return value >> 22, (value >> 14) & 0xFF, value & 0x3F
    return (value >> 16) & 0xFFFF, (value >> 8) & 0xFF, value & 0xFF


def intel_gpu_arch(ip_version: int) -> str:
    """The Intel GPU generation for a CL_DEVICE_IP_VERSION_INTEL value ("xe-hpc", "gen12lp", ...).

    An IP that is not in the table gives its "major.minor" (e.g. "12.99"), which ocloc also
    accepts as a device name.
    """
    major, minor, _ = intel_ip_version(ip_version)
    if major == 9:
        return "gen9"
    if major == 11:
        return "gen11"
    return _INTEL_IP_ARCH.get((major, minor), f"{major}.{minor}")


# Marketing names, most specific first.
_INTEL_NAME_ARCH: tuple[tuple[str, str], ...] = (
    (r"data center gpu max", "xe-hpc"),
    (r"data center gpu flex", "xe-hpg"),
    (r"arc\(tm\) (pro )?a\d", "xe-hpg"),
    (r"arc\(tm\) (pro )?b\d", "xe2-hpg"),
    (r"iris\(r\) xe", "gen12lp"),
    (r"uhd graphics 7\d\d", "gen12lp"),
    (r"uhd graphics 6\d\d", "gen9"),
)
# PCI device ids by their first two hex digits, for names like "Intel(R) Graphics [0x56a0]".
_INTEL_PCI_ARCH: dict[str, str] = {
    "0b": "xe-hpc",  # 0x0bd0-0x0bdb Ponte Vecchio
    "56": "xe-hpg",  # DG2: Arc A-series, Flex
    "e2": "xe2-hpg",  # Battlemage
    "64": "xe2-lpg",  # Lunar Lake
    "7d": "xe-lpg",  # Meteor Lake (and Arrow Lake, whose IP says xe-lpgplus)
    "9a": "gen12lp",  # Tiger Lake
    "46": "gen12lp",  # Alder Lake
    "a7": "gen12lp",  # Raptor Lake
    "4c": "gen12lp",  # Rocket Lake
    "49": "gen12lp",  # DG1
    "8a": "gen11",  # Ice Lake
    "4e": "gen11",  # Jasper Lake, Elkhart Lake
    "59": "gen9",  # Kaby Lake
    "3e": "gen9",  # Coffee Lake
    "9b": "gen9",  # Comet Lake
    "19": "gen9",  # Skylake
}


def intel_gpu_arch_from_name(name: str) -> str | None:
    """The Intel GPU generation a device name reveals, or None (CPUs, unknown names)."""
    low = name.lower()
    for pattern, arch in _INTEL_NAME_ARCH:
        if re.search(pattern, low):
            return arch
    pci = _INTEL_PCI_ID.search(name)
    if pci:
        return _INTEL_PCI_ARCH.get(pci.group(1).lower()[:2])
    return None


def opencl_c_number(text: str) -> str:
    """ "1.2" from CL_DEVICE_OPENCL_C_VERSION's "OpenCL C 1.2 PoCL"; the stripped text otherwise."""
    match = re.search(r"OpenCL C (\d+\.\d+)", text)
    return match.group(1) if match else text.strip()


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- live devices -------------------------------------------------------------------------------

# Vendor queries pyopencl may not know; passed to clGetDeviceInfo as raw ints.
CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV = 0x4000
CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV = 0x4001
CL_DEVICE_BOARD_NAME_AMD = 0x4038
CL_DEVICE_IP_VERSION_INTEL = 0x4250


@cache
def _opencl_library() -> ctypes.CDLL | None:
    """The ICD loader pyopencl uses (its wheel bundles one), else the system's libOpenCL."""
    import pyopencl

    candidates = sorted((Path(pyopencl.__file__).parent / ".libs").glob("libOpenCL*"))
    system = ctypes.util.find_library("OpenCL")
    for candidate in [*map(str, candidates), *([system] if system else [])]:
        try:
            lib = ctypes.CDLL(candidate)
        except OSError:
            continue
        lib.clGetDeviceInfo.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
        ]
        lib.clGetDeviceInfo.restype = ctypes.c_int32
        return lib
    return None


def query_uint(dev: cl.Device, param: int) -> int | None:
    """A cl_uint device query by its raw number, or None when the device does not answer it.

    pyopencl's get_info knows many vendor queries but not all (CL_DEVICE_IP_VERSION_INTEL);
    those go to clGetDeviceInfo directly through ctypes.
    """
    try:
        value = dev.get_info(cast(Any, param))
    except Exception:  # pyopencl raises LogicError/RuntimeError/ValueError by version
        value = None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    lib = _opencl_library()
    if lib is None:
        return None
    out = ctypes.c_uint32(0)
    status = lib.clGetDeviceInfo(
        ctypes.c_void_p(dev.int_ptr), param, ctypes.sizeof(out), ctypes.byref(out), None
    )
    return int(out.value) if status == 0 else None


def _query_str(dev: cl.Device, param: int) -> str:
    try:
        value = dev.get_info(cast(Any, param))
    except Exception:  # an unknown or unanswered query reads as absent
        return ""
    return value.strip() if isinstance(value, str) else ""


def _device_type(bits: int) -> str:
    import pyopencl as cl

    if bits & cl.device_type.GPU:
        return "gpu"
    if bits & cl.device_type.CPU:
        return "cpu"
    if bits & (cl.device_type.ACCELERATOR | cl.device_type.CUSTOM):
        return "accelerator"
    raise DeviceError(f"device type {bits:#x} is none of cpu, gpu, accelerator")


def _local_mem_type(value: int) -> str:
    import pyopencl as cl

    if value == cl.device_local_mem_type.LOCAL:
        return "local"
    if value == cl.device_local_mem_type.GLOBAL:
        return "global"
    return "none"


def _features(dev: cl.Device) -> tuple[str, ...]:
    try:
        return tuple(f.name for f in dev.opencl_c_features)
    except Exception:  # before OpenCL 3.0 the query does not exist
        return ()


def from_device(dev: cl.Device) -> DeviceProfile:
    """Read a live device's profile; raise DeviceError when the driver does not answer."""
    import pyopencl as cl

    try:
        return _read(dev)
    except cl.Error as exc:
        raise DeviceError(f"cannot read the profile of OpenCL device {dev!r}: {exc}") from None


def _read(dev: cl.Device) -> DeviceProfile:
    import pyopencl as cl

    info = cl.device_info
    platform = dev.platform
    raw_name = dev.name
    vendor_string = dev.vendor
    device_version = dev.version
    extensions = tuple(sorted(set(dev.extensions.split())))
    raw: dict[str, str] = {
        "name": raw_name,
        "vendor": vendor_string,
        "vendor_id": f"{dev.vendor_id:#x}",
        "device_version": device_version,
        "opencl_c_version": dev.opencl_c_version,
        "platform_name": platform.name,
        "platform_version": _one_line(platform.version),
    }

    board_name = ""
    if "cl_amd_device_attribute_query" in extensions:
        board_name = _query_str(dev, CL_DEVICE_BOARD_NAME_AMD)
        if board_name:
            raw["board_name"] = board_name
    name, arch = split_device_name(raw_name, device_version, board_name=board_name)

    if "cl_nv_device_attribute_query" in extensions:
        major = query_uint(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV)
        minor = query_uint(dev, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV)
        if major is not None and minor is not None:
            arch = f"sm_{major}{minor}"
            raw["compute_capability"] = f"{major}.{minor}"
    device_type = _device_type(dev.type)
    if device_type == "gpu" and "cl_intel_device_attribute_query" in extensions:
        ip = query_uint(dev, CL_DEVICE_IP_VERSION_INTEL)
        if ip:
            arch = intel_gpu_arch(ip)
            raw["ip_version"] = f"{ip:#x}"

    widths = tuple(
        (t, int(cast(int, dev.get_info(getattr(info, f"PREFERRED_VECTOR_WIDTH_{t.upper()}")))))
        for t in VECTOR_TYPES
    )
    subgroups = any(e in extensions for e in SUBGROUP_EXTENSIONS) or (
        SUBGROUP_FEATURE in _features(dev)
    )
    return DeviceProfile(
        name=name,
        vendor=normalize_vendor(vendor_string, platform.name, raw_name),
        device_type=device_type,
        arch=arch,
        extensions=extensions,
        local_mem_bytes=int(dev.local_mem_size),
        local_mem_type=_local_mem_type(dev.local_mem_type),
        max_work_group_size=int(dev.max_work_group_size),
        compute_units=int(dev.max_compute_units),
        opencl_c_version=opencl_c_number(dev.opencl_c_version),
        driver_version=dev.driver_version.strip(),
        preferred_vector_widths=widths,
        subgroups=subgroups,
        source=(
            f"live query via pyopencl on {_one_line(platform.name)} {_one_line(platform.version)}"
        ),
        raw=tuple(sorted(raw.items())),
    )


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
