"""The ahead-of-time tuner: for each op × variant × dtype × layouts × shape it can run on the
device, every candidate parameter set is built, verified against the NumPy reference (a wrong
candidate is never chosen), and timed out of process (warm-up, median of repeats); the best few
are then raced (timed again, interleaved, so that the machine's slow spells hit them alike) and
the race's winner is the variant's choice, where it beats the default by a margin: the
parameters a call would get with nothing tuned (the variant's device_params computed on this
device, else the spec's), which is the first candidate of every job and runs in every race;
where no candidate beats it by MARGIN, the entry records the default. Last, the winners of
the op's variants at each shape race each other, and those times, measured side by side, are
the ones selection compares (the crossover). The winners go to the device's tuning file.
Measurements are journaled in clforge's cache folder, so a killed run resumes where it
stopped."""

from __future__ import annotations

import itertools
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clforge.call.binding import bind_dims, int_attrs, resolve_attrs
from clforge.call.selection import select
from clforge.core import envelope
from clforge.core.atomic_file import atomic_write
from clforge.core.cache_dir import private_dir
from clforge.core.tree import Tree
from clforge.device.profile import DeviceProfile
from clforge.errors import UsageError
from clforge.params.database import (
    CATCH_ALL,
    HOIST,
    Entry,
    TuningFile,
    bucket_of,
    load,
    schema_hash,
    weights,
)
from clforge.params.fingerprint import Fingerprint
from clforge.params.lookup import ParamLookup
from clforge.params.space import Params, ParamSpace, as_params, params_text
from clforge.references.base import Case
from clforge.registry.loader import Registry, guard_holds
from clforge.registry.records import Instance, OpSig
from clforge.tune.cases import default_cases, default_layouts, full_layouts
from clforge.tune.pool import WorkerPool

EXHAUSTIVE = 32  # spaces up to this size are searched exhaustively; larger ones sampled
FINALISTS = 3  # the best candidates of each job race each other (and the default)
# a tuned set is written only where it is at least this much faster than the default in their
# race (3%: above the spread of a race's medians on these shared machines, below any gain worth
# a tuning entry); else the entry records the default
MARGIN = 0.03


@dataclass(frozen=True)
class Job:
    """One instance at one shape."""

    inst: Instance
    case: Case
    dims: tuple[tuple[str, int], ...]  # bound dims (derived included)
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    attrs: tuple[tuple[str, float | int], ...]

    @property
    def bucket(self) -> str:
        return bucket_of(dict(self.dims))

    def request(self, repeats: int) -> dict[str, Any]:
        """The worker request's fields for this job's shape (what to run is added to it)."""
        return {
            "dims": dict(self.dims),
            "shapes": {k: list(v) for k, v in self.shapes},
            "attrs": dict(self.attrs),
            "repeats": repeats,
        }


@dataclass
class Tuned:
    """A job's measurements: the time of every candidate timed (the finalists' from their
    race), the chosen parameters, and the chosen set's time in the race among the op's variants
    at this shape (or its own, where no other variant was timed there)."""

    job: Job
    timed: dict[Params, float]
    chosen: Params
    final_us: float
    default: Params = ()  # what a call gets with nothing tuned (default_params)


@dataclass
class Report:
    entries: list[Entry] = field(default_factory=list)
    measured: int = 0  # candidates timed in this run
    reused: int = 0  # candidates taken from the journal
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # instance, params, why
    skipped: int = 0  # candidates left out when the budget ran out
    path: Path | None = None  # the file written (the first, when entries went to several trees)
    paths: list[Path] = field(default_factory=list)  # every file written
    # (instance, bucket) of the entries that record the default: no candidate beat it by MARGIN
    defaults_kept: set[tuple[str, str]] = field(default_factory=set)


def _check_case(name: str, op: OpSig, case: Case) -> None:
    """A usage error unless `case` (from --shapes) gives every size of the op's inputs."""
    needed = sorted(
        {d for t in op.inputs if t.name not in case.shapes for d in t.shape if not d.isdigit()}
    )
    missing = [d for d in needed if d not in case.dims]
    if missing:
        given = ",".join(f"{k}={v}" for k, v in case.dims.items())
        raise UsageError(
            f"--shapes: {name}:{given} does not give {', '.join(missing)} "
            f"({name}'s sizes: {', '.join(needed)})"
        )


def plan_jobs(
    reg: Registry,
    profile: DeviceProfile,
    ops: Iterable[str],
    dtypes: Iterable[str],
    cases: Mapping[str, tuple[Case, ...]] | None = None,
    layouts: Mapping[str, tuple[Mapping[str, str], ...]] | None = None,
    *,
    first_layouts_only: bool = False,
    hoisted: bool = False,
) -> list[Job]:
    """The instances the device would consider (target, requirements and guard accepted) with
    parameters to tune, at each tuning shape of their op, in each layout combination: the
    first layouts and the op's defaults (:func:`~clforge.tune.cases.default_layouts`; only the
    first with `first_layouts_only`), plus those `layouts` gives for it. `hoisted`: only the
    routines with a step that reads only weights (every input but the op's first), their
    dims marked HOIST: timed as a compiled graph runs them (measure.hoisted_call)."""
    jobs: list[Job] = []
    wanted = set(dtypes)
    for name in ops:
        op = reg.op(name)
        combos = [full_layouts(op, c) for c in default_layouts(op)]
        if first_layouts_only:
            combos = combos[:1]
        for extra in (layouts or {}).get(name, ()):
            full = full_layouts(op, extra)
            if full not in combos:
                combos.append(full)
        chosen = (cases or {}).get(name)
        for case in chosen or ():
            _check_case(name, op, case)
        for case, lay in itertools.product(chosen or default_cases(op), combos):
            shapes = {
                t.name: tuple(case.shapes.get(t.name, tuple(case.dims[d] for d in t.shape)))
                for t in op.inputs
            }
            attrs = resolve_attrs(op, case.attrs)
            dims = bind_dims(op, shapes, attrs)
            env = {**dims, **int_attrs(op, attrs)}
            for dtype in op.dtypes:
                if dtype not in wanted:
                    continue
                sel = select(reg, profile, name, dtype, lay, env)
                for cand in sel.candidates:
                    if not cand.accepted or cand.instance is None:
                        continue
                    inst = reg.instance(cand.instance)
                    if hoisted and not inst.packs_once(weights(op)):
                        continue
                    if inst.tunables:
                        marked = {**dims, HOIST: 1} if hoisted else dims
                        jobs.append(
                            Job(
                                inst,
                                case,
                                tuple(sorted(marked.items())),
                                tuple(sorted(shapes.items())),
                                tuple(sorted(attrs.items())),
                            )
                        )
    return jobs


def default_params(reg: Registry, profile: DeviceProfile, job: Job) -> Params:
    """What a call at the job's shape runs with where nothing is tuned: the variant's
    device_params computed on this device (the lookup with no tuning file), else the spec
    defaults; the spec defaults too where the computed set's guard fails at this shape (as the
    dispatcher does)."""
    params = ParamLookup(profile).choose(job.inst, dict(job.dims)).params
    env = {**dict(job.dims), **int_attrs(reg.op(job.inst.op), dict(job.attrs))}
    if params and not guard_holds(reg, job.inst, env, dict(params)):
        return as_params(job.inst.param_map)
    return params


def candidates(
    job: Job,
    profile: DeviceProfile,
    default: Params,
    nearest: int | None = None,
    incumbent: Params | None = None,
) -> list[Params]:
    """The candidates of a job: the default first, then the spec defaults (where they meet the
    constraints on this device), then `incumbent` (the
    tuned set the chain gives the job's shape now, if any), then the rest of the space: all of a
    small one, else a sample in a fixed pseudo-random order (the budget decides how far it
    gets); or, with `nearest` (a quick tune), only the `nearest` points closest to the default
    (:func:`distance`)."""
    space = ParamSpace(job.inst)
    points = list(space.candidates(profile))
    # the spec defaults only where they fit this device (a block sized for AVX-512's registers
    # breaks the register constraint on AVX2's, and is not worth measuring there)
    spec = [p for p in points[:1] if space.problem(p, profile) is None]
    head = list(dict.fromkeys([default, *spec, *([incumbent] if incumbent else [])]))
    rest = [p for p in points[1:] if p not in head]
    if nearest is not None:
        return head + sorted(rest, key=lambda p: distance(p, default))[:nearest]
    if len(points) > EXHAUSTIVE:
        random.Random(job.inst.name).shuffle(rest)
    return head + rest


def incumbent(reg: Registry, lookup: ParamLookup, job: Job) -> Params | None:
    """The tuned set the chain (`lookup`: the tuning files a call would read) gives the job's
    shape now, where one applies and its guard holds there; None where the call would run the
    default. A quick tune races it too, so that it never leaves a shape worse off than before."""
    choice = lookup.choose(job.inst, dict(job.dims))
    if choice.entry is None:
        return None
    env = {**dict(job.dims), **int_attrs(reg.op(job.inst.op), dict(job.attrs))}
    return choice.params if guard_holds(reg, job.inst, env, dict(choice.params)) else None


def distance(params: Params, default: Params) -> float:
    """How far a parameter set is from the default: the sum over parameters of the distance in
    powers of two (tunables are mostly powers of two: 8 is as near 16 as 32 is)."""
    d = dict(default)
    return sum(abs(math.log2(max(v, 1)) - math.log2(max(d.get(k, v), 1))) for k, v in params)


class Journal:
    """Measurements of earlier runs: (instance, schema, params, dims) -> microseconds, or the
    problem that disqualified the candidate. Each line is checked (core/envelope.py): a line cut
    short by a kill, or changed since, is dropped with one warning and measured again."""

    KIND = "journal-1"

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        if path is not None:
            for rec in envelope.read_log(path, self.KIND, "the tuner's journal"):
                if isinstance(rec.get("key"), str):  # else intact but not ours: never written
                    self.done[rec["key"]] = rec

    @staticmethod
    def key(job: Job, params: Params) -> str:
        # the trailing 0 was a round index; it stays so that earlier journals keep matching
        return json.dumps([job.inst.name, schema_hash(job.inst), params, job.dims, job.attrs, 0])

    @staticmethod
    def race_key(job: Job, runners: list[tuple[Instance, Params]]) -> str:
        entrants = [[i.name, schema_hash(i), p] for i, p in runners]
        return json.dumps(["race", entrants, job.dims, job.attrs, job.shapes])

    def record(self, key: str, result: dict[str, Any]) -> None:
        rec = {"key": key, **result}
        self.done[key] = rec
        if self.path is not None:
            envelope.append_log(self.path, self.KIND, rec)


def tune(
    tree: Tree,
    reg: Registry,
    profile: DeviceProfile,
    jobs: list[Job],
    *,
    budget_s: float = 600.0,
    timeout_s: float = 120.0,
    repeats: int = 7,
    fresh: bool = False,
    progress: Callable[[int], Any] | None = None,
    out: Path | None = None,
    catch_all: bool = True,
    clock: Callable[[], float] = time.monotonic,
    nearest: int | None = None,
    finalists: int = FINALISTS,
    incumbents: Sequence[Params | None] | None = None,
) -> Report:
    """Measure every job's candidates (within the budget) and write the device's tuning file
    (`out`, default tuning/<device>.yaml in the tree), merged with what it held. `catch_all`
    false (a run at shapes the user picked, not the representative ones): the catch-all
    entries the file holds stay, since this run's few shapes would not stand for every other.
    `nearest` (a quick tune): each job's default, the spec defaults and only that many of the
    points nearest the default (:func:`candidates`); `finalists`: how many race the default;
    `incumbents` (per job, :func:`incumbent`): a tuned set to measure besides, where not None."""
    me = Fingerprint.of(profile)
    folder = private_dir("tune")
    journal_path = folder / f"{me.slug}.jsonl" if folder is not None else None
    if fresh and journal_path is not None:
        journal_path.unlink(missing_ok=True)
    journal = Journal(journal_path)
    pool = WorkerPool(tree.root, timeout_s)
    report = Report()
    start = clock()
    results: list[Tuned] = []
    try:
        # breadth first: every job's first candidate (the spec defaults), then every job's
        # second, ..., so that a budget that runs out leaves each job its best few so far
        # rather than the first jobs exhausted and the rest untouched
        defaults = [default_params(reg, profile, job) for job in jobs]
        held = incumbents if incumbents is not None else [None] * len(jobs)
        searches = [
            candidates(job, profile, d, nearest, inc)
            for job, d, inc in zip(jobs, defaults, held, strict=True)
        ]
        timings: list[dict[Params, float]] = [{} for _ in jobs]
        for depth in range(max(map(len, searches), default=0)):
            for job, search, timed in zip(jobs, searches, timings, strict=True):
                if depth >= len(search):
                    continue
                params = search[depth]
                # what the journal holds costs nothing: a later run with a smaller budget
                # still sees every candidate an earlier one measured
                spent = clock() - start > budget_s
                if spent and Journal.key(job, params) not in journal.done:
                    report.skipped += 1
                    continue
                res = _measure(pool, journal, report, job, params, repeats)
                if progress is not None:
                    progress(1)
                if res.get("ok"):
                    timed[params] = float(res["us"])
                else:
                    report.rejected.append(
                        (job.inst.name, params_text(params), str(res.get("problem")))
                    )
        for job, timed, base in zip(jobs, timings, defaults, strict=True):
            racing = sorted(timed, key=timed.__getitem__)[:finalists]
            if base in timed and base not in racing:
                racing.append(base)  # the winner must beat it side by side
            if len(racing) > 1:
                runners = [(job.inst, p) for p in racing]
                raced = _race(pool, journal, report, job, runners, repeats)
                for params, us in zip(list(racing), raced, strict=True):
                    if us is None:  # it failed this time (a crash, a hang): never chosen
                        timed.pop(params)
                        racing.remove(params)
                    else:
                        timed[params] = us
            if racing:
                chosen = min(racing, key=timed.__getitem__)
                if base in racing and not beats(timed[chosen], timed[base]):
                    chosen = base  # not worth an entry of its own: the default stands
                if chosen == base:
                    report.defaults_kept.add((job.inst.name, job.bucket))
                results.append(Tuned(job, timed, chosen, timed[chosen], base))
        _race_variants(pool, journal, report, results, repeats)
    finally:
        pool.close()
    report.entries = [e for e in _entries(results) if catch_all or e.bucket != CATCH_ALL]
    default = out or tree.tuning_out / f"{me.slug}.yaml"
    by_file = files_for(reg, report.entries, default, me.slug, out is not None)
    for path, entries in sorted(by_file.items()) or [(default, [])]:
        existing = load(path) if path.is_file() else TuningFile(me)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, existing.with_entries(entries).text())
        report.paths.append(path)
    report.path = default if default in report.paths else report.paths[0]
    return report


def files_for(
    reg: Registry, entries: Iterable[Entry], default: Path, slug: str, one_file: bool
) -> dict[Path, list[Entry]]:
    """Where each entry is written: the tuning folder of the tree its instance comes from (an
    extension's variants are tuned into the extension's tuning/, clforge's into clforge's), or
    `default` for all of them when `one_file` (`--out`) or when the tree has no folder here."""
    out: dict[Path, list[Entry]] = {}
    for e in entries:
        home = None if one_file else reg.tree_of(reg.instance(e.instance))
        path = home.tuning_out / f"{slug}.yaml" if home is not None else default
        out.setdefault(path, []).append(e)
    return out


def _journaled(
    pool: WorkerPool,
    journal: Journal,
    report: Report,
    key: str,
    req: dict[str, Any],
    fresh: bool = False,
) -> dict[str, Any]:
    """The worker's reply to `req`: from the journal of earlier runs when it holds `key`, else
    measured now (`fresh`: in a fresh measuring process, tune/pool.py) and journaled."""
    if key in journal.done:
        report.reused += 1
        return journal.done[key]
    if fresh:
        pool.recycle()
    res = pool.request(req)
    report.measured += 1
    journal.record(key, res)
    return res


def _measure(
    pool: WorkerPool, journal: Journal, report: Report, job: Job, params: Params, repeats: int
) -> dict[str, Any]:
    req = {"instance": job.inst.name, "params": dict(params), **job.request(repeats)}
    return _journaled(pool, journal, report, Journal.key(job, params), req)


def _race(
    pool: WorkerPool,
    journal: Journal,
    report: Report,
    job: Job,
    runners: list[tuple[Instance, Params]],
    repeats: int,
) -> list[float | None]:
    """Microseconds of each (instance, params) at `job`'s shape, raced in one request in a
    fresh measuring process (None for one that failed there): the deciding measurement."""
    race = [{"instance": i.name, "params": dict(p)} for i, p in runners]
    req = {"race": race, **job.request(repeats)}
    res = _journaled(pool, journal, report, Journal.race_key(job, runners), req, fresh=True)
    us = res.get("us") if res.get("ok") else None
    if not isinstance(us, list) or len(us) != len(runners):
        return [None] * len(runners)  # the whole race failed (the worker died, say)
    return [None if t is None else float(t) for t in us]


def _race_variants(
    pool: WorkerPool, journal: Journal, report: Report, results: list[Tuned], repeats: int
) -> None:
    """Where several variants of one op, dtype and layouts were tuned at one shape, race their
    chosen sets against each other and keep those times (selection compares them: the crossover)."""
    groups: dict[tuple[Any, ...], list[Tuned]] = {}
    for t in results:
        inst = t.job.inst
        key = (inst.op, inst.dtype, inst.layouts, t.job.dims, t.job.attrs, t.job.shapes)
        groups.setdefault(key, []).append(t)
    for group in groups.values():
        if len(group) < 2:
            continue
        runners = [(t.job.inst, t.chosen) for t in group]
        raced = _race(pool, journal, report, group[0].job, runners, repeats)
        for t, us in zip(group, raced, strict=True):
            if us is not None:
                t.final_us = us


def beats(tuned_us: float, default_us: float, margin: float = MARGIN) -> bool:
    """Whether a tuned set's time beats the default's by `margin` (a fraction of the default's):
    what earns it an entry of its own."""
    return tuned_us <= default_us * (1 - margin)


def _entries(results: Iterable[Tuned]) -> list[Entry]:
    """One entry per instance and bucket (the winner of its race, which the default joins, or
    the default where the winner does not beat it by MARGIN; its time from the race among the
    op's variants where there was one, and the default's in proportion), and per instance a
    catch-all: the parameters with the best geometric mean speedup over the default at every
    shape it was measured at (among those measured at all of them), or the default where that
    speedup is under MARGIN."""
    entries: list[Entry] = []
    by_inst: dict[str, list[tuple[Tuned, Mapping[Params, float]]]] = {}
    for t in results:
        job, timed = t.job, t.timed
        defaults = t.default
        entries.append(
            Entry(
                instance=job.inst.name,
                bucket=job.bucket,
                params=t.chosen,
                sha=schema_hash(job.inst),
                shape=job.dims,
                time_us=t.final_us,
                # the defaults' time from their race with the winner, on time_us's scale (the
                # race among variants may have run in a slower or faster moment)
                default_us=timed[defaults] * t.final_us / timed[t.chosen]
                if defaults in timed
                else 0.0,
                tried=len(timed),
            )
        )
        by_inst.setdefault(job.inst.name, []).append((t, timed))
    for name, runs in by_inst.items():
        common = set.intersection(*(set(t) for _, t in runs))
        inst = runs[0][0].job.inst
        if not common or any(r.default not in t for r, t in runs):
            continue

        def score(p: Params, runs: list[tuple[Tuned, Mapping[Params, float]]] = runs) -> float:
            prod = 1.0
            for r, t in runs:
                prod *= t[p] / t[r.default]
            return prod ** (1 / len(runs))

        best = min(sorted(common), key=score)
        # the default a call of any shape gets (the guard may send one shape to the spec's)
        usual = runs[0][0].default
        if score(best) > 1 - MARGIN and usual in common:
            best = usual
        entries.append(
            Entry(
                instance=name,
                bucket=CATCH_ALL,
                params=best,
                sha=schema_hash(inst),
                time_us=0.0,
                default_us=0.0,
                tried=len(common),
            )
        )
    return sorted(entries)


def stale_entries(reg: Registry, files: Iterable[TuningFile]) -> list[tuple[str, Entry, str]]:
    """(file, entry, why) for every entry that no longer applies to the registry: its instance
    is gone, its kernel or parameter schema changed, or its parameters break a constraint on the
    file's own device (a register block its registers do not hold)."""
    out = []
    for f in files:
        device = f.device.as_profile()
        for e in f.entries:
            inst = reg.instances.get(e.instance)
            if inst is None:
                out.append((str(f.path), e, "the instance no longer exists"))
            elif schema_hash(inst) != e.sha:
                out.append((str(f.path), e, "the kernel or its parameter schema changed"))
            elif (problem := ParamSpace(inst).problem(e.params, device)) is not None:
                out.append((str(f.path), e, f"its parameters no longer fit its device: {problem}"))
    return out


__all__ = [
    "MARGIN",
    "Job",
    "Report",
    "beats",
    "candidates",
    "default_params",
    "files_for",
    "incumbent",
    "plan_jobs",
    "stale_entries",
    "tune",
]
