"""`clforge explain-graph FILE [--dims S=256 ...] [--verbose] [--save OUT]`: every stage of a
compiled graph (``Model.explain``). FILE is a model saved by ``Model.save`` (JSON: loaded, not
planned again) or an ONNX model (``.onnx``: imported with :func:`clforge.graph.from_onnx`, then
compiled). Each ``--dims`` makes one specialization at those sizes (``S=256``, or
``S=256,H=12`` where the graph has several dims), which the output lists with what each node
runs there and its parameters."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clforge.core.tree import Tree
from clforge.errors import UsageError

if TYPE_CHECKING:
    from clforge.graph.artifact import Model

EPILOG = (
    "Exit status: 0 explained; 1 the file is no model (or a graph error: an ONNX operator "
    "clforge lacks, a broken guard at --dims); 2 usage errors (a file that is not there, "
    "--dims that do not bind every dim)."
)


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    tree_of: Callable[[argparse.Namespace], Tree],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    p = sub.add_parser(
        "explain-graph",
        parents=list(parents),
        help="print every stage of a compiled graph (a saved model, or an ONNX file)",
        description=__doc__,
        epilog=EPILOG,
    )
    p.add_argument("file", help="a model saved by Model.save (JSON) or an .onnx file")
    p.add_argument(
        "--dims",
        action="append",
        default=[],
        metavar="NAME=SIZE[,...]",
        help="make the specialization for these sizes and show it (repeat for several)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="every node's full verdict table (each candidate)"
    )
    p.add_argument("--save", metavar="OUT", help="also save the compiled model here (JSON)")
    p.set_defaults(func=cmd_explain_graph)


def load_model(path: Path) -> Model:
    """The model in `path`: an ONNX file imported and compiled, or a saved model loaded."""
    from clforge.graph import from_onnx, load

    if not path.is_file():
        raise UsageError(f"explain-graph: no file {path}")
    if path.suffix.lower() == ".onnx":
        return from_onnx(path).compile()
    return load(path)


def bindings(model: Model, text: str) -> dict[str, int]:
    """`--dims` as the graph's every dim: the given sizes bind the inputs' axes, the guards
    solve the rest (a dim neither given nor solved is a usage error)."""
    env: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise UsageError(f"--dims: expected NAME=SIZE[,NAME=SIZE...], got {item!r}")
        env[name.strip()] = int(value)
    ir = model.plan.ir
    shapes: dict[str, tuple[int, ...]] = {}
    missing: set[str] = set()
    for vid in ir.inputs:
        v = ir.value(vid)
        lacking = set().union(*(d.names for d in v.shape)) - env.keys()
        if lacking:
            missing |= lacking
            continue
        shapes[v.name] = tuple(d.evaluate(env) for d in v.shape)
    if missing:
        raise UsageError(
            f"--dims {text}: no size for {', '.join(sorted(missing))} (graph {model.name!r} "
            "binds its dims from its inputs' axes)"
        )
    return model.plan.guards.bind(model.name, shapes)


def cmd_explain_graph(args: argparse.Namespace) -> int:
    model = load_model(Path(args.file))
    for text in args.dims:
        model.specialization(bindings(model, text))
    model.explain(sys.stdout, verbose=args.verbose)
    if args.save:
        model.save(args.save)
        print(f"saved {args.save}")
    return 0
