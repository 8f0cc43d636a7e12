"""`clforge bench [--quick] [--json] [--out DIR] [--ops OP,...] [--untuned]`: every part of the
bench in one run (the throughput of the cases of some ops only, with --ops), the text printed (or
the JSON with --json) and both written to DIR with the chart. With --untuned, clforge's side is
timed twice in every round: as tuned, and with every tuning file hidden (a dispatcher whose
parameter lookup reads none, as `CLFORGE_TUNING=off` gives: the parameters computed for the
device), each case's two figures back to back, which goes first alternating by round."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clforge.call.dispatcher import Dispatcher, dispatcher
from clforge.core import resources
from clforge.core.tree import DEFAULT
from clforge.params.lookup import ParamLookup
from clforge.tools.bench import rounds as sides
from clforge.tools.bench.bandwidth import Bandwidth, Copier
from clforge.tools.bench.cases import run_cases
from clforge.tools.bench.chart import write_chart
from clforge.tools.bench.clforge_side import Figures, GenericPace, requests, time_case
from clforge.tools.bench.model_run import model_text, run_models
from clforge.tools.bench.models import MODEL_KINDS
from clforge.tools.bench.models import selected as model_cases
from clforge.tools.bench.overhead import (
    bench_first_call,
    bench_host_per_kernel,
    bench_overhead,
    bench_process_speed,
)
from clforge.tools.bench.peak import measure_peaks
from clforge.tools.bench.peers import PEERS, PeerProcess
from clforge.tools.bench.protocol import Outcome, Timing
from clforge.tools.bench.report import make_rows, text
from clforge.tools.bench.wake import bench_wake


@dataclass(frozen=True)
class Settings:
    timing: Timing
    overhead: tuple[int, int, int]  # rounds, repeats, calls per repeat
    first_call_repeats: int
    speed_processes: int  # fresh processes per mode for the one-speed-per-process check
    copy_bytes: int
    generic_budget_s: float  # skip timing a generic predicted to take longer than this
    peer_timeout_s: float  # for a peer's answer on one case
    rounds: int  # every case timed by every side this many times (figures: medians, spreads)


FULL = Settings({"repeats": 5, "target_s": 0.05}, (3, 9, 2000), 3, 5, 256 * 2**20, 20.0, 600.0, 3)
QUICK = Settings({"repeats": 1, "target_s": 0.002}, (1, 1, 200), 1, 1, 16 * 2**20, 20.0, 300.0, 1)


def progress(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def commit(root: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def untuned_dispatcher(d: Dispatcher) -> Dispatcher:
    """A dispatcher on `d`'s runtime whose parameter lookup reads no tuning file: every call
    runs the parameters computed for the device (overrides still apply), and variants are
    ranked by priority, no measured crossover (what CLFORGE_TUNING=off gives every call)."""
    return Dispatcher(d.runtime, d.profile, d.strict, ParamLookup.from_env(d.profile, ()))


def tuning_mode(d: Dispatcher) -> dict[str, Any]:
    """What the tuned side's figures are: tuned, or untuned where $CLFORGE_TUNING=off hides
    every file; and the tuning files its lookup was given."""
    on = resources.tuning_on()
    return {
        "clforge": "tuned" if on else f"untuned (${resources.TUNING_SWITCH_ENV}=off)",
        "files": [str(f.path or f.device.slug) for f in d.lookup.files],
    }


def run_bench(
    as_json: bool = False,
    quick: bool = False,
    out_dir: Path | None = None,
    ops: Sequence[str] | None = None,
    rounds: int | None = None,
    untuned: bool = False,
) -> int:
    s = QUICK if quick else FULL
    if rounds is not None:
        s = dataclasses.replace(s, rounds=rounds)
    out_dir = out_dir or DEFAULT.root / "bench-results"
    d = dispatcher()
    # the model cases (block, mlp) by their kind; --ops naming only those runs only them
    kinds = None if ops is None else [o for o in ops if o in MODEL_KINDS]
    models = model_cases(quick, kinds) if kinds is None or kinds else []
    if ops is not None and not [o for o in ops if o not in MODEL_KINDS]:
        return _models_only(d, models, s, out_dir, as_json)
    ops = None if ops is None else [o for o in ops if o not in MODEL_KINDS]
    cases = run_cases(d.registry, quick, ops)
    reqs = requests(d.registry, cases)
    progress(f"copy bandwidth ({s.copy_bytes // 2**20} MiB)")
    copier = Copier(d.runtime.queue)
    bw = copier.measure(s.timing, s.copy_bytes)
    progress("multiply-add peak")
    peaks = measure_peaks(d.runtime.queue, d.profile, s.timing)
    progress("per-call overhead")
    over = bench_overhead(*s.overhead)
    progress("host time per kernel, compiled model and eager")
    rounds, _, calls = s.overhead
    over["per_kernel"] = bench_host_per_kernel(rounds=2 * rounds + 1, inner=calls // 10)
    progress("PoCL's worker threads: join, gap between kernels, round trip")
    over["wake"] = bench_wake(d.runtime.queue)
    pace = GenericPace(s.generic_budget_s)
    per_case: list[list[Figures]] = [[] for _ in cases]
    bare = untuned_dispatcher(d) if untuned else None
    per_untuned: list[list[Figures]] | None = [[] for _ in cases] if untuned else None
    per_copy: list[list[Bandwidth | None]] = [[] for _ in cases]
    processes = [PeerProcess(peer, s.peer_timeout_s) for peer in PEERS]
    per_peer: list[list[list[Outcome]]] = [[[] for _ in cases] for _ in PEERS]

    def ours(k: int, i: int) -> None:
        case = cases[i]
        if bare is not None and per_untuned is not None and not sides.clforge_first(k):
            per_untuned[i].append(time_case(bare, case, reqs[i], s.timing, pace, False))
        per_case[i].append(time_case(d, case, reqs[i], s.timing, pace, with_generic=k == 0))
        # a copy of as many bytes, right after: the same caches and the same neighbours
        nbytes = round(case.amount() * 1e9)
        per_copy[i].append(copier.measure(s.timing, nbytes) if case.memory_bound else None)
        if bare is not None and per_untuned is not None and sides.clforge_first(k):
            per_untuned[i].append(time_case(bare, case, reqs[i], s.timing, pace, False))

    def theirs(_: int, i: int) -> None:
        for j, proc in enumerate(processes):
            per_peer[j][i].append(proc.ask(reqs[i], s.timing))

    try:
        sides.interleave(s.rounds, [c.title for c in cases], ours, theirs, progress)
    finally:
        for proc in processes:
            proc.close()
    runs = [proc.run(outcomes) for proc, outcomes in zip(processes, per_peer, strict=True)]
    model_rows = run_models(d, models, s.timing, s.rounds, s.peer_timeout_s, progress)
    progress("first call in fresh processes")
    first = bench_first_call(s.first_call_repeats)
    progress("the same calls in fresh processes")
    speed = bench_process_speed(s.speed_processes)
    mode = "tuned" if resources.tuning_on() else "untuned"
    rows = make_rows(
        cases, per_case, runs, per_copy, per_untuned, mode, {p.dtype: p.gflops for p in peaks}
    )
    report: dict[str, Any] = {
        "commit": commit(DEFAULT.root),
        "device": d.profile.name,
        "platform": d.runtime.device.platform.version.strip(),
        "quick": quick,
        "tuning": {**tuning_mode(d), "untuned": untuned},
        "timing": s.timing,
        "rounds": s.rounds,
        "round_order": sides.order(s.rounds),
        "peers": {
            run.peer.key: {
                "title": run.peer.title,
                "available": run.available,
                "version": run.version,
                "reason": run.reason,
                "status": run.status(),
            }
            for run in runs
        },
        "bandwidth": {
            "gbps": bw.gbps,
            "plain_gbps": bw.plain_gbps,
            "streaming_gbps": bw.streaming_gbps,
            "total_bytes": bw.total_bytes,
            "chunk_bytes": bw.chunk_bytes,
        },
        "peak": {
            p.dtype: {
                "gflops": p.gflops,
                "lanes": p.lanes,
                "accumulators": p.accumulators,
                "work_items": p.work_items,
            }
            for p in peaks
        },
        "overhead": over,
        "throughput": rows,
        "first_call": first,
        "process_speed": speed,
        "models": model_rows,
    }
    body = text(report, rows, runs) + ("\n" + model_text(model_rows, s.rounds) if models else "")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / "bench.txt").write_text(body, encoding="utf-8")
    peers = [(run.peer.key, run.peer.title) for run in runs]
    title = f"clforge bench, commit {report['commit']}" + (" (--quick)" if quick else "")
    why_not = write_chart(out_dir / "bench.png", rows, peers, f"{title}\n{report['device']}")
    chart = "bench.png" if why_not is None else f"no chart: {why_not}"
    report_line = f"wrote {DEFAULT.rel(out_dir)}/: bench.txt, bench.json, {chart}"
    if as_json:
        print(json.dumps(report, indent=2))
        print(report_line, file=sys.stderr)
    else:
        print(body + "\n" + report_line)
    return 0


def _models_only(
    d: Dispatcher, models: list[Any], s: Settings, out_dir: Path, as_json: bool
) -> int:
    """`--ops block,mlp`: the model cases alone (no op cases, copy bandwidth or overheads),
    written to DIR as bench-models.txt and bench-models.json."""
    rows = run_models(d, models, s.timing, s.rounds, s.peer_timeout_s, progress)
    report = {"commit": commit(DEFAULT.root), "device": d.profile.name, "rounds": s.rounds}
    report |= {"timing": s.timing, "models": rows}
    body = model_text(rows, s.rounds)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench-models.json").write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    (out_dir / "bench-models.txt").write_text(body, encoding="utf-8")
    print(json.dumps(report, indent=2) if as_json else body)
    print(f"wrote {DEFAULT.rel(out_dir)}/: bench-models.txt, bench-models.json", file=sys.stderr)
    return 0 if all(r["agree"] for r in rows) else 1
