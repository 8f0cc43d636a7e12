"""The program cache: built programs per context in memory, and their binaries on disk.

A disk entry is keyed by the source hash, the build options, the platform, the device (name and
version string, which names PoCL's CPU target), the driver version and the clforge version, so
any change to one of them misses. Each entry is written whole and read back through the checked
envelope (core/envelope.py: magic, length, SHA-256 of the entry and of its key), verified before
the binary reaches the driver: a truncated, damaged, unreadable or untrusted entry (which could
crash a driver that trusts it) is removed with one warning and rebuilt from source, and so is a
binary the driver refuses. `CLFORGE_CACHE_DIR` moves the folder (default ~/.cache/clforge,
created 0700; one another user could write is refused); `CLFORGE_CACHE=0` turns the disk part
off.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyopencl as cl

from clforge import __version__
from clforge.core import envelope
from clforge.core.cache_dir import check_private, private_dir
from clforge.errors import BuildError, ClforgeWarning

KIND = "program"  # the envelope's kind of a program binary


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    builds: int = 0
    rebuilt_corrupt: int = 0


@dataclass
class ProgramCache:
    directory: Path | None  # None: memory only
    stats: CacheStats = field(default_factory=CacheStats)
    _memory: dict[tuple[int, str], cl.Program] = field(default_factory=dict)
    _checked: bool = field(default=False, repr=False)

    @classmethod
    def default(cls) -> ProgramCache:
        return cls(private_dir())

    @staticmethod
    def key(device: cl.Device, source: str, options: str) -> str:
        parts = {
            "clforge": __version__,
            "platform": f"{device.platform.name} {device.platform.version}",
            "device": device.name,
            # what the driver compiles for: PoCL names its LLVM CPU target only here (HSTR:
            # "pthread-x86_64-unknown-linux-gnu-rocketlake"), and masked CPU names ("Intel(R)
            # Xeon(R) Processor") are alike on machines of other instruction sets
            "device_version": device.version,
            "driver": device.driver_version,
            "options": options,
            "source": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "entry": 2,  # the checked envelope; entries of the format before it are never read
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
        folder = self._folder()
        path = folder / f"{key}.bin" if folder is not None else None
        if path is not None:
            prog, damaged = self._from_disk(ctx, device, name, path, key, options)
            if prog is not None:
                self.stats.disk_hits += 1
                self._memory[mem_key] = prog
                return prog
            self.stats.rebuilt_corrupt += damaged
        prog = self._from_source(ctx, name, source, options)
        self.stats.builds += 1
        if path is not None:
            binaries: list[bytes] = prog.get_info(cl.program_info.BINARIES)  # type: ignore[assignment]
            binary = binaries[0] if binaries else b""
            if binary:
                try:
                    envelope.write(path, KIND, bytes.fromhex(key), bytes(binary))
                except OSError as exc:  # a read-only home must not break launching
                    warnings.warn(
                        f"clforge: cannot write program cache {path}: {exc}",
                        ClforgeWarning,
                        stacklevel=2,
                    )
        self._memory[mem_key] = prog
        return prog

    def _folder(self) -> Path | None:
        """The disk folder, created private where missing and checked once (CacheError when
        another user could write it); None for memory only, or where it cannot be created."""
        if self.directory is None or self._checked:
            return self.directory
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:  # a read-only home must not break launching
            self.directory = None
            return None
        check_private(self.directory)
        self._checked = True
        return self.directory

    @staticmethod
    def _from_disk(
        ctx: cl.Context, device: cl.Device, name: str, path: Path, key: str, options: str
    ) -> tuple[cl.Program | None, bool]:
        """The program from a verified entry, or None (and whether an unusable entry was
        removed, with one warning)."""
        what = f"the cached binary of {name}"
        status, binary = envelope.read(path, KIND, bytes.fromhex(key), what)
        if status is not envelope.Status.OK:
            return None, status is envelope.Status.DAMAGED
        problem = "was refused by the driver"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prog = cl.Program(ctx, [device], [binary]).build(options=options)
            if _has_kernels(prog):
                return prog, False
            problem = "holds no kernel"
        except (cl.Error, cl.RuntimeError):
            pass
        warnings.warn(
            f"clforge: {what} ({path}) {problem}; removed and rebuilt from source",
            ClforgeWarning,
            stacklevel=4,
        )
        envelope.remove(path)
        return None, True

    @staticmethod
    def _from_source(ctx: cl.Context, name: str, source: str, options: str) -> cl.Program:
        for attempt in (1, 2):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    # cache_dir=False: not PyOpenCL's own compiler cache as well (a folder of
                    # pickles it unpickles unchecked, used for drivers without a source cache of
                    # their own); this cache keeps the binary, checked
                    prog = cl.Program(ctx, source).build(options=options, cache_dir=False)  # type: ignore[arg-type]
                break
            except (cl.Error, cl.RuntimeError) as exc:
                # a located compiler diagnostic (`<source>:12:5: error: ...`) is the source's and
                # comes back every time; a failure without one may be the driver's environment
                # (seen once with PoCL 3.0, four processes building at once on a loaded host):
                # that one is tried once more before it counts
                if attempt == 2 or _LOCATED_ERROR.search(str(exc)):
                    raise BuildError(name, str(exc)) from None
        if not _has_kernels(prog):
            # seen with PoCL 3.0 compiling for an older CPU than the host (znver3 on Zen 4):
            # the build reports success, the program holds nothing, and reading its binary crashes
            raise BuildError(
                name, "the driver reported a successful build, but the program holds no kernel"
            )
        return prog


_LOCATED_ERROR = re.compile(r":\d+:\d+: (?:fatal )?error", re.IGNORECASE)


def _has_kernels(prog: cl.Program) -> bool:
    try:
        return bool(prog.get_info(cl.program_info.KERNEL_NAMES))
    except cl.Error:
        return False
