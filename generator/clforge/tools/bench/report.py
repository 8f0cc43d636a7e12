"""The bench's results: one row per case (clforge's figures, each peer's, the ratios), and the
text that `clforge bench` prints and writes beside the JSON."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

from clforge.tools.bench.bandwidth import Bandwidth
from clforge.tools.bench.cases import Case
from clforge.tools.bench.clforge_side import Figures
from clforge.tools.bench.peers import NOT_ASKED, PeerRun
from clforge.tools.bench.protocol import Outcome


class PeerCell(TypedDict):
    rate: float | None  # in the case's unit
    note: str | None  # why there is no rate ("missing": the peer is not installed), or how


class Row(TypedDict):
    op: str
    dtype: str
    label: str
    sizes: dict[str, int]
    unit: str
    instance: str  # the chosen instance
    clforge: float  # the chosen instance's rate, in the unit
    generic: float | None
    generic_note: str | None
    peers: dict[str, PeerCell]  # by peer key: numpy, onnxruntime, clblast
    ratios: dict[str, float | None]  # clforge's rate over each peer's and the generic's
    copy: float | None  # GB/s cases: the GB/s of a copy moving as many bytes
    of_bandwidth: float | None  # GB/s cases: clforge's GB/s over that copy's


def _rate(amount: float, seconds: float | None) -> float | None:
    return amount / seconds if seconds and math.isfinite(seconds) else None


def _ratio(ours: float, theirs: float | None) -> float | None:
    return ours / theirs if theirs else None


def _cell(case: Case, outcome: Outcome) -> PeerCell:
    return {"rate": _rate(case.amount(), outcome["seconds"]), "note": outcome.get("note")}


def make_rows(
    cases: Sequence[Case],
    figures: Sequence[Figures],
    runs: Sequence[PeerRun],
    copies: Sequence[Bandwidth | None],
) -> list[Row]:
    """One row per case; `copies`: per case, the copy of as many bytes (memory-bound cases)."""
    rows: list[Row] = []
    for i, (case, fig, copy) in enumerate(zip(cases, figures, copies, strict=True)):
        amount = case.amount()
        ours = amount / fig.seconds
        generic = _rate(amount, fig.generic_seconds)
        cells = {run.peer.key: _cell(case, run.outcomes[i]) for run in runs}
        ratios = {key: _ratio(ours, cell["rate"]) for key, cell in cells.items()}
        ratios["generic"] = _ratio(ours, generic)
        copy_gbps = copy.gbps if copy and case.memory_bound else None
        rows.append(
            {
                "op": case.op,
                "dtype": case.dtype,
                "label": case.title,
                "sizes": dict(case.sizes),
                "unit": case.unit,
                "instance": fig.instance,
                "clforge": ours,
                "generic": generic,
                "generic_note": fig.generic_note,
                "peers": cells,
                "ratios": ratios,
                "copy": copy_gbps,
                "of_bandwidth": _ratio(ours, copy_gbps),
            }
        )
    return rows


# --- text -----------------------------------------------------------------------------------


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _times(v: float | None) -> str:
    return "-" if v is None else f"{fmt(v)}x"


def _peer_text(cell: PeerCell) -> str:
    if cell["rate"] is not None:
        return fmt(cell["rate"])
    return "" if cell["note"] == NOT_ASKED else "missing" if cell["note"] == "missing" else "-"


def _table(rows: Sequence[Row], runs: Sequence[PeerRun]) -> list[str]:
    titles = [run.peer.title for run in runs]
    head = ["case", "chosen instance", "clforge", "generic", *titles, "unit"]
    head += [f"x{t}" for t in titles] + ["xgeneric", "copy", "of copy"]
    table = [head]
    for r in rows:
        cells = [_peer_text(r["peers"][run.peer.key]) for run in runs]
        ratios = [
            "" if r["peers"][k]["note"] == NOT_ASKED else _times(r["ratios"][k])
            for k in (run.peer.key for run in runs)
        ]
        of_bw = "" if r["of_bandwidth"] is None else f"{100 * r['of_bandwidth']:.0f}%"
        ours = [r["label"], r["instance"], fmt(r["clforge"]), fmt(r["generic"])]
        extra = [_times(r["ratios"]["generic"]), fmt(r["copy"]) if r["copy"] else "", of_bw]
        table.append([*ours, *cells, r["unit"], *ratios, *extra])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    left = {0, 1, len(titles) + 4}  # the case, the instance and the unit
    return [
        "  "
        + "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]


def _notes(rows: Sequence[Row], runs: Sequence[PeerRun]) -> list[str]:
    """Each distinct note once, with the cases it concerns."""
    seen: dict[str, list[str]] = {}
    for r in rows:
        if r["generic_note"]:
            seen.setdefault(r["generic_note"], []).append(r["label"])
        for run in runs:
            note = r["peers"][run.peer.key]["note"]
            if note and note not in (NOT_ASKED, "missing"):
                seen.setdefault(f"{run.peer.title}: {note}", []).append(r["label"])
    return [f"  {note}: {', '.join(labels)}" for note, labels in seen.items()]


def text(report: dict[str, Any], rows: Sequence[Row], runs: Sequence[PeerRun]) -> str:
    """The human-readable report."""
    t = report["timing"]
    lines = [
        f"device: {report['device']} ({report['platform']})",
        f"commit: {report['commit']}"
        + ("  (--quick: tiny sizes, not figures to quote)" if report["quick"] else ""),
        "peers, each timed in its own process:",
        *(f"  {run.status()}" for run in runs),
    ]
    bw = report["bandwidth"]
    lines += [
        f"memory bandwidth (copy, counted as read+write): {fmt(bw['gbps'])} GB/s "
        f"({bw['total_bytes'] // 2**20} MiB in {bw['chunk_bytes'] // 2**10} KiB chunks, "
        f"float16 loads, plain stores {fmt(bw['plain_gbps'])}, streaming stores "
        f"{fmt(bw['streaming_gbps'])}, work-groups of 1);",
        "  per memory-bound case, `copy` is the same copy moving as many bytes as the case "
        "(timed right after it,",
        "  so that both see the same caches) and `of copy` clforge's GB/s over it",
    ]
    over = report["overhead"]
    lines += [
        "",
        f"per-call overhead, add of 1024 f32 on device arrays (median of {over['rounds']}x"
        f"{over['repeats']} runs of {over['inner']}):",
        f"  raw pyopencl launch {over['raw_us']:.1f} us, eager ops.add {over['eager_us']:.1f} us,"
        f" ratio {over['ratio']:.2f}x  ({over['instance']})",
        "",
        f"throughput on device arrays (no transfers), higher is better: each figure the median of "
        f"{report['rounds']} round(s)",
        f"(clforge, then each peer in its own process, once per round), each round's the median "
        f"of {t['repeats']} repeats;",
        "ratios are clforge's figure over the other's (above 1: clforge is faster); NumPy runs",
        "a @ b for matmul and gemm and this project's reference implementation for the rest:",
        *_table(rows, runs),
    ]
    notes = _notes(rows, runs)
    if notes:
        lines += ["", "notes:", *notes]
    first = report["first_call"]
    lines += [
        "",
        f"first matmul in a fresh process (import included), median of {first['repeats']}:",
        f"  cold caches {first['cold_s']:.2f} s, warm caches {first['warm_s']:.2f} s",
    ]
    return "\n".join(lines) + "\n"
