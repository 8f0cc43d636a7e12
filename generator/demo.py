"""`clforge demo`: the main job. Every op, dispatched and run on the default OpenCL device,
each result checked against NumPy; prints which instance was chosen and the error."""

from __future__ import annotations

import time

import numpy as np

from . import references as reference
from .dispatch import dispatcher
from .dtypes import DTYPES
from .selection import describe

# sizes that are 1-off from every tile, primes where it matters
SIZES = {"N": 1_000_003, "M": 257, "K": 129}
MATMUL_SIZES = {"M": 257, "N": 263, "K": 129}
CASES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("matmul", "f32", {"a": "col"}),
    ("matmul", "f64", {}),
    ("sum", "f64", {}),
    ("softmax", "f16", {}),
)


def _inputs(
    op_name: str, dtype: str, layouts: dict[str, str], rng: np.random.Generator
) -> dict[str, np.ndarray]:
    d = dispatcher()
    op = d.registry.op(op_name)
    sizes = (
        MATMUL_SIZES
        if op_name == "matmul"
        else dict(SIZES, N=1001 if len(op.dims) > 1 else SIZES["N"])
    )
    ref = reference.REFERENCES[op_name]
    out = {}
    for t in op.inputs:
        shape = tuple(sizes[dim] for dim in t.shape)
        arr = reference.make_input(
            rng, shape, DTYPES[t.dtype or dtype].np_dtype, ref.domains.get(t.name, "normal")
        )
        out[t.name] = np.asfortranarray(arr) if layouts.get(t.name) == "col" else arr
    return out


def run_demo() -> int:
    d = dispatcher()
    print(f"device: {describe(d.profile)}")
    print(f"        {d.runtime.device.platform.name} {d.runtime.device.platform.version}")
    rng = np.random.default_rng(2026)
    cases = [(op, "f32", {}) for op in sorted(d.registry.ops) if op in reference.REFERENCES]
    cases += list(CASES)
    print(
        f"{'op':9} {'dtype':5} {'inputs':30} {'chosen instance':42} {'max rel err':>11} "
        f"{'ms':>8}  check"
    )
    failures = 0
    for op_name, dtype, layouts in cases:
        inputs = _inputs(op_name, dtype, layouts, rng)
        op = d.registry.op(op_name)
        plan = d.plan_for(op, inputs, {})  # select, build, plan
        t0 = time.perf_counter()
        outs = d.execute(op, plan, inputs)
        ms = (time.perf_counter() - t0) * 1e3
        want = reference.expected(op_name, inputs)
        tol = DTYPES[dtype]
        worst = 0.0
        ok = True
        for t in op.outputs:
            got = outs[t.name].astype(np.float64)
            scale = max(float(np.abs(want[t.name]).max(initial=0.0)), 1.0)
            err = float(np.abs(got - want[t.name]).max(initial=0.0)) / scale
            worst = max(worst, err)
            ok &= bool(
                np.allclose(got, want[t.name], rtol=tol.rtol * 10, atol=tol.atol * 10 * scale)
            )
        failures += not ok
        shapes = " ".join(
            f"{k}{'x'.join(map(str, v.shape))}{'(col)' if layouts.get(k) == 'col' else ''}"
            for k, v in inputs.items()
        )
        print(
            f"{op_name:9} {dtype:5} {shapes:30} {plan.inst.name:42} {worst:11.2e} {ms:8.2f}  "
            f"{'ok' if ok else 'FAIL'}"
        )
    print(f"{len(cases) - failures} of {len(cases)} ops match NumPy")
    return 1 if failures else 0
