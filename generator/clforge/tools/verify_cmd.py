"""`clforge verify [OP ...] [--tunables]`: build every instance of the tree's registry on the
present device and check it against its NumPy reference (the op's cases: 1, primes, sizes no
tile divides, empty tensors; canary-padded buffers), as the test suite does, for a user's CI;
with --tunables, also a cover of each instance's parameter space (every tunable value)."""

from __future__ import annotations

import argparse
import sys

from clforge.core.tree import Tree
from clforge.errors import BuildError, ReferenceLookupError, UsageError


def add_parser(sub: argparse._SubParsersAction, tree_of) -> None:  # type: ignore[type-arg]
    v = sub.add_parser(
        "verify",
        help="build and check every instance against NumPy on the default device",
        description="Build every instance of the registry (or of the ops named) on the default "
        "OpenCL device and check it against its NumPy reference on the op's cases, with "
        "canary-padded buffers. Instances that need an extension the device lacks are skipped, "
        "naming it. Exit status 1 when any instance fails.",
    )
    v.add_argument("ops", nargs="*", help="ops to verify (default: every op)")
    v.add_argument(
        "--tunables",
        action="store_true",
        help="also every value of every tunable: a few points of each instance's parameter "
        "space that together use them all (a cover), besides the spec defaults",
    )
    v.set_defaults(func=lambda args: cmd_verify(args, tree_of(args)))


def cmd_verify(args: argparse.Namespace, tree: Tree) -> int:
    from clforge import references
    from clforge.device.query import from_device
    from clforge.params.space import ParamSpace
    from clforge.registry import loader as registry_mod
    from clforge.runtime.launch import Runtime
    from clforge.tune.verify import Verdict, verify

    reg = registry_mod.for_tree(tree)
    ops = args.ops or sorted(reg.ops)
    unknown = [o for o in ops if o not in reg.ops]
    if unknown:
        raise UsageError(f"unknown op {', '.join(unknown)} (ops: {', '.join(sorted(reg.ops))})")
    rt = Runtime(reg=reg)
    profile = from_device(rt.device)
    exts = set(rt.device.extensions.split())
    passed = failed = skipped = 0
    for inst in sorted(reg.instances.values(), key=lambda i: i.name):
        if inst.op not in ops:
            continue
        try:
            references.reference_of(reg.op(inst.op), reg.roots())
        except ReferenceLookupError as exc:
            print(f"{inst.name}: FAILED: {exc}")
            failed += 1
            continue
        missing = [e for e in inst.requires.extensions if e not in exts]
        if missing:
            print(f"{inst.name}: skipped (the device lacks {', '.join(missing)})")
            skipped += 1
            continue
        space = ParamSpace(inst)
        points = [space.defaults]
        if args.tunables:
            cover, unused = space.cover(profile)
            points += cover
            for name, value in sorted(unused):
                print(f"{inst.name} [{name}={value}]: no valid parameter set uses it; not built")
        for params in points:
            try:
                verdict = verify(rt, inst, params)
            except BuildError as exc:
                lines = exc.log.strip().splitlines() or ["(no compiler log)"]
                first = next((line for line in lines if "error" in line), lines[0])
                print(Verdict(inst.name, params, 0, f"does not build: {first.strip()}"))
                print("\n".join("    " + line for line in lines))
                failed += 1
                continue
            print(verdict)
            if verdict.ok:
                passed += 1
            else:
                failed += 1
    print(
        f"{passed} passed, {failed} failed, {skipped} skipped on {rt.device.name}", file=sys.stderr
    )
    return 1 if failed else 0
