"""The bench's model cases (issue 35 point 6): the block and the MLP built directly and through
the ONNX importer give the same plan; every way of running them (compiled graph, imported graph,
eager calls, NumPy, ONNX Runtime) computes the same thing at odd sizes; the model bench runs its
rounds with every side and checks the outputs against each other."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl.array as cla
import pytest

from clforge.call.dispatcher import dispatcher
from clforge.tools.bench import models as M
from clforge.tools.bench.model_run import SIDES, model_text, run_models

onnx = pytest.importorskip("onnx")


@pytest.mark.parametrize("kind", M.MODEL_KINDS)
def test_built_directly_and_imported_give_the_same_plan(kind):
    from clforge.graph import from_onnx

    case = next(c for c in M.MODEL_CASES if c.kind == kind)
    w = M.weights(case)
    direct = M.build_graph(case, w).compile()
    imported = from_onnx(M.build_onnx(case, w)).compile()
    for c in M.MODEL_CASES:
        if c.kind == kind:  # the bench's sizes: each model's specializations at S=32, S=256
            for model in (direct, imported):
                model.specialization({"S": c.s})
    text = direct.explain(file=None)
    assert text == imported.explain(file=None)
    assert "S=32: slots" in text and "S=256: slots" in text
    ops = [node.op for node in direct.plan.ir.nodes]
    if kind == "block":
        assert ops.count("layer_norm") == 2 and ops.count("attention") == 1
        # q, k and v one matmul (sibling gemms merged), the heads permutes folded into
        # attention's layouts
        assert ops.count("gemm") == 3 and ops.count("matmul") == 1 and "permute" not in ops
    else:
        assert ops == ["gemm", "gelu", "gemm"]


@pytest.mark.parametrize("kind", M.MODEL_KINDS)
@pytest.mark.parametrize("s", [1, 5, 17])
def test_every_way_computes_the_same_model(kind, s):
    ort = pytest.importorskip("onnxruntime")
    from clforge.graph import from_onnx

    case = dataclasses.replace(M.ModelCase(kind, s).at(True), s=s)
    w, x = M.weights(case), M.model_input(case)
    want = M.numpy_forward(case, w)(x)
    q = dispatcher().runtime.queue
    eager = M.eager_calls(case, {k: cla.to_device(q, v) for k, v in w.items()})
    sess = ort.InferenceSession(M.build_onnx(case, w).SerializeToString())
    got = {
        "graph": M.build_graph(case, w).compile()(x),
        "unfused": M.build_graph(case, w).compile(fusion=False)(x),
        "imported": from_onnx(M.build_onnx(case, w)).compile()(x),
        "eager": eager(cla.to_device(q, x)).get(),
        "ort": sess.run(None, {"x": x})[0],
    }
    for way, y in got.items():
        assert y.shape == (s, case.d), way
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=way)
    # the residual path keeps x: a model that dropped a branch would still be close to x
    assert np.abs(want - x).max() > 1e-3


def test_quick_cases_are_distinct_and_small():
    quick = M.selected(True)
    assert len({c.title for c in quick}) == len(M.MODEL_CASES) == 4
    assert all(c.d == 64 and c.s in (4, 32) for c in quick)
    assert [c.kind for c in M.selected(False, ["mlp"])] == ["mlp", "mlp"]


@pytest.mark.slow
def test_the_model_bench_runs_every_side_and_checks_outputs():
    pytest.importorskip("onnxruntime")
    cases = M.selected(True)
    rows = run_models(dispatcher(), cases, {"repeats": 1, "target_s": 0.001}, 1, 300.0)
    assert [r["case"] for r in rows] == [c.title for c in cases]
    for r in rows:
        assert r["agree"], r
        cells = r["sides"]
        assert set(cells) == set(SIDES)
        for side in SIDES:
            assert cells[side]["ms"] and cells[side]["ms"] > 0, (side, cells[side])
        g, u, e = cells["graph"], cells["unfused"], cells["eager"]
        # the graph fuses (gelu and the residual adds run in their gemm's kernel): fewer kernels
        # than the same graph unfused (the eager calls may pick other gemm instances: a
        # direct kernel where the graph, packing its constant weights once, runs the routine)
        assert e["kernels"] >= (3 if "mlp" in r["case"] else 12) and g["kernels"] < u["kernels"]
        assert g["host_us_per_kernel"] > 0 and e["host_us_per_kernel"] > 0
        assert r["graph_vs_eager"] > 0 and r["graph_vs_ort"] > 0 and r["unfused_vs_eager"] > 0
        assert g["waited_ms"] > 0 and r["graph_waited_vs_ort"] > 0  # the graph's calls waited for
        assert "waited_ms" not in cells["onnxruntime"] or cells["onnxruntime"]["waited_ms"] is None
    text = model_text(rows, 1)
    assert all(c.title in text for c in cases)
    assert text.count("agree") == len(cases) + 1  # each row, and the header's explanation
