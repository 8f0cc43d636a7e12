"""What the bench sends a peer's process and what comes back, as JSON.

A request describes one case: the op, its dtype, the sizes of its dims, resolved attributes and
each input's shape, dtype and value domain, so that a peer makes the same inputs as clforge
(:func:`host_inputs`) without the registry or an OpenCL device. A peer answers each request
with an outcome: the median seconds of one call, or a note that says why there is no figure
(the peer has no such op, or it failed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

from clforge import references
from clforge.core.dtypes import DTYPES
from clforge.registry.records import OpSig


class InputSpec(TypedDict):
    shape: list[int]
    dtype: str
    domain: str


class Request(TypedDict):
    op: str
    reference: str  # the op's `module:name` (the NumPy peer computes it)
    roots: list[str]  # where an extension's reference module imports from
    dtype: str
    sizes: dict[str, int]
    attrs: dict[str, float | int]
    inputs: dict[str, InputSpec]
    layouts: dict[str, str]  # clforge's memory layouts other than row-major (peers: row-major)


class Outcome(TypedDict):
    seconds: float | None
    note: NotRequired[str]  # why there is no figure, or which implementation gave it


class Timing(TypedDict):
    repeats: int
    target_s: float  # how long one repeat should last (calls per repeat are calibrated)


class Answer(TypedDict):
    """A peer process's whole reply: `available` False (with `reason`) when the peer is not
    installed or does not work here."""

    available: bool
    reason: NotRequired[str]
    version: NotRequired[str]
    outcomes: NotRequired[list[Outcome]]


def request(
    op: OpSig,
    dtype: str,
    sizes: dict[str, int],
    attrs: dict[str, float | int],
    roots: Sequence[Path] = (),
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    layouts: Mapping[str, str] | None = None,
) -> Request:
    """A case for a peer's process; `roots`: the trees' folders, for an extension's reference;
    `shapes`: inputs whose shape is not the full one (a broadcast input, e.g. a one-element
    attention mask, which is what an eager call without a mask passes); `layouts`: the memory
    layouts clforge's side gives inputs (e.g. conv2d's x channels-last), which a peer may
    follow or not (its note says so); the arrays themselves are always the logical ones."""
    ref = references.reference_of(op, roots)
    shapes = shapes or {}
    return {
        "op": op.name,
        "reference": op.reference or "",
        "roots": [str(r) for r in roots],
        "dtype": dtype,
        "sizes": dict(sizes),
        "attrs": dict(attrs),
        "inputs": {
            t.name: {
                "shape": list(shapes.get(t.name, [sizes[d] for d in t.shape])),
                "dtype": t.dtype or dtype,
                "domain": references.domain_of(ref, t.name, sizes),
            }
            for t in op.inputs
        },
        "layouts": dict(layouts or {}),
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


def skipped(note: str) -> Outcome:
    return {"seconds": None, "note": note}


def unavailable(exc: ImportError) -> Answer:
    """The answer of a peer whose package cannot be imported: not installed, or installed
    without the library it needs (pyclblast without libclblast)."""
    if isinstance(exc, ModuleNotFoundError):
        return {"available": False, "reason": "not installed"}
    return {"available": False, "reason": f"cannot be loaded: {first_line(exc)}"}


def first_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message, for a note in a table."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:160]}" if lines else type(exc).__name__
