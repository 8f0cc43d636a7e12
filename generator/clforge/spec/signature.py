"""An op's signature record (what the registry and the call side know of an op) from its spec."""

from __future__ import annotations

from clforge.registry.records import AttrSig, OpSig, TensorSig
from clforge.spec.model import OpSpec


def signature_of(spec: OpSpec, path: str) -> OpSig:

    def tensors(group: dict) -> tuple[TensorSig, ...]:
        return tuple(
            TensorSig(
                name, t.shape, t.dtype, spec.layouts_of(name), t.broadcast, t.optional, t.fill
            )
            for name, t in group.items()
        )

    return OpSig(
        name=spec.op,
        doc=spec.doc,
        dims=spec.dims,
        inputs=tensors(spec.inputs),
        outputs=tensors(spec.outputs),
        attrs=tuple(
            AttrSig(n, a.type, a.default, tuple(a.names.items())) for n, a in spec.attrs.items()
        ),
        dtypes=spec.dtypes,
        spec=path,
        derived=tuple(spec.derived.items()),
        checks=tuple((c.expr, c.message) for c in spec.checks),
        call=spec.call,
        reference=spec.reference,
        expr=_expr(spec),
    )


def _expr(spec: OpSpec) -> tuple[tuple[str, str], ...]:
    if spec.expr is None:
        return ()
    if isinstance(spec.expr, str):
        return (("float", spec.expr), ("int", spec.expr))
    return (("float", spec.expr.float), ("int", spec.expr.int))
