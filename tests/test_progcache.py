"""The program cache: in memory per context, on disk across processes, corrupt entries rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyopencl as cl
import pytest

from clforge.errors import BuildError
from clforge.runtime.program_cache import ProgramCache

SCRIPT = """
import json
from clforge.runtime.launch import Runtime
rt = Runtime()
rt.kernel(rt.registry.instance("matmul__cpu_blocked__f32__a_row__b_row"))
rt.kernel(rt.registry.instance("matmul__cpu_blocked__f32__a_row__b_row"))
print(json.dumps(vars(rt.cache.stats)))
"""


def _run(cache: Path, pocl: Path) -> dict[str, int]:
    env = {**os.environ, "CLFORGE_CACHE_DIR": str(cache), "POCL_CACHE_DIR": str(pocl)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_from_disk(tmp_path: Path) -> None:
    cache, pocl = tmp_path / "cache", tmp_path / "pocl"
    first = _run(cache, pocl)
    assert first == {"memory_hits": 0, "disk_hits": 0, "builds": 1, "rebuilt_corrupt": 0}
    entries = list(cache.glob("*.bin"))
    assert len(entries) == 1 and entries[0].stat().st_size > 0
    second = _run(cache, pocl)
    assert second == {"memory_hits": 0, "disk_hits": 1, "builds": 0, "rebuilt_corrupt": 0}


def test_corrupt_entry_is_rebuilt_and_replaced(tmp_path: Path) -> None:
    cache, pocl = tmp_path / "cache", tmp_path / "pocl"
    _run(cache, pocl)
    (entry,) = cache.glob("*.bin")
    entry.write_bytes(b"\x00garbage" * 10)
    third = _run(cache, pocl)
    assert third == {"memory_hits": 0, "disk_hits": 0, "builds": 1, "rebuilt_corrupt": 1}
    assert _run(cache, pocl)["disk_hits"] == 1


def test_key_covers_source_and_options(runtime) -> None:
    dev = runtime.device
    base = ProgramCache.key(dev, "kernel void f() {}", "")
    assert ProgramCache.key(dev, "kernel void f() {}", "") == base
    assert ProgramCache.key(dev, "kernel void g() {}", "") != base
    assert ProgramCache.key(dev, "kernel void f() {}", "-cl-fast-relaxed-math") != base


def test_memory_cache_is_per_context(runtime, tmp_path: Path) -> None:
    cache = ProgramCache(tmp_path)
    inst = runtime.registry.instance("add__generic__f32")
    src = runtime.registry.source(inst)
    p1 = cache.program(runtime.context, runtime.device, inst.name, src)
    assert cache.program(runtime.context, runtime.device, inst.name, src) is p1
    other = cl.Context([runtime.device])
    assert cache.program(other, runtime.device, inst.name, src) is not p1
    assert cache.stats.memory_hits == 1 and cache.stats.disk_hits == 1


def test_a_build_that_succeeds_with_no_kernel_is_a_build_error(runtime, tmp_path: Path) -> None:
    # PoCL 3.0 compiling for an older CPU than the host returned such programs for some kernels
    # (and reading their binary crashed the process); a source with no kernel gives the same
    # program on every driver
    from clforge.errors import BuildError

    cache = ProgramCache(tmp_path)
    with pytest.raises(BuildError, match="holds no kernel"):
        cache.program(runtime.context, runtime.device, "empty", "void helper(void) {}")
    assert not list(tmp_path.glob("*.bin"))


def test_the_suite_never_writes_the_users_cache() -> None:
    from clforge.call.dispatcher import dispatcher

    home = (Path.home() / ".cache" / "clforge").resolve()
    for cache in (ProgramCache.default(), dispatcher().runtime.cache):
        assert cache.directory is not None
        assert not cache.directory.resolve().is_relative_to(home)


def _damage(entry: Path, how: str, at: float) -> None:
    data = bytearray(entry.read_bytes())
    cut = int(len(data) * at)
    if how == "truncate":
        entry.write_bytes(bytes(data[:cut]))
    else:  # flip 16 bytes at the cut point
        for i in range(cut, min(cut + 16, len(data))):
            data[i] ^= 0xFF
        entry.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "at"),
    # a cut or flip at the start, in the header, in the middle and at the end: the checksum
    # covers every byte alike (each case is three fresh processes, ~5 s of the suite)
    [("truncate", f) for f in (0.0, 0.01, 0.5, 0.99)] + [("flip", f) for f in (0.0, 0.5, 0.98)],
)
def test_damaged_entry_is_removed_and_rebuilt_not_trusted(tmp_path: Path, how: str, at: float):
    """Damage that would crash PoCL (a truncated or bit-flipped binary) never reaches it: the
    checksum refuses the entry, which is removed with a warning and rebuilt."""
    cache, pocl = tmp_path / "cache", tmp_path / "pocl"
    _run(cache, pocl)
    (entry,) = cache.glob("*.bin")
    _damage(entry, how, at)
    env = {**os.environ, "CLFORGE_CACHE_DIR": str(cache), "POCL_CACHE_DIR": str(pocl)}
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats == {"memory_hits": 0, "disk_hits": 0, "builds": 1, "rebuilt_corrupt": 1}
    assert "removed and rebuilt from source" in done.stderr
    assert _run(cache, pocl)["disk_hits"] == 1  # the rebuilt entry is good again


def test_key_covers_the_target_the_driver_compiles_for(runtime) -> None:
    """Two machines whose CPUs PoCL names alike (a masked "Intel(R) Xeon(R) Processor") but
    compiles for differently (its LLVM target, in the device version's HSTR) share no entry: a
    binary for one instruction set is never handed to a driver on the other."""
    from types import SimpleNamespace

    dev = runtime.device
    fields = ("name", "version", "driver_version")
    here = SimpleNamespace(platform=dev.platform, **{f: getattr(dev, f) for f in fields})
    zen3 = SimpleNamespace(**{**vars(here), "version": "OpenCL 3.0 PoCL HSTR: pthread-znver3"})
    base = ProgramCache.key(here, "kernel void f() {}", "")  # type: ignore[arg-type]
    assert base == ProgramCache.key(dev, "kernel void f() {}", "")
    assert ProgramCache.key(zen3, "kernel void f() {}", "") != base  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("log", "builds"),
    [
        ("<program source>:3:5: error: use of undeclared identifier 'x'", 1),  # the source's
        ("clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <device>:\n\n", 2),
    ],
)
def test_a_build_failure_without_a_located_error_is_tried_once_more(
    monkeypatch: pytest.MonkeyPatch, log: str, builds: int
) -> None:
    """A compiler diagnostic at a line of the source fails every time, so it counts at once; a
    failure without one (the driver's environment: seen once with four processes building at
    once on a loaded host) is tried once more before the build counts as failed."""
    from clforge.runtime import program_cache

    tries: list[str] = []

    class Failing:
        def __init__(self, ctx: object, source: str) -> None:
            pass

        def build(self, **kwargs: object) -> None:
            tries.append(log)
            raise cl.RuntimeError(log)

    monkeypatch.setattr(program_cache.cl, "Program", Failing)
    with pytest.raises(BuildError):
        program_cache.ProgramCache._from_source(None, "x__generic__f32", "kernel", "")  # type: ignore[arg-type]
    assert len(tries) == builds
