"""The ONNX importer: small models built with onnx.helper, imported (clforge.graph.from_onnx),
compiled and run on the device, against ONNX Runtime's output and NumPy's, at odd sizes with
symbolic dims; a model with operators clforge lacks fails once, naming each; `clforge
explain-graph` on an .onnx file and on a saved model."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from clforge.errors import CallError, GraphError  # noqa: E402
from clforge.graph import from_onnx  # noqa: E402
from clforge.graph.onnx_import import supported_onnx_ops  # noqa: E402
from clforge.tools.cli import main  # noqa: E402

rng = np.random.default_rng(3)
F32 = TensorProto.FLOAT
SIZES = [{"S": 7, "D": 5, "B": 3}, {"S": 1, "D": 1, "B": 1}]


def rand(*shape: int, positive: bool = False) -> np.ndarray:
    a = rng.standard_normal(shape)
    return (np.abs(a) + 0.5 if positive else a).astype(np.float32)


def make(
    nodes: list[Any],
    inputs: dict[str, tuple[Any, ...]],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 18,
    out_type: int = F32,
) -> Any:
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(k, F32, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = helper.find_min_ir_version_for(m.opset_import, ignore_unknown=True)
    return m


def run_both(m: Any, feeds: dict[str, np.ndarray], compiled: Any = None) -> tuple[Any, Any]:
    """(clforge's output, ORT's) for the same feeds."""
    ort = pytest.importorskip("onnxruntime")
    compiled = compiled or from_onnx(m).compile()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return compiled(**feeds), sess.run(None, feeds)[0]


def n(op: str, inputs: list[str], out: str = "y", **attrs: Any) -> Any:
    return helper.make_node(op, inputs, [out], name=f"{op.lower()}_{out}", **attrs)


def _ln(x: np.ndarray, g: np.ndarray, b: np.ndarray, k: int, eps: float) -> np.ndarray:
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axes, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axes, keepdims=True) + eps) * g + b


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


W = rand(5, 4)
# id -> (nodes, inputs with symbolic dims, initializers, opset, NumPy's result from (feeds, s))
CASES: dict[str, tuple[list[Any], dict[str, tuple[Any, ...]], dict[str, Any], int, Any]] = {
    "gemm_trans_alpha_beta": (
        [n("Gemm", ["a", "w", "c"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        {"a": (5, "S")},
        {"w": rand(4, 5), "c": rand(4)},
        18,
        lambda f, i: 0.5 * f["a"].T @ i["w"].T + 2.0 * i["c"],
    ),
    "matmul_add_relu": (
        [n("MatMul", ["x", "w"], "m"), n("Add", ["m", "b"], "s"), n("Relu", ["s"])],
        {"x": ("B", "S", 5)},
        {"w": W, "b": rand(4)},
        18,
        lambda f, i: np.maximum(f["x"] @ i["w"] + i["b"], 0),
    ),
    "softmax_axis_opset13": (
        [n("Softmax", ["x"], axis=1)],
        {"x": ("B", "S", "D")},
        {},
        13,
        lambda f, i: _softmax(f["x"], 1),
    ),
    "softmax_opset11_flattens": (
        [n("Softmax", ["x"], axis=1)],
        {"x": ("B", "S", "D")},
        {},
        11,
        lambda f, i: _softmax(f["x"].reshape(f["x"].shape[0], -1), 1).reshape(f["x"].shape),
    ),
    "reduce_mean_axes_attribute": (
        [n("ReduceMean", ["x"], axes=[1], keepdims=0)],
        {"x": ("B", "S", "D")},
        {},
        13,
        lambda f, i: f["x"].mean(1),
    ),
    "reduce_sum_axes_input": (
        [n("ReduceSum", ["x", "axes"], keepdims=1)],
        {"x": ("B", "S", "D")},
        {"axes": np.array([-2, -1], np.int64)},
        13,
        lambda f, i: f["x"].sum((1, 2), keepdims=True),
    ),
    "reduce_max_opset18_all_axes": (
        [n("ReduceMax", ["x"], keepdims=0)],
        {"x": ("S", "D")},
        {},
        18,
        lambda f, i: f["x"].max(),
    ),
    "layer_norm_two_axes": (
        [n("LayerNormalization", ["x", "g", "b"], axis=-2, epsilon=1e-3)],
        {"x": ("S", 3, 4)},
        {"g": rand(3, 4), "b": rand(3, 4)},
        18,
        lambda f, i: _ln(f["x"], i["g"], i["b"], 2, 1e-3),
    ),
    "gelu_tanh_and_exact": (
        [n("Gelu", ["x"], "t", approximate="tanh"), n("Gelu", ["t"])],
        {"x": ("S", "D")},
        {},
        20,
        None,
    ),
    "binary_broadcast": (
        [
            n("Sub", ["x", "c"], "s"),
            n("Mul", ["s", "x"], "m"),
            n("Div", ["m", "p"], "d"),
            n("Pow", ["p", "two"], "q"),
            n("Add", ["d", "q"]),
        ],
        {"x": ("S", "D"), "p": ("S", 1)},
        {"c": rand(1), "two": np.array(2.0, np.float32)},
        18,
        lambda f, i: (f["x"] - i["c"]) * f["x"] / f["p"] + f["p"] ** 2,
    ),
    "unary_chain": (
        [
            n("Tanh", ["x"], "a"),
            n("Sigmoid", ["a"], "b"),
            n("Dropout", ["b"], "bd"),
            n("Exp", ["bd"], "c"),
            n("Reciprocal", ["c"], "r"),
            n("Neg", ["r"]),
        ],
        {"x": ("S", "D")},
        {},
        18,
        lambda f, i: -1 / np.exp(1 / (1 + np.exp(-np.tanh(f["x"])))),
    ),
    "transpose_reshape": (
        [
            n("Transpose", ["x"], "t", perm=[1, 0, 2]),
            n("Reshape", ["t", "shape"], "r"),
            n("Transpose", ["r"]),
        ],
        {"x": ("B", "S", 6)},
        {"shape": np.array([0, -1, 2], np.int64)},
        18,
        lambda f, i: f["x"].transpose(1, 0, 2).reshape(f["x"].shape[1], -1, 2).T,
    ),
    "cast_where_max_min": (
        [
            n("Where", ["cond", "x", "z"], "w"),
            n("Max", ["w", "x", "z"], "mx"),
            n("Min", ["mx", "z"], "mn"),
            n("Cast", ["mn"], to=TensorProto.DOUBLE),
        ],
        {"x": ("S", 4)},
        {"cond": np.array([True, False, True, False]), "z": rand(4)},
        18,
        lambda f, i: np.minimum(
            np.maximum(np.where(i["cond"], f["x"], i["z"]), np.maximum(f["x"], i["z"])), i["z"]
        ).astype(np.float64),
    ),
    "squeeze_unsqueeze_flatten": (
        [
            n("Unsqueeze", ["x", "ax"], "u"),
            n("Squeeze", ["u", "ax"], "s"),
            n("Flatten", ["s"], axis=1),
        ],
        {"x": ("B", "S", "D")},
        {"ax": np.array([0, 3], np.int64)},
        18,
        lambda f, i: f["x"].reshape(f["x"].shape[0], -1),
    ),
    "attention_causal": (
        [n("Attention", ["x", "x", "x"], is_causal=1)],
        {"x": ("B", 2, "S", 4)},
        {},
        23,
        None,
    ),
    "attention_additive_mask": (  # an input, broadcast over batch and heads
        [n("Attention", ["x", "x", "x", "m"])],
        {"x": ("B", 2, "S", 4), "m": ("S", "S")},
        {},
        23,
        None,
    ),
    "attention_bool_mask_causal": (  # an initializer: a keep mask broadcast over the batch
        [n("Attention", ["x", "kv", "kv", "keep"], is_causal=1)],
        {"x": ("B", 3, 3, 4), "kv": ("B", 3, 5, 4)},
        {"keep": np.array([[[[True, False, True, True, False]] * 2 + [[False] * 4 + [True]]]])},
        23,
        None,
    ),
    "conv_pools_batch_norm": (
        [
            n("Conv", ["x", "k", "kb"], "c", pads=[1, 0, 1, 0], strides=[2, 1]),
            n("BatchNormalization", ["c", "sc", "bb", "mu", "var"], "bn", epsilon=1e-3),
            n("MaxPool", ["bn"], "mp", kernel_shape=[2, 2]),
            n("AveragePool", ["mp"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
        ],
        {"x": ("B", 3, 9, 8)},
        {
            "k": rand(4, 3, 3, 2),
            "kb": rand(4),
            "sc": rand(4),
            "bb": rand(4),
            "mu": rand(4),
            "var": rand(4, positive=True),
        },
        18,
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_imported_model_matches_onnxruntime_and_numpy(case):
    nodes, inputs, inits, opset, numpy_fn = CASES[case]
    out_type = TensorProto.DOUBLE if case.startswith("cast") else F32
    m = make(nodes, inputs, inits, opset, out_type)
    compiled = from_onnx(m).compile()
    for sizes in SIZES:
        feeds = {
            k: rand(*(sizes.get(d, d) if isinstance(d, str) else d for d in shape))
            for k, shape in inputs.items()
        }
        got, want = run_both(m, feeds, compiled)
        assert got.shape == want.shape, (case, sizes)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        if numpy_fn is not None:
            np.testing.assert_allclose(got, numpy_fn(feeds, inits), rtol=1e-4, atol=1e-5)


def test_symbolic_and_unnamed_dims_become_graph_dims():
    x = helper.make_tensor_value_info("x", F32, ["batch", None, 3])
    y = helper.make_tensor_value_info("y", F32, None)
    m = helper.make_model(
        helper.make_graph([n("Relu", ["x"])], "dims", [x], [y]),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    g = from_onnx(m)
    assert [str(d) for d in g._values[0].shape] == ["batch", "x_1", "3"]
    got = g.compile()(x=rand(2, 5, 3))
    assert got.shape == (2, 5, 3)


def test_argmax_int64_becomes_i32():
    m = make(
        [n("ArgMax", ["x"], axis=1, keepdims=0)], {"x": ("S", "D")}, out_type=TensorProto.INT64
    )
    x = rand(7, 5)
    got, want = run_both(m, {"x": x})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def _erf_gelu(form: str) -> list[Any]:
    """GELU as exporters write it before opset 20: (x * (1 + erf(x / sqrt2))) * 0.5 (PyTorch's
    F.gelu), or (x * 0.5) * (1 + erf(x * (1 / sqrt2))) (Hugging Face's)."""
    if form == "torch":
        return [
            n("Div", ["x", "sqrt2"], "d"),
            n("Erf", ["d"], "e"),
            n("Add", ["e", "one"], "a"),
            n("Mul", ["x", "a"], "m"),
            n("Mul", ["m", "half"], "g"),
        ]
    return [
        n("Mul", ["x", "half"], "h"),
        n("Mul", ["inv_sqrt2", "x"], "d"),
        n("Erf", ["d"], "e"),
        n("Add", ["one", "e"], "a"),
        n("Mul", ["h", "a"], "g"),
    ]


GELU_CONSTS = {
    "sqrt2": np.array(np.sqrt(2.0), np.float32),
    "inv_sqrt2": np.array(1 / np.sqrt(2.0), np.float32),
    "one": np.array(1.0, np.float32),
    "half": np.array(0.5, np.float32),
}


@pytest.mark.parametrize("form", ["torch", "hf"])
def test_erf_gelu_is_one_gelu(form):
    nodes = [*_erf_gelu(form), n("Relu", ["g"])]
    m = make(nodes, {"x": ("S", "D")}, GELU_CONSTS)
    compiled = from_onnx(m).compile()
    assert [node.op for node in compiled.plan.ir.nodes] == ["gelu", "relu"]
    for sizes in SIZES:
        x = rand(sizes["S"], sizes["D"])
        got, want = run_both(m, {"x": x}, compiled)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_erf_outside_gelu_stays_missing():
    # the erf's input is read twice: no chain to fold, so Erf is missing, with the hint
    nodes = [*_erf_gelu("torch"), n("Add", ["g", "d"])]
    m = make(nodes, {"x": ("S", "D")}, GELU_CONSTS)
    with pytest.raises(GraphError, match=r"Erf \('erf_e'\).*Erf is taken only within GELU"):
        from_onnx(m)
    wrong = dict(GELU_CONSTS, half=np.array(0.25, np.float32))  # not GELU: 0.25
    with pytest.raises(GraphError, match=r"no op for 1 ONNX operator.*Erf"):
        from_onnx(make(_erf_gelu("torch"), {"x": ("S", "D")}, wrong))


def test_missing_ops_are_named_once_with_their_nodes():
    nodes = [
        helper.make_node("Erf", ["x"], ["e"], name="erf_a"),
        helper.make_node("Relu", ["e"], ["r"], name="ok"),
        helper.make_node("Erf", ["r"], ["e2"], name="erf_b"),
        helper.make_node("TopK", ["e2", "k"], ["y", "i"], name="top"),
    ]
    m = make(nodes, {"x": ("S", "D")}, {"k": np.array([1], np.int64)})
    with pytest.raises(GraphError) as info:
        from_onnx(m)
    msg = str(info.value)
    assert "2 ONNX operators" in msg
    assert "Erf ('erf_a', 'erf_b')" in msg
    assert "TopK ('top')" in msg
    assert "Relu" in msg  # in the list of what the importer takes, not among the missing


def test_refusals_name_the_node():
    m = make([n("Reshape", ["x", "s"])], {"x": ("S", "D"), "s": (2,)}, opset=18)  # a computed shape
    with pytest.raises(GraphError, match=r"Reshape node 'reshape_y': the shape .* initializer"):
        from_onnx(m)
    m = make(
        [n("Conv", ["x", "w"], pads=[1, 0, 0, 0])], {"x": ("B", 1, 5, 5)}, {"w": rand(1, 1, 1, 1)}
    )
    with pytest.raises(GraphError, match="pads both ends of an axis alike"):
        from_onnx(m)
    m = make([n("MatMul", ["x", "w"])], {"x": ("S", 3)}, {"w": rand(4, 2)})  # K: 3 against 4
    with pytest.raises(GraphError, match=r"matmul: dim K is 3 .* \(ONNX MatMul node 'matmul_y'\)"):
        from_onnx(m)
    with pytest.raises(GraphError, match="not a readable ONNX model"):
        from_onnx(__file__)


def test_without_the_onnx_package_the_error_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ModuleNotFoundError
    with pytest.raises(GraphError, match=r"needs the onnx package: pip install 'clforge\[onnx\]'"):
        from_onnx("model.onnx")


def test_the_importer_takes_what_it_says():
    assert {"Gemm", "LayerNormalization", "Attention", "Softmax", "Where"} <= set(
        supported_onnx_ops()
    )


def test_explain_graph_on_onnx_and_saved_model(tmp_path, capsys):
    d = 6
    nodes = [
        n("LayerNormalization", ["x", "g", "b"], "h"),
        n("Gemm", ["h", "w", "c"], "z"),
        n("Softmax", ["z"]),
    ]
    m = make(nodes, {"x": ("S", d)}, {"g": rand(d), "b": rand(d), "w": rand(d, 3), "c": rand(3)})
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    saved = tmp_path / "m.json"
    cmd = ["explain-graph"]
    assert main([*cmd, str(path), "--dims", "S=5", "--dims", "S=11", "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    for stage in ("1. capture", "2. shapes and guards", "5. select", "6. plan buffers"):
        assert stage in out
    assert "S=5: slots" in out and "S=11: slots" in out
    assert main([*cmd, str(saved), "--dims", "S=3"]) == 0
    out = capsys.readouterr().out
    assert "S=3: slots" in out and "S=5: slots" not in out
    assert main([*cmd, str(saved), "--dims", "T=3"]) == 2
    assert "no size for S" in capsys.readouterr().err
    assert main([*cmd, str(tmp_path / "nope.onnx")]) == 2
    assert "no file" in capsys.readouterr().err
    bad = make([n("Erf", ["x"])], {"x": ("S",)})
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    assert main([*cmd, str(tmp_path / "bad.onnx")]) == 1
    assert "clforge has no op for 1 ONNX operator" in capsys.readouterr().err


def _heads(x: str, out: str, perm: list[int]) -> list[Any]:
    """`x` [batch, seq, 16] to heads as a torch exporter writes `x.view(B, S, 4, 4)`: Shape →
    Gather → Unsqueeze → Concat → Reshape, then Transpose by `perm`."""
    return [
        helper.make_node("Shape", [x], [f"{out}_s"], name=f"shape_{out}"),
        helper.make_node("Gather", [f"{out}_s", "i0"], [f"{out}_b"], name=f"gather_b_{out}"),
        helper.make_node("Gather", [f"{out}_s", "i1"], [f"{out}_t"], name=f"gather_t_{out}"),
        helper.make_node("Unsqueeze", [f"{out}_b", "ax0"], [f"{out}_bu"], name=f"unsq_b_{out}"),
        helper.make_node("Unsqueeze", [f"{out}_t", "ax0"], [f"{out}_tu"], name=f"unsq_t_{out}"),
        helper.make_node(
            "Concat",
            [f"{out}_bu", f"{out}_tu", "heads", "hd"],
            [f"{out}_shape"],
            axis=0,
            name=f"concat_{out}",
        ),
        helper.make_node("Reshape", [x, f"{out}_shape"], [f"{out}_r"], name=f"reshape_{out}"),
        helper.make_node("Transpose", [f"{out}_r"], [out], perm=perm, name=f"transpose_{out}"),
    ]


def exported_attention() -> Any:
    """Multi-head self-attention as torch.onnx writes it for symbolic batch and sequence: the
    heads split and merged by reshapes whose target shapes are computed in the graph (the merge
    from a Slice of the context's Shape and a Mul of its last two dims), the scale from a Div of
    the model dim by the head count, a padding mask input added as BERT's exporters write it."""
    nodes: list[Any] = [
        n("MatMul", ["x", "wq"], "q"),
        n("MatMul", ["x", "wk"], "k"),
        n("MatMul", ["x", "wv"], "v"),
        *_heads("q", "qh", [0, 2, 1, 3]),
        *_heads("k", "kh", [0, 2, 3, 1]),
        *_heads("v", "vh", [0, 2, 1, 3]),
        n("MatMul", ["qh", "kh"], "scores"),
        helper.make_node("Shape", ["x"], ["xs"], name="shape_x", start=2),
        n("Div", ["xs", "heads"], "hd_dyn"),  # 16 / 4, an int at import
        n("Cast", ["hd_dyn"], "hd_f", to=TensorProto.FLOAT),
        n("Sqrt", ["hd_f"], "sq"),
        n("Div", ["scores", "sq"], "scaled"),
        n("Unsqueeze", ["mask", "ax12"], "m4"),  # BERT's padding mask: (1 - m) * -10000
        n("Sub", ["f1", "m4"], "inv"),
        n("Mul", ["inv", "big"], "madd"),
        n("Add", ["scaled", "madd"], "masked"),
        n("Softmax", ["masked"], "p", axis=-1),
        n("MatMul", ["p", "vh"], "ctx"),
        n("Transpose", ["ctx"], "ctx_t", perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["ctx_t"], ["cs"], name="shape_ctx"),
        n("Slice", ["cs", "s0", "s2", "ax0"], "lead"),
        n("Gather", ["cs", "i2"], "nh"),
        n("Gather", ["cs", "i3"], "dh"),
        n("Mul", ["nh", "dh"], "width"),
        n("Unsqueeze", ["width", "ax0"], "width_u"),
        n("Concat", ["lead", "width_u"], "merged", axis=0),
        n("Reshape", ["ctx_t", "merged"], "ctx_m"),
        n("MatMul", ["ctx_m", "wo"]),
    ]
    i64 = {k: np.array(v, np.int64) for k, v in {"i0": 0, "i1": 1, "i2": 2, "i3": 3}.items()}
    inits = {
        **{w: rand(16, 16) for w in ("wq", "wk", "wv", "wo")},
        **i64,
        "ax0": np.array([0], np.int64),
        "heads": np.array([4], np.int64),
        "hd": np.array([4], np.int64),
        "s0": np.array([0], np.int64),
        "s2": np.array([2], np.int64),
        "ax12": np.array([1, 2], np.int64),
        "f1": np.array(1.0, np.float32),
        "big": np.array(-10000.0, np.float32),
    }
    return make(nodes, {"x": ("batch", "seq", 16), "mask": ("batch", "seq")}, inits, opset=18)


def test_exported_attention_with_computed_reshapes():
    """Shape subgraphs are folded at import into the graph's dims: the reshapes are views to
    [batch, seq, 4, 4] and [batch, seq, 16], the model runs against ONNX Runtime at odd sizes."""
    m = exported_attention()
    g = from_onnx(m)
    shapes = {v.name: str(list(map(str, v.shape))) for v in g._values}
    assert shapes["reshape"] == "['batch', 'seq', '4', '4']"
    assert "['batch', 'seq', '16']" in shapes.values()
    ops = [node.op for node in g.ir().nodes]
    assert not {"Shape", "Gather", "Concat"} & set(ops)
    compiled = g.compile()
    for b, s in ((1, 1), (3, 7), (2, 13)):
        mask = (rng.random((b, s)) > 0.3).astype(np.float32)
        mask[:, 0] = 1
        got, want = run_both(m, {"x": rand(b, s, 16), "mask": mask}, compiled)
        assert got.shape == want.shape == (b, s, 16)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_shape_chains_that_cannot_fold_name_the_node():
    i64 = {"i0": np.array(0, np.int64), "ax0": np.array([0], np.int64)}
    # a Div of a symbolic dim that is not whole for every size
    m = make(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape_x"),
            n("Gather", ["s", "i0"], "b"),
            n("Div", ["b", "three"], "third"),
            n("Unsqueeze", ["third", "ax0"], "tu"),
            n("Concat", ["tu", "minus"], "target", axis=0),
            n("Reshape", ["x", "target"]),
        ],
        {"x": ("S", 6)},
        {**i64, "three": np.array(3, np.int64), "minus": np.array([-1], np.int64)},
    )
    with pytest.raises(GraphError, match=r"Div node 'div_third': cannot fold .* S by 3 is not"):
        from_onnx(m)
    # a target shape computed from data
    m = make(
        [n("Relu", ["x"], "r"), n("Gather", ["r", "i0"], "g"), n("Reshape", ["x", "g"])],
        {"x": ("S", 6)},
        i64,
    )
    with pytest.raises(GraphError, match=r"Gather node 'gather_g': input 'r' is a tensor"):
        from_onnx(m)
    # a symbolic shape used as data
    m = make(
        [helper.make_node("Shape", ["x"], ["s"], name="shape_x"), n("Cast", ["s"], to=F32)],
        {"x": ("S", 6)},
    )
    with pytest.raises(GraphError, match=r"Cast node 'cast_y': input 's' is the shape \[S, 6\]"):
        from_onnx(m)


END = np.iinfo(np.int64).max  # what exporters write for "to the end"


def test_slices_unsqueeze_and_expand_on_tensors_are_views():
    """Slice (columns of a fused projection, from the end, rows past the first), Unsqueeze and
    an Expand that only adds an axis of 1 import as views (no kernel of their own), checked
    against ONNX Runtime and NumPy at odd sizes."""
    i64 = {
        k: np.array(v, np.int64)
        for k, v in {
            "c4": [4],
            "c8": [8],
            "m4": [-4],
            "end": [END],
            "one": [1],
            "ax1": [1],
            "axm1": [-1],
            "ax0": [0],
            "e": [1, 1, 4],
        }.items()
    }
    nodes = [
        n("Slice", ["x", "c4", "c8", "ax1"], "mid"),  # x[:, 4:8]
        n("Slice", ["x", "m4", "end", "axm1"], "last"),  # x[:, -4:]
        n("Add", ["mid", "last"], "sum"),
        n("Slice", ["sum", "one", "end", "ax0"], "rows"),  # sum[1:]
        n("Unsqueeze", ["rows", "ax0"], "u"),
        n("Expand", ["u", "e"]),
    ]
    m = make(nodes, {"x": ("S", 12)}, i64)
    g = from_onnx(m)
    assert [node.op for node in g.ir().nodes] == ["slice", "slice", "add", "slice", "reshape"]
    compiled = g.compile()
    for s in (2, 5, 13):
        x = rand(s, 12)
        got, want = run_both(m, {"x": x}, compiled)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, (x[:, 4:8] + x[:, -4:])[None, 1:], rtol=1e-6)


def test_a_slice_from_the_end_of_a_symbolic_axis_is_guarded():
    """`x[-3:]` of a symbolic axis: ONNX clamps the start at 0 where the axis is shorter, a
    graph's view needs S >= 3, checked by the call's guards."""
    inits = {"m3": np.array([-3], np.int64), "end": np.array([END], np.int64)}
    m = make([n("Slice", ["x", "m3", "end"])], {"x": ("S", 5)}, inits)
    compiled = from_onnx(m).compile()
    x = rand(7, 5)
    np.testing.assert_allclose(compiled(x=x), x[-3:])
    with pytest.raises(CallError, match=r"guard 0 <= S \+ -3 .* fails for S=2"):
        compiled(x=rand(2, 5))


def test_copies_are_refused_naming_the_node():
    inits = {"e": np.array([3, 5], np.int64), "s": np.array([0], np.int64)}
    m = make([n("Expand", ["x", "e"])], {"x": (1, 5)}, inits)
    with pytest.raises(GraphError, match=r"Expand node 'expand_y': expanding x .* would copy it"):
        from_onnx(m)
    inits = {"s": np.array([0], np.int64), "t": np.array([4], np.int64), "two": np.array([2])}
    m = make([n("Slice", ["x", "s", "t", "s", "two"])], {"x": ("S", 5)}, inits)
    with pytest.raises(GraphError, match=r"Slice node 'slice_y': step 2 along axis 0"):
        from_onnx(m)
