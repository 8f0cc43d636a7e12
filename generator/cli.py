"""The `clforge` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from .errors import ClforgeError, SpecError, StaleError
from .paths import DEFAULT, Layout

Command = Callable[[argparse.Namespace], int]


def _layout(args: argparse.Namespace) -> Layout:
    from pathlib import Path

    return Layout(Path(args.root).resolve()) if args.root else DEFAULT


def cmd_generate(args: argparse.Namespace) -> int:
    from .generate import generate

    layout = _layout(args)
    try:
        p = generate(layout, check=args.check)
    except StaleError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.check:
        print(f"generated/ is up to date ({p.unchanged} files)")
    else:
        print(
            f"generated/: {len(p.write)} written, {len(p.remove)} removed, {p.unchanged} unchanged"
        )
        for rel in p.write:
            print(f"  wrote   generated/{rel}")
        for rel in p.remove:
            print(f"  removed generated/{rel}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from .spec import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from . import registry

    reg = registry.default()
    for inst in sorted(reg.instances.values(), key=lambda i: i.name):
        if args.op and inst.op != args.op:
            continue
        print(f"{inst.name:52} {','.join(inst.targets):22} {inst.guard or ''}")
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    from .device import FALLBACK_HINT, survey

    statuses = survey()
    for s in statuses:
        verdict = "builds kernels" if s.builds else f"cannot build kernels: {s.problem}"
        print(f"{s.label}: {verdict}")
    if not any(s.builds for s in statuses):
        print(f"clforge: no OpenCL device can build kernels. {FALLBACK_HINT}", file=sys.stderr)
        return 1 if args.check else 0
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clforge", description=__doc__)
    parser.add_argument("--root", help="the clforge tree (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="render specs into generated/ (kernels and registry)")
    g.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming the files if generated/ is stale",
    )
    g.set_defaults(func=cmd_generate)

    s = sub.add_parser("schema", help="print the JSON Schema of the spec format")
    s.set_defaults(func=cmd_schema)

    ls = sub.add_parser("list", help="list the registry's instances")
    ls.add_argument("op", nargs="?", help="only this op's instances")
    ls.set_defaults(func=cmd_list)

    dv = sub.add_parser("devices", help="list OpenCL devices and whether each builds kernels")
    dv.add_argument("--check", action="store_true", help="exit 1 when no device builds kernels")
    dv.set_defaults(func=cmd_devices)

    d = sub.add_parser("demo", help="run every op on the default device, checked against NumPy")
    d.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Command = args.func
    try:
        return func(args)
    except SpecError as exc:
        for d in exc.diagnostics:
            print(d, file=sys.stderr)
        return 1
    except ClforgeError as exc:
        print(f"clforge: error: {exc}", file=sys.stderr)
        return 1
