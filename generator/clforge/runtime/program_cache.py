"""The program cache: built programs per context in memory, and their binaries on disk.

A disk entry is keyed by the source hash, the build options, the platform, device and driver
versions and the clforge version, so any change to one of them misses. Each entry carries a
checksum of its binary, verified before the binary reaches the driver: a truncated or damaged
file (which can crash a driver that trusts it) is removed with a warning and rebuilt from
source, and so is a binary the driver refuses. `CLFORGE_CACHE_DIR` moves the folder (default
~/.cache/clforge); `CLFORGE_CACHE=0` turns the disk part off.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyopencl as cl

from clforge import __version__
from clforge.core.atomic_file import atomic_write_bytes
from clforge.core.cache_dir import cache_dir
from clforge.errors import BuildError, ClforgeWarning

# entry = MAGIC, the sha256 of the binary (32 bytes), its length (8 bytes, little-endian), binary
MAGIC = b"clforge-program-1\n"
_HEAD = len(MAGIC) + 32 + 8


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    builds: int = 0
    rebuilt_corrupt: int = 0


def pack_entry(binary: bytes) -> bytes:
    return MAGIC + hashlib.sha256(binary).digest() + len(binary).to_bytes(8, "little") + binary


def unpack_entry(data: bytes) -> bytes | None:
    """The binary of a cache entry, or None when the entry is damaged in any way."""
    if len(data) < _HEAD or not data.startswith(MAGIC):
        return None
    digest = data[len(MAGIC) : len(MAGIC) + 32]
    length = int.from_bytes(data[len(MAGIC) + 32 : _HEAD], "little")
    binary = data[_HEAD:]
    if length != len(binary) or not binary or hashlib.sha256(binary).digest() != digest:
        return None
    return binary


@dataclass
class ProgramCache:
    directory: Path | None  # None: memory only
    stats: CacheStats = field(default_factory=CacheStats)
    _memory: dict[tuple[int, str], cl.Program] = field(default_factory=dict)

    @classmethod
    def default(cls) -> ProgramCache:
        return cls(cache_dir())

    @staticmethod
    def key(device: cl.Device, source: str, options: str) -> str:
        parts = {
            "clforge": __version__,
            "platform": f"{device.platform.name} {device.platform.version}",
            "device": device.name,
            "driver": device.driver_version,
            "options": options,
            "source": hashlib.sha256(source.encode("utf-8")).hexdigest(),
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def program(
        self, ctx: cl.Context, device: cl.Device, name: str, source: str, options: str = ""
    ) -> cl.Program:
        key = self.key(device, source, options)
        mem_key = (ctx.int_ptr, key)
        prog = self._memory.get(mem_key)
        if prog is not None:
            self.stats.memory_hits += 1
            return prog
        path = self.directory / f"{key}.bin" if self.directory is not None else None
        if path is not None and path.is_file():
            prog = self._from_disk(ctx, device, name, path, options)
            if prog is not None:
                self.stats.disk_hits += 1
                self._memory[mem_key] = prog
                return prog
            self.stats.rebuilt_corrupt += 1
        prog = self._from_source(ctx, name, source, options)
        self.stats.builds += 1
        if path is not None:
            binaries: list[bytes] = prog.get_info(cl.program_info.BINARIES)  # type: ignore[assignment]
            binary = binaries[0] if binaries else b""
            if binary:
                try:
                    atomic_write_bytes(path, pack_entry(bytes(binary)))
                except OSError as exc:  # a read-only home must not break launching
                    warnings.warn(
                        f"clforge: cannot write program cache {path}: {exc}",
                        ClforgeWarning,
                        stacklevel=2,
                    )
        self._memory[mem_key] = prog
        return prog

    @staticmethod
    def _from_disk(
        ctx: cl.Context, device: cl.Device, name: str, path: Path, options: str
    ) -> cl.Program | None:
        """The program from a verified entry, or None after removing an unusable one."""
        try:
            binary = unpack_entry(path.read_bytes())
        except OSError:
            return None
        problem = "is damaged (its checksum or length does not match)"
        if binary is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    prog = cl.Program(ctx, [device], [binary]).build(options=options)
                if _has_kernels(prog):
                    return prog
                problem = "holds no kernel"
            except (cl.Error, cl.RuntimeError):
                problem = "was refused by the driver"
        warnings.warn(
            f"clforge: the cached binary of {name} ({path}) {problem}; removed and rebuilt "
            "from source",
            ClforgeWarning,
            stacklevel=4,
        )
        path.unlink(missing_ok=True)
        return None

    @staticmethod
    def _from_source(ctx: cl.Context, name: str, source: str, options: str) -> cl.Program:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prog = cl.Program(ctx, source).build(options=options)
        except (cl.Error, cl.RuntimeError) as exc:
            raise BuildError(name, str(exc)) from None
        if not _has_kernels(prog):
            # seen with PoCL 3.0 compiling for an older CPU than the host (znver3 on Zen 4):
            # the build reports success, the program holds nothing, and reading its binary crashes
            raise BuildError(
                name, "the driver reported a successful build, but the program holds no kernel"
            )
        return prog


def _has_kernels(prog: cl.Program) -> bool:
    try:
        return bool(prog.get_info(cl.program_info.KERNEL_NAMES))
    except cl.Error:
        return False
