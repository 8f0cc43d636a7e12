"""The bench's model cases run in rounds (:func:`.rounds.interleave`: clforge's sides and the
peers' processes back to back per case, which goes first alternating by round), their outputs
checked against each other, and their table: milliseconds per call of each side (the median
of the rounds), the compiled graph over eager calls, ONNX Runtime over the graph, the kernels
one call launches and the host time per kernel of clforge's sides. clforge runs three ways:
the compiled graph, the same graph compiled without fusion (`compile(fusion=False)`: what
capture, views, buffer planning and the prepared launch path give alone) and eager calls."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clforge.tools.bench import rounds as sides
from clforge.tools.bench.model_sides import (
    ModelOutcome,
    Prepared,
    model_request,
    prepare,
    time_clforge,
)
from clforge.tools.bench.models import ModelCase
from clforge.tools.bench.peers import PEERS, PeerProcess
from clforge.tools.bench.protocol import Timing

OURS = ("graph", "unfused", "eager")  # clforge's ways, in the order of a round that starts
SIDES = (*OURS, "onnxruntime", "numpy")
TITLES = {
    "graph": "graph",
    "unfused": "unfused",
    "eager": "eager",
    "onnxruntime": "ORT",
    "numpy": "NumPy",
}
AGREE_RTOL = 2e-3  # outputs agree: max |a - b| <= AGREE_RTOL * max |NumPy's|


def run_models(
    d: Any,
    cases: Sequence[ModelCase],
    timing: Timing,
    n_rounds: int,
    peer_timeout_s: float,
    progress: Callable[[str], object] = lambda _: None,
) -> list[dict[str, Any]]:
    """Every model case timed by every side in `n_rounds` rounds: a row per case."""
    rt = d.runtime
    peers = [p for p in PEERS if p.key in SIDES]
    processes = [PeerProcess(p, peer_timeout_s) for p in peers]
    per: dict[str, list[list[ModelOutcome]]] = {s: [[] for _ in cases] for s in SIDES}
    ready: dict[int, Prepared | str] = {}
    with tempfile.TemporaryDirectory(prefix="clforge-bench-models-") as tmp:
        outs = {s: [str(Path(tmp) / f"{s}-{i}.npy") for i in range(len(cases))] for s in SIDES}

        def ours(k: int, i: int) -> None:
            if i not in ready:
                try:
                    ready[i] = prepare(cases[i], d)
                except Exception as exc:  # a graph that does not compile: a note per side
                    ready[i] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            p = ready[i]
            order = OURS if sides.clforge_first(k) else OURS[::-1]
            for side in order:
                if isinstance(p, str):
                    per[side][i].append({"seconds": None, "note": p})
                    continue
                way = getattr(p, side)
                out = outs[side][i] if k == 0 else None
                per[side][i].append(time_clforge(way, rt, timing, out))

        def theirs(k: int, i: int) -> None:
            for proc in processes:
                req = model_request(cases[i], outs[proc.peer.key][i])
                per[proc.peer.key][i].append(proc.ask(req, timing))  # type: ignore[arg-type]

        try:
            sides.interleave(n_rounds, [c.title for c in cases], ours, theirs, progress)
        finally:
            for proc in processes:
                proc.close()
        return [
            _row(c, {s: per[s][i] for s in SIDES}, _agreement(outs, i)) for i, c in enumerate(cases)
        ]


def _agreement(outs: dict[str, list[str]], i: int) -> dict[str, float | None]:
    """Each side's largest difference from NumPy's output, relative to NumPy's largest
    magnitude (None where a side wrote no output)."""
    ref_path = Path(outs["numpy"][i])
    if not ref_path.is_file():
        return dict.fromkeys(SIDES)
    ref = np.load(ref_path).astype(np.float64)
    scale = float(np.abs(ref).max()) or 1.0
    out: dict[str, float | None] = {}
    for s in SIDES:
        p = Path(outs[s][i])
        if not p.is_file():
            out[s] = None
            continue
        got = np.load(p).astype(np.float64)
        out[s] = float(np.abs(got - ref).max()) / scale if got.shape == ref.shape else float("inf")
    return out


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _row(
    case: ModelCase, rounds: dict[str, list[ModelOutcome]], diffs: dict[str, float | None]
) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for s, outcomes in rounds.items():
        secs = [o["seconds"] for o in outcomes]
        known = [v for v in secs if v is not None]
        mid = _median(secs)
        notes = [o["note"] for o in outcomes if "note" in o]
        kernels = next((o.get("kernels") for o in outcomes if o.get("kernels")), None)
        host = _median([o.get("host_s") for o in outcomes])
        waited = _median([o.get("waited_s") for o in outcomes])
        cells[s] = {
            "ms": mid * 1e3 if mid is not None else None,
            "waited_ms": waited * 1e3 if waited is not None else None,
            "range_ms": [min(known) * 1e3, max(known) * 1e3] if known else None,
            "note": notes[0] if notes else None,
            "kernels": kernels,
            "host_us_per_kernel": host * 1e6 / kernels if host is not None and kernels else None,
        }

    def ratio(a: str, b: str, field: str = "seconds") -> float | None:
        # per round, b's seconds over a's `field` (how many times faster a is), then the median
        per_round = [
            ob["seconds"] / oa[field]  # type: ignore[literal-required]
            for oa, ob in zip(rounds[a], rounds[b], strict=True)
            if oa.get(field) and ob["seconds"]
        ]
        return statistics.median(per_round) if per_round else None

    worst = max((v for v in diffs.values() if v is not None), default=None)
    return {
        "case": case.title,
        "model": {"kind": case.kind, "S": case.s, "D": case.d, "H": case.heads, "F": case.hidden},
        "sides": cells,
        "graph_vs_eager": ratio("graph", "eager"),
        "unfused_vs_eager": ratio("unfused", "eager"),
        "graph_vs_ort": ratio("graph", "onnxruntime"),
        "graph_waited_vs_ort": ratio("graph", "onnxruntime", "waited_s"),
        "graph_vs_numpy": ratio("graph", "numpy"),
        "max_rel_diff": diffs,
        "agree": worst is not None and worst <= AGREE_RTOL,
    }


def model_text(rows: Sequence[dict[str, Any]], n_rounds: int) -> str:
    """The model cases' table."""

    def ms(v: float | None) -> str:
        return f"{v:.2f}" if v is not None else "-"

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v is not None else "-"

    head = (
        f"{'model':26} {'graph ms':>9} {'waited ms':>9} {'unfused ms':>10} {'eager ms':>9} "
        f"{'ORT ms':>8} {'NumPy ms':>9} {'graph/eager':>11} {'unfused/eager':>13} "
        f"{'graph/ORT':>9} {'waited/ORT':>10} {'kernels g/u/e':>13} "
        f"{'host us/kernel g/u/e':>20}  outputs"
    )
    lines = [
        f"Models (issues 35 and 36): ms per call, median of {n_rounds} round(s): clforge's "
        "calls back to back (the queue drained once per repeat), and the graph's calls each "
        "waited for (waited: drained after every call, as the peers' calls return their "
        "results); ratios: how many times faster the graph is (per round, then the median); "
        "unfused: the same graph compiled without fusion; kernels per call and host time per "
        "kernel of the compiled graph / unfused / the eager calls; outputs: agree with NumPy's "
        f"(max |diff| <= {AGREE_RTOL:g} x max |NumPy|) or the worst side's difference",
        head,
    ]
    for r in rows:
        c = r["sides"]
        k = "/".join(str(c[s]["kernels"] or "-") for s in OURS)
        h = "/".join(
            f"{c[s]['host_us_per_kernel']:.1f}" if c[s]["host_us_per_kernel"] else "-" for s in OURS
        )
        diffs = {s: v for s, v in r["max_rel_diff"].items() if v is not None}
        verdict = (
            "agree"
            if r["agree"]
            else (", ".join(f"{TITLES[s]} {v:.1e}" for s, v in diffs.items()) or "not checked")
        )
        lines.append(
            f"{r['case']:26} {ms(c['graph']['ms']):>9} {ms(c['graph'].get('waited_ms')):>9} "
            f"{ms(c['unfused']['ms']):>10} {ms(c['eager']['ms']):>9} "
            f"{ms(c['onnxruntime']['ms']):>8} {ms(c['numpy']['ms']):>9} "
            f"{x(r['graph_vs_eager']):>11} {x(r.get('unfused_vs_eager')):>13} "
            f"{x(r['graph_vs_ort']):>9} {x(r.get('graph_waited_vs_ort')):>10} {k:>13} {h:>20}  "
            f"{verdict}"
        )
        for s in SIDES:
            if c[s]["ms"] is None and c[s]["note"]:
                lines.append(f"  {TITLES[s]}: {c[s]['note']}")
    return "\n".join(lines) + "\n"


__all__ = ["AGREE_RTOL", "SIDES", "model_text", "run_models"]
