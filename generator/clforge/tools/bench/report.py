"""The bench's results: one row per case (clforge's figures, each peer's, the ratios), and the
text that `clforge bench` prints and writes beside the JSON."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from clforge.tools.bench import rounds
from clforge.tools.bench.bandwidth import Bandwidth
from clforge.tools.bench.cases import Case
from clforge.tools.bench.clforge_side import Figures
from clforge.tools.bench.peers import NOT_ASKED, PeerRun
from clforge.tools.bench.protocol import Outcome
from clforge.tools.bench.rounds import Spread
from clforge.tools.bench.wake import wake_lines


class PeerCell(TypedDict):
    rate: float | None  # in the case's unit: the median of its rounds
    range: list[float] | None  # [lowest, highest] over the rounds
    note: str | None  # why there is no rate ("missing": the peer is not installed), or how
    ways: dict[str, list[float | None]] | None  # where the peer has several ways to run the
    # case (ORT): each way's rate, per round (the fastest counted that round)


class Ratio(TypedDict):
    """clforge's rate over a peer's, round by round: the median, [lowest, highest], and whether
    that spread crosses 1.0 (then neither side won: `level`)."""

    median: float
    range: list[float]
    level: bool


class Untuned(TypedDict):
    """clforge's side with every tuning file hidden, timed in the same rounds as the tuned one:
    its chosen instance, its rate (median, range, per round) and its ratios, round by round,
    over each peer's rate and (key "tuned") over the tuned side's."""

    instance: str
    rate: float
    range: list[float]
    rounds: list[float]
    ratios: dict[str, Ratio | None]


class Row(TypedDict):
    op: str
    dtype: str
    label: str
    sizes: dict[str, int]
    unit: str
    instance: str  # the chosen instance
    clforge: float  # the chosen instance's rate, in the unit: the median of its rounds
    clforge_range: list[float]  # [lowest, highest] over the rounds
    generic: float | None  # timed in the first round only
    generic_note: str | None
    peers: dict[str, PeerCell]  # by peer key: numpy, onnxruntime, clblast
    ratios: dict[str, float | None]  # clforge's rate over each peer's (medians of the rounds'
    # ratios) and over the generic's
    spreads: dict[str, Ratio | None]  # by peer key: each ratio over the rounds
    rounds: dict[str, list[float | None]]  # per round, the rate of clforge and of each peer
    copy: float | None  # GB/s cases: the GB/s of a copy moving as many bytes
    of_bandwidth: float | None  # GB/s cases: clforge's GB/s over that copy's
    peak: float | None  # GFLOP/s cases: the device's multiply-add rate in the case's dtype
    of_peak: float | None  # GFLOP/s cases: clforge's GFLOP/s over that peak
    mode: str  # what `clforge` is: "tuned", or "untuned" (CLFORGE_TUNING=off)
    untuned: Untuned | None  # with --untuned: the same side with every tuning file hidden


def _rate(amount: float, seconds: float | None) -> float | None:
    return amount / seconds if seconds and math.isfinite(seconds) else None


def _ratio(ours: float, theirs: float | None) -> float | None:
    return ours / theirs if theirs else None


def _range(spread: Spread | None) -> list[float] | None:
    return None if spread is None else [spread.low, spread.high]


def _ways(amount: float, outcomes: Sequence[Outcome]) -> dict[str, list[float | None]] | None:
    names = list(dict.fromkeys(k for o in outcomes for k in o.get("ways", {})))
    if not names:
        return None
    return {k: [_rate(amount, o.get("ways", {}).get(k)) for o in outcomes] for k in names}


def _cell(amount: float, rates: Sequence[float | None], outcomes: Sequence[Outcome]) -> PeerCell:
    spread = Spread.of(rates)
    return {
        "rate": None if spread is None else spread.median,
        "range": _range(spread),
        "note": rounds.note(outcomes),
        "ways": _ways(amount, outcomes),
    }


def _spread(ours: Sequence[float], theirs: Sequence[float | None]) -> Ratio | None:
    spread = Spread.of(rounds.ratios(ours, theirs))
    if spread is None:
        return None
    return {
        "median": spread.median,
        "range": [spread.low, spread.high],
        "level": spread.crosses_one(),
    }


def _untuned(
    amount: float,
    figs: Sequence[Figures],
    tuned: Sequence[float],
    theirs: dict[str, list[float | None]],
) -> Untuned:
    per_round = [amount / f.seconds for f in figs]
    spread = Spread.of(per_round)
    assert spread is not None
    ratios = {key: _spread(per_round, rates) for key, rates in theirs.items()}
    ratios["tuned"] = _spread(per_round, tuned)
    return {
        "instance": figs[0].instance,
        "rate": spread.median,
        "range": [spread.low, spread.high],
        "rounds": per_round,
        "ratios": ratios,
    }


def make_rows(
    cases: Sequence[Case],
    figures: Sequence[Sequence[Figures]],
    runs: Sequence[PeerRun],
    copies: Sequence[Sequence[Bandwidth | None]],
    untuned: Sequence[Sequence[Figures]] | None = None,
    mode: str = "tuned",
    peaks: Mapping[str, float] | None = None,
) -> list[Row]:
    """One row per case, from its rounds: `figures`, clforge's per case per round; `runs`, each
    peer's; `copies`, per case per round, the copy of as many bytes (memory-bound cases);
    `untuned`, clforge's per case per round with every tuning file hidden (--untuned); `mode`,
    what `figures` are ("tuned", or "untuned" where CLFORGE_TUNING=off hid the files); `peaks`,
    the device's multiply-add GFLOP/s by dtype (peak.py), for the compute-bound cases."""
    rows: list[Row] = []
    for i, (case, figs, cps) in enumerate(zip(cases, figures, copies, strict=True)):
        amount = case.amount()
        merged = rounds.figures(figs)
        per_round = [amount / f.seconds for f in figs]
        ours = Spread.of(per_round)
        assert ours is not None
        generic = _rate(amount, merged.generic_seconds)
        theirs = {
            run.peer.key: [_rate(amount, o["seconds"]) for o in run.outcomes[i]] for run in runs
        }
        cells = {run.peer.key: _cell(amount, theirs[run.peer.key], run.outcomes[i]) for run in runs}
        spreads = {key: _spread(per_round, rates) for key, rates in theirs.items()}
        ratios = {key: s["median"] if s else None for key, s in spreads.items()}
        ratios["generic"] = _ratio(ours.median, generic)
        copy = rounds.copy(cps)
        copy_gbps = copy.gbps if copy and case.memory_bound else None
        peak = (peaks or {}).get(case.dtype) if case.bounded and not case.memory_bound else None
        rows.append(
            {
                "op": case.op,
                "dtype": case.dtype,
                "label": case.title,
                "sizes": dict(case.sizes),
                "unit": case.unit,
                "instance": merged.instance,
                "clforge": ours.median,
                "clforge_range": [ours.low, ours.high],
                "generic": generic,
                "generic_note": merged.generic_note,
                "peers": cells,
                "ratios": ratios,
                "spreads": spreads,
                "rounds": {"clforge": list[float | None](per_round), **theirs},
                "copy": copy_gbps,
                "of_bandwidth": _ratio(ours.median, copy_gbps),
                "peak": peak,
                "of_peak": _ratio(ours.median, peak),
                "mode": mode,
                "untuned": None
                if untuned is None
                else _untuned(amount, untuned[i], per_round, theirs),
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


def _spread_text(low: float, high: float) -> str:
    return f" [{fmt(low)}-{fmt(high)}]"


def _rate_text(rate: float | None, spread: list[float] | None, spreads: bool) -> str:
    return fmt(rate) + (_spread_text(*spread) if spreads and spread and rate is not None else "")


def _peer_text(cell: PeerCell, spreads: bool) -> str:
    if cell["rate"] is not None:
        return _rate_text(cell["rate"], cell["range"], spreads)
    return "" if cell["note"] == NOT_ASKED else "missing" if cell["note"] == "missing" else "-"


def _ratio_text(ratio: Ratio | None, spreads: bool) -> str:
    """The ratio, `~` before it where its rounds' spread crosses 1.0 (no win either way)."""
    if ratio is None:
        return "-"
    mark = "~" if ratio["level"] else ""
    return mark + _times(ratio["median"]) + (_spread_text(*ratio["range"]) if spreads else "")


def _table(rows: Sequence[Row], runs: Sequence[PeerRun], spreads: bool) -> list[str]:
    titles = [run.peer.title for run in runs]
    head = ["case", "chosen instance", "clforge", "generic", *titles, "unit"]
    head += [f"x{t}" for t in titles] + ["xgeneric", "ceiling", "of it"]
    table = [head]
    for r in rows:
        keys = [run.peer.key for run in runs]
        cells = [_peer_text(r["peers"][k], spreads) for k in keys]
        ratios = [
            "" if r["peers"][k]["note"] == NOT_ASKED else _ratio_text(r["spreads"][k], spreads)
            for k in keys
        ]
        ceiling, of_it = (r["copy"], r["of_bandwidth"]) if r["copy"] else (r["peak"], r["of_peak"])
        of_bw = "" if of_it is None else f"{100 * of_it:.0f}%"
        ours = [r["label"], r["instance"], _rate_text(r["clforge"], r["clforge_range"], spreads)]
        ours.append(fmt(r["generic"]))
        extra = [_times(r["ratios"]["generic"]), fmt(ceiling) if ceiling else "", of_bw]
        table.append([*ours, *cells, r["unit"], *ratios, *extra])
    return _aligned(table, left={0, 1, len(titles) + 4})  # the case, the instance, the unit


def _aligned(table: Sequence[Sequence[str]], left: set[int]) -> list[str]:
    """`table`'s rows as lines, each column as wide as its widest cell: the columns in `left`
    flush left, the others (figures) flush right."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [
        "  "
        + "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]


def _untuned_table(rows: Sequence[Row], runs: Sequence[PeerRun], spreads: bool) -> list[str]:
    """The untuned side's table: its instance, its rate beside the tuned one, untuned/tuned,
    and its ratios over each peer (rows without an untuned figure are left out)."""
    titles = [run.peer.title for run in runs]
    head = ["case", "instance (untuned)", "untuned", "tuned", "unit", "untuned/tuned"]
    head += [f"x{t}" for t in titles]
    table = [head]
    for r in rows:
        u = r["untuned"]
        if u is None:
            continue
        keys = [run.peer.key for run in runs]
        ratios = [
            "" if r["peers"][k]["note"] == NOT_ASKED else _ratio_text(u["ratios"].get(k), spreads)
            for k in keys
        ]
        instance = u["instance"] if u["instance"] != r["instance"] else "(the same)"
        table.append(
            [
                r["label"],
                instance,
                _rate_text(u["rate"], u["range"], spreads),
                fmt(r["clforge"]),
                r["unit"],
                _ratio_text(u["ratios"].get("tuned"), spreads),
                *ratios,
            ]
        )
    return _aligned(table, left={0, 1, 4})


def tally(rows: Sequence[Row], key: str) -> tuple[int, int, int]:
    """Against one peer: the cases clforge is ahead in, behind in, and level in (the rounds'
    ratios on both sides of 1.0, or a ratio of exactly 1: no win either way)."""
    ahead = behind = level = 0
    for r in rows:
        ratio = r["spreads"].get(key)
        if ratio is None:
            continue
        if ratio["level"] or ratio["median"] == 1.0:
            level += 1
        elif ratio["median"] > 1.0:
            ahead += 1
        else:
            behind += 1
    return ahead, behind, level


def _tallies(rows: Sequence[Row], runs: Sequence[PeerRun]) -> list[str]:
    out = []
    for run in runs:
        ahead, behind, level = tally(rows, run.peer.key)
        if ahead + behind + level:
            out.append(
                f"  x{run.peer.title}: clforge ahead in {ahead} case(s), behind in {behind}, "
                f"level in {level} (marked ~)"
            )
    return out


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


def _mode_text(report: dict[str, Any]) -> str:
    tuning = report.get("tuning") or {}
    files = ", ".join(Path(f).name for f in tuning.get("files", ())) or "none"
    return f"{tuning.get('clforge', 'tuned')} (tuning files given to the lookup: {files})"


def _peak_lines(peaks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The multiply-add peak's lines of the report's head (none where it was not measured)."""
    if not peaks:
        return []
    first = next(iter(peaks.values()))
    rates = ", ".join(f"{dt} {fmt(p['gflops'])}" for dt, p in peaks.items())
    return [
        f"multiply-add peak: {rates} GFLOP/s ({first['accumulators']} independent vectors per "
        f"work-item, {first['work_items']} work-items, nothing loaded: peak.py);",
        "  per compute-bound case, `ceiling` is that peak in the case's dtype and `of it` "
        "clforge's GFLOP/s over it",
    ]


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
        "  per memory-bound case, `ceiling` is the same copy moving as many bytes as the case "
        "(timed right after it,",
        "  so that both see the same caches) and `of it` clforge's GB/s over it",
        *_peak_lines(report.get("peak") or {}),
    ]
    over = report["overhead"]
    lines += [
        "",
        f"per-call overhead, add of 1024 f32 on device arrays (median of {over['rounds']}x"
        f"{over['repeats']} runs of {over['inner']}):",
        f"  raw pyopencl launch {over['raw_us']:.1f} us, eager ops.add {over['eager_us']:.1f} us,"
        f" ratio {over['ratio']:.2f}x  ({over['instance']})",
        *per_kernel_lines(over.get("per_kernel")),
        *wake_lines(over.get("wake")),
        "",
        f"throughput on device arrays (no transfers), higher is better: each figure the median "
        f"of {report['rounds']} round(s), [lowest-highest] beside it;",
        "in every round each case is timed by clforge, then by each peer in its own process",
        "(the next round: the peers first, then clforge), each side's figure the median of "
        f"{t['repeats']} repeats;",
        "each peer gets the call its users write (the label's shapes and axis). Ratios are",
        "clforge's figure over the other's (above 1: clforge is faster), the median of the",
        "rounds' ratios; ~ marks one whose rounds fall on both sides of 1 (level: no win).",
        "NumPy runs a @ b for matmul and gemm, np.sum/mean/max/argmax, a transpose made",
        "contiguous, and this project's reference implementation for the rest.",
        f"clforge: {_mode_text(report)}:",
        *_table(rows, runs, spreads=report["rounds"] > 1),
    ]
    if any(r["untuned"] for r in rows):
        lines += [
            "",
            "clforge untuned: every tuning file hidden (the parameters computed for this "
            "device, variants by priority),",
            "timed in the same rounds, back to back with the tuned side; untuned/tuned below "
            "1: the tuning files help",
            *_untuned_table(rows, runs, spreads=report["rounds"] > 1),
        ]
    tallies = _tallies(rows, runs)
    if tallies:
        lines += ["", "wins and losses (a ~ ratio counts as level, not as a win):", *tallies]
    notes = _notes(rows, runs)
    if notes:
        lines += ["", "notes:", *notes]
    first = report["first_call"]
    lines += [
        "",
        f"first matmul in a fresh process (import included), median of {first['repeats']}:",
        f"  cold caches {first['cold_s']:.2f} s, warm caches {first['warm_s']:.2f} s",
    ]
    speed = report.get("process_speed")
    if speed:
        lines += ["", *process_speed_lines(speed)]
    return "\n".join(lines) + "\n"


def process_speed_lines(speed: dict[str, Any]) -> list[str]:
    """The one-speed-per-process check: each call's median, lowest and highest over the fresh
    processes, with PoCL's workers pinned (clforge's setting) and unpinned."""
    n = speed["processes"]
    lines = [
        f"the same eager calls in {n} fresh processes per mode (each process: median of 15 "
        "calls after 10), ms: median [lowest-highest] over the processes; pinned: PoCL's "
        "worker threads one per core, as clforge sets them; unpinned: $POCL_AFFINITY=0"
    ]
    modes = speed["ms"]
    for name in modes.get("pinned", {}):
        cells = []
        for mode, per in modes.items():
            v = per.get(name) or []
            if v:
                cells.append(f"{mode} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
        lines.append(f"  {name:20} " + ", ".join(cells))
    return lines


def per_kernel_lines(pk: dict[str, Any] | None) -> list[str]:
    """The host time per kernel of a compiled model beside eager calls (overhead.py)."""
    if not pk:
        return []

    def fig(key: str) -> str:
        lo, hi = pk[f"{key}_range_us"]
        return f"{pk[f'{key}_us']:.2f} us [{lo:.2f}-{hi:.2f}]"

    return [
        f"host time per kernel, a chain of {pk['kernels']} adds of {pk['n']} f32 on device arrays "
        f"(median of {pk['rounds']} rounds of {pk['inner']} calls, [lowest-highest]):",
        f"  compiled model {fig('compiled')}, eager calls {fig('eager')}, the driver's bare "
        f"enqueue {fig('enqueue')}",
    ]
