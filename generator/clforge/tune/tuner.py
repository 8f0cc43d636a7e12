"""The ahead-of-time tuner: for each op × variant × dtype × layouts × shape it can run on the
device, every candidate parameter set is built, verified against the NumPy reference (a wrong
candidate is never chosen), and timed out of process (warm-up, median of repeats); the best few
are then raced (timed again, interleaved, so that the machine's slow spells hit them alike) and
the race's winner is the variant's choice. Last, the winners of the op's variants at each shape
race each other, and those times, measured side by side, are the ones selection compares (the
crossover). The winners go to the device's tuning file. Measurements are journaled in
clforge's cache folder, so a killed run resumes where it stopped."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Iterable, Mapping
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
from clforge.params.database import (
    CATCH_ALL,
    Entry,
    TuningFile,
    bucket_of,
    load,
    schema_hash,
)
from clforge.params.fingerprint import Fingerprint
from clforge.params.space import Params, ParamSpace, as_params, params_text
from clforge.references.base import Case
from clforge.registry.loader import Registry
from clforge.registry.records import Instance
from clforge.tune.cases import default_cases, default_layouts, full_layouts
from clforge.tune.pool import WorkerPool

EXHAUSTIVE = 32  # spaces up to this size are searched exhaustively; larger ones sampled
FINALISTS = 3  # the best candidates of each job race each other (and the spec defaults)


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


@dataclass
class Report:
    entries: list[Entry] = field(default_factory=list)
    measured: int = 0  # candidates timed in this run
    reused: int = 0  # candidates taken from the journal
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # instance, params, why
    skipped: int = 0  # candidates left out when the budget ran out
    path: Path | None = None  # the file written (the first, when entries went to several trees)
    paths: list[Path] = field(default_factory=list)  # every file written


def plan_jobs(
    reg: Registry,
    profile: DeviceProfile,
    ops: Iterable[str],
    dtypes: Iterable[str],
    cases: Mapping[str, tuple[Case, ...]] | None = None,
    layouts: Mapping[str, tuple[Mapping[str, str], ...]] | None = None,
) -> list[Job]:
    """The instances the device would consider (target, requirements and guard accepted) with
    parameters to tune, at each tuning shape of their op, in each layout combination: the
    first layouts and the op's defaults (:func:`~clforge.tune.cases.default_layouts`), plus
    those `layouts` gives for it."""
    jobs: list[Job] = []
    wanted = set(dtypes)
    for name in ops:
        op = reg.op(name)
        combos = [full_layouts(op, c) for c in default_layouts(op)]
        for extra in (layouts or {}).get(name, ()):
            full = full_layouts(op, extra)
            if full not in combos:
                combos.append(full)
        for case, lay in itertools.product((cases or {}).get(name) or default_cases(op), combos):
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
                    if inst.tunables:
                        jobs.append(
                            Job(
                                inst,
                                case,
                                tuple(sorted(dims.items())),
                                tuple(sorted(shapes.items())),
                                tuple(sorted(attrs.items())),
                            )
                        )
    return jobs


def _search(job: Job, profile: DeviceProfile) -> list[Params]:
    """The candidates of a job, the spec defaults first: all of a small space, else a sample
    in a fixed pseudo-random order (the budget decides how far it gets)."""
    space = ParamSpace(job.inst)
    points = list(space.candidates(profile))
    if len(points) <= EXHAUSTIVE:
        return points
    rest = points[1:]
    random.Random(job.inst.name).shuffle(rest)
    return [points[0], *rest]


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
) -> Report:
    """Measure every job's candidates (within the budget) and write the device's tuning file
    (`out`, default tuning/<device>.yaml in the tree), merged with what it held. `catch_all`
    false (a run at shapes the user picked, not the representative ones): the catch-all
    entries the file holds stay, since this run's few shapes would not stand for every other."""
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
        searches = [_search(job, profile) for job in jobs]
        timings: list[dict[Params, float]] = [{} for _ in jobs]
        for depth in range(max(map(len, searches), default=0)):
            for job, candidates, timed in zip(jobs, searches, timings, strict=True):
                if depth >= len(candidates):
                    continue
                params = candidates[depth]
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
        for job, timed in zip(jobs, timings, strict=True):
            finalists = sorted(timed, key=timed.__getitem__)[:FINALISTS]
            defaults = as_params(job.inst.param_map)
            if defaults in timed and defaults not in finalists:
                finalists.append(defaults)  # so that the entry's speedup is side by side too
            if len(finalists) > 1:
                runners = [(job.inst, p) for p in finalists]
                raced = _race(pool, journal, report, job, runners, repeats)
                for params, us in zip(finalists, raced, strict=True):
                    if us is None:  # it failed this time (a crash, a hang): never chosen
                        timed.pop(params)
                        finalists.remove(params)
                    else:
                        timed[params] = us
            if finalists:
                chosen = min(finalists, key=timed.__getitem__)
                results.append(Tuned(job, timed, chosen, timed[chosen]))
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
    pool: WorkerPool, journal: Journal, report: Report, key: str, req: dict[str, Any]
) -> dict[str, Any]:
    """The worker's reply to `req`: from the journal of earlier runs when it holds `key`, else
    measured now and journaled."""
    if key in journal.done:
        report.reused += 1
        return journal.done[key]
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
    """Microseconds of each (instance, params) at `job`'s shape, raced in one request (None
    for one that failed there)."""
    race = [{"instance": i.name, "params": dict(p)} for i, p in runners]
    req = {"race": race, **job.request(repeats)}
    res = _journaled(pool, journal, report, Journal.race_key(job, runners), req)
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


def _entries(results: Iterable[Tuned]) -> list[Entry]:
    """One entry per instance and bucket (the winner of its race, which the spec defaults join;
    its time from the race among the op's variants where there was one, and the defaults' in
    proportion), and per instance a catch-all: the parameters with the best geometric mean
    speedup over every shape it was measured at (among those measured at all of them)."""
    entries: list[Entry] = []
    by_inst: dict[str, list[tuple[Job, Mapping[Params, float]]]] = {}
    for t in results:
        job, timed = t.job, t.timed
        defaults = as_params(job.inst.param_map)
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
        by_inst.setdefault(job.inst.name, []).append((job, timed))
    for name, runs in by_inst.items():
        common = set.intersection(*(set(t) for _, t in runs))
        inst = runs[0][0].inst
        defaults = as_params(inst.param_map)
        if not common or defaults not in common:
            continue

        def score(
            p: Params,
            runs: list[tuple[Job, Mapping[Params, float]]] = runs,
            defaults: Params = defaults,
        ) -> float:
            prod = 1.0
            for _, t in runs:
                prod *= t[p] / t[defaults]
            return prod ** (1 / len(runs))

        best = min(sorted(common), key=score)
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
    """(file, entry, why) for every entry that no longer applies to the registry."""
    out = []
    for f in files:
        for e in f.entries:
            inst = reg.instances.get(e.instance)
            if inst is None:
                out.append((str(f.path), e, "the instance no longer exists"))
            elif schema_hash(inst) != e.sha:
                out.append((str(f.path), e, "the kernel or its parameter schema changed"))
    return out


__all__ = ["Job", "Report", "files_for", "plan_jobs", "stale_entries", "tune"]
