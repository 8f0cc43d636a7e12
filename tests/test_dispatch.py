"""The dispatcher: selection on device profiles, guards, errors, eager and compiled calls."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.compiled import TensorType
from clforge.call.dispatcher import ClforgeWarning, Dispatcher, dispatcher
from clforge.call.selection import chosen_or_raise, select
from clforge.core.tree import DEFAULT, Tree
from clforge.device.profile import DeviceProfile
from clforge.emit.generate import generate
from clforge.errors import BuildError, CallError, DispatchError
from clforge.registry import loader as registry_mod
from clforge.runtime.launch import Runtime
from clforge.runtime.program_cache import ProgramCache
from clforge.tools.cli import main

FP64 = ("cl_khr_fp64",)
POCL = DeviceProfile("AMD EPYC", "pocl", "cpu", "skylake-avx512", FP64, 524288, "global", 4096, 2)
NVIDIA = DeviceProfile(
    "NVIDIA H100", "nvidia", "gpu", "sm_90", (*FP64, "cl_khr_fp16"), 49152, "local", 1024, 132
)
TINY_GPU = DeviceProfile("Tiny", "amd", "gpu", "gfx90a", FP64, 1024, "local", 1024, 8)
UNKNOWN = DeviceProfile(
    "Mystery Accelerator", "unknown", "accelerator", None, (), 0, "global", 64, 1
)
REG = registry_mod.default()


def chosen(
    profile: DeviceProfile,
    op: str,
    dtype: str = "f32",
    layouts: dict | None = None,
    dims: dict | None = None,
) -> str | None:
    c = select(REG, profile, op, dtype, layouts or {}, dims or {}).chosen
    return c.instance if c else None


# --- selection -----------------------------------------------------------------------------


def test_each_profile_gets_its_variant() -> None:
    dims = {"M": 64, "N": 64, "K": 64}
    assert chosen(NVIDIA, "matmul", dims=dims) == "matmul__gpu_tiled__f32__a_row__b_row"
    # on a CPU nothing tuned, the analytic crossover (prefer_when) sends 64^3 to the direct
    # kernel and 1024^3 to the packed routine
    assert chosen(POCL, "matmul", dims=dims) == "matmul__cpu_blocked__f32__a_row__b_row"
    big = {"M": 1024, "N": 1024, "K": 1024}
    assert chosen(POCL, "matmul", dims=big) == "matmul__cpu_packed__f32__a_row__b_row"
    assert chosen(UNKNOWN, "matmul", dims=dims) == "matmul__generic__f32__a_row__b_row"
    assert chosen(NVIDIA, "sum") == "sum__gpu_workgroup__f32"
    assert chosen(POCL, "add") == "add__cpu__f32"


def test_layout_and_dtype_steer_selection() -> None:
    sel = select(REG, POCL, "matmul", "f32", {"a": "row", "b": "col"}, {})
    assert sel.chosen and sel.chosen.instance == "matmul__cpu_packed__f32__a_row__b_col"
    reasons = {c.variant: c.reason for c in sel.candidates}
    assert reasons["cpu_blocked"] == "b is col-major; the variant takes it row-major"
    assert chosen(POCL, "matmul", "f16") == "matmul__generic__f16__a_row__b_row"
    reasons = {c.variant: c.reason for c in select(REG, POCL, "matmul", "f16", {}, {}).candidates}
    assert reasons["cpu_blocked"] == "no f16 instance (variant covers f32, f64)"


def test_requirements_are_checked() -> None:
    # 1 KiB of local memory holds the 8 x 8 tiles the tiled matmul computes for it; 512 bytes not
    sel = select(REG, TINY_GPU, "matmul", "f32", {}, {"M": 8, "N": 8, "K": 8})
    assert sel.chosen and sel.chosen.variant == "gpu_tiled"
    tiny = dataclasses.replace(TINY_GPU, local_mem_bytes=512)
    sel = select(REG, tiny, "matmul", "f32", {}, {"M": 8, "N": 8, "K": 8})
    reasons = {c.variant: c.reason for c in sel.candidates}
    assert reasons["gpu_tiled"] == "needs local_mem_bytes >= 1024, the device has 512"
    assert sel.chosen and sel.chosen.variant == "generic"


def test_guard_boundaries_and_priority() -> None:
    for n, want in (
        (16, "cpu_vec8"),
        (64, "cpu_vec8"),
        (0, "cpu_vec8"),
        (8, "cpu"),
        (7, "cpu"),
        (17, "cpu"),
        (1, "cpu"),
    ):
        sel = select(REG, POCL, "softmax", "f32", {}, {"B": 3, "R": n, "I": 1})
        assert sel.chosen and sel.chosen.variant == want, n
    sel = select(REG, POCL, "softmax", "f32", {}, {"B": 3, "R": 7, "I": 1})
    reasons = {c.variant: c.reason for c in sel.candidates}
    assert reasons["cpu_vec8"] == "guard 'R % 16 == 0' is false for R=7"


def test_symbolic_dims_leave_the_guard_to_run_time() -> None:
    sel = select(REG, POCL, "softmax", "f32", {}, {"B": 3, "I": 1})
    assert sel.chosen and sel.chosen.variant == "cpu_vec8"
    assert sel.chosen.runtime_guard == "R % 16 == 0"


def test_no_candidate_lists_every_rejection() -> None:
    sel = select(REG, UNKNOWN, "matmul", "f64", {}, {})
    with pytest.raises(DispatchError) as err:
        chosen_or_raise(sel)
    text = str(err.value)
    assert text.startswith("no instance fits this call:\nmatmul dtype=f64")
    for variant in ("generic", "cpu_blocked", "gpu_tiled"):
        assert variant in text
    assert "needs cl_khr_fp64, which the device lacks" in text


def test_explain_cli_text_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    profile = tmp_path / "gpu.yaml"
    from clforge.device.profile_files import dump_profile

    profile.write_text(dump_profile(NVIDIA))
    args = [
        "explain",
        "matmul",
        "--dtype",
        "f32",
        "--layout",
        "a=row,b=col",
        "--dims",
        "M=1000,N=512,K=64",
        "--device",
        str(profile),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "gpu_tiled     CHOSEN" in out
    assert out.rstrip().endswith("=> matmul__gpu_tiled__f32__a_row__b_col")
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == "matmul__gpu_tiled__f32__a_row__b_col"
    assert {c["variant"]: c["verdict"] for c in data["candidates"]} == {
        "gpu_tiled": "chosen",
        "generic": "eligible",
        "cpu_blocked": "rejected",
        "cpu_packed": "rejected",
        "cpu_packed64": "rejected",
        "generic_half": "rejected",
    }
    assert main(["explain", "matmul", "--dims", "Q=3"]) == 2
    assert "has no dim 'Q'" in capsys.readouterr().err


def test_explain_shapes_and_attrs_bind_like_a_call(capsys: pytest.CaptureFixture[str]) -> None:
    """--shapes binds every dim (derived ones included), so explain names the instance and
    the tuned bucket that a call of those shapes gets on this device; --dims alone that leave
    a dim unset say so."""
    a, b = np.ones((1, 256, 200), np.float32), np.ones((1, 200, 96), np.float32)
    d = dispatcher()
    called = d.plan_for(d.registry.op("matmul"), {"a": a, "b": b}, {}).inst.name
    assert main(["explain", "matmul", "--shapes", "a=1x256x200,b=1x200x96", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == called
    assert {k: data["dims"][k] for k in ("BA", "BB", "BATCH", "M", "N", "K")} == {
        "BA": 1,
        "BB": 1,
        "BATCH": 1,
        "M": 256,
        "N": 96,
        "K": 200,
    }
    assert main(["explain", "matmul", "--dims", "M=256,N=96"]) == 0
    assert "dims BATCH, K, BA, BB unset" in capsys.readouterr().out
    conv = ["explain", "conv2d", "--shapes", "x=1x8x15x15,w=4x8x3x3", "--json"]
    assert main([*conv, "--attrs", "stride_h=2,stride_w=2,pad_h=1,pad_w=1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["dims"]["OH"], doc["dims"]["OW"]) == (8, 8)
    assert "stride_h" not in doc["dims"] and doc["attrs"]["stride_h"] == 2  # each in its place
    for bad, message in [
        (["--attrs", "stride=2"], "has no attribute 'stride' (attributes: stride_h"),
        (["--attrs", "stride_h=two"], "stride_h='two' is not an int"),
        (["--shapes", "x=1x8x"], "is not sizes joined by x"),
        (["--shapes", "q=1"], "has no input 'q'"),
        (["--dims", "H=16"], "--dims: H=16, but --shapes makes it 15"),
        (["--shapes", "x=1x8x15x15,w=4x7x3x3"], "C == CG * groups is false for C=8, CG=7"),
    ]:
        assert main([*conv, *bad]) in (1, 2), bad
        assert message in capsys.readouterr().err, bad


# --- eager calls ---------------------------------------------------------------------------

rng = np.random.default_rng(7)


def test_eager_numpy_and_device_arrays() -> None:
    a = rng.standard_normal((37, 19)).astype(np.float32)
    b = rng.standard_normal((19, 23)).astype(np.float32)
    np.testing.assert_allclose(ops.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
    q = dispatcher().runtime.queue
    c = ops.matmul(cla.to_device(q, a), cla.to_device(q, b))
    assert isinstance(c, cla.Array)
    np.testing.assert_allclose(c.get(), a @ b, rtol=1e-4, atol=1e-4)
    x = rng.standard_normal(1001).astype(np.float64)
    np.testing.assert_allclose(ops.relu(x), np.maximum(x, 0))


def test_fortran_arrays_pick_col_instances() -> None:
    a = np.asfortranarray(rng.standard_normal((30, 20)).astype(np.float32))
    b = rng.standard_normal((20, 10)).astype(np.float32)
    d = dispatcher()
    plan = d.plan_for(d.registry.op("matmul"), {"a": a[None], "b": b[None]}, {})
    # no host copy: a cpu instance that reads a column-major (the direct kernel or the packed
    # routine, whichever this device's tuning measured faster near this shape)
    assert plan.inst.name.endswith("__f32__a_col__b_row") and plan.inst.variant.startswith("cpu")
    np.testing.assert_allclose(ops.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_strided_numpy_and_strided_device_arrays_are_copied() -> None:
    """A strided NumPy view is copied on the way to the device; a strided device view (strides
    no kernel reads) is gathered on the device (tests/test_views.py has the rest of views)."""
    x = rng.standard_normal(200).astype(np.float32)
    np.testing.assert_allclose(ops.exp(x[::3]), np.exp(x[::3]), rtol=1e-5)
    q = dispatcher().runtime.queue
    host = rng.standard_normal((8, 6)).astype(np.float32)
    m = cla.to_device(q, host)
    e = np.exp(host[:, ::2] - host[:, ::2].max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ops.softmax(m[:, ::2]).get(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.matmul(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32)),
            "matmul: dim K is 4 in a (shape (3, 4)) but 5 in b (shape (5, 2)); one name means "
            "one size",
        ),
        (
            lambda: ops.add(np.ones(3, np.float32), np.ones(4, np.float32)),
            "add: shapes (3,) and (4,) do not broadcast",
        ),
        (
            lambda: ops.add(np.ones(3, np.float32), np.ones((3, 5), np.float64)),
            "add: shapes (3,) and (3, 5) do not broadcast",
        ),
        (
            lambda: ops.relu(np.ones(3, np.int64)),
            "relu: input 'x' has dtype int64, which clforge does not support (supported: f16, "
            "f32, f64, i32)",
        ),
        (
            lambda: ops.add(np.ones((1, 1, 1, 1, 2), np.float32), np.ones(2, np.float32)),
            "add: input 'a' has rank 5; at most 4",
        ),
        (
            lambda: ops.exp(np.ones(3, np.int32)),
            "exp: dtype i32 is not supported (supported: f32, f64, f16)",
        ),
        (
            lambda: ops.relu([1.0, 2.0]),
            "relu: input 'x' is a list, not an array (pass a NumPy or pyopencl array)",
        ),
    ],
)
def test_bad_calls_fail_before_any_kernel(call, message: str) -> None:
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


def test_empty_tensors() -> None:
    assert ops.add(np.ones(0, np.float32), np.ones(0, np.float32)).shape == (0,)
    np.testing.assert_array_equal(ops.sum(np.ones((4, 0), np.float32), axis=1), np.zeros(4))
    out = ops.matmul(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32))
    np.testing.assert_array_equal(out, np.zeros((3, 2)))
    assert ops.softmax(np.ones((0, 5), np.float32)).shape == (0, 5)


def test_warm_calls_reuse_the_plan() -> None:
    d = dispatcher()
    x = rng.standard_normal(64).astype(np.float32)
    ops.tanh(x)
    before = d.cache_info()["plans"]
    for _ in range(3):
        ops.tanh(x)
    assert d.cache_info()["plans"] == before


# --- compiled entry points -----------------------------------------------------------------


def _pocl_dispatcher() -> Dispatcher:
    return Dispatcher(dispatcher().runtime, POCL)


def test_compiled_reuses_and_redispatches_on_guard_failure() -> None:
    d = _pocl_dispatcher()
    f = d.compile("softmax", {"x": TensorType("f32", ("B", "R", "I"))})
    assert f.instance.name == "softmax__cpu_vec8__f32"
    for n in (16, 64, 7, 32):
        x = rng.standard_normal((5, n, 1)).astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(f(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert f.redispatches == 1
    assert sorted(f.cache.values()) == ["softmax__cpu__f32", "softmax__cpu_vec8__f32"]


def test_compiled_strict_rejects_guard_failure() -> None:
    f = _pocl_dispatcher().compile(
        "softmax", {"x": TensorType("f32", ("B", "R", "I"))}, strict=True
    )
    f(np.ones((2, 16, 1), np.float32))
    with pytest.raises(CallError, match=r"guard 'R % 16 == 0' does not hold for B=2, R=7, I=1"):
        f(np.ones((2, 7, 1), np.float32))


def test_compiled_checks_types_and_static_dims() -> None:
    d = _pocl_dispatcher()
    f = d.compile(
        "matmul",
        {"a": TensorType("f32", (1, "M", 16)), "b": TensorType("f32", (1, 16, "N"))},
    )
    assert f.instance.name == "matmul__cpu_packed__f32__a_row__b_row"
    with pytest.raises(CallError, match="compiled for f32, called with f64"):
        f(np.ones((1, 2, 16)), np.ones((1, 16, 3)))
    with pytest.raises(CallError, match="one name means one size"):
        d.compile(
            "matmul",
            {"a": TensorType("f32", (1, "M", 16)), "b": TensorType("f32", (1, 8, "N"))},
        )


# --- build failures fall back ----------------------------------------------------------------


@pytest.fixture
def broken_tree(tmp_path: Path) -> Tree:
    shutil.copytree(DEFAULT.specs, tmp_path / "specs")
    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    tree = Tree(tmp_path)
    # the cpu unary template broken, then generated: kernels and registry agree (their hashes
    # are checked at build time), and the kernel fails in the compiler, not before
    tpl = tree.templates / "elementwise/unary_cpu.cl.j2"
    tpl.write_text(tpl.read_text().replace("const int start_", "syntax error here; int start_"))
    generate(tree)
    return tree


def test_build_failure_falls_back_to_the_next_candidate(broken_tree: Tree) -> None:
    reg = registry_mod.load(broken_tree)
    d = Dispatcher(Runtime(dispatcher().runtime.queue, reg, ProgramCache(None)), POCL)
    x = rng.standard_normal(50).astype(np.float32)
    with pytest.warns(ClforgeWarning, match="relu__cpu__f32 failed to build"):
        np.testing.assert_allclose(d.call("relu", {"x": x})["y"], np.maximum(x, 0))
    assert d.plan_for(reg.op("relu"), {"x": x}, {}).inst.name == "relu__generic__f32"
    strict = Dispatcher(
        Runtime(dispatcher().runtime.queue, reg, ProgramCache(None)), POCL, strict=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BuildError, match="building relu__cpu__f32 failed"):
            strict.call("relu", {"x": x})


def test_numpy_inputs_are_copied_into_the_layout_with_the_best_kernel() -> None:
    a = rng.standard_normal((300, 1000)).astype(np.float32)
    b = np.asfortranarray(rng.standard_normal((1000, 1000)).astype(np.float32))  # 4 MB
    d = _pocl_dispatcher()
    host = d.plan_for(d.registry.op("matmul"), {"a": a[None], "b": b[None]}, {})
    # the packed cpu routine takes b in either layout: a Fortran b is not reordered on the way
    assert host.inst.variant == "cpu_packed" and host.inst.layout_of("b") == "col"
    # where the direct kernel ranks first (a small product, prefer_when false for the
    # routine), b is copied row-major for it rather than run through the routine
    small = d.plan_for(
        d.registry.op("matmul"), {"a": a[None, :30, :20], "b": b[None, :20, :10]}, {}
    )
    assert small.inst.variant == "cpu_blocked" and small.inst.layout_of("b") == "row"
    q = d.runtime.queue
    on_device = d.plan_for(
        d.registry.op("matmul"),
        {"a": cla.to_device(q, a[None]), "b": cla.to_device(q, b[None])},
        {},
    )
    assert on_device.inst.layout_of("b") == "col"  # a device array is never copied
    np.testing.assert_allclose(
        d.call("matmul", {"a": a[None], "b": b[None]})["c"][0], a @ b, rtol=1e-4, atol=1e-4
    )


# --- overrides reach every dispatcher of the device ----------------------------------------


def test_an_override_reaches_calls_on_every_queue_of_the_device() -> None:
    """`dispatcher().override_params` binds to the device, not to one dispatcher object: a call
    with `queue=` of another context on the same device, its device arrays, a dispatcher made
    directly on that queue, and one made after the override all run the overridden set; plans
    memoized before it are dropped everywhere, and None puts every one back."""
    import pyopencl as cl

    name = "relu__cpu__f32"
    chunked = (("CHUNK", 1024), ("NT_MIN", 4194304), ("VW", 16))
    main_d = dispatcher()
    q2 = cl.CommandQueue(cl.Context([main_d.runtime.device]))
    other = dispatcher(q2)
    assert other is not main_d and other.lookup is not main_d.lookup
    x = rng.standard_normal(10_000).astype(np.float32)

    def params_of(d: Dispatcher) -> tuple:
        return next(p.params for p in d._plans.values() if p.inst.name == name)

    np.testing.assert_array_equal(ops.relu(x, queue=q2), np.maximum(x, 0))  # memoized first
    assert params_of(other) != chunked
    main_d.override_params(name, {"CHUNK": 1024})
    try:
        assert other._plans == {} and other._recipes == {}
        np.testing.assert_array_equal(ops.relu(x, queue=q2), np.maximum(x, 0))
        assert params_of(other) == chunked
        on_q2 = ops.relu(cla.to_device(q2, x), queue=q2)
        np.testing.assert_array_equal(on_q2.get(), np.maximum(x, 0))
        assert params_of(other) == chunked
        direct = Dispatcher.for_runtime(Runtime(cl.CommandQueue(q2.context)))
        assert direct.params_for(REG.instance(name), {"N": 10_000}).origin == "override"
        later = dispatcher(cl.CommandQueue(cl.Context([main_d.runtime.device])))
        assert later.lookup.overrides == {name: {"CHUNK": 1024}}
    finally:
        other.override_params(name, None)  # from any of them, for all of them
    assert main_d.lookup.overrides.get(name) is None
    np.testing.assert_array_equal(ops.relu(x, queue=q2), np.maximum(x, 0))
    assert params_of(other) != chunked


def test_python_explain_names_the_isa_and_the_files_passed_over() -> None:
    import clforge
    from clforge.device.profile import isa_text

    a = rng.standard_normal((64, 64)).astype(np.float32)
    ex = clforge.explain("matmul", a, a)
    d = dispatcher()
    assert ex.device_isa == (isa_text(d.profile) or "no known vector ISA")
    assert ex.passed == d.lookup.passed  # the files this device's chain does not read
    doc = ex.as_dict()
    assert doc["device_isa"] == ex.device_isa
    assert doc["tuning_passed_over"] == [{"file": f, "reason": r} for f, r in ex.passed]
    assert all(f"tuning file passed over: {f}: {r}: not borrowed" in str(ex) for f, r in ex.passed)
