"""Every value of every tunable builds on the present device and matches NumPy.

The instance tests run each instance with its spec defaults, and the tuner drops any candidate
that fails to build or to verify, so a template bug that only some tunable value renders would
otherwise show only as a candidate the tuner quietly rejects (exp's VW = 8 once did, 48 times).
For each variant: a few points of its space that together use every value of every tunable (a
greedy cover, deterministic), each run through the tuner's own canary-padded verification on
every case of the op whose guard holds, on the variant's instances in turn, so that dtypes and
layouts rotate too.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from clforge.params.space import ParamSpace
from clforge.registry import loader as registry_mod
from clforge.registry.records import Instance
from clforge.tune.verify import verify

REG = registry_mod.default()


def _families() -> dict[str, list[Instance]]:
    out: dict[str, list[Instance]] = defaultdict(list)
    for inst in REG.instances.values():
        if inst.tunables:
            out[f"{inst.op}:{inst.variant}"].append(inst)
    return {k: sorted(v, key=lambda i: (i.dtype != "f32", i.name)) for k, v in out.items()}


FAMILIES = _families()


def test_cover_uses_every_value() -> None:
    inst = REG.instance("matmul__cpu_blocked__f32__a_row__b_row")
    points, left = ParamSpace(inst).cover()
    assert not left
    used = {pair for p in points for pair in p}
    for name, values in inst.tunables:
        assert {v for v in values if (name, v) not in used} <= {inst.param_map[name]}
    for p in points:
        assert ParamSpace(inst).problem(p) is None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_tunable_value_matches_numpy(runtime, family: str) -> None:
    instances = [
        i
        for i in FAMILIES[family]
        if all(e in runtime.device.extensions for e in i.requires.extensions)
    ]
    if not instances:
        pytest.skip(f"the device lacks {', '.join(FAMILIES[family][0].requires.extensions)}")
    points, left = ParamSpace(instances[0]).cover()
    assert not left, f"{family}: no valid point uses {sorted(left)}"
    failures = []
    for k, params in enumerate(points):
        verdict = verify(runtime, instances[k % len(instances)], params)
        if not verdict.ok:
            failures.append(str(verdict))
    assert not failures, "\n".join(failures)
