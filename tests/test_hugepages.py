"""Transparent huge pages for CPU devices' buffers (generator/clforge/runtime/hugepages.py): the
kernel's setting read, the span advised, the advice really applied to a pool block (the
block's mapping is flagged in /proc/self/smaps), and results unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.runtime import hugepages
from clforge.runtime.hugepages import HUGE, huge_span, thp_setting


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
        ("garbage\n", "unavailable"),
    ],
)
def test_the_kernels_setting_is_the_bracketed_word(tmp_path: Path, text: str, mode: str) -> None:
    f = tmp_path / "enabled"
    f.write_text(text)
    assert thp_setting(f) == mode


def test_no_setting_file_means_unavailable(tmp_path: Path) -> None:
    assert thp_setting(tmp_path / "missing") == "unavailable"


@pytest.mark.parametrize(
    ("address", "nbytes", "span"),
    [
        (0, 2 * HUGE, (0, 2 * HUGE)),
        (16, 2 * HUGE, (HUGE, HUGE)),
        (16, HUGE, (0, 0)),  # no whole huge page inside: None
        (HUGE - 1, 2 * HUGE + 1, (HUGE, 2 * HUGE)),
        (5 * HUGE + 4096, HUGE, (0, 0)),
    ],
)
def test_the_span_is_the_whole_huge_pages_inside(
    address: int, nbytes: int, span: tuple[int, int]
) -> None:
    got = huge_span(address, nbytes)
    if span[1] == 0:
        assert got is None
    else:
        assert got == span
        assert got[0] % HUGE == 0 and got[1] % HUGE == 0
        assert address <= got[0] and got[0] + got[1] <= address + nbytes


def test_the_environment_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    device = dispatcher().runtime.device  # the shared runtime, made outside the setting
    monkeypatch.setenv(hugepages.ENV, "0")
    assert not hugepages.wanted(device)


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds `address`."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return []


def test_a_large_pool_block_is_advised_once_and_results_are_unchanged() -> None:
    rt = dispatcher().runtime
    if not hugepages.wanted(rt.device):
        pytest.skip(
            f"not advised here: {rt.device.name!r}, transparent huge pages {thp_setting()!r}"
        )
    assert isinstance(rt.allocator, hugepages.AdvisingAllocator)
    n = 3 * HUGE // 4 + 7  # 6 MiB of f32 and 28 bytes: whole huge pages inside, and a tail
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    xd = cla.to_device(rt.queue, x)
    y = ops.exp(xd)  # a device input: the output is a device array from the pool
    host, _ = cl.enqueue_map_buffer(rt.queue, y.base_data, cl.map_flags.READ, 0, (4,), np.uint8)
    try:
        address = host.ctypes.data
    finally:
        host.base.release(rt.queue)
    span = huge_span(address, y.nbytes)
    assert span is not None
    assert "hg" in _vm_flags(span[0]), "the block's memory was not advised (no 'hg' flag)"
    assert y.base_data.int_ptr in rt.allocator.advised
    np.testing.assert_allclose(y.get(), np.exp(x.astype(np.float64)), rtol=2e-7, atol=0)
    before = len(rt.allocator.advised)
    del y
    ops.exp(xd)  # the pool hands the same block out again: no second map
    assert len(rt.allocator.advised) == before
