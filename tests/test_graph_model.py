"""Compiled graphs run: a small MLP and a layer_norm → matmul → softmax chain against NumPy at
odd sizes, device arrays in and out, guards that hold and that break, specializations, and a
saved model loaded and run in a fresh process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyopencl.array as cla
import pytest

import clforge
from clforge import Graph, TensorType, dispatcher
from clforge.errors import CallError, GraphError

rng = np.random.default_rng(35)
ROOT = Path(__file__).resolve().parents[1]
_erf = np.vectorize(math.erf)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def close(a, b, tol=2e-4):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


D, H, OUT = 7, 13, 5
W1, B1, W2 = rand(D, H), rand(H), rand(H, OUT)


def mlp() -> Graph:
    g = Graph("mlp")
    x = g.input("x", TensorType("f32", ("S", D)))
    h = g.ops.gelu(g.ops.add(g.ops.matmul(x, g.constant(W1, "w1")), g.constant(B1, "b1")))
    g.output(g.ops.matmul(h, g.constant(W2, "w2")))
    return g


@pytest.fixture(scope="module")
def mlp_model():
    return mlp().compile()


@pytest.mark.parametrize("s", [1, 2, 3, 17, 31])
def test_mlp_against_numpy(mlp_model, s):
    x = rand(s, D)
    close(mlp_model(x), gelu(x @ W1 + B1) @ W2)


def chain() -> Graph:
    g = Graph("ln_mm_sm")
    x = g.input("x", TensorType("f32", ("S", "D")))
    w = g.input("w", TensorType("f32", ("D", "N")))
    gamma = g.input("gamma", TensorType("f32", ("D",)))
    beta = g.input("beta", TensorType("f32", ("D",)))
    y = g.ops.softmax(g.ops.matmul(g.ops.layer_norm(x, gamma, beta), w), axis=-1)
    g.output(y)
    return g


@pytest.fixture(scope="module")
def chain_model():
    return chain().compile()


@pytest.mark.parametrize(
    ("s", "d", "n"), [(1, 1, 1), (1, 3, 2), (5, 7, 11), (13, 2, 3), (3, 17, 19)]
)
def test_layer_norm_matmul_softmax_against_numpy(chain_model, s, d, n):
    x, w, gm, bt = rand(s, d), rand(d, n), rand(d), rand(d)
    close(chain_model(x, w, gamma=gm, beta=bt), softmax(layer_norm(x, gm, bt) @ w))


def test_device_arrays_in_device_arrays_out(chain_model):
    q = dispatcher().runtime.queue
    host = [rand(3, 5), rand(5, 2), rand(5), rand(5)]
    out = chain_model(*(cla.to_device(q, a) for a in host))
    assert isinstance(out, cla.Array)
    close(out.get(), chain_model(*host))
    # a column slice (strides no kernel reads) is gathered into a row-major copy, and said so
    wide = rand(3, 10)
    view = cla.to_device(q, wide)[:, :5]
    got = chain_model(view, *(cla.to_device(q, a) for a in host[1:]))
    close(got.get(), chain_model(np.ascontiguousarray(wide[:, :5]), *host[1:]))
    assert "copied into a row-major array by a gather kernel" in chain_model.views["x"]


def test_guard_hits_and_misses(chain_model):
    chain_model.cache.clear()
    x, w, gm, bt = rand(4, 3), rand(3, 2), rand(3), rand(3)
    chain_model(x, w, gm, bt)
    first = next(iter(chain_model.cache.values()))
    chain_model(rand(4, 3), rand(3, 2), rand(3), rand(3))  # a hit: same dims
    assert list(chain_model.cache) == [(("D", 3), ("N", 2), ("S", 4))]
    assert next(iter(chain_model.cache.values())) is first  # the same prepared launches
    chain_model(rand(6, 3), w, gm, bt)  # new dims: a second specialization
    assert len(chain_model.cache) == 2
    with pytest.raises(CallError, match=r"dim D is 3 in x .* but 4 in w .*one name means one size"):
        chain_model(x, rand(4, 2), gm, bt)
    with pytest.raises(CallError, match=r"dim D is 3 in x .* but 2 in gamma"):
        chain_model(x, w, rand(2), bt)
    with pytest.raises(CallError, match="rank 3"):
        chain_model(rand(4, 3, 1), w, gm, bt)
    with pytest.raises(CallError, match="dtype float64"):
        chain_model(x.astype(np.float64), w, gm, bt)
    with pytest.raises(CallError, match="missing input 'beta'"):
        chain_model(x, w, gm)
    assert len(chain_model.cache) == 2  # a failed call makes no specialization
    for spec in chain_model.cache.values():
        for node in spec.summary()["nodes"]:
            static = chain_model.plan.selection(node["node"]).instance
            # the static choice where its guard holds at these sizes, else a re-dispatch
            assert (node["instance"] == static) == node["guard_held"]


def test_range_and_algebraic_guards():
    g = Graph("heads")
    x = g.input("x", TensorType("f32", ("S", "D")))
    g.input("h", TensorType("f32", ("H",)))
    g.dim_range("S", 1, 8)
    y = g.ops.softmax(g.reshape(x, ("S", "H", "hd")), axis=-1)
    g.output(g.reshape(y, ("S", "D")))
    m = g.compile()
    x = rand(5, 12)
    close(m(x, rand(4)), softmax(x.reshape(5, 4, 3)).reshape(5, 12))
    assert list(m.cache) == [(("D", 12), ("H", 4), ("S", 5), ("hd", 3))]
    with pytest.raises(CallError, match=r"D == H\*hd .* fails: D = 10 is not a multiple of H = 4"):
        m(rand(5, 10), rand(4))
    with pytest.raises(CallError, match=r"1 <= S <= 8 .* fails for S=9"):
        m(rand(9, 12), rand(4))


def test_outputs_that_are_inputs_and_constants_are_copies():
    g = Graph("id")
    x = g.input("x", TensorType("f32", ("N",)))
    g.output(g.ops.cast_f32(x), g.ops.exp(x))
    m = g.compile()
    assert "a cast of x to its own dtype f32" in m.explain(file=None)
    a = rand(3)
    same, e = m(a)
    close(same, a)
    close(e, np.exp(a))


SCRIPT = """
import json, sys
import numpy as np
import clforge
m = clforge.load(sys.argv[1])
x = np.load(sys.argv[2])
out = m(x)
np.save(sys.argv[3], out)
print(json.dumps({"cache": len(m.cache), "explain": "== 7. schedule" in m.explain(file=None)}))
"""


def _run_script(tmp_path: Path, text: str, *args: Path) -> subprocess.CompletedProcess[str]:
    """`text` run as a script in a fresh Python process with `args`, clforge from this
    checkout; it must exit 0."""
    script = tmp_path / "run.py"
    script.write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "generator"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_save_and_load_in_a_fresh_process(tmp_path, mlp_model):
    path = tmp_path / "mlp.json"
    mlp_model.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "clforge-graph/1"
    assert "pickle" not in path.read_text()
    x = rand(11, D)
    np.save(tmp_path / "x.npy", x)
    done = _run_script(tmp_path, SCRIPT, path, tmp_path / "x.npy", tmp_path / "y.npy")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"cache": 1, "explain": True}
    close(np.load(tmp_path / "y.npy"), mlp_model(x), tol=1e-6)
    loaded = clforge.load(path)
    assert loaded.plan.guards == mlp_model.plan.guards
    assert loaded.plan.schedule == mlp_model.plan.schedule
    text = path.read_text()
    inst = mlp_model.plan.selections[0].instance
    stale = tmp_path / "stale.json"
    stale.write_text(text.replace(f'"{inst}"', '"matmul__gone__f32"'))
    with pytest.raises(GraphError, match=r"matmul__gone__f32.*compile the graph again"):
        clforge.load(stale)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "clforge-graph/1", "plan": {"__record__": "os.system"}}))
    with pytest.raises(GraphError, match="not a clforge graph record"):
        clforge.load(bad)


def test_attention_block_from_views_and_matmuls():
    """A pre-LN self-attention block written with the ops graphs take: heads by reshape and
    permute (the guard D == H*hd solves hd), scores by batched matmul, a residual add."""
    g = Graph("attn")
    x = g.input("x", TensorType("f32", ("S", "D")))
    g.input("heads", TensorType("f32", ("H",)))
    wq = g.input("wq", TensorType("f32", ("D", "D")))
    wo = g.input("wo", TensorType("f32", ("D", "D")))
    h = g.ops.layer_norm(x)
    q = g.ops.permute(g.reshape(g.ops.gemm(h, wq), ("S", "H", "hd")), axes=(1, 0, 2))
    k = g.ops.permute(q, axes=(0, 2, 1))
    att = g.ops.softmax(g.ops.matmul(q, k) * 0.5, axis=-1)
    o = g.reshape(g.ops.permute(g.ops.matmul(att, q), axes=(1, 0, 2)), ("S", "D"))
    g.output(g.ops.add(x, g.ops.matmul(o, wo)))
    m = g.compile()
    for s, heads, hd in ((1, 1, 1), (5, 3, 2), (7, 2, 3)):
        d = heads * hd
        xv, wqv, wov = rand(s, d), rand(d, d), rand(d, d)
        qv = layer_norm(xv, np.ones(d, np.float32), np.zeros(d, np.float32)) @ wqv
        qv = qv.reshape(s, heads, hd).transpose(1, 0, 2)
        attv = softmax(qv @ qv.transpose(0, 2, 1) * 0.5)
        ov = (attv @ qv).transpose(1, 0, 2).reshape(s, d)
        close(m(xv, rand(heads), wqv, wov), xv + ov @ wov, tol=1e-3)
    assert "hd := (D) / (H)" in m.explain(file=None)
    with pytest.raises(CallError, match="not a multiple of H = 4"):
        m(rand(3, 6), rand(4), rand(6, 6), rand(6, 6))


SCRIPT_MANY = """
import sys
import numpy as np
import clforge
m = clforge.load(sys.argv[1])
ins = dict(np.load(sys.argv[2]))
out = m(**ins)
np.savez(sys.argv[3], *(out if isinstance(out, tuple) else (out,)))
"""


def _run_saved(tmp_path: Path, model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """`model` saved, loaded and called on `inputs` in a fresh process: its outputs."""
    path = tmp_path / "model.json"
    model.save(path)
    np.savez(tmp_path / "in.npz", **inputs)
    _run_script(tmp_path, SCRIPT_MANY, path, tmp_path / "in.npz", tmp_path / "o.npz")
    with np.load(tmp_path / "o.npz") as out:
        return [out[f"arr_{k}"] for k in range(len(out.files))]


def test_save_and_load_dims_solved_from_an_axis(tmp_path):
    """Inputs of dims `2*S` and `S + 1` (S solved from an axis, `S + 1` checked): saved, loaded
    in a fresh process, run at odd sizes, and a broken guard still refused after loading."""
    g = Graph("solved")
    x = g.input("x", TensorType("f32", ("2*S", 3)))
    y = g.input("y", TensorType("f32", ("S + 1", "E")))
    g.output(g.ops.exp(g.reshape(x, ("S", 6))), g.ops.neg(y))
    model = g.compile()
    assert any("x.shape[0]" in line for line in model.plan.guards.lines())
    for s in (1, 7):
        xs, ys = rand(2 * s, 3), rand(s + 1, 5)
        a, b = _run_saved(tmp_path, model, {"x": xs, "y": ys})
        close(a, np.exp(xs.reshape(s, 6)))
        close(b, -ys)
    loaded = clforge.load(tmp_path / "model.json")
    assert loaded.plan.guards == model.plan.guards
    with pytest.raises(
        CallError, match=r"guard y.shape\[0\] == S \+ 1 .*fails for S=7, y.shape\[0\]=7"
    ):
        loaded(x=rand(14, 3), y=rand(7, 5))
    with pytest.raises(CallError, match="not a multiple of 2"):
        loaded(x=rand(13, 3), y=rand(7, 5))
