"""ONNX nodes as the importer reads them, and the subgraphs it takes as one clforge op.

Exporters before opset 20 write GELU without a Gelu node: ``x * 0.5 * (1 + erf(x / sqrt(2)))``
as ``Div`` (or ``Mul`` by 1/sqrt(2)) → ``Erf`` → ``Add`` 1 → ``Mul`` x → ``Mul`` 0.5 (PyTorch's
``F.gelu``), or with ``x * 0.5`` computed first (Hugging Face's ``gelu``). clforge has no erf,
and has gelu: :func:`fold_erf_gelu` turns each such chain into one ``Gelu`` node, where no
value inside it is read from outside."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class OnnxNode:
    """One ONNX node as the importer reads it."""

    op_type: str
    name: str
    inputs: tuple[str, ...]  # "" for an omitted optional input
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]

    @property
    def where(self) -> str:
        return f"{self.op_type} node {self.name!r}"


def _close(value: float | None, want: float) -> bool:
    return value is not None and math.isclose(value, want, rel_tol=1e-4)


def fold_erf_gelu(
    nodes: Sequence[OnnxNode], consts: Mapping[str, np.ndarray], outputs: Iterable[str]
) -> list[OnnxNode]:
    """`nodes` with every erf form of GELU as one ``Gelu`` node (named as the chain's last);
    `consts`: the arrays known at import (initializers, Constant outputs); `outputs`: the
    graph's (a value the graph returns is read from outside)."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs if o}
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for i in n.inputs:
            readers.setdefault(i, []).append(k)
    for o in outputs:
        readers.setdefault(o, []).append(-1)

    def scalar(name: str) -> float | None:
        v = consts.get(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def only_reader(name: str) -> int | None:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and r[0] >= 0 else None

    def node(k: int | None, op: str) -> OnnxNode | None:
        return nodes[k] if k is not None and nodes[k].op_type == op else None

    def times(n: OnnxNode, want: float) -> str | None:
        """The other input of a Mul whose one input is the constant `want`."""
        a, b = n.inputs[:2]
        if _close(scalar(b), want):
            return a
        return b if _close(scalar(a), want) else None

    replaced: dict[int, OnnxNode] = {}
    dropped: set[int] = set()
    for k, erf in enumerate(nodes):
        if erf.op_type != "Erf":
            continue
        ks = producer.get(erf.inputs[0])
        if ks is None or only_reader(nodes[ks].outputs[0]) != k:
            continue
        scaled = nodes[ks]
        if scaled.op_type == "Div" and _close(scalar(scaled.inputs[1]), math.sqrt(2.0)):
            x: str | None = scaled.inputs[0]
        elif scaled.op_type == "Mul":
            x = times(scaled, 1 / math.sqrt(2.0))
        else:
            x = None
        ka = only_reader(erf.outputs[0])
        add = node(ka, "Add")
        if x is None or ka is None or add is None:
            continue
        if not _close(
            scalar(add.inputs[1] if add.inputs[0] == erf.outputs[0] else add.inputs[0]), 1.0
        ):
            continue
        km = only_reader(add.outputs[0])
        mul = node(km, "Mul")
        if km is None or mul is None:
            continue
        other = mul.inputs[1] if mul.inputs[0] == add.outputs[0] else mul.inputs[0]
        chain = [ks, k, ka, km]
        if other == x:  # (x * (1 + erf)) * 0.5
            kl = only_reader(mul.outputs[0])
            last = node(kl, "Mul")
            if kl is None or last is None or times(last, 0.5) != mul.outputs[0]:
                continue
            chain.append(kl)
        else:  # (x * 0.5) * (1 + erf)
            kh = producer.get(other)
            half = node(kh, "Mul")
            if kh is None or half is None or times(half, 0.5) != x or only_reader(other) != km:
                continue
            chain.insert(0, kh)
            kl, last = km, mul
        replaced[kl] = OnnxNode("Gelu", last.name, (x,), last.outputs, {})
        dropped.update(c for c in chain if c != kl)
    return [replaced.get(k, n) for k, n in enumerate(nodes) if k not in dropped]


__all__ = ["OnnxNode", "fold_erf_gelu"]
