"""The loaded registry: generated ops and instances, guards and launch sizes parsed once."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from generator.core import expressions
from generator.core.tree import DEFAULT, Tree
from generator.errors import ClforgeError, GenerationError
from generator.registry.records import Instance, OpSig, Step


@dataclass(frozen=True)
class Exprs:
    """An instance's guard and NDRange, parsed."""

    guard: expressions.Expr | None
    global_size: tuple[expressions.Expr, ...]
    local_size: tuple[expressions.Expr, ...] | None


@dataclass(frozen=True)
class Registry:
    ops: dict[str, OpSig]
    instances: dict[str, Instance]
    generated: Path  # folder holding kernels/

    @property
    def tree(self) -> Tree:
        """The tree the registry was generated in (its templates render tuned parameters)."""
        return Tree(self.generated.parent)

    def op(self, name: str) -> OpSig:
        try:
            return self.ops[name]
        except KeyError:
            raise ClforgeError(
                f"unknown op {name!r}; known ops: {', '.join(sorted(self.ops))}"
            ) from None

    def instance(self, name: str) -> Instance:
        try:
            return self.instances[name]
        except KeyError:
            raise ClforgeError(f"unknown instance {name!r}; `clforge list` shows them") from None

    def of_op(self, op: str) -> list[Instance]:
        return [i for i in self.instances.values() if i.op == op]

    def exprs(self, inst: Instance, step: Step | None = None) -> Exprs:
        """The guard and the NDRange (of `step`, default the instance's), parsed once."""
        launch = step.launch if step is not None else inst.launch
        return _parse_exprs(inst.guard, launch.global_size, launch.local_size)

    def source(self, inst: Instance) -> str:
        """The kernel source of `inst`, which must be the text the registry was generated with
        (an interrupted or partial `clforge generate` leaves kernels and registry out of step)."""
        path = self.generated / inst.source
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GenerationError(
                f"{inst.name}: cannot read {path}: {exc}; run `clforge generate`"
            ) from None
        if inst.sha256 and hashlib.sha256(text.encode("utf-8")).hexdigest() != inst.sha256:
            raise GenerationError(
                f"{inst.name}: {path} does not match the hash its registry records, so the "
                "kernels and the registry come from different generations (an interrupted "
                "`clforge generate`?); run `clforge generate`"
            )
        return text


@cache
def _parse_exprs(
    guard: str | None, global_size: tuple[str, ...], local_size: tuple[str, ...] | None
) -> Exprs:
    return Exprs(
        expressions.parse(guard, "bool") if guard else None,
        tuple(expressions.parse(e, "int") for e in global_size),
        tuple(expressions.parse(e, "int") for e in local_size) if local_size is not None else None,
    )


def load(tree: Tree = DEFAULT) -> Registry:
    """The registry of a tree: `generated.registry` for this repository, else by file path."""
    if tree == DEFAULT:
        module = importlib.import_module("generated.registry")
    else:
        path = tree.generated / "registry.py"
        spec = importlib.util.spec_from_file_location(f"clforge_registry_{abs(hash(path))}", path)
        if spec is None or spec.loader is None:
            raise GenerationError(f"no registry at {path}; run `clforge generate`")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    reg = Registry(dict(module.OPS), dict(module.INSTANCES), tree.generated)
    for inst in reg.instances.values():  # every guard and launch size parsed once, up front
        try:
            for step in inst.steps:
                reg.exprs(inst, step)
                for s in inst.scratch:
                    expressions.parse(s.size, "int")
            reg.exprs(inst)
        except expressions.GuardError as exc:
            raise GenerationError(
                f"{inst.name}: {exc}; regenerate with `clforge generate`"
            ) from None
    return reg


@cache
def default() -> Registry:
    return load(DEFAULT)


def guard_holds(
    reg: Registry,
    inst: Instance,
    env: Mapping[str, int],
    params: Mapping[str, int] | None = None,
) -> bool:
    """Whether `inst`'s guard holds for `env` (the dims and the int attributes), with its
    default parameters or with `params`."""
    guard = reg.exprs(inst).guard
    return guard is None or guard.holds({**env, **(inst.param_map if params is None else params)})
