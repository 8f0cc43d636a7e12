"""Save and load a model's plan as JSON: records by type name (only the graph's own record
types are read back), constants as base64 of their bytes. No code is pickled or evaluated."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

import clforge
from clforge.core.atomic_file import atomic_write
from clforge.core.dtypes import DTYPES
from clforge.errors import GraphError
from clforge.graph.buffers import BufferPlan, Place, Slot
from clforge.graph.dims import Dim, parse_dim
from clforge.graph.fuse import Fused, Group
from clforge.graph.fused_kernel import FusedKernel, FusedOp
from clforge.graph.guards import AxisCheck, Binding, GuardSet, Solve
from clforge.graph.handoff import HandOff
from clforge.graph.plan import Plan
from clforge.graph.records import GraphIR, Guard, Node, Value
from clforge.graph.schedule import Schedule, Step
from clforge.graph.select import NodeSelection

FORMAT = "clforge-graph/1"
_RECORDS: dict[str, type] = {
    c.__name__: c
    for c in (
        Plan,
        GraphIR,
        Value,
        Node,
        Guard,
        GuardSet,
        Binding,
        Solve,
        AxisCheck,
        Fused,
        Group,
        FusedKernel,
        FusedOp,
        HandOff,
        NodeSelection,
        BufferPlan,
        Place,
        Slot,
        Schedule,
        Step,
    )
}


def _to(obj: Any) -> Any:
    if isinstance(obj, Dim):
        # the text for the reader, the terms for loading: a solved dim's hidden name for an
        # input axis (`x.shape[0]`, from an input of dim `2*S`) is no name the dim grammar reads
        terms = [[list(m), c] for m, c in obj.terms]
        return {"__dim__": str(obj), "terms": terms}
    if isinstance(obj, np.ndarray):
        dt = next(d for d in DTYPES.values() if d.np_dtype == obj.dtype)
        return {
            "__array__": base64.b64encode(np.ascontiguousarray(obj).tobytes()).decode("ascii"),
            "dtype": dt.name,
            "shape": list(obj.shape),
        }
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if type(obj).__name__ not in _RECORDS:  # pragma: no cover - a developer's slip
            raise GraphError(f"cannot save a {type(obj).__name__}")
        fields = {f.name: _to(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return {"__record__": type(obj).__name__, **fields}
    if isinstance(obj, dict):
        return {"__map__": [[_to(k), _to(v)] for k, v in obj.items()]}
    if isinstance(obj, (tuple, list)):
        return [_to(x) for x in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise GraphError(f"cannot save a {type(obj).__name__}: {obj!r}")


def _from(data: Any) -> Any:
    if isinstance(data, list):
        return tuple(_from(x) for x in data)
    if not isinstance(data, dict):
        return data
    if "__dim__" in data:
        return _dim(data)
    if "__array__" in data:
        dt = DTYPES[data["dtype"]].np_dtype
        raw = base64.b64decode(data["__array__"])
        arr = np.frombuffer(raw, dtype=dt).reshape(tuple(data["shape"])).copy()
        arr.setflags(write=False)
        return arr
    if "__map__" in data:
        return {_from(k): _from(v) for k, v in data["__map__"]}
    kind = data.get("__record__")
    cls = _RECORDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise GraphError(f"not a clforge graph record: {str(data)[:80]}")
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(data) - names - {"__record__"}
    if extra:
        raise GraphError(f"{kind}: unknown fields {sorted(extra)}")
    return cls(**{k: _from(v) for k, v in data.items() if k != "__record__"})


def _dim(data: dict[str, Any]) -> Dim:
    """A saved dim: its terms (names and coefficients), else its text (as older saves wrote)."""
    terms = data.get("terms")
    if terms is None:
        return parse_dim(data["__dim__"])
    if not isinstance(terms, list) or not all(
        isinstance(t, list)
        and len(t) == 2
        and isinstance(t[0], list)
        and all(isinstance(n, str) for n in t[0])
        and isinstance(t[1], int)
        and not isinstance(t[1], bool)
        for t in terms
    ):
        raise GraphError(f"dim {data['__dim__']!r}: its saved terms are not [[names], int] pairs")
    out = Dim.const(0)
    for names, coef in terms:
        term = Dim.const(coef)
        for n in names:
            term = term * Dim.name(n)
        out = out + term
    return out


def save(plan: Plan, path: Any) -> None:
    doc = {"format": FORMAT, "clforge": clforge.__version__, "plan": _to(plan)}
    atomic_write(Path(path), json.dumps(doc, indent=1, sort_keys=False) + "\n")


def load_plan(path: Any) -> Plan:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise GraphError(f"{path}: cannot read a saved graph ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphError(f"{path}: not a saved clforge graph (format {FORMAT})")
    plan = _from(doc["plan"])
    if not isinstance(plan, Plan):
        raise GraphError(f"{path}: the saved plan is not a plan")
    return plan
