"""The host CPU as Linux describes it: physical cores and the cache sizes of one core, read from
sysfs (`/sys/devices/system/cpu`). A CPU device's profile takes them from here, and where they
are unreadable (another OS, a container that hides sysfs) from OpenCL's cache query. Nothing
here imports pyopencl."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class HostCpu:
    """Cores and per-core caches (0 where unknown)."""

    cores: int = 0
    l1d_bytes: int = 0
    l2_bytes: int = 0
    l3_bytes: int = 0


def _size(text: str) -> int:
    """ "48K" -> 49152 (sysfs cache sizes); 0 for what does not parse."""
    text = text.strip().upper()
    scale = _UNITS.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in _UNITS else text
    return int(digits) * scale if digits.isdigit() else 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def caches(cpu_dir: Path) -> dict[int, int]:
    """Data (or unified) cache size by level, of the CPU at `cpu_dir` (`.../cpu0`)."""
    out: dict[int, int] = {}
    for index in sorted(cpu_dir.glob("cache/index*")):
        kind = _read(index / "type")
        level = _read(index / "level")
        size = _size(_read(index / "size"))
        if kind in ("Data", "Unified") and level.isdigit() and size:
            out.setdefault(int(level), size)
    return out


def physical_cores(sysfs: Path) -> int:
    """Distinct (package, core) pairs among the CPUs sysfs lists; 0 when it lists none."""
    seen = set()
    for cpu in sysfs.glob("cpu[0-9]*"):
        core = _read(cpu / "topology" / "core_id")
        package = _read(cpu / "topology" / "physical_package_id")
        if core:
            seen.add((package, core))
    return len(seen)


def host_cpu(sysfs: Path = SYSFS_CPU) -> HostCpu:
    """This machine's cores and cpu0's caches; cores fall back to os.cpu_count()."""
    levels = caches(sysfs / "cpu0")
    cores = physical_cores(sysfs) or (os.cpu_count() or 0)
    return HostCpu(cores, levels.get(1, 0), levels.get(2, 0), levels.get(3, 0))
