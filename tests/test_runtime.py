"""The named-instance entry point: the registry's contract is all a caller needs."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

from clforge.errors import CallError, ClforgeError
from clforge.runtime.launch import geometry

rng = np.random.default_rng(3)


def test_launch_by_name_numpy_and_device(runtime, launcher) -> None:
    a = rng.standard_normal((9, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    out = launcher.launch("matmul__generic__f32__a_col__b_row", {"a": a[None], "b": b[None]})
    np.testing.assert_allclose(out["c"][0], a @ b, rtol=1e-5, atol=1e-5)
    q = runtime.queue
    dev = launcher.launch(
        "matmul__generic__f32__a_row__b_row",
        {"a": cla.to_device(q, a[None]), "b": cla.to_device(q, b[None])},
    )
    assert isinstance(dev["c"], cla.Array)
    np.testing.assert_allclose(dev["c"].get()[0], a @ b, rtol=1e-5, atol=1e-5)


def test_registry_contract_drives_geometry(registry) -> None:
    inst = registry.instance("add__cpu__f32")
    strides = [f"{t}_s{k}" for t in "ab" for k in range(4)]
    assert [a.name for a in inst.args] == ["a", "b", "c", "D0", "D1", "D2", "D3", *strides]
    assert [a.kind for a in inst.args] == ["input", "input", "output"] + ["dim"] * 4 + [
        "stride"
    ] * 8
    geo = geometry(registry, inst, {"D0": 1, "D1": 1, "D2": 1, "D3": 8195})
    assert geo.global_size == (3,) and geo.local_size == (1,)
    assert geometry(registry, inst, {"D0": 1, "D1": 1, "D2": 1, "D3": 0}).empty


@pytest.mark.parametrize(
    ("name", "inputs", "message"),
    [
        (
            "softmax__cpu_vec8__f32",
            {"x": np.ones((2, 7, 1), np.float32)},
            "softmax__cpu_vec8__f32: guard 'R % 16 == 0' does not hold for B=2, R=7, I=1",
        ),
        ("add__generic__f32", {"a": np.ones(3, np.float32)}, "add: missing input b (expects a, b)"),
        (
            "add__generic__f32",
            {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32), "z": np.ones(3, np.float32)},
            "add: unknown input z (expects a, b)",
        ),
        (
            "add__generic__f64",
            {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)},
            "add: input 'a' is float32, expected float64",
        ),
    ],
)
def test_launch_errors(runtime, launcher, name: str, inputs: dict, message: str) -> None:
    with pytest.raises(CallError) as err:
        launcher.launch(name, inputs)
    assert str(err.value) == message


def test_device_array_in_the_wrong_layout_is_refused(runtime, launcher) -> None:
    a = cla.to_device(runtime.queue, np.ones((1, 4, 3), np.float32))
    b = cla.to_device(runtime.queue, np.ones((1, 3, 2), np.float32))
    with pytest.raises(CallError, match="is not col-major as needed"):
        launcher.launch("matmul__generic__f32__a_col__b_row", {"a": a, "b": b})


def test_unknown_instance(runtime, launcher) -> None:
    with pytest.raises(ClforgeError, match="unknown instance 'nope'"):
        launcher.launch("nope", {})


def test_variant_build_options_reach_the_compiler(runtime, tmp_path) -> None:
    import shutil

    from clforge.call.dispatcher import Dispatcher
    from clforge.core.tree import DEFAULT, Tree
    from clforge.emit.generate import generate
    from clforge.registry import loader as registry_mod
    from clforge.runtime.launch import Runtime
    from clforge.runtime.program_cache import ProgramCache

    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    (tmp_path / "templates" / "custom").mkdir()
    (tmp_path / "templates" / "custom" / "scaled.cl.j2").write_text(
        '{% import "_common/macros.cl.j2" as cf with context %}\n{{ cf.header() }}\n'
        "#ifndef SCALE\n#error SCALE comes from the variant's build options\n#endif\n"
        "{{ cf.signature() }}\n{\n    const int i_ = get_global_id(0);\n"
        "    if (i_ < N) y[i_] = x[i_] * SCALE;\n}\n"
    )
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "scale3.yaml").write_text(
        "# yaml-language-server: $schema=schema.json\nop: scale3\ndims: [N]\n"
        "inputs: {x: [N]}\noutputs: {y: [N]}\ndtypes: [f32]\nvariants:\n"
        "  - name: generic\n    arch: generic\n    template: custom/scaled.cl.j2\n"
        "    build_options: [-DSCALE=3]\n    launch: {global_size: [N]}\n"
    )
    tree = Tree(tmp_path)
    generate(tree)
    reg = registry_mod.load(tree)
    inst = reg.instance("scale3__generic__f32")
    assert inst.build_options == "-DSCALE=3"
    rt = Runtime(runtime.queue, reg, ProgramCache(None))
    x = np.arange(5, dtype=np.float32)
    launched = Dispatcher.for_runtime(rt).launch(inst, {"x": x})
    np.testing.assert_array_equal(launched["y"], 3 * x)
