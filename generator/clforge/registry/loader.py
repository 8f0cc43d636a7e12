"""The loaded registry: generated ops and instances, guards and launch sizes parsed once."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from clforge.core import expressions, resources
from clforge.core.manifest import BUILTIN_NAME
from clforge.core.tree import BUILTIN_MODULE, DEFAULT, Tree
from clforge.errors import ClforgeError, GenerationError
from clforge.registry import sources
from clforge.registry.records import Instance, OpSig, Step
from clforge.registry.sources import Source


@dataclass(frozen=True)
class Exprs:
    """An instance's guard, NDRange and analytic crossover (prefer_when), parsed."""

    guard: expressions.Expr | None
    global_size: tuple[expressions.Expr, ...]
    local_size: tuple[expressions.Expr, ...] | None
    prefer: expressions.Expr | None = None


@dataclass(frozen=True)
class Registry:
    """The ops and instances of one tree, or of several merged (clforge's and its extensions'):
    `homes` says which tree each op and instance comes from."""

    ops: dict[str, OpSig]
    instances: dict[str, Instance]
    generated: Path  # the first tree's generated package (holding kernels/)
    homes: Mapping[str, Source] = field(default_factory=dict)  # op or instance name -> tree
    trees: tuple[Source, ...] = ()

    @property
    def tree(self) -> Tree:
        """The first tree (clforge's, in the default registry)."""
        first = self.trees[0].tree if self.trees else None
        return first or Tree(self.generated.parent)

    def home(self, name: str) -> Source | None:
        """The tree an op or an instance comes from."""
        return self.homes.get(name)

    def tree_of(self, inst: Instance) -> Tree | None:
        """The tree whose templates render `inst` with tuned parameters (None: installed
        without its folder)."""
        home = self.homes.get(inst.name)
        return home.tree if home is not None else self.tree

    def roots(self) -> tuple[Path, ...]:
        """The folders of the trees, for their reference modules."""
        return tuple(s.root for s in self.trees if s.root is not None)

    def tuning_folders(self, *, hidden_too: bool = False) -> tuple[Path, ...]:
        """The user's tuning folders (what `clforge tune` made on an installed clforge: read
        first), then every tree's tuning/ folder, clforge's first; none with
        `$CLFORGE_TUNING=off` (the computed defaults only), unless `hidden_too` (`clforge tune
        --check` checks the files whether calls read them or not)."""
        if not (hidden_too or resources.tuning_on()):
            return ()
        if not self.trees:
            trees: tuple[Path, ...] = (self.tree.tuning,)
        else:
            trees = tuple(s.root / "tuning" for s in self.trees if s.root is not None)
        return (*resources.user_tuning_folders(), *trees)

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
        """The guard, the NDRange (of `step`, default the instance's) and prefer_when, parsed
        once."""
        launch = step.launch if step is not None else inst.launch
        return _parse_exprs(inst.guard, launch.global_size, launch.local_size, inst.prefer_when)

    def source(self, inst: Instance) -> str:
        """The kernel source of `inst`, which must be the text the registry was generated with
        (an interrupted or partial `clforge generate` leaves kernels and registry out of step)."""
        home = self.homes.get(inst.name)
        path = (home.generated if home is not None else self.generated) / inst.source
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
    guard: str | None,
    global_size: tuple[str, ...],
    local_size: tuple[str, ...] | None,
    prefer_when: str | None = None,
) -> Exprs:
    return Exprs(
        expressions.parse(guard, "bool") if guard else None,
        tuple(expressions.parse(e, "int") for e in global_size),
        tuple(expressions.parse(e, "int") for e in local_size) if local_size is not None else None,
        expressions.parse(prefer_when, "bool") if prefer_when else None,
    )


def load(tree: Tree = DEFAULT) -> Registry:
    """The registry of one tree (its generated package, read by file path)."""
    if tree == DEFAULT:
        return merge([_load_source(sources.BUILTIN)])
    return merge([_load_source(sources.by_root(tree.root) or sources.of_tree(tree))])


def load_all(extra: Sequence[Tree] = ()) -> Registry:
    """One registry of every registered tree (clforge's first), plus `extra` trees."""
    found = list(sources.sources())
    found += [sources.of_tree(t) for t in extra if sources.by_root(t.root) is None]
    return merge([_load_source(s) for s in found])


def for_tree(tree: Tree) -> Registry:
    """The registry a command run in `tree` works on: clforge's and every registered extension's
    ops, with `tree`'s among them. A tree named like clforge's (clforge's own, or a scratch copy
    of it without a manifest of its own) stands alone."""
    if tree == DEFAULT:
        return default()
    if tree.name == BUILTIN_NAME:
        return load(tree)
    return load_all(extra=(tree,))


def merge(parts: Sequence[Registry]) -> Registry:
    """The registries of several trees as one: an op is defined by one tree; any tree may add
    instances (variants) to any op; names never collide."""
    ops: dict[str, OpSig] = {}
    instances: dict[str, Instance] = {}
    homes: dict[str, Source] = {}
    for part in parts:
        for name, op in part.ops.items():
            if name in ops:
                raise GenerationError(
                    f"op {name!r} is defined by two trees: {_where(homes[name])} and "
                    f"{_where(part.homes[name])}; an extension adds variants to another tree's op "
                    "with `extends:`"
                )
            ops[name] = op
            homes[name] = part.homes[name]
    for part in parts:
        for name, inst in part.instances.items():
            if name in instances:
                raise GenerationError(
                    f"instance {name!r} comes from two trees: {_where(homes[name])} and "
                    f"{_where(part.homes[name])}; rename one tree's variant"
                )
            if inst.op not in ops:
                raise GenerationError(
                    f"{_where(part.homes[name])}: instance {name!r} serves op {inst.op!r}, which "
                    "no registered tree defines (is the extension it extends registered?)"
                )
            instances[name] = inst
            homes[name] = part.homes[name]
    trees = tuple(s for p in parts for s in p.trees)
    return Registry(ops, instances, parts[0].generated, homes, trees)


def _where(src: Source) -> str:
    return f"tree {src.name!r} ({src.generated})"


def _load_source(src: Source) -> Registry:
    """The registry of one tree: clforge's by import, an extension's by file path (so that a
    folder need not be installed), or as installed when it comes without its folder."""
    path = src.generated / "registry.py"
    if src == sources.BUILTIN:
        module = importlib.import_module(f"{BUILTIN_MODULE}.registry")
    else:
        spec = importlib.util.spec_from_file_location(
            f"clforge_registry_{src.name}_{abs(hash(path))}", path
        )
        if spec is None or spec.loader is None or not path.is_file():
            raise GenerationError(
                f"no registry at {path}; run `clforge generate` in {src.root or src.generated}"
            )
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise GenerationError(f"{path}: cannot load: {type(exc).__name__}: {exc}") from None
    homes = dict.fromkeys((*module.OPS, *module.INSTANCES), src)
    reg = Registry(dict(module.OPS), dict(module.INSTANCES), src.generated, homes, (src,))
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


_DEFAULT: dict[tuple[int, str | None], Registry] = {}


def default() -> Registry:
    """The default registry: clforge's ops and every registered extension's (rebuilt when an
    extension is registered or `CLFORGE_PATH` changes)."""
    k = sources.key()
    reg = _DEFAULT.get(k)
    if reg is None:
        _DEFAULT.clear()
        reg = _DEFAULT[k] = load_all()
    return reg


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
