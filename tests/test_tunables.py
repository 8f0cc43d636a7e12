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


def _pragma_then_loop(source: str) -> list[str]:
    """The loop header after each `#pragma unroll` of `source`."""
    lines = source.splitlines()
    return [lines[i + 1].strip() for i, line in enumerate(lines) if "#pragma unroll" in line]


def test_reduction_loops_are_unrolled_only_where_their_body_does_not_branch(runtime) -> None:  # type: ignore[no-untyped-def]
    """_common/unroll.cl.j2: the micro-kernel's loops take the unroll hint where it measured
    faster, and never around a body that branches (the BLIS order's prefetch lost 40% unrolled,
    conv2d's padded taps and pointwise prefetch 20-60%)."""

    def source(name: str, **params: int) -> str:
        inst = REG.instance(name)
        return runtime.source(inst, tuple(sorted({**inst.param_map, **params}.items())))

    packed = "matmul__cpu_packed__f32__a_row__b_row"
    assert _pragma_then_loop(source(packed, PF=0, RB=1, KC=1024)) == [
        "for (int k_ = kc_; k_ < kend_; ++k_) {"
    ]
    assert _pragma_then_loop(source(packed, PF=2)) == []  # the prefetch branches in the loop
    # cpu_blocked: the whole-vector path only (the last panel's gathers stay rolled)
    assert _pragma_then_loop(source("gemm__cpu_blocked__f32__a_row__b_row")) == [
        "for (int k_ = 0; k_ < K; ++k_) {"
    ]
    assert _pragma_then_loop(source("attention__cpu_flash__f32__q_row__k_row__v_row__o_row")) == [
        "for (int d_ = 0; d_ < D; ++d_) {",
        "for (int jj_ = 0; jj_ < nj_; ++jj_) {",
    ]
    for conv in ("cpu_packed", "cpu_rows", "cpu_im2col"):
        assert _pragma_then_loop(source(f"conv2d__{conv}__f32__x_row__y_row")) == [], conv
