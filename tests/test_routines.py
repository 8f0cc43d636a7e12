"""Routines: a variant whose work is several kernels, with scratch buffers between them, is an
instance like any other: expanded, rendered into one program, verified against NumPy (canary-
padded), explained step by step, and run by eager calls through the one launch path."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from clforge.call.dispatcher import Dispatcher
from clforge.core.tree import DEFAULT, Tree
from clforge.emit.generate import generate
from clforge.errors import TemplateError
from clforge.registry import loader as registry_mod
from clforge.runtime.launch import Runtime
from clforge.runtime.program_cache import ProgramCache
from clforge.tools.cli import main
from clforge.tune.verify import verify

RELU = """\
# yaml-language-server: $schema=schema.json
op: relu
doc: "relu, with a two-step routine for the cpu"
reference: clforge.references.elementwise:relu
expr: "((x) < (V)0 ? (V)0 : (x))"
call: flat
dims: [N]
inputs:
  x: [N]
outputs:
  y: [N]
dtypes: [f32, f64]
variants:
  - name: generic
    arch: generic
    template: elementwise/unary_generic.cl.j2
    launch: {global_size: [N]}
  - name: piped
    arch: cpu
    template: custom/piped.cl.j2
    params: {B: 64}
    tunables: {B: [16, 64]}
    routine:
      scratch: {tmp: "cdiv(N, B) * B"}
      steps:
        - {name: twice, reads: [x], writes: [tmp], launch: {global_size: ["cdiv(N, B)"]}}
        - {name: half, reads: [tmp], writes: [y], launch: {global_size: ["cdiv(N, B)"]}}
"""

PIPED = """\
{% import "_common/macros.cl.j2" as cf with context %}
{{ cf.header() }}
#define B {{ params.B }}
{{ cf.signature(step=steps.twice) }}
{
    const int b_ = get_global_id(0) * B;
    for (int i_ = b_; i_ < b_ + B; ++i_)  /* scratch is padded to whole blocks */
        tmp[i_] = i_ < N ? 2 * x[i_] : 0;
}
{{ cf.signature(step=steps.half) }}
{
    const int b_ = get_global_id(0) * B;
    for (int i_ = b_; i_ < b_ + B && i_ < N; ++i_)
        y[i_] = tmp[i_] > 0 ? tmp[i_] / 2 : 0;
}
"""


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    shutil.copytree(DEFAULT.specs, tmp_path / "specs")
    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    (tmp_path / "specs" / "relu.yaml").write_text(RELU)
    (tmp_path / "templates" / "custom").mkdir()
    (tmp_path / "templates" / "custom" / "piped.cl.j2").write_text(PIPED)
    tree = Tree(tmp_path)
    generate(tree)
    return tree


def _dispatcher(tree: Tree) -> Dispatcher:
    from clforge.call.dispatcher import dispatcher

    rt = Runtime(dispatcher().runtime.queue, registry_mod.load(tree), ProgramCache(None))
    return Dispatcher.for_runtime(rt)


def test_a_routine_is_expanded_into_steps_and_scratch(tree: Tree) -> None:
    inst = registry_mod.load(tree).instance("relu__piped__f32")
    assert [(s.name, s.kernel, s.reads, s.writes) for s in inst.steps] == [
        ("twice", "relu__piped__f32__twice", ("x",), ("tmp",)),
        ("half", "relu__piped__f32__half", ("tmp",), ("y",)),
    ]
    assert [(a.kind, a.name) for a in inst.steps[0].args] == [
        ("input", "x"),
        ("output", "tmp"),
        ("dim", "N"),
    ]
    assert [(s.name, s.size) for s in inst.scratch] == [("tmp", "cdiv(N, B) * B")]
    text = (tree.generated / inst.source).read_text()
    assert text.count("__kernel void relu__piped__f32__") == 2


@pytest.mark.parametrize("params", [None, (("B", 16),)])
def test_a_routine_is_verified_like_any_instance(tree: Tree, params) -> None:
    d = _dispatcher(tree)
    for dtype in ("f32", "f64"):
        verdict = verify(d.runtime, d.registry.instance(f"relu__piped__{dtype}"), params)
        assert verdict.ok and verdict.ran >= 4, str(verdict)


def test_eager_calls_run_every_step(tree: Tree) -> None:
    d = _dispatcher(tree)
    for n in (1, 7, 64, 1001, 0):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        got = d.call("relu", {"x": x})["y"]
        np.testing.assert_array_equal(got, np.maximum(x, 0))
    plan = d.plan_for(d.registry.op("relu"), {"x": np.ones(1001, np.float32)}, {})
    assert plan.inst.name == "relu__piped__f32"
    assert [launch.geometry.global_size for launch in plan.launches] == [(16,), (16,)]
    assert plan.scratch[0][:2] == ("tmp", 1024)
    empty = d.plan_for(d.registry.op("relu"), {"x": np.ones(0, np.float32)}, {})
    assert empty.launches == ()  # empty NDRanges are not launched


def test_explain_shows_the_steps(tree: Tree, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tree.root), "explain", "relu", "--dims", "N=100"]) == 0
    out = capsys.readouterr().out
    assert "step twice: relu__piped__f32__twice, reads x, writes tmp" in out
    assert "step half: relu__piped__f32__half, reads tmp, writes y" in out


def test_a_template_must_define_every_step(tree: Tree) -> None:
    tpl = tree.templates / "custom" / "piped.cl.j2"
    tpl.write_text(tpl.read_text().replace("{{ cf.signature(step=steps.half) }}", "void f_()"))
    with pytest.raises(TemplateError, match="defined no kernel for step half"):
        generate(tree)
