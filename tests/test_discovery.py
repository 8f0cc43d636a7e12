"""Finding a device whose compiler works for the whole CPU: the probe, the host's vector width,
and the choice among devices."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyopencl as cl
import pytest

from clforge.device import discovery
from clforge.device.discovery import DeviceStatus, host_simd_bits, probe
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
