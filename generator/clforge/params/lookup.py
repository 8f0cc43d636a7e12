"""Which parameters a call of an instance gets, and where they came from.

Device, most specific first: an override (from Python or $CLFORGE_PARAMS) → a tuning file of
this exact device → one of the same architecture → the nearest of the same vendor and device
type (:meth:`Fingerprint.similarity`) → the variant's device_params computed for this device
(:mod:`clforge.params.properties`) → the spec's defaults. A file of a device whose vector ISA
differs from this one's (name, width, registers) is never read, for parameters or for the
measured crossovers between variants; :attr:`ParamLookup.passed` says why each file was passed
over. Shape, within a file: the exact dims → their bucket → the file's catch-all. Stale entries
(measured on another version of the kernel) are skipped and counted."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from clforge.device.profile import DeviceProfile
from clforge.errors import CallError
from clforge.params.database import (
    CATCH_ALL,
    HOIST,
    Entry,
    TuningFile,
    bucket_of,
    schema_hash,
    shape_distance,
)
from clforge.params.fingerprint import LEVEL_NAMES, Fingerprint
from clforge.params.properties import computed, device_properties
from clforge.params.space import Params, ParamSpace, as_params, params_text
from clforge.registry.records import Instance

PARAMS_ENV = "CLFORGE_PARAMS"


@dataclass(frozen=True)
class Choice:
    """The parameters of one launch and where they came from, for `explain`."""

    params: Params
    origin: str  # "spec default", "override", or the tuning level
    entry: Entry | None = None
    file: str = ""

    def describe(self) -> str:
        where = f" ({self.file}, bucket {self.entry.bucket})" if self.entry else ""
        return f"{params_text(self.params)}: {self.origin}{where}"


@dataclass(frozen=True)
class Timings:
    """The tuner's times of some instances for one call (instance -> microseconds and where they
    were recorded), and at which shape: the call's own bucket or the nearest tuned one."""

    times: Mapping[str, tuple[float, str]]
    at: str


def parse_overrides(text: str) -> dict[str, dict[str, int]]:
    """`inst:NAME=V,NAME=V;inst2:...` ($CLFORGE_PARAMS) as {instance: {name: value}}."""
    out: dict[str, dict[str, int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, assigns = part.partition(":")
        if not sep:
            raise CallError(f"${PARAMS_ENV}: {part!r} is not instance:NAME=VALUE,...")
        values: dict[str, int] = {}
        for a in filter(None, (x.strip() for x in assigns.split(","))):
            k, eq, v = a.partition("=")
            try:
                values[k.strip()] = int(v)
            except ValueError:
                raise CallError(f"${PARAMS_ENV}: {a!r} is not NAME=INTEGER") from None
            if not eq:
                raise CallError(f"${PARAMS_ENV}: {a!r} is not NAME=INTEGER")
        out[name.strip()] = values
    return out


@dataclass
class ParamLookup:
    """The tuning files a dispatcher consults for one device, plus overrides."""

    profile: DeviceProfile
    files: tuple[TuningFile, ...] = ()
    overrides: dict[str, dict[str, int]] = field(default_factory=dict)
    stale: set[tuple[str, str]] = field(default_factory=set)  # (file, instance) skipped

    def __post_init__(self) -> None:
        me = self.device = Fingerprint.of(self.profile)
        usable: list[tuple[int, tuple[float, ...], int, TuningFile]] = []
        passed: list[tuple[str, str]] = []
        for i, f in enumerate(self.files):
            reason = me.pass_reason(f.device)
            if reason is None:
                usable.append(
                    (-me.level(f.device), tuple(-x for x in me.similarity(f.device)), i, f)
                )
            else:
                passed.append((_file_name(f), reason))
        # by level, then the nearest device, then the order the files were given in
        self._ranked = [(-lvl, f) for lvl, _, _, f in sorted(usable, key=lambda x: x[:3])]
        self.passed: tuple[tuple[str, str], ...] = tuple(passed)  # (file, why not borrowed)
        self._index: list[tuple[int, TuningFile, dict[tuple[str, str], Entry]]] = [
            (lvl, f, {e.key: e for e in f.entries}) for lvl, f in self._ranked
        ]
        # per file, each instance's timed bucket entries: what a shape nobody tuned compares
        self._timed: list[tuple[TuningFile, dict[str, list[Entry]]]] = []
        for _, f in self._ranked:
            timed: dict[str, list[Entry]] = {}
            for e in f.entries:
                if e.bucket != CATCH_ALL and e.time_us > 0:
                    timed.setdefault(e.instance, []).append(e)
            self._timed.append((f, timed))

    def passed_over(self) -> list[str]:
        """One line per tuning file the chain does not read for this device, and why."""
        return [not_borrowed(name, why) for name, why in self.passed]

    @classmethod
    def from_env(cls, profile: DeviceProfile, files: tuple[TuningFile, ...]) -> ParamLookup:
        return cls(profile, files, parse_overrides(os.environ.get(PARAMS_ENV, "")))

    def override(self, instance: str, values: Mapping[str, int]) -> None:
        """Use `values` for `instance` from now on (validated when a call uses them)."""
        self.overrides[instance] = dict(values)

    def choose(self, inst: Instance, dims: Mapping[str, int]) -> Choice:
        space = ParamSpace(inst)
        if not inst.params:
            return Choice((), "no parameters")
        given = self.overrides.get(inst.name)
        if given is not None:
            params = space.complete(given)
            problem = space.problem(params, self.profile)
            if problem:
                raise CallError(f"{inst.name}: the override {params_text(params)}: {problem}")
            return Choice(params, "override")
        sha = schema_hash(inst)
        exact = bucket_of(dims)
        shape = as_params(dims)
        # a shape as a compiled graph runs it (HOIST): its own entry, else the eager call's
        buckets = [exact, bucket_of({k: v for k, v in dims.items() if k != HOIST})]
        for lvl, f, entries in self._index:
            candidates = [entries.get((inst.name, b)) for b in dict.fromkeys(buckets)]
            candidates.append(entries.get((inst.name, CATCH_ALL)))
            for e in candidates:
                if e is None:
                    continue
                if e.sha != sha:
                    self.stale.add((str(f.path or f.device.slug), inst.name))
                    continue
                if space.problem(e.params, self.profile) is None:
                    origin = LEVEL_NAMES[lvl] + (" (exact shape)" if e.shape == shape else "")
                    return Choice(e.params, origin, e, _file_name(f))
        return self._computed(inst, space, dims) or Choice(
            space.defaults, "spec default; nothing tuned applies"
        )

    def measured(self, inst: Instance, dims: Mapping[str, int]) -> tuple[float, str] | None:
        """The tuner's time for `inst` at the shape bucket of `dims` (its best parameters), on
        the nearest device level that has one, and where it is recorded; None when nothing
        current was measured there (catch-all entries carry no time)."""
        sha = schema_hash(inst)
        bucket = bucket_of(dims)
        for _, f, entries in self._index:
            e = entries.get((inst.name, bucket))
            if e is not None and e.sha == sha and e.time_us > 0:
                return e.time_us, f"{_file_name(f)}, bucket {bucket}"
        return None

    def times(
        self,
        instances: Mapping[str, Instance],
        names: Iterable[str | None],
        dims: Mapping[str, int],
    ) -> Timings:
        """:meth:`measured` for each of the instances `names` that has a time at the bucket of
        `dims`; where fewer than two have one, their times at the tuned bucket nearest `dims`
        (:func:`shape_distance`: in size, then in shape) that times two or more of them, on
        the nearest device level that has such a bucket (the crossover between variants,
        carried to shapes nobody tuned: a matmul of 8 takes the side of the one of 64)."""
        wanted = [n for n in names if n is not None]
        exact = {}
        for name in wanted:
            if (m := self.measured(instances[name], dims)) is not None:
                exact[name] = m
        if len(exact) >= 2:
            return Timings(exact, "at this shape")
        hashes = {n: schema_hash(instances[n]) for n in wanted}
        for f, timed in self._timed:
            by_bucket: dict[str, dict[str, float]] = {}
            for name in wanted:
                for e in timed.get(name, ()):
                    if e.sha == hashes[name]:
                        by_bucket.setdefault(e.bucket, {})[name] = e.time_us
            near = sorted((shape_distance(dims, b), b) for b, t in by_bucket.items() if len(t) >= 2)
            if near and near[0][0][0] < math.inf:
                bucket = near[0][1]
                where = f"{_file_name(f)}, bucket {bucket}"
                return Timings(
                    {n: (us, where) for n, us in by_bucket[bucket].items()},
                    "at the nearest tuned shape",
                )
        return Timings(exact, "at this shape")

    def _computed(
        self, inst: Instance, space: ParamSpace, dims: Mapping[str, int]
    ) -> Choice | None:
        """The variant's device_params, evaluated on this device's properties and the call's
        `dims` (those that read a dim not given keep the spec default), when they give a valid
        point of the space."""
        if not inst.device_params:
            return None
        env = {**dims, **device_properties(self.profile, inst.dtype)}
        try:
            values, read = computed(dict(inst.device_params), env)
        except (ZeroDivisionError, ValueError, ArithmeticError):
            return None
        if not values:
            return None
        params = space.complete(values)
        problem = space.problem(params, self.profile)
        if problem:
            return Choice(
                space.defaults,
                f"spec default (computed from the device: {params_text(params)}, but {problem})",
            )
        basis = ", ".join(f"{name}={env[name]}" for name in read if name != "dtype_bits")
        return Choice(params, f"computed for this device ({basis}); nothing tuned applies")


def not_borrowed(name: str, why: str) -> str:
    """How explain says that a tuning file was passed over, and why."""
    return f"{name}: {why}: not borrowed"


def _file_name(f: TuningFile) -> str:
    """How explain names a tuning file: its file name, or the device's slug for one in memory."""
    return f.path.name if f.path else f.device.slug
