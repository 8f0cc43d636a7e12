"""Every generated instance, built on the present device and checked against NumPy.

Shapes include 1, primes, sizes that are no multiple of any tile, large reductions and empty
tensors; every buffer is canary-padded so an out-of-bounds write fails the test. Instances for
other devices (GPU variants) are forced onto this one: PoCL runs any portable OpenCL C.
"""

from __future__ import annotations

import numpy as np
import pytest

from generator import reference
from generator import registry as registry_mod
from generator.dtypes import DTYPES
from generator.runtime import guard_holds

from .checking import assert_close, launch_with_canaries

SHAPES: dict[int, list[tuple[int, ...]]] = {
    1: [(1,), (7,), (130,), (8195,), (0,)],
    2: [(1, 1), (7, 13), (31, 130), (3, 100_003), (9, 8), (13, 1000), (0, 5), (5, 0)],
    3: [(1, 1, 1), (7, 13, 31), (67, 130, 33), (6, 16, 8), (13, 17, 0), (0, 5, 7)],
}
REDUCED = {"sum": "N", "softmax": "N", "matmul": "K"}

REG = registry_mod.default()


@pytest.mark.parametrize("name", sorted(REG.instances))
def test_instance_matches_numpy(runtime, name: str) -> None:
    inst = REG.instance(name)
    op = REG.op(inst.op)
    ref = reference.REFERENCES[op.name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    ran = 0
    for sizes in SHAPES[len(op.dims)]:
        dims = dict(zip(op.dims, sizes, strict=True))
        if not guard_holds(REG, inst, dims):
            continue
        inputs = {
            t.name: reference.make_input(
                rng,
                tuple(dims[d] for d in t.shape),
                DTYPES[t.dtype or inst.dtype].np_dtype,
                ref.domains.get(t.name, "normal"),
            )
            for t in op.inputs
        }
        got = launch_with_canaries(runtime, inst, inputs, dims)
        want = reference.expected(op.name, inputs)
        reduce_len = dims.get(REDUCED.get(op.name, ""), 0)
        for t in op.outputs:
            assert_close(name, inst.dtype, got[t.name], want[t.name], reduce_len)
        ran += 1
    assert ran >= 3, f"{name}: only {ran} shapes satisfy its guard"


def test_every_op_has_a_reference() -> None:
    assert sorted(REG.ops) == sorted(set(REG.ops) & set(reference.REFERENCES))
