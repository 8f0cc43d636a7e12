"""A variant's parameter space: its spec defaults, its tunables, its constraints, and the
device's limits (work-group size, local memory) that prune it. A spec default stays valid
everywhere; every other point must meet the constraints, which name params and the device's
register file (`vector_registers`, `vector_bits`, and the element's `dtype_bits`:
:func:`clforge.params.properties.register_file`;
with no device named, the widest ISA's)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache

from clforge.core import expressions
from clforge.device.profile import DeviceProfile
from clforge.errors import CallError
from clforge.params.properties import register_file
from clforge.registry.records import Instance

Params = tuple[tuple[str, int], ...]  # sorted (name, value) pairs: hashable, deterministic


@cache
def _parsed(text: str) -> expressions.Expr:
    return expressions.parse(text, "bool")


@cache
def _sized(text: str) -> expressions.Expr:
    return expressions.parse(text, "int")


def as_params(values: Mapping[str, int]) -> Params:
    return tuple(sorted((k, int(v)) for k, v in values.items()))


def params_text(params: Params) -> str:
    return ",".join(f"{k}={v}" for k, v in params) or "(none)"


@dataclass(frozen=True)
class ParamSpace:
    """The compile-time parameters of one instance."""

    instance: Instance

    @property
    def defaults(self) -> Params:
        return as_params(dict(self.instance.params))

    @property
    def size(self) -> int:
        return math.prod(len(vals) for _, vals in self.instance.tunables)

    def complete(self, chosen: Mapping[str, int]) -> Params:
        """`chosen` over the defaults; a name that is no param of the instance is an error."""
        unknown = sorted(set(chosen) - set(dict(self.instance.params)))
        if unknown:
            raise CallError(
                f"{self.instance.name}: {', '.join(unknown)} "
                f"{'is no parameter' if len(unknown) == 1 else 'are no parameters'} of it "
                f"(parameters: {params_text(self.defaults)})"
            )
        return as_params({**dict(self.instance.params), **chosen})

    def problem(self, params: Params, profile: DeviceProfile | None = None) -> str | None:
        """Why `params` cannot be used (a constraint, a device limit), or None. Constraints read
        the register file of `profile` (of the widest ISA where None)."""
        env = {**register_file(profile, self.instance.dtype), **dict(params)}
        for text in self.instance.constraints:
            if not _parsed(text).holds(env):
                where = "" if profile is None else f" on {profile.name}"
                return f"constraint {text!r} does not hold for {params_text(params)}{where}"
        if profile is not None and self.instance.launch.local_size is not None:
            try:  # local sizes are params-only expressions in practice; dims read as 1
                dims = dict.fromkeys(_names(self.instance), 1)
                local = [
                    _sized(e).evaluate({**dims, **dict(params)})
                    for e in self.instance.launch.local_size
                ]
            except (ZeroDivisionError, ValueError):
                local = []
            if local and math.prod(local) > profile.max_work_group_size:
                return (
                    f"work-group size {math.prod(local)} exceeds the device's "
                    f"{profile.max_work_group_size} for {params_text(params)}"
                )
        return None

    def candidates(self, profile: DeviceProfile | None = None) -> Iterator[Params]:
        """Every valid point: the tunables' product over the defaults, defaults first."""
        yield self.defaults
        if not self.instance.tunables:
            return
        names = [n for n, _ in self.instance.tunables]
        for combo in itertools.product(*(vals for _, vals in self.instance.tunables)):
            params = self.complete(dict(zip(names, combo, strict=True)))
            if params != self.defaults and self.problem(params, profile) is None:
                yield params

    def cover(
        self, profile: DeviceProfile | None = None
    ) -> tuple[list[Params], set[tuple[str, int]]]:
        """A few valid points (defaults excluded) that together use every (tunable, value) pair
        the defaults do not, picked greedily (the point that uses the most pairs not yet used,
        first in `candidates` order on a tie: deterministic); and the pairs that no valid point
        uses (the linter's dead-tunable warning). Building and verifying these checks every
        value's code at a fraction of the whole space's cost."""
        points = [p for p in self.candidates(profile) if p != self.defaults]
        wanted = {(n, v) for n, vals in self.instance.tunables for v in vals} - set(self.defaults)
        chosen: list[Params] = []
        while wanted:
            best = max(points, key=lambda p: len(wanted & set(p)), default=None)
            if best is None or not wanted & set(best):
                break
            chosen.append(best)
            wanted -= set(best)
        return chosen, wanted


def _names(inst: Instance) -> set[str]:
    out: set[str] = set()
    for e in inst.launch.local_size or ():
        out |= _sized(e).names
    return out - {n for n, _ in inst.params}
