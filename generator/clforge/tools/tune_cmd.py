"""`clforge tune`: tune, inspect, check and merge the per-device tuning database."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from clforge.core.tree import Tree
from clforge.errors import UsageError

if TYPE_CHECKING:
    from clforge.params.database import Entry
    from clforge.params.space import Params


EPILOG = (
    "Exit status: 0 tuned (with --check: no stale entries); 1 with --check when an entry is "
    "stale, or a device or spec error; 2 usage errors (an unknown op, a bad --shapes). Entries "
    "that do not beat the default are reported by --check but change no exit status. --check "
    "--json: {version: 1, stale: [{file, instance, bucket, why}], count, behind: [{file, "
    "instance, bucket, tuned_us, default_us, source}], behind_count}; its keys are kept "
    'across releases (keys may be added; its "version" changes when one is removed or '
    "changes meaning)."
)


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    tree_of: Callable[[argparse.Namespace], Tree],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    t = sub.add_parser(
        "tune",
        parents=list(parents),
        help="tune kernel parameters ahead of time for the default device",
        description="Build, verify and time every candidate parameter set of the instances the "
        "device would run, at representative shapes (or --shapes), and write the best to "
        "tuning/<device>.yaml. Killed runs resume from a journal in clforge's cache folder.",
        epilog=EPILOG,
    )
    t.add_argument("ops", nargs="*", help="ops to tune (default: every op; --quick: its ops)")
    t.add_argument(
        "--quick",
        action="store_true",
        help="a few minutes for a new machine: the core ops at a few shapes, f32, a small "
        "search around the parameters computed for this device; written to the user's tuning "
        "folder (docs/tuning.md)",
    )
    t.add_argument("--dtypes", default=None, help="dtypes to tune (default: f32,f64; --quick: f32)")
    t.add_argument("--shapes", help="OP:DIM=N,...;OP:... instead of the default shapes")
    t.add_argument(
        "--layouts",
        help="OP:TENSOR=LAYOUT,...;OP:... layout combinations to tune besides the default ones "
        "(the first layouts, and channels-last convs)",
    )
    t.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for measuring candidates (default 600; --quick: 90); the races follow",
    )
    t.add_argument("--timeout", type=float, default=120.0, help="seconds per candidate")
    t.add_argument(
        "--repeats", type=int, default=None, help="timed repeats per candidate (7; --quick: 3)"
    )
    t.add_argument("--fresh", action="store_true", help="forget the journal of earlier runs")
    t.add_argument(
        "--hoisted",
        action="store_true",
        help="tune the routines as a compiled graph runs them, every input but the first a "
        "constant: their steps that read only those run once and are not timed (gemm's "
        "pack_b); the entries' shapes carry HOIST~1, and compiled graphs take them first",
    )
    t.add_argument(
        "--check",
        action="store_true",
        help="list stale entries (exit 1 if any), and entries that do not beat the default "
        "by the times their file or this device's journal records",
    )
    t.add_argument(
        "--remeasure",
        action="store_true",
        help="with --check: race what the chain picks at each tuned shape (of OPS, default "
        "every op) against the default on this device now",
    )
    t.add_argument(
        "--json", action="store_true", help="with --check: machine-readable output (see below)"
    )
    t.add_argument(
        "--prune",
        action="store_true",
        help="drop stale entries from the tuning files (of devices not at hand to re-tune)",
    )
    t.add_argument("--merge", nargs=2, metavar=("A", "B"), help="merge tuning file B into A")
    t.add_argument(
        "--out",
        help="write the tuning file here instead of tuning/<device>.yaml (--quick: instead of "
        "the user's tuning folder)",
    )
    t.set_defaults(func=lambda args: cmd_tune(args, tree_of(args)))


def cmd_tune(args: argparse.Namespace, tree: Tree) -> int:
    from clforge.params.database import load, load_folders, merge, schema_hash
    from clforge.registry import loader as registry_mod
    from clforge.tune.tuner import stale_entries

    if args.json and not args.check:
        raise UsageError("tune --json goes with --check (the stale entries as JSON)")
    if args.remeasure and not args.check:
        raise UsageError("tune --remeasure goes with --check")
    reg = registry_mod.for_tree(tree)
    if args.merge:
        a, b = (load(Path(p)) for p in args.merge)
        current = {i.name: schema_hash(i) for i in reg.instances.values()}
        merged = merge(a, b, current)
        merged.save(Path(args.merge[0]))
        print(f"merged {args.merge[1]} into {args.merge[0]}: {len(merged.entries)} entries")
        return 0
    if args.check or args.prune:
        files = load_folders(reg.tuning_folders(hidden_too=True))
        stale = stale_entries(reg, files)
        if args.prune:
            return _prune(stale)
        behind = _behind(args, tree, reg, files)
        if args.json:
            rows = [
                {"file": path, "instance": e.instance, "bucket": e.bucket, "why": why}
                for path, e, why in stale
            ]
            doc = {"version": 1, "stale": rows, "count": len(rows)}
            doc |= {"behind": [b.as_dict() for b in behind], "behind_count": len(behind)}
            print(json.dumps(doc, indent=2))
        else:
            for path, e, why in stale:
                print(f"{path}: {e.instance} bucket {e.bucket}: stale ({why})")
            for b in behind:
                print(b.line())
        print(f"{len(stale)} stale entries", file=sys.stderr)
        print(_behind_summary(behind, args.remeasure), file=sys.stderr)
        return 1 if stale else 0
    return _run(args, tree, reg)


def _behind(args: argparse.Namespace, tree: Tree, reg, files) -> list:  # type: ignore[no-untyped-def]
    """The entries that do not beat the default: by their files' times, then by this device's
    journal where a device is at hand (both cheap), or raced now with --remeasure."""
    from clforge.errors import ClforgeError
    from clforge.tune import behind

    found = {(b.file, b.entry.key): b for b in behind.from_files(reg, files)}
    try:
        from clforge.device.discovery import default_device
        from clforge.device.query import from_device

        profile = from_device(default_device())
    except (ClforgeError, ImportError):  # no OpenCL here (a lint-only CI job): the files alone
        if args.remeasure:
            raise
        return list(found.values())  # no device here: what the files say
    journal = behind.journal_of(profile)
    for b in behind.from_journal(reg, profile, files, journal):
        found[(b.file, b.entry.key)] = b
    if args.remeasure:
        from clforge.tune.tuner import plan_jobs

        ops = _ops(args, reg) if args.ops else sorted(reg.ops)
        jobs = plan_jobs(reg, profile, ops, (args.dtypes or "f32,f64").split(","))
        print(
            f"--remeasure: {len(jobs)} instance × shape jobs; racing each tuned set the chain "
            "picks there against the default",
            file=sys.stderr,
        )
        for b in behind.remeasure(
            tree, reg, profile, jobs, files, journal, args.repeats or 7, args.timeout
        ):
            found[(b.file, b.entry.key)] = b
    return sorted(found.values(), key=lambda b: (b.file, b.entry.key))


def _behind_summary(found: list, remeasured: bool) -> str:  # type: ignore[type-arg]
    from clforge.tune.tuner import MARGIN

    how = "raced on this device now, or as" if remeasured else "as"
    return (
        f"{len(found)} entries do not beat the default by {MARGIN:.0%} ({how} their file or "
        "this device's journal records the two times; `clforge tune OP` re-tunes them, "
        "`clforge tune --check --remeasure [OP ...]` races them here)"
    )


def _ops(args: argparse.Namespace, reg) -> list[str]:  # type: ignore[no-untyped-def]
    unknown = [o for o in args.ops if o not in reg.ops]
    if unknown:
        raise UsageError(f"unknown op {', '.join(unknown)} (ops: {', '.join(sorted(reg.ops))})")
    return list(args.ops)


def _prune(stale: list[tuple[str, Entry, str]]) -> int:
    """Rewrite each tuning file that holds stale entries (`stale`: file, entry, why) without
    them."""
    from clforge.params.database import load

    by_file: dict[str, set[Entry]] = {}
    for path, e, _ in stale:
        by_file.setdefault(path, set()).add(e)
    for path, gone in sorted(by_file.items()):
        f = load(Path(path))
        kept = tuple(e for e in f.entries if e not in gone)
        replace(f, entries=kept).save(Path(path))
        print(f"{path}: dropped {len(gone)} stale entries, kept {len(kept)}")
    print(f"{len(stale)} stale entries dropped", file=sys.stderr)
    return 0


class _Lines:
    """Progress as a line every `every_s` seconds, where a bar would only garble a log file."""

    def __init__(self, total: int, every_s: float, clock: Callable[[], float]) -> None:
        self.total, self.every_s, self.clock = total, every_s, clock
        self.done = 0
        self.start = self.last = clock()

    def __call__(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.every_s or self.done == self.total:
            self.last = now
            pct = 100 * self.done / max(self.total, 1)
            print(
                f"tune: {self.done}/{self.total} candidates ({pct:.0f}%), "
                f"{(now - self.start) / 60:.1f} min",
                file=sys.stderr,
                flush=True,
            )


@contextmanager
def progress_bar(
    total: int,
    tty: bool | None = None,
    every_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Callable[[int], object]]:
    """An update(n) callable: a tqdm bar on a terminal, else a line now and then."""
    if tty if tty is not None else sys.stderr.isatty():
        from tqdm import tqdm

        with tqdm(total=total, unit="cand") as bar:
            yield bar.update
    else:
        yield _Lines(total, every_s, clock)


def _run(args: argparse.Namespace, tree: Tree, reg) -> int:  # type: ignore[no-untyped-def]
    from clforge.core import resources
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device
    from clforge.params.database import load_folders
    from clforge.params.fingerprint import Fingerprint
    from clforge.params.lookup import ParamLookup
    from clforge.tune import quick
    from clforge.tune.cases import parse_layouts, parse_shapes
    from clforge.tune.tuner import MARGIN, candidates, default_params, incumbent, plan_jobs, tune

    started = time.monotonic()
    if args.quick:
        ops = _ops(args, reg) if args.ops else list(quick.PLAN)
    else:
        ops = _ops(args, reg) if args.ops else sorted(reg.ops)
    profile = from_device(default_device())
    shapes = parse_shapes(args.shapes) if args.shapes else None
    if args.quick and shapes is None:
        shapes = quick.cases(ops) or None  # an op the plan does not list: its default shapes
    layouts = parse_layouts(args.layouts) if args.layouts else None
    stray = sorted(set(layouts or ()) - set(ops))
    if stray:
        raise UsageError(f"--layouts names {', '.join(stray)}, which this run does not tune")
    dtypes = (args.dtypes or (",".join(quick.DTYPES) if args.quick else "f32,f64")).split(",")
    jobs = plan_jobs(
        reg,
        profile,
        ops,
        dtypes,
        shapes,
        layouts,
        first_layouts_only=args.quick,
        hoisted=args.hoisted,
    )
    nearest = quick.NEAREST if args.quick else None
    held: list[Params | None] = [None] * len(jobs)
    if args.quick:  # what the chain gives each shape now races too: never worse than before
        lookup = ParamLookup(profile, load_folders(reg.tuning_folders()))
        held = [incumbent(reg, lookup, j) for j in jobs]
    total = sum(
        len(candidates(j, profile, default_params(reg, profile, j), nearest, inc))
        for j, inc in zip(jobs, held, strict=True)
    )
    budget = args.budget if args.budget is not None else quick.BUDGET_S if args.quick else 600.0
    repeats = args.repeats or (quick.REPEATS if args.quick else 7)
    out = Path(args.out) if args.out else None
    if args.quick and out is None:  # this machine's own: the user's folder, read first
        out = resources.user_tuning_folders()[0] / f"{Fingerprint.of(profile).slug}.yaml"
    kind = "quick tune: " if args.quick else ""
    print(f"{kind}tuning {len(jobs)} instance × shape jobs, {total} candidates, on {profile.name}")
    with progress_bar(total) as update:
        report = tune(
            tree,
            reg,
            profile,
            jobs,
            budget_s=budget,
            timeout_s=args.timeout,
            repeats=repeats,
            fresh=args.fresh,
            progress=update,
            out=out,
            # no catch-all from a quick tune: one shape per op would speak for every shape on
            # this device, above another file's entry for the shape itself (seen: the last-axis
            # mean's IB=16 served the middle-axis mean, 0.76x the computed default's speed)
            catch_all=args.shapes is None and not args.quick and not args.hoisted,
            nearest=nearest,
            finalists=quick.FINALISTS if args.quick else 3,
            incumbents=held,
        )
    for e in report.entries:
        if e.bucket == "*":
            continue
        gain = f"{e.default_us / e.time_us:.2f}x" if e.time_us and e.default_us else "-"
        if e.key in report.defaults_kept:
            gain += " (default)"
        params = ",".join(f"{k}={v}" for k, v in e.params)
        print(f"  {e.instance:48s} {e.bucket:36s} {params:24s} {e.time_us:10.1f} us  {gain}")
    for inst, params, why in report.rejected:
        print(f"  rejected {inst} [{params}]: {why.splitlines()[0][:160]}")
    buckets = [e for e in report.entries if e.bucket != "*"]
    kept = sum(e.key in report.defaults_kept for e in buckets)
    print(
        f"wrote {', '.join(tree.rel(p) for p in report.paths) or '?'}: "
        f"{len(report.entries)} entries; "
        f"{report.measured} candidates measured, {report.reused} from the journal, "
        f"{len(report.rejected)} rejected, {report.skipped} left out by the budget; "
        f"{len(buckets) - kept} tuned sets beat the default by {MARGIN:.0%}, the default "
        f"stands in {kept}"
    )
    if args.quick:
        print(f"quick tune: {time.monotonic() - started:.0f} s; what it tuned, by op:")
        by_op: dict[str, list[Entry]] = {}
        for e in buckets:
            by_op.setdefault(e.instance.split("__")[0], []).append(e)
        for op, entries in by_op.items():
            n_kept = sum(e.key in report.defaults_kept for e in entries)
            n_shapes = len({e.bucket for e in entries})
            print(
                f"  {op:12s} {n_shapes} shape(s), {len(entries)} instance entries: "
                f"{len(entries) - n_kept} tuned, {n_kept} the default"
            )
        print(
            f"tuning file: {report.path} (calls on this device read it first; delete it to "
            "go back to the computed defaults)"
        )
    return 0
