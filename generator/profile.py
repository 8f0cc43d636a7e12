"""Device profiles: what selection needs to know about a device, live or from a YAML file."""

from __future__ import annotations

from dataclasses import dataclass, field


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
        """A numeric field by the name a spec's requires: uses."""
        value = getattr(self, name)
        if not isinstance(value, int):
            raise KeyError(name)
        return value
