"""The `clforge` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from clforge.core.tree import DEFAULT, Tree
from clforge.errors import ClforgeError, ExtensionError, SpecError, StaleError, UsageError

if TYPE_CHECKING:
    from clforge.params.lookup import Choice
    from clforge.registry.loader import Registry
    from clforge.registry.records import OpSig

Command = Callable[[argparse.Namespace], int]

EXIT_CODES = (
    "Exit status: 0 ok; 1 findings or failures (lint findings, failed verification, stale "
    "generated files or tuning entries, a spec that does not load, a call no instance serves, a "
    "device or profile error); 2 usage or environment errors (a bad option or value, an unknown "
    "op, a path that does not exist, a tree clforge may not write, an extension that cannot be "
    "found or read: CLFORGE_PATH, entry points)."
)
JSON_NOTE = (
    "With --json, standard output is one JSON document; its keys are kept across releases "
    '(keys may be added; its "version" changes when one is removed or changes meaning).'
)


def _unknown_op(reg: Registry, name: str) -> UsageError:
    import difflib

    close = difflib.get_close_matches(name, list(reg.ops), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return UsageError(f"unknown op {name!r}{hint} (known ops: {', '.join(sorted(reg.ops))})")


def _tree(args: argparse.Namespace) -> Tree:
    """`--root`, else the tree whose clforge.yaml is in the working folder or above it, else
    clforge's own."""
    from pathlib import Path

    from clforge.core.tree import find

    if getattr(args, "root", None):
        root = Path(args.root).resolve()
        if not root.is_dir():
            raise UsageError(f"--root: {args.root} is not a folder")
        return Tree.at(root)
    return find(Path.cwd()) or DEFAULT


def _tree_of_paths(paths: Sequence[str]) -> Tree:
    """The tree the spec files named on the command line are in: the nearest clforge.yaml above
    them (all in one tree), else clforge's own, which is then said on standard error."""
    from pathlib import Path

    from clforge.core.tree import find

    found = {
        find(Path(p).resolve().parent if Path(p).is_file() else Path(p).resolve()) for p in paths
    }
    if len(found) > 1:
        roots = ", ".join(sorted(str(t.root) if t else "(none)" for t in found))
        raise UsageError(f"the paths are in several trees ({roots}); lint each tree on its own")
    (tree,) = found
    if tree is None:
        print(
            "clforge lint: the paths are in no tree (no clforge.yaml above them): templates are "
            f"looked up in {DEFAULT.templates}; --root DIR names the tree",
            file=sys.stderr,
        )
        return DEFAULT
    return tree


def _registry(args: argparse.Namespace) -> Registry:
    """The registry the command works on (:func:`clforge.registry.loader.for_tree`)."""
    from clforge.registry import loader

    return loader.for_tree(_tree(args))


def _trees(args: argparse.Namespace) -> list[Tree]:
    """The tree of `--root` (or of the working folder), or with `--all` every registered tree
    that has its folder here (clforge's, then the extensions')."""
    tree = _tree(args)
    if not getattr(args, "all", False):
        return [tree]
    from clforge.registry import sources

    found = [s.tree for s in sources.sources() if s.tree is not None]
    return found if sources.by_root(tree.root) is not None else [*found, tree]


def cmd_generate(args: argparse.Namespace) -> int:
    from clforge.emit.generate import generate

    status = 0
    for tree in _trees(args):
        shown = f" (tree {tree.name}, {tree.root})" if args.all else ""
        if not tree.writable and not args.check:
            if args.all:
                print(f"skipped: {_not_writable(tree)}", file=sys.stderr)
                continue
            raise UsageError(_not_writable(tree))
        try:
            p = generate(tree, check=args.check)
        except StaleError as exc:
            print(f"{exc}{shown}", file=sys.stderr)
            status = 1
            continue
        if args.check:
            print(f"generated files are up to date ({p.unchanged} files){shown}")
            continue
        print(
            f"generated: {len(p.write)} written, {len(p.remove)} removed, "
            f"{p.unchanged} unchanged{shown}"
        )
        for rel in p.write:
            print(f"  wrote   {rel}")
        for rel in p.remove:
            print(f"  removed {rel}")
    return status


def _not_writable(tree: Tree) -> str:
    """Why clforge does not write into `tree` (an installed clforge's own data)."""
    return (
        f"clforge's own tree ({tree.root}) is the data of an installed clforge: site-packages "
        "belongs to the installer, and clforge writes nothing there. Run this in an extension's "
        "folder (where its clforge.yaml is) or name one with --root DIR; to change clforge's "
        "own specs, work in a source checkout (`pip install -e .`)"
    )


def cmd_schema(args: argparse.Namespace) -> int:
    from clforge.spec.schema import schema_text

    tree = _tree(args)
    text = schema_text()
    path = tree.specs / "schema.json"
    shown = tree.rel(path)
    if args.write:
        from clforge.core.atomic_file import atomic_write

        if not tree.writable:
            raise UsageError(_not_writable(tree))

        if path.is_file() and path.read_text(encoding="utf-8") == text:
            print(f"{shown} is up to date")
        else:
            atomic_write(path, text)
            print(f"wrote {shown}")
    elif args.check:
        try:
            same = path.read_text(encoding="utf-8") == text
        except OSError:
            same = False
        if not same:
            print(f"{shown} is stale or missing; run `clforge schema --write`", file=sys.stderr)
            return 1
        print(f"{shown} is up to date")
    else:
        sys.stdout.write(text)
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clforge.errors import DeviceError
    from clforge.lint.checks import FORMATS, combined, lint, list_rules

    if args.list_rules:
        sys.stdout.write(list_rules())
        return 0
    if args.all and args.paths:
        raise UsageError("lint --all lints every registered tree's specs/: name no paths")
    named = getattr(args, "root", None)
    trees = _trees(args) if named or not args.paths else [_tree_of_paths(args.paths)]
    try:
        reports = [
            lint(
                [Path(p) for p in args.paths],
                tree,
                freshness=not args.no_freshness,
                compile=args.compile,
            )
            for tree in trees
        ]
    except DeviceError as exc:
        print(f"clforge lint: error: {exc}", file=sys.stderr)
        return 2
    report = reports[0] if len(reports) == 1 else combined(reports, trees)
    sys.stdout.write(FORMATS[args.format](report))
    print(report.summary(), file=sys.stderr)
    return report.exit_code(strict=args.strict)


def cmd_list(args: argparse.Namespace) -> int:
    from clforge.core.manifest import BUILTIN_NAME

    reg = _registry(args)
    if args.op and args.op not in reg.ops:
        raise _unknown_op(reg, args.op)  # an unknown op is an error, not an empty listing
    rows = []
    for inst in sorted(reg.instances.values(), key=lambda i: i.name):
        if args.op and inst.op != args.op:
            continue
        home = reg.home(inst.name)
        if args.json:
            rows.append(
                {
                    "name": inst.name,
                    "op": inst.op,
                    "variant": inst.variant,
                    "dtype": inst.dtype,
                    "layouts": dict(inst.layouts),
                    "targets": list(inst.targets),
                    "priority": inst.priority,
                    "guard": inst.guard,
                    "params": dict(inst.params),
                    "tree": home.name if home is not None else BUILTIN_NAME,
                }
            )
            continue
        tree = f"  [{home.name}]" if home is not None and home.name != BUILTIN_NAME else ""
        print(f"{inst.name:52} {','.join(inst.targets):22} {inst.guard or ''}{tree}".rstrip())
    if args.json:
        print(json.dumps({"version": 1, "instances": rows}, indent=2))
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    import contextlib

    from clforge.device.discovery import FALLBACK_HINT, survey
    from clforge.device.profile import MODEL_FIELDS, model_dict, model_text
    from clforge.device.query import from_device
    from clforge.device.threads import pin_pocl_workers
    from clforge.errors import DeviceError

    statuses = survey()
    threads = pin_pocl_workers()  # the decision survey()'s platform query was made under
    models = {}
    for s in statuses:
        with contextlib.suppress(DeviceError):  # a driver that does not answer: no model
            models[s.device.int_ptr] = from_device(s.device)
    if args.json:
        empty = dict.fromkeys((*MODEL_FIELDS, "preferred_vector_widths"))
        doc = {
            "version": 1,
            "devices": [
                {
                    "platform": s.device.platform.name,
                    "platform_version": s.device.platform.version.strip(),
                    "name": s.device.name,
                    "builds": s.builds,
                    "builds_fully": s.builds_fully,
                    "problem": s.problem or None,
                    "compiled_simd_bits": s.compiled_simd or None,
                    "host_simd_bits": s.host_simd or None,
                    "verdict": s.verdict,
                    **(
                        model_dict(models[s.device.int_ptr])
                        if s.device.int_ptr in models
                        else empty
                    ),
                }
                for s in statuses
            ],
            "builds": any(s.builds for s in statuses),
            "builds_fully": any(s.builds_fully for s in statuses),
            "pocl_threads": {"pinned": threads.pinned, "reason": threads.reason},
        }
        print(json.dumps(doc, indent=2))
    else:
        for s in statuses:
            print(f"{s.label}: {s.verdict}")
            if s.device.int_ptr in models:
                print(f"  {model_text(models[s.device.int_ptr])}")
        if any("portable computing language" in s.device.platform.name.lower() for s in statuses):
            print(f"PoCL's CPU worker threads: {threads.describe()}")
    if not any(s.builds for s in statuses):
        print(f"clforge: no OpenCL device can build kernels. {FALLBACK_HINT}", file=sys.stderr)
        return 1 if args.check or args.check_full else 0
    if args.check_full and not any(s.builds_fully for s in statuses):
        print(
            "clforge: every OpenCL device that builds kernels compiles for narrower vectors "
            f"than this CPU has. {FALLBACK_HINT}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from clforge.device.profile_files import (
        PROFILES_DIR,
        dump_profile,
        find_profile,
        load_profile,
        shipped_profiles,
    )

    profiles = PROFILES_DIR
    if args.list:
        stems = shipped_profiles(profiles)
        width = max((len(stem) for stem in stems), default=0)
        for stem in stems:
            p = load_profile(profiles / f"{stem}.yaml")
            print(f"{stem:{width}} {p.name} ({p.vendor} {p.device_type}, arch {p.arch or '-'})")
        return 0
    sys.stdout.write(dump_profile(find_profile(args.device, profiles_dir=profiles)))
    return 0


def _pairs(text: str | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"--{what}: expected NAME=VALUE[,NAME=VALUE...], got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _explain_sizes(
    op: OpSig, dims: dict[str, int], args: argparse.Namespace
) -> tuple[dict[str, int], dict[str, float | int]]:
    """explain's dims and attributes: --dims, the dims that --shapes binds (as a call binds
    its inputs' shapes), and the derived dims that these and --attrs (over the spec's
    defaults) determine."""
    from clforge.call.binding import bind_dims, derive_dims

    given: dict[str, float | int] = {}
    names = {a.name: a for a in op.attrs}
    for name, value in _pairs(args.attrs, "attrs").items():
        if name not in names:
            raise UsageError(
                f"--attrs: {op.name} has no attribute {name!r} "
                f"(attributes: {', '.join(names) or 'none'})"
            )
        try:
            given[name] = int(value) if names[name].type == "int" else float(value)
        except ValueError:
            kind = "an int" if names[name].type == "int" else "a number"
            raise UsageError(f"--attrs: {name}={value!r} is not {kind}") from None
    attrs = {a.name: a.default for a in op.attrs if a.default is not None} | given
    shapes: dict[str, tuple[int, ...]] = {}
    inputs = {t.name: t for t in op.inputs}
    for name, text in _pairs(args.shapes, "shapes").items():
        if name not in inputs:
            raise UsageError(
                f"--shapes: {op.name} has no input {name!r} (inputs: {', '.join(inputs)})"
            )
        sizes = text.lower().split("x")
        if not all(n.isdigit() for n in sizes):
            raise UsageError(f"--shapes: {name}={text!r} is not sizes joined by x, e.g. 1x256x64")
        shapes[name] = tuple(int(n) for n in sizes)
    for dim, size in bind_dims(op, shapes).items():
        if dims.setdefault(dim, size) != size:
            raise UsageError(f"--dims: {dim}={dims[dim]}, but --shapes makes it {size}")
    return derive_dims(op, dims, attrs, partial=True), attrs


def cmd_explain(args: argparse.Namespace) -> int:
    from clforge.call.binding import int_attrs
    from clforge.call.selection import select
    from clforge.device.profile_files import find_profile

    reg = _registry(args)
    if args.op not in reg.ops:
        raise _unknown_op(reg, args.op)
    op = reg.op(args.op)
    layouts = _pairs(args.layout, "layout")
    tensors = {t.name: t for t in op.inputs + op.outputs}
    for name, lay in layouts.items():
        if name not in tensors:
            raise UsageError(
                f"--layout: {args.op} has no tensor {name!r} (tensors: {', '.join(tensors)})"
            )
        if lay not in tensors[name].layouts:
            raise UsageError(
                f"--layout: {name} of {args.op} is {' or '.join(tensors[name].layouts)}"
                f", not {lay!r}"
            )
    dims: dict[str, int] = {}
    for name, value in _pairs(args.dims, "dims").items():
        if name not in op.dims:
            raise UsageError(f"--dims: {args.op} has no dim {name!r} (dims: {', '.join(op.dims)})")
        if not value.isdigit():
            raise UsageError(f"--dims: {name}={value!r} is not a non-negative integer")
        dims[name] = int(value)
    dims, attrs = _explain_sizes(op, dims, args)
    env = {**dims, **int_attrs(op, attrs)}
    dtype = args.dtype or op.dtypes[0]
    if dtype not in op.dtypes:
        raise UsageError(f"--dtype: {args.op} supports {', '.join(op.dtypes)}, not {dtype!r}")
    from clforge.call.selection import measured
    from clforge.params.database import load_folders
    from clforge.params.lookup import ParamLookup

    profile = find_profile(args.device)
    lookup = ParamLookup.from_env(profile, load_folders(reg.tuning_folders()))
    sel = measured(select(reg, profile, args.op, dtype, layouts, env), reg, lookup, env)
    choice = None
    if sel.chosen and sel.chosen.instance:
        choice = lookup.choose(reg.instance(sel.chosen.instance), dims)
    hint = _tuning_hint(choice, args.device.strip() == "auto")
    if args.json:
        # the selection's env holds the int attributes too (guards read them): apart here
        doc = sel.as_dict() | {"dims": dims, "attrs": attrs}
        doc["device_isa"] = lookup.device.isa_text
        doc["tuning_passed_over"] = [{"file": f, "reason": why} for f, why in lookup.passed]
        if choice is not None:
            doc["params"] = dict(choice.params)
            doc["params_origin"] = choice.describe()
            doc["tuning_hint"] = hint
            doc["steps"] = [
                {"name": s.name, "kernel": s.kernel, "reads": s.reads, "writes": s.writes}
                for s in reg.instance(sel.chosen.instance).steps  # type: ignore[union-attr, arg-type]
            ]
        print(json.dumps(doc, indent=2))
    else:
        lines = sel.table().splitlines()
        if choice is not None:  # above the verdict, which stays the last line
            inst = reg.instance(sel.chosen.instance)  # type: ignore[union-attr, arg-type]
            for step in inst.steps:
                lines.insert(
                    -1,
                    f"  step {step.name}: {step.kernel}, reads {', '.join(step.reads)}, "
                    f"writes {', '.join(step.writes)}, global size {list(step.launch.global_size)}",
                )
            lines.insert(-1, f"  params of the chosen instance: {choice.describe()}")
        for line in lookup.passed_over():
            lines.insert(-1, f"  tuning file passed over: {line}")
        if hint:
            lines.insert(-1, f"  {hint}")
        unset = [d for d in op.dims if d not in dims]
        if dims and unset:
            lines.insert(
                -1,
                f"  dims {', '.join(unset)} unset: guards on them stay open, and tuned times and "
                "shape buckets need every dim (pass them, or --shapes)",
            )
        print("\n".join(lines))
    return 0 if sel.chosen else 1


def _tuning_hint(choice: Choice | None, this_device: bool) -> str | None:
    """What explain adds where the chosen parameters were not tuned on the present device: that
    the tuning files are hidden, or that a quick tune would measure them here."""
    from clforge.core import resources

    if not resources.tuning_on():
        return "tuning files hidden ($CLFORGE_TUNING=off): the parameters computed for the device"
    if choice is None or not this_device or not choice.params:
        return None
    if choice.origin == "override" or choice.origin.startswith("tuned on this device"):
        return None
    how = "borrowed" if choice.origin.startswith("tuned on") else "not tuned"
    return (
        f"these parameters are {how} here: `clforge tune --quick` tunes the core ops on this "
        "device in a few minutes (docs/tuning.md)"
    )


def _positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clforge.tools.bench.run import run_bench

    out = Path(args.out) if args.out else _tree(args).root / "bench-results"
    ops = [o for o in args.ops.split(",") if o] if args.ops else None
    return run_bench(
        as_json=args.json,
        quick=args.quick,
        out_dir=out,
        ops=ops,
        rounds=args.rounds,
        untuned=args.untuned,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from clforge.tools.demo import run_demo

    return run_demo()


def _device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        help="auto (the default OpenCL device), a shipped profile name, or a YAML file",
    )


def _all_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--all",
        action="store_true",
        help=f"{what} every registered tree with its folder here (clforge's and the extensions' "
        "found by entry points, CLFORGE_PATH), not only this one",
    )


ROOT_HELP = (
    "the clforge tree to work on, before or after the command (default: the tree whose "
    "clforge.yaml is in the working folder or above it, else clforge's own)"
)


def build_parser() -> argparse.ArgumentParser:
    from clforge import __version__

    parser = argparse.ArgumentParser(prog="clforge", description=__doc__, epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"clforge {__version__}")
    parser.add_argument("--root", default=None, help=ROOT_HELP)
    # `--root` after the command too: SUPPRESS leaves the value given before it in place
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=argparse.SUPPRESS, help=ROOT_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kw: object) -> argparse.ArgumentParser:
        kw.setdefault("epilog", EXIT_CODES)
        return sub.add_parser(name, parents=[common], **kw)  # type: ignore[arg-type]

    g = add(
        "generate",
        help="render specs into generated/ (kernels and registry)",
        epilog="Exit status: 0 written (or up to date, with --check); 1 a spec that does not "
        "load, or with --check stale files; 2 usage errors, or clforge's own tree when "
        "clforge is installed from a wheel (site-packages is the installer's: run it in an "
        "extension's folder or with --root).",
    )
    g.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming the files if generated/ is stale",
    )
    _all_option(g, "generate")
    g.set_defaults(func=cmd_generate)

    s = add("schema", help="print the JSON Schema of the spec format")
    sg = s.add_mutually_exclusive_group()
    sg.add_argument("--write", action="store_true", help="write it to specs/schema.json")
    sg.add_argument(
        "--check", action="store_true", help="exit 1 if specs/schema.json is stale or missing"
    )
    s.set_defaults(func=cmd_schema)

    li = add(
        "lint",
        help="check spec files: every finding as file:line:col, exit 1 on errors",
        description="Check spec files and report every finding at once, sorted.",
        epilog="Exit status: 0 clean (warnings alone are clean unless --strict); 1 findings; 2 "
        "usage or environment errors (a path that does not exist, no OpenCL device for "
        "--compile). --format json: {version, files, errors, warnings, findings: [{path, line, "
        "col, severity, rule, message}]}. " + JSON_NOTE,
    )
    li.add_argument("paths", nargs="*", help="spec files or folders (default: the tree's specs/)")
    li.add_argument("--format", choices=("text", "json", "github"), default="text")
    li.add_argument(
        "--compile",
        action="store_true",
        help="also build every instance on the default OpenCL device",
    )
    li.add_argument(
        "--no-freshness", action="store_true", help="do not check that generated/ is up to date"
    )
    li.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    li.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    _all_option(li, "lint")
    li.set_defaults(func=cmd_lint)

    ls = add(
        "list",
        help="list the registry's instances",
        epilog="Exit status: 0 listed; 1 a registry that does not load; 2 usage errors (an "
        "unknown op). --json: {version: 1, "
        "instances: [{name, op, variant, dtype, layouts: {tensor: layout}, targets: [arch], "
        "priority, guard (null: none), params: {name: default}, tree}]}, sorted by name. "
        + JSON_NOTE,
    )
    ls.add_argument("op", nargs="?", help="only this op's instances")
    ls.add_argument("--json", action="store_true", help="machine-readable output (see below)")
    ls.set_defaults(func=cmd_list)

    dv = add(
        "devices",
        help="list OpenCL devices and whether each builds kernels",
        epilog="Exit status: 0 listed (with --check: a device builds kernels); 1 with --check "
        "(--check-full) when none does (fully); 2 usage errors. --json: {version: 1, devices: "
        "[{platform, platform_version, name, builds, builds_fully, problem (null: none), "
        "compiled_simd_bits, host_simd_bits (null: not compared), verdict, and the device "
        "model (null where the driver does not answer): device_type, vector_isa (avx512, avx2, "
        "avx, sse2, neon, sve; empty: not a CPU, or unknown), vector_bits, vector_registers, "
        "cores, l1d_bytes, l2_bytes, l3_bytes (0: unknown), compute_units, local_mem_bytes, "
        "max_work_group_size, sub_group_size (0: unknown), preferred_vector_widths {type: "
        "width}}], builds, builds_fully}. " + JSON_NOTE,
    )
    dv.add_argument("--json", action="store_true", help="machine-readable output (see below)")
    dv.add_argument("--check", action="store_true", help="exit 1 when no device builds kernels")
    dv.add_argument(
        "--check-full",
        action="store_true",
        help="exit 1 also when every device that builds compiles for narrower vectors than the "
        "host CPU has (e.g. AVX2 code on an AVX-512 CPU)",
    )
    dv.set_defaults(func=cmd_devices)

    pr = add("profile", help="print a device profile as YAML, or list shipped ones")
    _device_option(pr)
    pr.add_argument("--list", action="store_true", help="list the shipped profiles")
    pr.set_defaults(func=cmd_profile)

    ex = add(
        "explain",
        help="show which instance a call gets, and why not the others",
        epilog="Exit status: 0 an instance serves the call; 1 none does; 2 usage errors (an "
        "unknown op, dim, tensor, layout or dtype). " + JSON_NOTE,
    )
    ex.add_argument("op")
    ex.add_argument("--dtype", help="the call's dtype (default: the op's first)")
    ex.add_argument("--layout", help="tensor layouts, e.g. a=row,b=col (default: row)")
    ex.add_argument("--dims", help="sizes, e.g. M=1000,N=512,K=64 (unset dims stay symbolic)")
    ex.add_argument(
        "--shapes",
        help="input shapes as the spec declares them, e.g. a=1x256x256,b=1x256x256 "
        "(binds their dims as a call would)",
    )
    ex.add_argument(
        "--attrs", help="attribute values, e.g. stride_h=2,pad_h=1 (default: the spec's)"
    )
    _device_option(ex)
    ex.add_argument("--json", action="store_true", help="machine-readable output")
    ex.set_defaults(func=cmd_explain)

    b = add(
        "bench", help="speed as ratios against NumPy, ONNX Runtime and CLBlast, and raw pyopencl"
    )
    b.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    b.add_argument(
        "--quick", action="store_true", help="tiny sizes and one repeat: a check, not figures"
    )
    b.add_argument(
        "--out", help="where bench.txt, bench.json and bench.png go (default: bench-results/)"
    )
    b.add_argument("--ops", help="only the cases of these ops, e.g. exp,gelu (default: all)")
    b.add_argument(
        "--rounds",
        type=_positive_int,
        help="run the throughput bench (clforge and every peer) this many times, one after "
        "another, and report medians (default 3; --quick: 1)",
    )
    b.add_argument(
        "--untuned",
        action="store_true",
        help="time clforge a second time, beside the tuned run, with every tuning file hidden "
        "(the parameters computed for the device, as with CLFORGE_TUNING=off), and report "
        "untuned/tuned ratios",
    )
    b.set_defaults(func=cmd_bench)

    d = add("demo", help="run every op on the default device, checked against NumPy")
    d.set_defaults(func=cmd_demo)

    from clforge.tools import graph_cmd, tune_cmd, verify_cmd

    tune_cmd.add_parser(sub, _tree, parents=[common])
    verify_cmd.add_parser(sub, _tree, parents=[common])
    graph_cmd.add_parser(sub, _tree, parents=[common])
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
    except BrokenPipeError:  # `clforge ... | head`
        sys.stderr.close()
        return 0
    except (UsageError, ExtensionError) as exc:
        print(f"clforge: error: {exc}", file=sys.stderr)
        return 2
    except ClforgeError as exc:
        print(f"clforge: error: {exc}", file=sys.stderr)
        return 1
