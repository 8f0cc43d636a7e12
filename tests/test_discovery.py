"""Finding a device whose compiler works for the whole CPU: the probe, the host's vector width,
and the choice among devices."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyopencl as cl
import pytest

from clforge.device import discovery
from clforge.device.discovery import DeviceStatus, host_simd_bits, probe
from clforge.device.isa import ISAS, isa_by_code, isa_of_llvm_cpu, probe_source
from clforge.errors import ClforgeWarning, DeviceError


@pytest.mark.parametrize(
    ("flags", "bits"),
    [
        ("fpu sse sse2 avx avx2 fma avx512f avx512bw", 512),
        ("fpu sse sse2 avx avx2 fma", 256),
        ("fpu sse sse2 avx", 256),
        ("fpu sse sse2", 128),
        ("fpu", 0),
    ],
)
def test_host_simd_bits_reads_the_widest_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str, bits: int
) -> None:
    monkeypatch.setattr(discovery.platform, "machine", lambda: "x86_64")
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert host_simd_bits(info) == bits


def test_host_simd_bits_is_unknown_off_x86_or_without_cpuinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discovery.platform, "machine", lambda: "x86_64")
    assert host_simd_bits(tmp_path / "missing") == 0
    monkeypatch.setattr(discovery.platform, "machine", lambda: "aarch64")
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t: avx512f\n")
    assert host_simd_bits(info) == 0


def test_probe_runs_a_kernel_on_the_default_device() -> None:
    status = probe(discovery.default_device())
    assert status.builds and status.problem == ""
    assert not status.under_targets, status.verdict
    if status.device.type & cl.device_type.CPU and status.host_simd:
        # a CPU device: its compiler's target was read and compared
        assert status.compiled_simd >= status.host_simd
        assert ISAS[status.compiled_isa].bits == status.compiled_simd  # an x86 ISA, named
    assert probe(status.device) is status  # once per device and process


def test_the_probe_asks_the_compiler_for_each_isa_widest_first() -> None:
    source = probe_source("out")
    at = [source.index(f"defined({isa.macro})") for isa in ISAS.values()]
    assert at == sorted(at) and source.count("#elif") == len(ISAS) - 1
    assert all(isa_by_code(isa.code) is isa for isa in ISAS.values())
    assert isa_by_code(0) is None and len({isa.code for isa in ISAS.values()}) == len(ISAS)


@pytest.mark.parametrize(
    ("cpu", "isa"),
    [
        ("icelake-client", "avx512"),  # the Xeon's PyPI PoCL 3.0
        ("skylake-avx512", "avx512"),  # Debian's PoCL 3.1 on Zen 4/5
        ("rocketlake", "avx512"),
        ("znver4", "avx512"),
        ("znver3", "avx2"),  # PyPI PoCL 3.0 on Zen 3, and on a Zen 4 it does not know
        ("haswell", "avx2"),
        ("alderlake", "avx2"),  # AVX-512 fused off
        ("sandybridge", "avx"),
        ("x86-64", "sse2"),
        ("generic", None),  # PoCL on a CPU its LLVM does not know: the width decides
    ],
)
def test_the_isa_of_llvm_cpu_names(cpu: str, isa: str | None) -> None:
    found = isa_of_llvm_cpu(cpu)
    assert (found.name if found else None) == isa


class _FakeDevice:
    def __init__(self, name: str) -> None:
        self.name = name
        self.platform = type("P", (), {"name": "Fake", "version": "1.0"})()


def _statuses(monkeypatch: pytest.MonkeyPatch, table: dict[str, DeviceStatus]) -> None:
    devices = [s.device for s in table.values()]
    monkeypatch.setattr(discovery, "all_devices", lambda: devices)
    monkeypatch.setattr(discovery, "probe", lambda d: table[d.name])
    monkeypatch.delenv(discovery.DEVICE_ENV, raising=False)
    discovery.default_device.cache_clear()


def test_default_device_prefers_a_compiler_for_the_whole_cpu(monkeypatch) -> None:
    old, new = _FakeDevice("pocl-3.0"), _FakeDevice("pocl-3.1")
    table = {
        "pocl-3.0": DeviceStatus(old, True, "", compiled_simd=256, host_simd=512),
        "pocl-3.1": DeviceStatus(new, True, "", compiled_simd=512, host_simd=512),
    }
    _statuses(monkeypatch, table)
    try:
        assert table["pocl-3.0"].under_targets and "256-bit vectors" in table["pocl-3.0"].verdict
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert discovery.default_device() is new
    finally:
        discovery.default_device.cache_clear()


def test_default_device_takes_a_narrow_compiler_with_a_warning(monkeypatch) -> None:
    broken, narrow = _FakeDevice("broken"), _FakeDevice("narrow")
    table = {
        "broken": DeviceStatus(broken, False, "unknown target CPU 'generic'"),
        "narrow": DeviceStatus(narrow, True, "", compiled_simd=256, host_simd=512),
    }
    _statuses(monkeypatch, table)
    try:
        with pytest.warns(ClforgeWarning, match="256-bit vectors on a CPU with 512-bit"):
            assert discovery.default_device() is narrow
    finally:
        discovery.default_device.cache_clear()


def test_no_device_that_builds_is_a_device_error_naming_each(monkeypatch) -> None:
    table = {"broken": DeviceStatus(_FakeDevice("broken"), False, "unknown target CPU 'generic'")}
    _statuses(monkeypatch, table)
    try:
        with pytest.raises(
            DeviceError, match=r"Fake 1\.0: broken \(unknown target CPU 'generic'\)"
        ):
            discovery.default_device()
    finally:
        discovery.default_device.cache_clear()


def test_devices_shows_each_device_model(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from clforge.device.query import from_device
    from clforge.tools.cli import main

    assert main(["devices", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dev = discovery.default_device()
    (mine,) = [d for d in doc["devices"] if d["name"] == dev.name]
    p = from_device(dev)
    assert mine["device_type"] == p.device_type and mine["compute_units"] == p.compute_units
    assert mine["preferred_vector_widths"] == dict(p.preferred_vector_widths)
    keys = ("vector_isa", "vector_bits", "vector_registers", "cores", "l1d_bytes", "l2_bytes")
    assert all(mine[k] == getattr(p, k) for k in (*keys, "l3_bytes", "sub_group_size"))
    if p.device_type == "cpu":
        assert mine["vector_isa"] in ISAS and mine["vector_registers"] in (16, 32)
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    assert f"  {p.device_type}: " in text and "preferred vector widths" in text
