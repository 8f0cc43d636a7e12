"""What the bench sends a peer's process and what comes back, as JSON.

A request describes one case: the op, its dtype, the sizes of its dims, resolved attributes and
each input's shape, dtype and value domain, so that a peer makes the same inputs as clforge
(:func:`host_inputs`) without the registry or an OpenCL device, and the call a peer's user
writes (:class:`NaturalSpec`: the natural shapes, axis and permutation; :func:`natural_inputs`).
A peer's process first says whether it is available (:class:`Hello`), then answers each request
(:class:`Job`, one line each) with an outcome: the median seconds of one call, or a note that says
why there is no figure (the peer has no such op, or it failed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

from clforge import references
from clforge.core.dtypes import DTYPES
from clforge.registry.records import OpSig
from clforge.tools.bench.natural import Natural


class InputSpec(TypedDict):
    shape: list[int]
    dtype: str
    domain: str


class NaturalSpec(TypedDict):
    """The case as a peer's user holds it (:class:`clforge.tools.bench.natural.Natural`, resolved):
    every input's shape, the axis of an axis op, a transpose's permutation."""

    shapes: dict[str, list[int]]
    axis: int | None
    perm: list[int] | None


class Request(TypedDict):
    op: str
    reference: str  # the op's `module:name` (the NumPy peer computes it)
    roots: list[str]  # where an extension's reference module imports from
    dtype: str
    sizes: dict[str, int]
    attrs: dict[str, float | int]
    inputs: dict[str, InputSpec]
    layouts: dict[str, str]  # clforge's memory layouts other than row-major (peers: row-major)
    natural: NaturalSpec


class Outcome(TypedDict):
    seconds: float | None
    note: NotRequired[str]  # why there is no figure, or which implementation gave it
    ways: NotRequired[dict[str, float | None]]  # a peer's ways of running it, timed: the fastest


class Timing(TypedDict):
    repeats: int
    target_s: float  # how long one repeat should last (calls per repeat are calibrated)


class Hello(TypedDict):
    """A peer process's first line: `available` False (with `reason`) when the peer is not
    installed or does not work here, else its version; an outcome per request follows."""

    available: bool
    reason: NotRequired[str]
    version: NotRequired[str]


class Job(TypedDict):
    """A line a peer's process reads: one case to time."""

    request: Request
    timing: Timing


def request(
    op: OpSig,
    dtype: str,
    sizes: dict[str, int],
    attrs: dict[str, float | int],
    roots: Sequence[Path] = (),
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    layouts: Mapping[str, str] | None = None,
    natural: Natural | None = None,
) -> Request:
    """A case for a peer's process; `roots`: the trees' folders, for an extension's reference;
    `shapes`: inputs whose shape is not the full one (a broadcast input, e.g. a one-element
    attention mask, which is what an eager call without a mask passes); `layouts`: the memory
    layouts clforge's side gives inputs (e.g. conv2d's x channels-last), which a peer may
    follow or not (its note says so); the arrays themselves are always the logical ones;
    `natural`: how a peer's user holds the inputs (default: their canonical shapes)."""
    ref = references.reference_of(op, roots)
    shapes = shapes or {}
    natural = natural or Natural()
    canonical = {t.name: list(shapes.get(t.name, [sizes[d] for d in t.shape])) for t in op.inputs}
    natural_shapes = {
        name: [sizes[d] for d in natural.dims[name]] if name in natural.dims else shape
        for name, shape in canonical.items()
    }
    for name, shape in natural_shapes.items():
        if math.prod(shape) != math.prod(canonical[name]):
            raise ValueError(
                f"{op.name}: the natural shape {shape} of {name} does not hold its "
                f"{math.prod(canonical[name])} elements (canonical shape {canonical[name]})"
            )
    return {
        "op": op.name,
        "reference": op.reference or "",
        "roots": [str(r) for r in roots],
        "dtype": dtype,
        "sizes": dict(sizes),
        "attrs": dict(attrs),
        "inputs": {
            t.name: {
                "shape": canonical[t.name],
                "dtype": t.dtype or dtype,
                "domain": references.domain_of(ref, t.name, sizes),
            }
            for t in op.inputs
        },
        "layouts": dict(layouts or {}),
        "natural": {
            "shapes": natural_shapes,
            "axis": natural.axis,
            "perm": list(natural.perm) if natural.perm is not None else None,
        },
    }


def host_inputs(req: Request, seed: int = 0) -> dict[str, np.ndarray]:
    """The request's inputs as NumPy arrays, row-major, drawn as the tuner's and the tests'
    inputs are (:func:`clforge.tune.measure.device_inputs`)."""
    rng = np.random.default_rng(seed)
    return {
        name: references.make_input(
            rng, tuple(spec["shape"]), DTYPES[spec["dtype"]].np_dtype, spec["domain"]
        )
        for name, spec in req["inputs"].items()
    }


def natural_inputs(req: Request, seed: int = 0) -> dict[str, np.ndarray]:
    """:func:`host_inputs` in the shapes a peer's user holds them (the same row-major data:
    reshaping drops or splits axes, it moves nothing)."""
    shapes = req["natural"]["shapes"]
    return {k: v.reshape(shapes[k]) for k, v in host_inputs(req, seed).items()}


def skipped(note: str) -> Outcome:
    return {"seconds": None, "note": note}


def unavailable(exc: ImportError) -> Hello:
    """The answer of a peer whose package cannot be imported: not installed, or installed
    without the library it needs (pyclblast without libclblast)."""
    if isinstance(exc, ModuleNotFoundError):
        return {"available": False, "reason": "not installed"}
    return {"available": False, "reason": f"cannot be loaded: {first_line(exc)}"}


def first_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message, for a note in a table."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:160]}" if lines else type(exc).__name__
