"""Every generated instance, built on the present device and checked against NumPy.

Cases include 1, primes, sizes that are no multiple of any tile, large reductions, broadcast
inputs and empty tensors; every buffer is canary-padded so an out-of-bounds write fails the
test. Instances for other devices (GPU variants) are forced onto this one: PoCL runs any portable
OpenCL C. Instances that need an extension the device lacks are skipped, saying which.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from clforge import references
from clforge.call.binding import bind_dims, int_attrs, resolve_attrs
from clforge.core.dtypes import DTYPES
from clforge.references import Case
from clforge.registry import loader as registry_mod
from clforge.registry.loader import guard_holds

from .checking import assert_close, launch_with_canaries

REG = registry_mod.default()


def cases(op_name: str) -> tuple[Case, ...]:
    op = REG.op(op_name)
    return references.cases_of(references.reference_of(op), op.dims)


@pytest.mark.parametrize("name", sorted(REG.instances))
def test_instance_matches_numpy(runtime, name: str) -> None:
    inst = REG.instance(name)
    op = REG.op(inst.op)
    missing = [e for e in inst.requires.extensions if e not in runtime.device.extensions]
    if missing:
        pytest.skip(f"the device lacks {', '.join(missing)}")
    ref = references.reference_of(op)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    ran = 0
    for case in cases(op.name):
        shapes = {
            t.name: tuple(case.shapes.get(t.name, tuple(case.dims[d] for d in t.shape)))
            for t in op.inputs
        }
        attrs = resolve_attrs(op, case.attrs)
        dims = bind_dims(op, shapes, attrs)
        if not guard_holds(REG, inst, {**dims, **int_attrs(op, attrs)}):
            continue
        inputs = {
            t.name: references.make_input(
                rng,
                shapes[t.name],
                DTYPES[t.dtype or inst.dtype].np_dtype,
                references.domain_of(ref, t.name, dims),
            )
            for t in op.inputs
        }
        got = launch_with_canaries(runtime, inst, inputs, dims, attrs)
        want = references.expected(op, inputs, attrs)
        reduce_len = dims.get(ref.reduce, 0) if ref.reduce else 0
        for t in op.outputs:
            assert_close(
                f"{name} {case}",
                t.dtype or inst.dtype,
                got[t.name],
                want[t.name],
                reduce_len,
                ref.exact,
            )
        ran += 1
    assert ran >= 3, f"{name}: only {ran} cases satisfy its guard"


def test_every_op_names_a_reference_that_resolves() -> None:
    for op in REG.ops.values():
        assert op.reference, op.name
        assert callable(references.reference_of(op).fn), op.name


STREAMING = sorted(n for n, i in REG.instances.items() if "NT_MIN" in i.param_map)


@pytest.mark.parametrize("name", STREAMING)
def test_streaming_stores_match_numpy(runtime, name: str) -> None:
    """The streaming-store path of a kernel, taken from NT_MIN output elements on, on every case
    (NT_MIN = 0: always taken; the tuner's larger thresholds run the same code)."""
    from clforge.params.space import as_params
    from clforge.tune.verify import verify

    inst = REG.instance(name)
    verdict = verify(runtime, inst, as_params({**inst.param_map, "NT_MIN": 0}))
    assert verdict.ok, str(verdict)
