"""`clforge bench`: the quick run end to end (its JSON, text and chart, a missing peer reported
as missing), the rule that skips slow generic timings, the ratios, and ORT's graphs computing
what the references compute."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clforge import references
from clforge.core.tree import DEFAULT
from clforge.errors import UsageError
from clforge.registry.loader import Registry
from clforge.tools.bench import rounds
from clforge.tools.bench.bandwidth import Bandwidth
from clforge.tools.bench.cases import CASES, run_cases, selected
from clforge.tools.bench.clforge_side import Figures, GenericPace, requests
from clforge.tools.bench.peers import PEERS, PeerRun
from clforge.tools.bench.protocol import Outcome, host_inputs
from clforge.tools.bench.report import make_rows

ROW_KEYS = {
    "op", "dtype", "label", "sizes", "unit", "instance", "clforge", "generic", "generic_note",
    "peers", "ratios", "copy", "of_bandwidth",
}  # fmt: skip


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """`clforge bench --quick --json` in a subprocess, with pyclblast hidden (a module that
    fails to import as a missing one does), so that one peer is missing whatever is installed."""
    tmp = tmp_path_factory.mktemp("bench")
    shadow = tmp / "shadow"
    shadow.mkdir()
    (shadow / "pyclblast.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyclblast'\", name='pyclblast')\n"
    )
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), path]))}
    out = tmp / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "clforge", "bench", "--quick", "--json", "--out", str(out)],
        cwd=DEFAULT.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout), out


@pytest.mark.slow
def test_quick_bench_reports_every_case_and_peer(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    report, out = quick_run
    assert report["quick"] is True
    assert report["commit"] and report["device"]
    bw = report["bandwidth"]
    assert bw["gbps"] == max(bw["plain_gbps"], bw["streaming_gbps"]) > 0
    assert set(report["peers"]) == {p.key for p in PEERS}
    clblast = report["peers"]["clblast"]
    assert clblast["available"] is False
    assert (
        clblast["status"] == "CLBlast: not installed (pip install pyclblast; needs libclblast-dev)"
    )
    assert report["peers"]["numpy"]["available"] is True
    assert report["peers"]["onnxruntime"]["available"] is _installed("onnxruntime")

    rows = report["throughput"]
    assert [(r["op"], r["dtype"]) for r in rows] == [(c.op, c.dtype) for c in selected(True)]
    for r in rows:
        assert set(r) == ROW_KEYS, r["label"]
        assert r["clforge"] > 0
        assert set(r["ratios"]) == {*(p.key for p in PEERS), "generic"}
        for v in r["ratios"].values():
            assert v is None or (isinstance(v, float) and v > 0), r["label"]
        assert (r["of_bandwidth"] is not None) == (r["unit"] == "GB/s")
        assert (r["copy"] is not None) == (r["unit"] == "GB/s")
        if r["copy"] is not None:
            assert r["of_bandwidth"] == pytest.approx(r["clforge"] / r["copy"])
        cell = r["peers"]["clblast"]
        assert cell["rate"] is None
        assert cell["note"] == ("missing" if r["op"] in ("matmul", "gemm") else "n/a")
        numpy = r["peers"]["numpy"]
        assert (numpy["rate"] is None) == (r["op"] == "gelu"), r["label"]
        if not report["peers"]["onnxruntime"]["available"]:
            assert r["peers"]["onnxruntime"] == {"rate": None, "note": "missing"}
        else:
            assert r["peers"]["onnxruntime"]["rate"], r

    text = (out / "bench.txt").read_text()
    assert "memory bandwidth (copy, counted as read+write): " in text
    assert "CLBlast: not installed (pip install pyclblast; needs libclblast-dev)" in text
    assert json.loads((out / "bench.json").read_text()) == report


@pytest.mark.slow
def test_quick_bench_writes_the_chart(quick_run: tuple[dict[str, Any], Path]) -> None:
    if not _installed("matplotlib"):
        pytest.skip("matplotlib is not installed")
    _, out = quick_run
    png = out / "bench.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_cases_of_some_ops(registry: Registry) -> None:
    assert [(c.op, dict(c.attrs)) for c in run_cases(registry, False, ["gelu"])] == [
        ("gelu", {}),
        ("gelu", {"approximate": 1}),
    ]
    assert {c.op for c in run_cases(registry, True, ["exp", "matmul"])} == {"exp", "matmul"}
    with pytest.raises(UsageError, match="no bench case for nope"):
        run_cases(registry, False, ["nope"])


def test_slow_generics_are_predicted_and_skipped() -> None:
    matmuls = {c.sizes["M"]: c for c in CASES if c.op == "matmul" and c.dtype == "f32"}
    timing = {"repeats": 5, "target_s": 0.05}
    pace = GenericPace(budget_s=20.0)
    assert pace.too_slow(matmuls[2048], timing) is None  # nothing measured yet: time it
    pace.record(matmuls[1024], 2.0)  # ~1.07 GFLOP/s: 2048 would take 16 s a call
    note = pace.too_slow(matmuls[2048], timing)
    assert note and note.startswith("generic not timed: ~16 s a call")
    assert pace.too_slow(matmuls[512], timing) is None  # 0.25 s a call
    pace.record(matmuls[512], 0.1)  # faster than at 1024: the slowest rate is kept
    assert pace.predicted_s(matmuls[2048]) == pytest.approx(16.0)


def test_rows_take_ratios_of_rates_and_none_where_a_figure_is_missing() -> None:
    case = selected(True)[0]
    run = PeerRun(PEERS[0], True, "1", None, ({"seconds": 4.0},))
    missing = PeerRun(PEERS[1], False, None, "not installed", ({"seconds": None, "note": "x"},))
    copy = Bandwidth(2.0 * case.amount(), case.amount(), 1, 1)  # twice as fast as clforge
    (row,) = make_rows([case], [Figures("i", 1.0, 2.0)], [run, missing], [copy])
    assert row["ratios"] == {"numpy": 4.0, "onnxruntime": None, "generic": 2.0}
    assert row["clforge"] == pytest.approx(case.amount())
    assert row["copy"] == pytest.approx(2.0 * case.amount())
    assert row["of_bandwidth"] == pytest.approx(0.5)
    (row,) = make_rows([case], [Figures("i", 1.0, 2.0)], [run, missing], [None])
    assert row["copy"] is None and row["of_bandwidth"] is None


def test_ort_graphs_compute_what_the_references_compute(registry: Registry) -> None:
    if not (_installed("onnxruntime") and _installed("onnx")):
        pytest.skip("onnxruntime or onnx is not installed")
    from clforge.tools.bench import peer_ort

    cases = [c for c in selected(True) if c.op in peer_ort.BUILDERS]
    assert {c.op for c in cases} == set(peer_ort.BUILDERS)
    for case, req in zip(cases, requests(registry, cases), strict=True):
        x = host_inputs(req)
        (want,) = references.resolve(req["reference"]).fn(x, req["attrs"]).values()
        for graph in peer_ort.BUILDERS[case.op](req, x):  # every way, not only the first
            (got,) = peer_ort._session(graph).run(None, graph.feeds)
            tol = 1e-9 if case.dtype == "f64" else 1e-4
            np.testing.assert_allclose(
                got.reshape(want.shape), want, rtol=tol, atol=tol, err_msg=case.title
            )


def test_rounds_take_each_figure_s_median_and_keep_notes() -> None:
    one = [Figures("i", s, 9.0 if k == 0 else None) for k, s in enumerate((3.0, 1.0, 2.0))]
    assert rounds.figures(one) == Figures("i", 2.0, 9.0)  # the generic: the first round's
    copies = [Bandwidth(p, s, 64, 64) for p, s in ((1.0, 6.0), (3.0, 4.0), (2.0, 5.0))]
    assert rounds.copy([*copies, None]) == Bandwidth(2.0, 5.0, 64, 64)
    assert rounds.copy([None, None]) is None

    def run(*outcomes: Outcome) -> PeerRun:
        return PeerRun(PEERS[1], True, "1", None, outcomes)

    merged = rounds.peer_run(
        [
            run({"seconds": 5.0}, {"seconds": None, "note": "failed: x"}, {"seconds": 1.0}),
            run(
                {"seconds": 1.0},
                {"seconds": None, "note": "failed: x"},
                {"seconds": 2.0, "note": "y"},
            ),
            run({"seconds": 2.0}, {"seconds": None, "note": "failed: x"}, {"seconds": 3.0}),
        ]
    )
    assert merged.outcomes == (
        {"seconds": 2.0},
        {"seconds": None, "note": "failed: x"},
        {"seconds": 2.0, "note": "y"},
    )
    missing = PeerRun(
        PEERS[1], False, None, "not installed", ({"seconds": None, "note": "missing"},)
    )
    assert rounds.peer_run([missing, run({"seconds": 1.0})]) is missing
