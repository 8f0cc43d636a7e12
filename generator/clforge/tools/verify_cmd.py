"""`clforge verify [OP ...] [--tunables]`: build every instance of the tree's registry on the
present device and check it against its NumPy reference (the op's cases: 1, primes, sizes no
tile divides, empty tensors; canary-padded buffers), as the test suite does, for a user's CI;
with --tunables, also a cover of each instance's parameter space (every tunable value).

Run in an extension's folder (or with --root of one), it checks that extension's instances
(its own ops' and the variants it adds to other trees' ops); --all checks every registered
tree's."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from clforge.core.manifest import BUILTIN_NAME
from clforge.core.tree import Tree
from clforge.errors import BuildError, ReferenceLookupError, UsageError

if TYPE_CHECKING:
    from clforge.registry.loader import Registry
    from clforge.registry.records import Instance

EPILOG = (
    "Exit status: 0 every instance checked passed (skipped ones aside); 1 an instance failed, "
    "or a device error; 2 usage errors (an unknown op, an op with no instance in this tree). "
    "--json: {version: 1, device, tree (the extension checked; null: every tree), passed, failed, "
    "skipped, results: "
    "[{instance, op, tree, params: {name: value}, status: passed|failed|skipped|unused, cases "
    "(the cases run), problem (null: none), log (the compiler log of a build failure, else "
    "null)}]}; status unused marks a tunable value no valid parameter set uses (params holds "
    'it; not built). Its keys are kept across releases (keys may be added; its "version" '
    "changes when one is removed or changes meaning)."
)


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    tree_of: Callable[[argparse.Namespace], Tree],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    v = sub.add_parser(
        "verify",
        parents=list(parents),
        help="build and check every instance against NumPy on the default device",
        description="Build every instance of the registry (or of the ops named) on the default "
        "OpenCL device and check it against its NumPy reference on the op's cases, with "
        "canary-padded buffers. Instances that need an extension the device lacks are skipped, "
        "naming it. In an extension's folder (or with --root of one), only that extension's "
        "instances are checked, unless --all.",
        epilog=EPILOG,
    )
    v.add_argument("ops", nargs="*", help="ops to verify (default: every op)")
    v.add_argument(
        "--tunables",
        action="store_true",
        help="also every value of every tunable: a few points of each instance's parameter "
        "space that together use them all (a cover), besides the spec defaults",
    )
    v.add_argument(
        "--all",
        action="store_true",
        help="every registered tree's instances (clforge's and every extension's), not only "
        "this extension's (clforge's own tree checks them all anyway)",
    )
    v.add_argument("--json", action="store_true", help="machine-readable output (see below)")
    v.set_defaults(func=lambda args: cmd_verify(args, tree_of(args)))


def scope(reg: Registry, tree: Tree, every: bool) -> str | None:
    """The tree whose instances verify checks: an extension's own, else None (every tree's)."""
    if every or tree.name == BUILTIN_NAME:
        return None
    return tree.name


def selected(reg: Registry, tree: Tree, ops: Sequence[str], every: bool = False) -> list[Instance]:
    """The instances to verify: of `ops` (default: every op), in the tree's scope."""
    unknown = [o for o in ops if o not in reg.ops]
    if unknown:
        raise UsageError(f"unknown op {', '.join(unknown)} (ops: {', '.join(sorted(reg.ops))})")
    only = scope(reg, tree, every)

    def home(inst: Instance) -> str:
        src = reg.home(inst.name)
        return src.name if src is not None else BUILTIN_NAME

    chosen = sorted(
        (
            i
            for i in reg.instances.values()
            if (not ops or i.op in ops) and (only is None or home(i) == only)
        ),
        key=lambda i: i.name,
    )
    empty = [o for o in ops if not any(i.op == o for i in chosen)]
    if empty:
        raise UsageError(
            f"tree {only!r} has no instance of {', '.join(empty)} (it neither defines nor "
            "extends it); `clforge verify --all` checks every registered tree's instances"
        )
    return chosen


def cmd_verify(args: argparse.Namespace, tree: Tree) -> int:
    from clforge import references
    from clforge.device.query import from_device
    from clforge.params.space import ParamSpace
    from clforge.registry import loader as registry_mod
    from clforge.runtime.launch import Runtime
    from clforge.tune.verify import Verdict, verify

    reg = registry_mod.for_tree(tree)
    every = bool(getattr(args, "all", False))
    instances = selected(reg, tree, args.ops, every)
    as_json = bool(getattr(args, "json", False))
    rt = Runtime(reg=reg)
    profile = from_device(rt.device)
    exts = set(rt.device.extensions.split())
    results: list[dict[str, Any]] = []

    def result(
        inst: Instance,
        params: Any,
        status: str,
        text: str,
        cases: int = 0,
        problem: str | None = None,
        log: str | None = None,
    ) -> None:
        if not as_json:
            print(text)
        home = reg.home(inst.name)
        results.append(
            {
                "instance": inst.name,
                "op": inst.op,
                "tree": home.name if home is not None else BUILTIN_NAME,
                "params": dict(params),
                "status": status,
                "cases": cases,
                "problem": problem,
                "log": log,
            }
        )

    for inst in instances:
        try:
            references.reference_of(reg.op(inst.op), reg.roots())
        except ReferenceLookupError as exc:
            result(inst, {}, "failed", f"{inst.name}: FAILED: {exc}", problem=str(exc))
            continue
        missing = [e for e in inst.requires.extensions if e not in exts]
        if missing:
            why = f"the device lacks {', '.join(missing)}"
            result(inst, {}, "skipped", f"{inst.name}: skipped ({why})", problem=why)
            continue
        space = ParamSpace(inst)
        points = [space.defaults]
        if args.tunables:
            cover, unused = space.cover(profile)
            points += cover
            for name, value in sorted(unused):
                why = "no valid parameter set uses it; not built"
                result(inst, {name: value}, "unused", f"{inst.name} [{name}={value}]: {why}")
        for params in points:
            try:
                verdict = verify(rt, inst, params)
            except BuildError as exc:
                lines = exc.log.strip().splitlines() or ["(no compiler log)"]
                first = next((line for line in lines if "error" in line), lines[0])
                text = str(Verdict(inst.name, params, 0, f"does not build: {first.strip()}"))
                text += "\n" + "\n".join("    " + line for line in lines)
                why = f"does not build: {first.strip()}"
                result(inst, params, "failed", text, problem=why, log=exc.log)
                continue
            failure = None if verdict.ok else str(verdict).split(": FAILED: ", 1)[-1]
            status = "passed" if verdict.ok else "failed"
            result(inst, params, status, str(verdict), verdict.ran, failure)
    passed, failed, skipped = (
        sum(r["status"] == status for r in results) for status in ("passed", "failed", "skipped")
    )
    if as_json:
        doc = {
            "version": 1,
            "device": rt.device.name,
            "tree": scope(reg, tree, every),
            "passed": passed,
            "failed": failed,
            "skipped": skipped,
            "results": results,
        }
        print(json.dumps(doc, indent=2))
    print(
        f"{passed} passed, {failed} failed, {skipped} skipped on {rt.device.name}", file=sys.stderr
    )
    return 1 if failed else 0
