"""Tuned entries that do not beat the default (`clforge tune --check`): an entry earns its place
only where its parameters run at least MARGIN faster than what a call would get with nothing
tuned. Three sources of the two times, cheapest first: the entry itself (its `time_us` and
`default_us`, from the tuner's race: for files written before the default was computed from the
device, the spec defaults' time), this device's journal (a race of the entry's parameters and
today's default at its shape), and, with --remeasure, a race run now on this device between
what the chain picks for each tuned shape and the default."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clforge.core.cache_dir import CacheError, private_dir
from clforge.core.tree import Tree
from clforge.device.profile import DeviceProfile
from clforge.params.database import CATCH_ALL, Entry, TuningFile, schema_hash
from clforge.params.fingerprint import Fingerprint
from clforge.params.lookup import ParamLookup
from clforge.params.space import Params, as_params
from clforge.registry.loader import Registry
from clforge.tune.pool import WorkerPool
from clforge.tune.tuner import MARGIN, Job, Journal, beats, default_params


@dataclass(frozen=True)
class Behind:
    """An entry whose parameters do not beat the default by MARGIN, by `source`'s times."""

    file: str
    entry: Entry
    tuned_us: float
    default_us: float
    source: str  # "file", "journal" or "measured now"

    def line(self) -> str:
        e = self.entry
        gain = 1 - self.tuned_us / self.default_us
        how = f"{gain:.1%} faster" if gain >= 0 else f"{-gain:.1%} slower"
        return (
            f"{self.file}: {e.instance} bucket {e.bucket}: does not beat the default by "
            f"{MARGIN:.0%} ({self.tuned_us:.1f} us against {self.default_us:.1f} us: {how}; "
            f"{self.source})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "instance": self.entry.instance,
            "bucket": self.entry.bucket,
            "tuned_us": round(self.tuned_us, 2),
            "default_us": round(self.default_us, 2),
            "source": self.source,
        }


def records_default(e: Entry) -> bool:
    """Whether an entry records the default itself (the tuner writes the default's time as
    both), rather than a tuned set measured against it."""
    return math.isclose(e.time_us, e.default_us, rel_tol=1e-6, abs_tol=0.011)


def from_files(reg: Registry, files: Iterable[TuningFile]) -> list[Behind]:
    """The current entries whose own times say they do not beat the default by MARGIN."""
    out = []
    for f in files:
        for e in f.entries:
            inst = reg.instances.get(e.instance)
            if inst is None or schema_hash(inst) != e.sha:
                continue  # stale: reported as such
            if e.bucket == CATCH_ALL or e.time_us <= 0 or e.default_us <= 0:
                continue
            if not records_default(e) and not beats(e.time_us, e.default_us):
                out.append(Behind(str(f.path or f.device.slug), e, e.time_us, e.default_us, "file"))
    return out


def _races(journal: Journal) -> dict[tuple[str, str, str], list[dict[Params, float]]]:
    """The journal's races, by (instance, schema hash, dims): each a map params -> us, oldest
    first."""
    out: dict[tuple[str, str, str], list[dict[Params, float]]] = {}
    for key, rec in journal.done.items():
        if not key.startswith('["race"') or not rec.get("ok"):
            continue
        try:
            _, entrants, dims, *_ = json.loads(key)
            times = rec["us"]
            by_inst: dict[tuple[str, str], dict[Params, float]] = {}
            for (name, sha, params), us in zip(entrants, times, strict=True):
                if us is not None:
                    by_inst.setdefault((name, sha), {})[as_params(dict(params))] = float(us)
            where = json.dumps(sorted(map(list, dims)))
        except (ValueError, TypeError, KeyError):
            continue
        for (name, sha), t in by_inst.items():
            out.setdefault((name, sha, where), []).append(t)
    return out


def from_journal(
    reg: Registry, profile: DeviceProfile, files: Iterable[TuningFile], journal: Journal
) -> list[Behind]:
    """The current entries that this device's journal has raced against today's default at
    their shape (the latest such race), and that did not beat it by MARGIN there."""
    races = _races(journal)
    lookup = ParamLookup(profile)
    out = []
    for f in files:
        for e in f.entries:
            inst = reg.instances.get(e.instance)
            if inst is None or e.bucket == CATCH_ALL or not e.shape:
                continue
            sha = schema_hash(inst)
            if sha != e.sha:
                continue
            default = lookup.choose(inst, dict(e.shape)).params
            if e.params == default:
                continue
            where = json.dumps(sorted(map(list, e.shape)))
            both = [
                t for t in races.get((e.instance, sha, where), ()) if {e.params, default} <= set(t)
            ]
            if both and not beats(both[-1][e.params], both[-1][default]):
                t = both[-1]
                name = str(f.path or f.device.slug)
                out.append(Behind(name, e, t[e.params], t[default], "this device's journal"))
    return out


def remeasure(
    tree: Tree,
    reg: Registry,
    profile: DeviceProfile,
    jobs: Sequence[Job],
    files: tuple[TuningFile, ...],
    journal: Journal,
    repeats: int = 7,
    timeout_s: float = 120.0,
) -> list[Behind]:
    """For each job (an instance at a tuned shape), what the chain picks from `files` on this
    device, where a tuned entry gives it, raced now against the default; those that do not
    beat it by MARGIN. The races are journaled (a later --check reads them)."""
    lookup = ParamLookup(profile, files)
    # explain's name of a file (its file name) -> how --check names it (its path)
    paths = {f.path.name: str(f.path) for f in files if f.path is not None}
    out = []
    pool = WorkerPool(tree.root, timeout_s)
    try:
        for job in jobs:
            choice = lookup.choose(job.inst, dict(job.dims))
            default = default_params(reg, profile, job)
            if choice.entry is None or choice.params == default:
                continue
            runners = [(job.inst, choice.params), (job.inst, default)]
            race = [{"instance": i.name, "params": dict(p)} for i, p in runners]
            res = pool.request({"race": race, **job.request(repeats)})
            journal.record(Journal.race_key(job, runners), res)
            us = res.get("us") if res.get("ok") else None
            if not isinstance(us, list) or None in us:
                continue
            if not beats(float(us[0]), float(us[1])):
                name = paths.get(choice.file, choice.file)
                out.append(Behind(name, choice.entry, float(us[0]), float(us[1]), "measured now"))
    finally:
        pool.close()
    return out


def journal_of(profile: DeviceProfile) -> Journal:
    """This device's journal of measurements (the tuner's; none where the cache is unusable)."""
    try:
        folder = private_dir("tune")
    except CacheError:
        folder = None
    path: Path | None = folder / f"{Fingerprint.of(profile).slug}.jsonl" if folder else None
    return Journal(path)


__all__ = ["Behind", "from_files", "from_journal", "journal_of", "records_default", "remeasure"]
