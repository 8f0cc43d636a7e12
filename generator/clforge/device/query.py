"""Querying a live device for its profile (pyopencl, plus raw clGetDeviceInfo through ctypes for
vendor queries pyopencl does not know). pyopencl is imported only when a device is queried."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from clforge.device.host import host_cpu
from clforge.device.isa import ISAS
from clforge.device.profile import (
    SUBGROUP_EXTENSIONS,
    SUBGROUP_FEATURE,
    VECTOR_TYPES,
    DeviceProfile,
    with_model,
)
from clforge.device.vendors import (
    intel_gpu_arch,
    normalize_vendor,
    one_line,
    opencl_c_number,
    split_device_name,
)
from clforge.errors import DeviceError

if TYPE_CHECKING:
    import pyopencl as cl

# --- live devices -------------------------------------------------------------------------------

# Vendor queries pyopencl may not know; passed to clGetDeviceInfo as raw ints.
CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV = 0x4000
CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV = 0x4001
CL_DEVICE_BOARD_NAME_AMD = 0x4038
CL_DEVICE_IP_VERSION_INTEL = 0x4250
CL_DEVICE_WARP_SIZE_NV = 0x4003
CL_DEVICE_WAVEFRONT_WIDTH_AMD = 0x4043
CL_DEVICE_SUB_GROUP_SIZES_INTEL = 0x4108


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
    import pyopencl as cl

    try:
        value = dev.get_info(cast(Any, param))
    except (cl.Error, ValueError, TypeError):  # unknown to the driver or to pyopencl's enums
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


def query_sizes(dev: cl.Device, param: int) -> list[int]:
    """A size_t[] device query by its raw number through clGetDeviceInfo ([] when the device
    does not answer it)."""
    lib = _opencl_library()
    if lib is None:
        return []
    size = ctypes.c_size_t(0)
    device = ctypes.c_void_p(dev.int_ptr)
    if lib.clGetDeviceInfo(device, param, 0, None, ctypes.byref(size)) != 0 or not size.value:
        return []
    values = (ctypes.c_size_t * (size.value // ctypes.sizeof(ctypes.c_size_t)))()
    if lib.clGetDeviceInfo(device, param, size.value, values, None) != 0:
        return []
    return [int(v) for v in values]


def _query_str(dev: cl.Device, param: int) -> str:
    import pyopencl as cl

    try:
        value = dev.get_info(cast(Any, param))
    except (cl.Error, ValueError, TypeError):  # an unknown or unanswered query reads as absent
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
    import pyopencl as cl

    try:
        return tuple(f.name for f in dev.opencl_c_features)
    except (cl.Error, AttributeError):  # before OpenCL 3.0 (or pyopencl 2022) no such query
        return ()


def _sub_group_size(dev: cl.Device, extensions: tuple[str, ...]) -> int:
    """A GPU's warp (NVIDIA) or wavefront (AMD) width, or the smallest sub-group size an Intel
    GPU lists (the width every kernel can count on); 0 where the driver says none of these."""
    if "cl_nv_device_attribute_query" in extensions:
        return query_uint(dev, CL_DEVICE_WARP_SIZE_NV) or 0
    if "cl_amd_device_attribute_query" in extensions:
        return query_uint(dev, CL_DEVICE_WAVEFRONT_WIDTH_AMD) or 0
    if "cl_intel_required_subgroup_size" in extensions:
        return min(query_sizes(dev, CL_DEVICE_SUB_GROUP_SIZES_INTEL), default=0)
    return 0


def _cpu_model(dev: cl.Device) -> dict[str, Any]:
    """A CPU device's model: the vector ISA its compiler targets (the probe's, read once per
    device), the host's cores and caches (sysfs), else OpenCL's cache query, which PoCL answers
    with the last level's size."""
    from clforge.device.discovery import probe

    out: dict[str, Any] = {}
    isa = ISAS.get(probe(dev).compiled_isa)
    if isa is not None:
        widths = int(cast(int, dev.preferred_vector_width_float))
        out |= {"vector_isa": isa.name, "vector_bits": isa.bits or 32 * widths}
        out["vector_registers"] = isa.registers
    host = host_cpu()
    out |= {"cores": host.cores, "l1d_bytes": host.l1d_bytes, "l2_bytes": host.l2_bytes}
    out["l3_bytes"] = host.l3_bytes
    if not (host.l1d_bytes or host.l2_bytes or host.l3_bytes):
        out["l3_bytes"] = int(dev.global_mem_cache_size)
    return out


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
        "platform_version": one_line(platform.version),
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
    if device_type == "cpu":
        model = _cpu_model(dev)
    else:
        model = {
            "l2_bytes": int(dev.global_mem_cache_size),
            "sub_group_size": _sub_group_size(dev, extensions),
        }
    profile = DeviceProfile(
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
            f"live query via pyopencl on {one_line(platform.name)} {one_line(platform.version)}"
        ),
        raw=tuple(sorted(raw.items())),
        **model,
    )
    return with_model(profile)
