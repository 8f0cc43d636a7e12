"""Selection: filter an op's variants for a call and a device, rank the survivors, choose.

Filter, in order: dtype, layouts, device target, device requirements (extensions, device type,
limits), guard. Rank: the most specific matching target (device > arch > vendor > device type >
generic), then the spec's priority. Every candidate gets a verdict with its reason, so a call can
always be explained; selection itself never raises, :func:`chosen_or_raise` does.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clforge.core.targets import Level, Target, parse_target
from clforge.device.profile import DeviceProfile
from clforge.errors import DispatchError
from clforge.params.lookup import ParamLookup, Timings
from clforge.params.properties import device_properties
from clforge.registry.loader import Registry
from clforge.registry.records import Instance, OpSig

_CMP: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
}


@dataclass(frozen=True)
class Candidate:
    """One variant's verdict for one call."""

    variant: str
    instance: str | None  # the instance for the call's dtype and layouts, if the variant has one
    accepted: bool
    reason: str
    level: int = -1  # specificity of the matching target; -1 when none matched
    priority: int = 0
    runtime_guard: str | None = None  # guard that could not be decided without the sizes
    tree: str = ""  # the tree the variant comes from (clforge's, or an extension's)
    measured_us: float | None = None  # the tuner's time at this call's shape bucket, if any
    preferred: bool = True  # its prefer_when holds at the call's dims (or it has none)

    @property
    def rank(self) -> tuple[int, int, int]:
        return (self.level, int(self.preferred), self.priority)


@dataclass(frozen=True)
class Selection:
    op: str
    dtype: str
    layouts: tuple[tuple[str, str], ...]
    dims: tuple[tuple[str, int], ...]  # the sizes known at selection time
    device: str
    candidates: tuple[Candidate, ...]  # accepted by rank (best first), then rejected

    @property
    def chosen(self) -> Candidate | None:
        first = self.candidates[0] if self.candidates else None
        return first if first is not None and first.accepted else None

    @property
    def standing(self) -> tuple[int, int, int]:
        """How good the chosen candidate is, for comparing selections of other layouts: its rank
        or, where it was measured fastest, the best rank among those it outran (a direct kernel
        that beat the packed routine stands where the routine's priority would); (-1, 0) when
        nothing was chosen."""
        chosen = self.chosen
        if chosen is None:
            return (-1, 0, 0)
        if chosen.measured_us is None:
            return chosen.rank
        return max(c.rank for c in self.candidates if c.accepted and c.measured_us is not None)

    def as_dict(self) -> dict[str, Any]:
        chosen = self.chosen
        return {
            "op": self.op,
            "dtype": self.dtype,
            "layouts": dict(self.layouts),
            "dims": dict(self.dims),
            "device": self.device,
            "chosen": chosen.instance if chosen else None,
            "candidates": [
                {
                    "variant": c.variant,
                    "instance": c.instance,
                    "verdict": "chosen"
                    if c is chosen
                    else ("eligible" if c.accepted else "rejected"),
                    "reason": c.reason,
                    "rank": list(c.rank) if c.accepted else None,
                    "runtime_guard": c.runtime_guard,
                    "tree": c.tree,
                    "measured_us": c.measured_us,
                }
                for c in self.candidates
            ],
        }

    def table(self) -> str:
        """A human-readable explanation: every candidate, its verdict and why."""
        chosen = self.chosen
        head = (
            f"{self.op} dtype={self.dtype}"
            + "".join(f" {t}={lay}" for t, lay in self.layouts)
            + (" dims " + ",".join(f"{k}={v}" for k, v in self.dims) if self.dims else "")
            + f" on {self.device}"
        )
        # the tree column appears once an extension contributes a variant
        trees = len({c.tree for c in self.candidates}) > 1
        rows = [("variant", "verdict", "instance", *(("tree",) if trees else ()), "reason")]
        for c in self.candidates:
            verdict = "CHOSEN" if c is chosen else ("eligible" if c.accepted else "rejected")
            rows.append(
                (c.variant, verdict, c.instance or "-", *((c.tree,) if trees else ()), c.reason)
            )
        n = len(rows[0]) - 1
        widths = [max(len(r[i]) for r in rows) for i in range(n)]
        lines = [head]
        for r in rows:
            lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(n)) + "  " + r[n])
        lines.append(f"=> {chosen.instance}" if chosen else "=> no candidate fits")
        return "\n".join(lines)


def describe(profile: DeviceProfile) -> str:
    arch = f", arch {profile.arch}" if profile.arch else ""
    return f"{profile.name} ({profile.vendor} {profile.device_type}{arch})"


def target_matches(target: Target, profile: DeviceProfile) -> bool:
    value = target.value.lower()
    if target.level is Level.GENERIC:
        return True
    if target.level is Level.DEVICE_TYPE:
        return profile.device_type == value
    if target.level is Level.VENDOR:
        return profile.vendor == value
    if target.level is Level.ARCH:
        return (profile.arch or "").lower() == value
    return profile.name.lower() == value


def requirement_problem(inst: Instance, profile: DeviceProfile) -> str | None:
    req = inst.requires
    missing = [e for e in req.extensions if not profile.has(e)]
    if missing:
        return f"needs {', '.join(missing)}, which the device lacks"
    if req.device_type is not None and req.device_type != profile.device_type:
        return f"needs a {req.device_type} device, this is a {profile.device_type}"
    for name, cmp, value in req.limits:
        have = profile.limit(name)
        if not _CMP[cmp](have, value):
            return f"needs {name} {cmp} {value}, the device has {have}"
    return None


def _variant_index(reg: Registry, op: str) -> dict[str, list[Instance]]:
    out: dict[str, list[Instance]] = {}
    for inst in reg.of_op(op):
        out.setdefault(inst.variant, []).append(inst)
    return out


def _covers(
    instances: list[Instance], dtype: str, layouts: Mapping[str, str]
) -> tuple[Instance | None, str]:
    by_dtype = [i for i in instances if i.dtype == dtype]
    if not by_dtype:
        have = sorted({i.dtype for i in instances})
        return None, f"no {dtype} instance (variant covers {', '.join(have)})"
    for inst in by_dtype:
        if all(layouts.get(t, lay) == lay for t, lay in inst.layouts):
            return inst, ""
    for tensor, lay in sorted(layouts.items()):
        takes = sorted({dict(i.layouts).get(tensor, lay) for i in by_dtype})
        if lay not in takes:
            return None, f"{tensor} is {lay}-major; the variant takes it {' or '.join(takes)}-major"
    wanted = ", ".join(f"{t}={layouts[t]}" for t in sorted(layouts))
    return None, f"no instance for the layout combination {wanted}"


def judge(
    reg: Registry, inst: Instance, profile: DeviceProfile, dims: Mapping[str, int]
) -> Candidate:
    """The verdict for one instance that has the call's dtype and layouts."""
    matched = [t for t in map(parse_target, inst.targets) if target_matches(t, profile)]
    if not matched:
        return Candidate(
            inst.variant,
            inst.name,
            False,
            f"targets {', '.join(inst.targets)}; device is {describe(profile)}",
            priority=inst.priority,
        )
    best = max(matched)
    problem = requirement_problem(inst, profile)
    if problem:
        return Candidate(inst.variant, inst.name, False, problem, int(best.level), inst.priority)
    guard = reg.exprs(inst).guard
    runtime_guard = None
    if guard is not None:
        env = {**dims, **inst.param_map}
        if guard.names <= env.keys():
            if not guard.holds(env):
                shown = ", ".join(f"{n}={env[n]}" for n in sorted(guard.names))
                return Candidate(
                    inst.variant,
                    inst.name,
                    False,
                    f"guard {inst.guard!r} is false for {shown}",
                    int(best.level),
                    inst.priority,
                )
        else:
            runtime_guard = inst.guard
    preferred, crossover = _preference(reg, inst, profile, dims)
    why = (
        f"matches {best} ({best.level.name.lower().replace('_', ' ')}), priority "
        f"{inst.priority}"
        + (f", guard {runtime_guard!r} checked per call" if runtime_guard else "")
        + crossover
    )
    return Candidate(
        inst.variant,
        inst.name,
        True,
        why,
        int(best.level),
        inst.priority,
        runtime_guard,
        preferred=preferred,
    )


def _preference(
    reg: Registry, inst: Instance, profile: DeviceProfile, dims: Mapping[str, int]
) -> tuple[bool, str]:
    """Whether `inst`'s analytic crossover (prefer_when) holds at `dims` on `profile`, and
    what the reason says of it: unknown dims count as holding."""
    expr = reg.exprs(inst).prefer
    if expr is None:
        return True, ""
    env = {**device_properties(profile, inst.dtype), **dims}
    if not expr.names <= env.keys():
        return True, f", prefer_when {inst.prefer_when!r} decided per shape"
    holds = expr.holds(env)
    shown = ", ".join(f"{n}={env[n]}" for n in sorted(expr.names))
    verdict = "holds" if holds else "is false (ranks below the others of its level)"
    return holds, f", prefer_when {inst.prefer_when!r} {verdict} for {shown}"


def resolve_layouts(sig: OpSig, layouts: Mapping[str, str]) -> dict[str, str]:
    """Every tensor's layout for a call: as given; else an output with a choice follows the
    first input that has the same choice (an NHWC input gives an NHWC output); else the first
    declared layout (row)."""
    out = {t.name: layouts.get(t.name, t.layouts[0]) for t in sig.inputs}
    for t in sig.outputs:
        follow = next(
            (i.name for i in sig.inputs if len(t.layouts) > 1 and i.layouts == t.layouts), None
        )
        out[t.name] = layouts.get(t.name) or (out[follow] if follow else t.layouts[0])
    return out


def select(
    reg: Registry,
    profile: DeviceProfile,
    op: str,
    dtype: str,
    layouts: Mapping[str, str],
    dims: Mapping[str, int],
) -> Selection:
    """Judge every variant of `op` for this call; accepted ones first, best first."""
    sig = reg.op(op)
    full = resolve_layouts(sig, layouts)
    candidates: list[Candidate] = []
    for variant, instances in sorted(_variant_index(reg, op).items()):
        inst, why = _covers(instances, dtype, full)
        c = (
            Candidate(variant, None, False, why)
            if inst is None
            else judge(reg, inst, profile, dims)
        )
        home = reg.home(instances[0].name)
        candidates.append(dataclasses.replace(c, tree=home.name if home is not None else ""))
    accepted = sorted((c for c in candidates if c.accepted), key=lambda c: c.rank, reverse=True)
    rejected = [c for c in candidates if not c.accepted]
    return Selection(
        op,
        dtype,
        tuple(full.items()),
        tuple(sorted(dims.items())),
        describe(profile),
        tuple(accepted + rejected),
    )


def by_measurement(sel: Selection, timings: Timings) -> Selection:
    """`sel` with the accepted candidate that the tuner measured fastest first, when it measured
    two or more of them (at this call's shape bucket, or the nearest tuned one): the crossover
    between variants, e.g. a direct kernel against a packed routine by size, as measured on
    this device. Otherwise the ranking stands."""
    accepted = [c for c in sel.candidates if c.accepted]
    times = timings.times
    timed = {c.instance: times[c.instance] for c in accepted if c.instance and c.instance in times}
    if len(timed) < 2:
        return sel
    best = min(timed, key=lambda name: timed[name][0])
    t, where = timed[best]
    others = ", ".join(
        f"{c.variant} {timed[c.instance][0]:.1f} us"
        for c in accepted
        if c.instance in timed and c.instance != best
    )
    note = f"; measured fastest {timings.at}: {t:.1f} us vs {others} ({where})"
    marked = [
        dataclasses.replace(
            c,
            measured_us=timed[c.instance][0],
            reason=c.reason + (note if c.instance == best else ""),
        )
        if c.instance in timed
        else c
        for c in accepted
    ]
    ordered = sorted(marked, key=lambda c: c.instance != best)  # stable: the rest keep rank
    rejected = [c for c in sel.candidates if not c.accepted]
    return dataclasses.replace(sel, candidates=(*ordered, *rejected))


def measured(
    sel: Selection, reg: Registry, lookup: ParamLookup, env: Mapping[str, int]
) -> Selection:
    """:func:`by_measurement` with the tuning files of `lookup`, when every dim of the op is
    known in `env` (shape buckets need them all); otherwise `sel` as ranked."""
    op = reg.op(sel.op)
    shape = op.dims_of(env)
    if len(shape) < len(op.dims):
        return sel
    names = [c.instance for c in sel.candidates if c.accepted]
    return by_measurement(sel, lookup.times(reg.instances, names, shape))


def chosen_or_raise(sel: Selection) -> Candidate:
    chosen = sel.chosen
    if chosen is None:
        raise DispatchError("no instance fits this call:\n" + sel.table())
    ties = [
        c
        for c in sel.candidates
        if c.accepted
        and c is not chosen
        and c.rank == chosen.rank
        and c.runtime_guard is None
        and chosen.runtime_guard is None
        and (chosen.measured_us is None or c.measured_us is None)
    ]
    if ties:
        raise DispatchError(
            f"{sel.op}: variants {chosen.variant} and {ties[0].variant} tie at rank "
            f"{chosen.rank}; set a priority in the spec (`clforge lint` reports this)"
        )
    return chosen
