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


EPILOG = (
    "Exit status: 0 tuned (with --check: no stale entries); 1 with --check when an entry is "
    "stale, or a device or spec error; 2 usage errors (an unknown op, a bad --shapes). --check "
    "--json: {version: 1, stale: [{file, instance, bucket, why}], count}; its keys are kept "
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
    t.add_argument("ops", nargs="*", help="ops to tune (default: every op)")
    t.add_argument("--dtypes", default="f32,f64", help="dtypes to tune (default: f32,f64)")
    t.add_argument("--shapes", help="OP:DIM=N,...;OP:... instead of the default shapes")
    t.add_argument(
        "--layouts",
        help="OP:TENSOR=LAYOUT,...;OP:... layout combinations to tune besides the default ones "
        "(the first layouts, and channels-last convs)",
    )
    t.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run")
    t.add_argument("--timeout", type=float, default=120.0, help="seconds per candidate")
    t.add_argument("--repeats", type=int, default=7, help="timed repeats per candidate")
    t.add_argument("--fresh", action="store_true", help="forget the journal of earlier runs")
    t.add_argument("--check", action="store_true", help="list stale entries; exit 1 if any")
    t.add_argument(
        "--json", action="store_true", help="with --check: machine-readable output (see below)"
    )
    t.add_argument(
        "--prune",
        action="store_true",
        help="drop stale entries from the tuning files (of devices not at hand to re-tune)",
    )
    t.add_argument("--merge", nargs=2, metavar=("A", "B"), help="merge tuning file B into A")
    t.add_argument("--out", help="write the tuning file here instead of tuning/<device>.yaml")
    t.set_defaults(func=lambda args: cmd_tune(args, tree_of(args)))


def cmd_tune(args: argparse.Namespace, tree: Tree) -> int:
    from clforge.params.database import load, load_folders, merge, schema_hash
    from clforge.registry import loader as registry_mod
    from clforge.tune.tuner import stale_entries

    if args.json and not args.check:
        raise UsageError("tune --json goes with --check (the stale entries as JSON)")
    reg = registry_mod.for_tree(tree)
    if args.merge:
        a, b = (load(Path(p)) for p in args.merge)
        current = {i.name: schema_hash(i) for i in reg.instances.values()}
        merged = merge(a, b, current)
        merged.save(Path(args.merge[0]))
        print(f"merged {args.merge[1]} into {args.merge[0]}: {len(merged.entries)} entries")
        return 0
    if args.check or args.prune:
        stale = stale_entries(reg, load_folders(reg.tuning_folders()))
        if args.prune:
            return _prune(stale)
        if args.json:
            rows = [
                {"file": path, "instance": e.instance, "bucket": e.bucket, "why": why}
                for path, e, why in stale
            ]
            print(json.dumps({"version": 1, "stale": rows, "count": len(rows)}, indent=2))
        else:
            for path, e, why in stale:
                print(f"{path}: {e.instance} bucket {e.bucket}: stale ({why})")
        print(f"{len(stale)} stale entries", file=sys.stderr)
        return 1 if stale else 0
    return _run(args, tree, reg)


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
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device
    from clforge.params.space import ParamSpace
    from clforge.tune.cases import parse_layouts, parse_shapes
    from clforge.tune.tuner import plan_jobs, tune

    ops = args.ops or sorted(reg.ops)
    unknown = [o for o in ops if o not in reg.ops]
    if unknown:
        raise UsageError(f"unknown op {', '.join(unknown)} (ops: {', '.join(sorted(reg.ops))})")
    profile = from_device(default_device())
    shapes = parse_shapes(args.shapes) if args.shapes else None
    layouts = parse_layouts(args.layouts) if args.layouts else None
    stray = sorted(set(layouts or ()) - set(ops))
    if stray:
        raise UsageError(f"--layouts names {', '.join(stray)}, which this run does not tune")
    jobs = plan_jobs(reg, profile, ops, args.dtypes.split(","), shapes, layouts)
    total = sum(len(list(ParamSpace(j.inst).candidates(profile))) for j in jobs)
    print(f"tuning {len(jobs)} instance × shape jobs, {total} candidates, on {profile.name}")
    with progress_bar(total) as update:
        report = tune(
            tree,
            reg,
            profile,
            jobs,
            budget_s=args.budget,
            timeout_s=args.timeout,
            repeats=args.repeats,
            fresh=args.fresh,
            progress=update,
            out=Path(args.out) if args.out else None,
            catch_all=shapes is None,
        )
    for e in report.entries:
        if e.bucket == "*":
            continue
        gain = f"{e.default_us / e.time_us:.2f}x" if e.time_us and e.default_us else "-"
        params = ",".join(f"{k}={v}" for k, v in e.params)
        print(f"  {e.instance:48s} {e.bucket:36s} {params:24s} {e.time_us:10.1f} us  {gain}")
    for inst, params, why in report.rejected:
        print(f"  rejected {inst} [{params}]: {why.splitlines()[0][:160]}")
    print(
        f"wrote {', '.join(tree.rel(p) for p in report.paths) or '?'}: "
        f"{len(report.entries)} entries; "
        f"{report.measured} candidates measured, {report.reused} from the journal, "
        f"{len(report.rejected)} rejected, {report.skipped} left out by the budget"
    )
    return 0
