"""Vendor, device-name and architecture normalization: pure functions over the raw strings
OpenCL drivers report (testable without a device)."""

from __future__ import annotations

import re

from clforge.core.targets import UNKNOWN_VENDOR

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
    return UNKNOWN_VENDOR


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


def one_line(text: str) -> str:
    return " ".join(text.split())
