"""`clforge bench`: the quick run end to end (its JSON, text and chart, a missing peer reported
as missing), the rule that skips slow generic timings, the ratios and their spreads over the
rounds, the rounds' interleaved order, a peer's long-lived process, ORT's graphs computing what
the references compute, and every peer's call pinned to its case's label (the natural shapes
and axis a user of NumPy or ONNX Runtime writes, never clforge's canonical ones)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl
import pytest

from clforge import references
from clforge.call.dispatcher import dispatcher
from clforge.core.tree import DEFAULT
from clforge.errors import UsageError
from clforge.registry.loader import Registry
from clforge.tools.bench import rounds
from clforge.tools.bench.bandwidth import Bandwidth
from clforge.tools.bench.cases import CASES, Case, run_cases, selected
from clforge.tools.bench.clforge_side import Figures, GenericPace, requests
from clforge.tools.bench.overhead import bench_host_per_kernel
from clforge.tools.bench.peak import accumulators, lanes, measure, source
from clforge.tools.bench.peers import NOT_ASKED, PEERS, Peer, PeerProcess, PeerRun
from clforge.tools.bench.protocol import Request, host_inputs, natural_inputs
from clforge.tools.bench.report import fmt, make_rows, per_kernel_lines, tally
from clforge.tools.bench.rounds import Spread
from clforge.tools.bench.wake import bench_wake, wake_lines

ROW_KEYS = {
    "op", "dtype", "label", "sizes", "unit", "instance", "clforge", "clforge_range", "generic",
    "generic_note", "peers", "ratios", "spreads", "rounds", "copy", "of_bandwidth", "peak",
    "of_peak", "mode", "untuned",
}  # fmt: skip


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """`clforge bench --quick --untuned --json` in a subprocess, with pyclblast hidden (a module
    that fails to import as a missing one does), so that one peer is missing whatever is
    installed."""
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
        [
            sys.executable,
            "-m",
            "clforge",
            "bench",
            "--quick",
            "--untuned",
            "--json",
            "--out",
            str(out),
        ],
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
    assert report["rounds"] == 1 and report["round_order"] == ["clforge first"]
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
        assert r["rounds"]["clforge"] == [r["clforge"]] == r["clforge_range"][:1]
        assert set(r["rounds"]) == {"clforge", *(p.key for p in PEERS)}
        assert (r["of_bandwidth"] is not None) == (r["unit"] == "GB/s")
        assert (r["copy"] is not None) == (r["unit"] == "GB/s")
        if r["copy"] is not None:
            assert r["of_bandwidth"] == pytest.approx(r["clforge"] / r["copy"])
        # the compute-bound cases are set against the multiply-add peak of their dtype (not
        # causal attention, whose flops count the full product)
        bounded = r["unit"] == "GFLOP/s" and "causal" not in r["label"]
        assert (r["peak"] is not None) == bounded, r["label"]
        if r["peak"] is not None:
            assert r["peak"] == report["peak"][r["dtype"]]["gflops"]
            assert r["of_peak"] == pytest.approx(r["clforge"] / r["peak"])
        cell = r["peers"]["clblast"]
        assert cell["rate"] is None
        assert cell["note"] == ("missing" if r["op"] in ("matmul", "gemm") else "n/a")
        numpy = r["peers"]["numpy"]
        assert (numpy["rate"] is None) == (r["op"] == "gelu"), r["label"]
        if not report["peers"]["onnxruntime"]["available"]:
            assert r["peers"]["onnxruntime"] == {
                "rate": None,
                "range": None,
                "note": "missing",
                "ways": None,
            }
        else:
            assert r["peers"]["onnxruntime"]["rate"], r

    # --untuned: clforge's side again with every tuning file hidden, in the same rounds
    assert report["tuning"]["clforge"] == "tuned" and report["tuning"]["untuned"] is True
    for r in rows:
        u = r["untuned"]
        assert r["mode"] == "tuned" and u is not None, r["label"]
        assert u["rate"] > 0 and u["rounds"] == [u["rate"]] and u["instance"]
        assert set(u["ratios"]) == {*(p.key for p in PEERS), "tuned"}
        assert u["ratios"]["tuned"]["median"] == pytest.approx(u["rate"] / r["clforge"])

    text = (out / "bench.txt").read_text()
    assert "clforge: tuned (tuning files given to the lookup: " in text
    assert "clforge untuned: every tuning file hidden" in text
    assert "untuned/tuned" in text
    assert "memory bandwidth (copy, counted as read+write): " in text
    assert report["peak"]["f32"]["gflops"] > 0
    assert f"multiply-add peak: f32 {fmt(report['peak']['f32']['gflops'])}" in text
    pk = report["overhead"]["per_kernel"]
    assert pk["launched"] == pk["kernels"] and pk["compiled_us"] > 0 and pk["eager_us"] > 0
    assert "host time per kernel, a chain of 64 adds" in text
    assert "CLBlast: not installed (pip install pyclblast; needs libclblast-dev)" in text
    assert json.loads((out / "bench.json").read_text()) == report


def test_host_time_per_kernel_runs_the_chain_compiled_and_eager() -> None:
    """The figure's chain (checked against its known result before timing) launches one kernel
    per add when compiled; the report prints it (no timed assertion: figures only exist)."""
    pk = bench_host_per_kernel(kernels=5, n=3, rounds=1, inner=2)
    assert (pk["kernels"], pk["launched"], pk["rounds"], pk["inner"]) == (5, 5, 1, 2)
    assert min(pk["compiled_us"], pk["eager_us"], pk["enqueue_us"]) > 0
    lines = per_kernel_lines(pk)
    assert lines[0].startswith("host time per kernel, a chain of 5 adds of 3 f32")
    assert "compiled model" in lines[1] and "eager calls" in lines[1]


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
    run = PeerRun(PEERS[0], True, "1", None, (({"seconds": 4.0},),))
    missing = PeerRun(PEERS[1], False, None, "not installed", (({"seconds": None, "note": "x"},),))
    copy = Bandwidth(2.0 * case.amount(), case.amount(), 1, 1)  # twice as fast as clforge
    (row,) = make_rows([case], [[Figures("i", 1.0, 2.0)]], [run, missing], [[copy]])
    assert row["ratios"] == {"numpy": 4.0, "onnxruntime": None, "generic": 2.0}
    assert row["spreads"]["onnxruntime"] is None
    assert row["clforge"] == pytest.approx(case.amount())
    assert row["copy"] == pytest.approx(2.0 * case.amount())
    assert row["of_bandwidth"] == pytest.approx(0.5)
    (row,) = make_rows([case], [[Figures("i", 1.0, 2.0)]], [run, missing], [[None]])
    assert row["copy"] is None and row["of_bandwidth"] is None
    assert row["mode"] == "tuned" and row["untuned"] is None
    assert row["peak"] is None and row["of_peak"] is None  # a memory-bound case
    matmul = next(c for c in selected(True) if c.op == "matmul")
    (row,) = make_rows([matmul], [[Figures("i", 1.0, 2.0)]], [run], [[None]], peaks={"f32": 4.0})
    assert row["peak"] == 4.0 and row["of_peak"] == pytest.approx(matmul.amount() / 4.0)
    (row,) = make_rows([matmul], [[Figures("i", 1.0, 2.0)]], [run], [[None]], peaks={"f64": 4.0})
    assert row["peak"] is None and row["of_peak"] is None  # no peak measured in its dtype
    causal = next(c for c in CASES if c.op == "attention" and c.attrs.get("causal"))
    assert not causal.bounded and all(c.bounded for c in CASES if "causal" not in c.title)
    (row,) = make_rows([causal], [[Figures("i", 1.0, 2.0)]], [run], [[None]], peaks={"f32": 4.0})
    assert row["peak"] is None  # its flops count the full product: no ceiling to set it against


def test_the_peak_kernel_is_shaped_by_the_device_and_runs_at_a_plausible_rate(launcher) -> None:  # type: ignore[no-untyped-def]
    """The multiply-add probe: lanes and chains from the device model (an AVX2 model gets
    8-lane floats and 12 chains, an AVX-512 one 16 and 24; a GPU without a register count 16),
    a kernel that builds, and a rate above zero and below the device's lanes x 2 flops x 5 GHz
    per compute unit (a loop the compiler folded away would time as absurdly fast)."""
    device_profile, queue = launcher.profile, launcher.runtime.queue
    avx2 = dataclasses.replace(device_profile, vector_bits=256, vector_registers=16)
    avx512 = dataclasses.replace(device_profile, vector_bits=512, vector_registers=32)
    gpu = dataclasses.replace(
        device_profile, device_type="gpu", vector_bits=0, vector_registers=0,
        preferred_vector_widths=(("float", 1), ("double", 1)),
    )  # fmt: skip
    assert (lanes(avx2, 32), accumulators(avx2), lanes(avx2, 64)) == (8, 12, 4)
    assert (lanes(avx512, 32), accumulators(avx512), lanes(avx512, 64)) == (16, 24, 8)
    assert (lanes(gpu, 32), accumulators(gpu)) == (2, 16)
    assert "double8 c23 = (double8)(23);" in source("double", 8, 24)
    peak = measure(queue, device_profile, "f32", {"repeats": 1, "target_s": 0.0})
    ceiling = device_profile.compute_units * 2 * peak.lanes * 2 * 5.0  # 2 FMA units at 5 GHz
    assert 0 < peak.gflops < ceiling
    assert peak.work_items == device_profile.compute_units * 8


def test_the_untuned_side_takes_its_ratios_round_by_round() -> None:
    """--untuned: the side with every tuning file hidden, over the tuned side and each peer,
    per round (here untuned is 2x slower in round 1, level in round 2)."""
    case = selected(True)[0]
    a = case.amount()
    tuned = [Figures("t", 1.0, None), Figures("t", 2.0, None)]
    untuned = [Figures("u", 2.0, None), Figures("u", 2.0, None)]
    run = PeerRun(PEERS[0], True, "1", None, (({"seconds": 4.0}, {"seconds": 4.0}),))
    (row,) = make_rows([case], [tuned], [run], [[None, None]], [untuned])
    u = row["untuned"]
    assert u is not None and u["instance"] == "u"
    assert u["rounds"] == pytest.approx([a / 2, a / 2])
    ratio = u["ratios"]["tuned"]
    assert ratio is not None and ratio["median"] == pytest.approx(0.75)
    assert ratio["range"] == pytest.approx([0.5, 1.0]) and ratio["level"] is False
    numpy = u["ratios"]["numpy"]
    assert numpy is not None and numpy["median"] == pytest.approx(2.0)
    (off,) = make_rows([case], [tuned], [run], [[None, None]], mode="untuned")
    assert off["mode"] == "untuned" and off["untuned"] is None


def test_tuning_off_hides_every_tuning_file(monkeypatch: pytest.MonkeyPatch, registry) -> None:  # type: ignore[no-untyped-def]
    """CLFORGE_TUNING=off: the lookup reads no file (the bench's untuned side, a user's check
    of the defaults); `clforge tune --check` still checks them; a typo is an error."""
    from clforge.errors import ClforgeError

    assert registry.tuning_folders()
    monkeypatch.setenv("CLFORGE_TUNING", "off")
    assert registry.tuning_folders() == ()
    assert registry.tuning_folders(hidden_too=True)
    monkeypatch.setenv("CLFORGE_TUNING", "of")
    with pytest.raises(ClforgeError, match="expected on or off"):
        registry.tuning_folders()
    monkeypatch.setenv("CLFORGE_TUNING", "on")
    assert registry.tuning_folders()


def test_ratios_are_taken_round_by_round_and_one_that_crosses_1_is_level() -> None:
    case = selected(True)[0]
    a = case.amount()
    figs = [Figures("i", s, 9.0 if k == 0 else None) for k, s in enumerate((1.0, 2.0, 1.0))]

    def peer(i: int, *seconds: float | None) -> PeerRun:
        return PeerRun(PEERS[i], True, "1", None, (tuple({"seconds": s} for s in seconds),))

    # NumPy: 0.5x, 1.5x, 2x by round, level; ORT: 2x, 1.5x, 4x, a win (its fastest of two
    # ways each round); CLBlast: one round
    ways = ({"A": 2.0, "B": 5.0}, {"A": 4.0, "B": 3.0}, {"A": 4.0, "B": None})
    ort = PeerRun(
        PEERS[1],
        True,
        "1",
        None,
        (tuple({"seconds": min(v for v in w.values() if v), "ways": w} for w in ways),),
    )
    runs = [peer(0, 0.5, 3.0, 2.0), ort, peer(2, None, 1.0, None)]
    (row,) = make_rows([case], [figs], runs, [[None, None, None]])
    assert row["clforge"] == pytest.approx(a)
    assert row["clforge_range"] == pytest.approx([a / 2, a])
    assert row["rounds"]["clforge"] == pytest.approx([a, a / 2, a])
    assert row["rounds"]["clblast"] == [None, pytest.approx(a), None]
    numpy, ort, clblast = (row["spreads"][p.key] for p in PEERS)
    assert numpy is not None and ort is not None and clblast is not None
    assert numpy["median"] == pytest.approx(1.5) and numpy["range"] == pytest.approx([0.5, 2.0])
    assert numpy["level"] is True
    assert ort["median"] == pytest.approx(2.0) and ort["level"] is False
    assert row["peers"]["numpy"]["rate"] == pytest.approx(a / 2.0)  # its median round
    assert row["peers"]["numpy"]["ways"] is None
    assert row["peers"]["onnxruntime"]["ways"] == {
        "A": pytest.approx([a / 2, a / 4, a / 4]),
        "B": [pytest.approx(a / 5), pytest.approx(a / 3), None],
    }
    assert clblast["range"] == pytest.approx([0.5, 0.5]) and clblast["level"] is False
    assert row["ratios"]["numpy"] == pytest.approx(1.5)  # the median of the rounds' ratios
    assert row["generic"] == pytest.approx(a / 9.0)  # the first round's
    assert tally([row], "numpy") == (0, 0, 1)
    assert tally([row], "onnxruntime") == (1, 0, 0)
    assert tally([row], "clblast") == (0, 1, 0)


def test_rounds_interleave_the_sides_per_case_and_alternate_who_goes_first() -> None:
    calls: list[tuple[str, int, int]] = []
    rounds.interleave(
        3,
        ["a", "b"],
        lambda k, i: calls.append(("clforge", k, i)),
        lambda k, i: calls.append(("peers", k, i)),
    )
    assert calls == [
        ("clforge", 0, 0), ("peers", 0, 0), ("clforge", 0, 1), ("peers", 0, 1),
        ("peers", 1, 0), ("clforge", 1, 0), ("peers", 1, 1), ("clforge", 1, 1),
        ("clforge", 2, 0), ("peers", 2, 0), ("clforge", 2, 1), ("peers", 2, 1),
    ]  # fmt: skip
    assert rounds.order(3) == ["clforge first", "peers first", "clforge first"]


def test_spreads_medians_and_notes_over_rounds() -> None:
    assert Spread.of([3.0, None, 1.0, 2.0]) == Spread(2.0, 1.0, 3.0)
    assert Spread.of([None]) is None
    assert Spread(1.0, 0.9, 1.1).crosses_one()
    assert not Spread(1.0, 1.0, 1.1).crosses_one()  # a tie at the bottom is no loss
    one = [Figures("i", s, 9.0 if k == 0 else None) for k, s in enumerate((3.0, 1.0, 2.0))]
    assert rounds.figures(one) == Figures("i", 2.0, 9.0)  # the generic: the first round's
    copies = [Bandwidth(p, s, 64, 64) for p, s in ((1.0, 6.0), (3.0, 4.0), (2.0, 5.0))]
    assert rounds.copy([*copies, None]) == Bandwidth(2.0, 5.0, 64, 64)
    assert rounds.copy([None, None]) is None
    assert rounds.note([{"seconds": 1.0, "note": "a"}, {"seconds": 1.0, "note": "b"},
                        {"seconds": 2.0, "note": "b"}]) == "b"  # fmt: skip
    assert rounds.note([{"seconds": None, "note": "failed: x"}] * 2) == "failed: x"


def test_a_peer_process_lives_for_the_run_and_answers_case_by_case(registry: Registry) -> None:
    cases = [c for c in selected(True) if c.op in ("sum", "matmul")][:2]
    reqs = requests(registry, cases)
    timing = {"repeats": 1, "target_s": 0.001}
    numpy = PeerProcess(PEERS[0], timeout_s=120)
    clblast = PeerProcess(next(p for p in PEERS if p.key == "clblast"), timeout_s=120)
    try:
        first = [numpy.ask(r, timing) for r in reqs]
        pid = numpy._proc.pid if numpy._proc else None
        again = numpy.ask(reqs[0], timing)
        assert numpy._proc is not None and numpy._proc.pid == pid  # the same process
        assert all(o["seconds"] for o in [*first, again]), first
        assert clblast.ask(next(r for r in reqs if r["op"] == "sum"), timing) == {
            "seconds": None,
            "note": NOT_ASKED,
        }
    finally:
        numpy.close()
        clblast.close()
    run = numpy.run([[first[0], again], [first[1]]])
    assert run.available and run.version and run.outcomes[0] == (first[0], again)


def test_a_peer_whose_process_fails_is_missing_with_the_reason(registry: Registry) -> None:
    (req,) = requests(registry, [selected(True)[0]])
    broken = PeerProcess(Peer("nope", "Nope", "nothing to install"), timeout_s=60)
    assert broken.ask(req, {"repeats": 1, "target_s": 0.001}) == {
        "seconds": None,
        "note": "missing",
    }
    run = broken.run([[{"seconds": None, "note": "missing"}]])
    assert not run.available
    assert run.status().startswith("Nope: its process failed: usage: python -m"), run.status()


# --- the peers' calls, pinned to the cases' labels -----------------------------------------

_SHAPE = re.compile(r"(?<![\w/])\d+(?:x\d+)*(?![\w])")


def _label_shapes(label: str) -> list[tuple[int, ...]]:
    """The sizes written in a label, e.g. "conv2d 3x3/2 128x56x56->128x28x28" gives (3, 3),
    (128, 56, 56) and (128, 28, 28); "f64", "8h", "d64" and "/2" are no sizes."""
    return [tuple(int(n) for n in m.split("x")) for m in _SHAPE.findall(label)]


def _from_label(case: Case) -> tuple[dict[str, tuple[int, ...]], int | None, list[int] | None]:
    """What a user of NumPy or ONNX Runtime passes for the case, read off its label alone: each
    input's shape, the axis (-1, or 1 for a middle-axis case) and a transpose's permutation."""
    label, op = case.title, case.op
    shapes = _label_shapes(label)
    if op == "attention":
        (sq, sk), h = shapes[0], int(re.findall(r"(\d+)h\b", label)[0])
        d = int(re.findall(r"\bd(\d+)", label)[0])
        q, kv = (1, h, sq, d), (1, h, sk, d)  # batch 1, as every attention case
        return {"q": q, "k": kv, "v": kv}, None, None
    if op == "conv2d":
        (r, s), (c, hh, ww) = shapes[0], shapes[1]
        k = shapes[2][0] if len(shapes) > 2 else c  # depthwise: as many outputs as inputs
        groups = c if "depthwise" in label else int(next(iter(re.findall(r"\bg(\d+)", label)), 1))
        return {"x": (1, c, hh, ww), "w": (k, c // groups, r, s), "bias": (k,)}, None, None
    (shape,) = shapes
    if op in ("matmul", "gemm"):
        (n,) = shape
        return {"a": (n, n), "b": (n, n)}, None, None
    if op == "permute":
        return {"x": shape}, None, [1, 0]
    if op in ("add", "mul", "maximum"):
        return {"a": shape, "b": shape}, None, None
    if op in ("layer_norm", "rms_norm"):
        vec = (shape[-1],)
        return (
            {"x": shape, "weight": vec, **({"bias": vec} if op == "layer_norm" else {})},
            -1,
            None,
        )
    if op in ("sum", "mean", "max", "argmax", "softmax", "log_softmax"):
        middle = "(middle axis)" in label
        assert len(shape) == (3 if middle else 2), label
        return {"x": shape}, 1 if middle else -1, None
    return {"x": shape}, None, None  # a unary elementwise op: a vector


def test_every_case_label_says_what_its_call_is() -> None:
    """The label parser above knows every op the bench has a case for."""
    for case in CASES:
        shapes, _, _ = _from_label(case)
        assert shapes and all(math.prod(s) > 0 for s in shapes.values()), case.title


def _full_requests(registry: Registry) -> list[tuple[Case, Request]]:
    cases = list(CASES)
    return list(zip(cases, requests(registry, cases), strict=True))


def test_numpy_gets_the_natural_shapes_and_axis_of_each_label(registry: Registry) -> None:
    for case, req in _full_requests(registry):
        shapes, axis, perm = _from_label(case)
        natural = req["natural"]
        got = {k: tuple(v) for k, v in natural["shapes"].items() if k in shapes}
        assert got == shapes, case.title
        assert natural["axis"] == axis and natural["perm"] == perm, case.title
    tiny = selected(True)
    for case, req in zip(tiny, requests(registry, tiny), strict=True):  # the arrays themselves
        x = natural_inputs(req)
        assert {k: x[k].shape for k in _from_label(case)[0]} == _from_label(case)[0], case.title


def _attr(node: Any, name: str) -> Any:
    from onnx import helper

    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def _graph_axis(model: Any) -> int | None:
    """The axis an ONNX graph's reduction, softmax or norm works on (None: it names none)."""
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type.startswith("Reduce"):
            (axis,) = consts[node.input[1]].tolist()
            return int(axis)
        if node.op_type in ("ArgMax", "Softmax", "LogSoftmax") or "Normalization" in node.op_type:
            return int(_attr(node, "axis"))
    return None


def test_ort_graphs_take_the_natural_shapes_and_axis_of_each_label(registry: Registry) -> None:
    """Every way ORT is offered every case, built (not run) at the full sizes: its inputs have
    the label's shapes (MultiHeadAttention's (B, S, H * D) for attention), its op the label's
    axis, with no size-1 axis of clforge's canonical shapes."""
    pytest.importorskip("onnx")
    from clforge.tools.bench import peer_ort

    for case, req in _full_requests(registry):
        shapes, axis, perm = _from_label(case)
        graphs = peer_ort.BUILDERS[case.op](req)
        assert graphs, case.title
        for g in graphs:
            model = peer_ort.model(g)
            fed = {
                i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                for i in model.graph.input
            }
            if g.heads is not None:  # MultiHeadAttention: (B, S, H * D)
                want = {k: (b, s, h * d) for k, (b, h, s, d) in shapes.items()}
                assert fed == want, (case.title, g.note)
                (node,) = model.graph.node
                assert node.op_type == "MultiHeadAttention" and _attr(node, "num_heads") == g.heads
                continue
            assert fed == shapes, (case.title, g.note)
            if case.op != "attention":  # its composed graph's Softmax is over the keys
                assert _graph_axis(model) == axis, (case.title, g.note)
            if perm is not None:
                (node,) = model.graph.node
                assert _attr(node, "perm") == perm, case.title
            if case.op == "conv2d":
                (node,) = model.graph.node
                w = shapes["w"]
                assert _attr(node, "kernel_shape") == list(w[2:]), case.title
                assert _attr(node, "group") == shapes["x"][1] // w[1], case.title


def test_ort_graphs_compute_what_the_references_compute(registry: Registry) -> None:
    if not (_installed("onnxruntime") and _installed("onnx")):
        pytest.skip("onnxruntime or onnx is not installed")
    from clforge.tools.bench import peer_ort

    cases = [c for c in selected(True) if c.op in peer_ort.BUILDERS]
    assert {c.op for c in cases} == set(peer_ort.BUILDERS)
    for case, req in zip(cases, requests(registry, cases), strict=True):
        x = host_inputs(req)
        (want,) = references.resolve(req["reference"]).fn(x, req["attrs"]).values()
        for graph in peer_ort.BUILDERS[case.op](req):  # every way, not only the first
            (got,) = peer_ort.session(graph).run(None, graph.feeds(x))
            tol = 1e-9 if case.dtype == "f64" else 1e-4
            np.testing.assert_allclose(
                graph.canonical(got).reshape(want.shape),
                want,
                rtol=tol,
                atol=tol,
                err_msg=f"{case.title}: {graph.note}",
            )


def test_wake_measures_the_pools_join_gap_and_round_trip() -> None:
    """The second worker joins every kernel of two work-groups (each spin ends on the flag, not
    on its bound) and the report prints the figures; a device of one compute unit is skipped
    with a reason (no timed assertion: the figures only have to exist)."""
    d = dispatcher()
    w = bench_wake(d.runtime.queue, calls=24, repeats=1)
    if "skipped" in w:
        assert d.runtime.device.max_compute_units < 2 or not (
            d.runtime.device.type & cl.device_type.CPU
        )
        assert wake_lines(w)[0].endswith(w["skipped"])
        return
    assert w["joined"] == w["calls"] > 0
    assert min(w["join_us"], w["gap_us"], w["back_to_back_us"], w["round_trip_us"]) > 0
    lines = wake_lines(w)
    assert lines[0] == "PoCL's worker threads (wake.py):"
    assert "the second worker joins a kernel" in lines[1]
    assert "from one kernel's end to the next one's start" in lines[2]
    assert "enqueued and waited for" in lines[3]
    # the counts printed are the ones measured, not the defaults'
    assert f"median of {w['gaps']})" in lines[2] and "(median of 1)" in lines[3]
