"""Shapes and guards: how a call binds the graph's symbolic dims, and what it must check.

Each dim name is bound by the first graph-input axis that is exactly that name; every other
axis of the inputs, every algebraic dim (``H*hd``) and every guard capture recorded (views,
ranges) becomes a check. A name that no input axis binds is solved from an equality where it
appears alone and linearly (``D == 4*hd`` binds ``hd = D / 4`` and checks the division); one
that cannot be bound either way is refused when the graph is compiled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clforge.errors import CallError, GraphError
from clforge.graph.dims import Dim
from clforge.graph.records import GraphIR, Guard

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Binding:
    """Dim `dim` takes its size from axis `axis` of graph input `input`."""

    dim: str
    input: str
    axis: int

    def __str__(self) -> str:
        if _hidden(self.dim):
            return f"{self.dim}: read, to solve a dim from"
        return f"{self.dim} := {self.input}.shape[{self.axis}]"


@dataclass(frozen=True)
class Solve:
    """Dim `dim` = `other` / `coef`, from the equality `guard` (the division must be exact)."""

    dim: str
    other: Dim
    coef: Dim
    guard: Guard

    def __str__(self) -> str:
        coef = "" if self.coef == Dim.const(1) else f" / ({self.coef})"
        return f"{self.dim} := ({self.other}){coef}  (from {self.guard.origin})"


@dataclass(frozen=True)
class AxisCheck:
    """Axis `axis` of input `input` must be `dim` (a size, a name bound elsewhere, or an
    algebraic dim)."""

    input: str
    axis: int
    dim: Dim

    def __str__(self) -> str:
        return f"{self.input}.shape[{self.axis}] == {self.dim}"


@dataclass(frozen=True)
class GuardSet:
    """Everything a call checks once, in order: ranks, bindings, solved dims, axis checks,
    guards (equalities and ranges); then every dim fits a 32-bit index."""

    inputs: tuple[tuple[str, int], ...]  # (input, rank)
    bindings: tuple[Binding, ...]
    solves: tuple[Solve, ...]
    axes: tuple[AxisCheck, ...]
    guards: tuple[Guard, ...]

    @property
    def dims(self) -> tuple[str, ...]:
        names = tuple(b.dim for b in self.bindings) + tuple(s.dim for s in self.solves)
        return tuple(n for n in names if not _hidden(n))

    def lines(self) -> list[str]:
        return [
            *(f"rank {name} == {rank}" for name, rank in self.inputs),
            *(str(b) for b in self.bindings),
            *(str(s) for s in self.solves),
            *(str(a) for a in self.axes),
            *(str(g) for g in self.guards),
        ]

    def bind(self, graph: str, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
        """The dims of a call whose inputs have `shapes`; a broken guard is a CallError naming
        the dims and the sizes."""
        here = f"graph {graph!r}"
        for name, rank in self.inputs:
            if len(shapes[name]) != rank:
                raise CallError(
                    f"{here}: input {name!r} has rank {len(shapes[name])} (shape "
                    f"{shapes[name]}), compiled for rank {rank}"
                )
        env: dict[str, int] = {}
        for b in self.bindings:
            env[b.dim] = int(shapes[b.input][b.axis])
        for s in self.solves:
            num, den = s.other.evaluate(env), s.coef.evaluate(env)
            if den == 0 or num % den:
                shown = ", ".join(f"{k}={env[k]}" for k in sorted(s.other.names | s.coef.names))
                raise CallError(
                    f"{here}: guard {s.guard.lhs} == {s.guard.rhs} ({s.guard.origin}) fails: "
                    f"{s.other} = {num} is not a multiple of {s.coef} = {den} ({shown})"
                )
            env[s.dim] = num // den
        first = {b.dim: b for b in self.bindings}
        for a in self.axes:
            got = int(shapes[a.input][a.axis])
            want = a.dim.evaluate(env)
            if got != want:
                single = a.dim.single_name
                if single is not None and single in first:
                    src = first[single]
                    raise CallError(
                        f"{here}: dim {single} is {env[single]} in {src.input} (axis {src.axis}, "
                        f"shape {shapes[src.input]}) but {got} in {a.input} (axis {a.axis}, "
                        f"shape {shapes[a.input]}); one name means one size"
                    )
                shown = ", ".join(f"{k}={env[k]}" for k in sorted(a.dim.names))
                raise CallError(
                    f"{here}: {a.input} axis {a.axis} (shape {shapes[a.input]}) must be "
                    f"{a.dim} = {want}{f' ({shown})' if shown else ''}, got {got}"
                )
        for g in self.guards:
            if not g.holds(env):
                names = g.lhs.names | (g.rhs.names if g.rhs is not None else frozenset())
                shown = ", ".join(f"{k}={env[k]}" for k in sorted(names))
                raise CallError(f"{here}: guard {g} fails for {shown}")
        for k, v in env.items():
            if v > _INT32_MAX:
                raise CallError(f"{here}: dim {k} = {v} exceeds the kernels' 32-bit index range")
        return {k: v for k, v in env.items() if not _hidden(k)}


def guards_of(ir: GraphIR) -> GuardSet:
    """The stage: the guard set of a captured (simplified) graph."""
    bindings: list[Binding] = []
    axes: list[AxisCheck] = []
    bound: set[str] = set()
    for vid in ir.inputs:
        v = ir.value(vid)
        for k, d in enumerate(v.shape):
            name = d.single_name
            if name is not None and name not in bound:
                bindings.append(Binding(name, v.name, k))
                bound.add(name)
            else:
                axes.append(AxisCheck(v.name, k, d))
    # an axis whose dim has names no axis binds alone (z [S, H*hd] binds no hd) is a size to
    # solve from: a hidden name for the axis, and the equality `z.shape[1] == H*hd`
    solvable = [a for a in axes if not a.dim.names <= bound]
    axes = [a for a in axes if a.dim.names <= bound]
    pending = list(ir.guards)
    for a in solvable:
        hidden = f"{a.input}.shape[{a.axis}]"
        bindings.append(Binding(hidden, a.input, a.axis))
        bound.add(hidden)
        pending.append(Guard("equal", Dim.name(hidden), f"{a.input} axis {a.axis}", rhs=a.dim))
    solves: list[Solve] = []
    checks: list[Guard] = []
    progress = True
    while progress:
        progress = False
        for g in list(pending):
            solved = _solve(g, bound)
            if solved is not None:
                solves.append(solved)
                bound.add(solved.dim)
                pending.remove(g)
                progress = True
            elif g.lhs.names | (g.rhs.names if g.rhs else frozenset()) <= bound:
                checks.append(g)
                pending.remove(g)
                progress = True
    needed: set[str] = set()
    for v in ir.values:
        for d in v.shape:
            needed |= d.names
    for g in pending:
        needed |= g.lhs.names | (g.rhs.names if g.rhs else frozenset())
    missing = sorted(needed - bound)
    if missing:
        raise GraphError(
            f"graph {ir.name!r}: dim {', '.join(missing)} is bound by no graph input and "
            "cannot be solved from a guard; name it in an input's shape"
        )
    ins = tuple((ir.value(v).name, len(ir.value(v).shape)) for v in ir.inputs)
    return GuardSet(ins, tuple(bindings), tuple(solves), tuple(axes), tuple(checks))


def _hidden(name: str) -> bool:
    """A name for an input axis's size (``z.shape[1]``), not a dim of the graph."""
    return "[" in name


def _solve(g: Guard, bound: set[str]) -> Solve | None:
    """`g` solved for its one unbound name, when it appears alone, linearly, in one side."""
    if g.kind != "equal" or g.rhs is None:
        return None
    for side, other in ((g.lhs, g.rhs), (g.rhs, g.lhs)):
        free = side.names - bound
        if len(free) != 1 or not other.names <= bound or not side.is_monomial:
            continue
        ((mono, c),) = side.terms
        (name,) = free
        if mono.count(name) != 1:
            continue
        coef = Dim.const(c)
        for n in mono:
            if n != name:
                coef = coef * Dim.name(n)
        return Solve(name, other, coef, g)
    return None
