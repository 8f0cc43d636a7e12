"""Extensions: ops and variants from another folder, in the same registry, with the same lint,
generation, verification, tuning and entry points (examples/swiglu is the worked example)."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clforge.call.compiled import TensorType
from clforge.call.dispatcher import dispatcher
from clforge.core.manifest import read_manifest
from clforge.core.tree import DEFAULT, Tree
from clforge.emit.ops_module import ops_source
from clforge.errors import CallError, ExtensionError, SpecError
from clforge.lint.checks import lint
from clforge.registry import loader, sources
from clforge.registry.records import AttrSig, OpSig, TensorSig
from clforge.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "swiglu"


def clforge(*argv: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process, with `env` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "clforge", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture
def registered():
    """The example registered in this process, for one test."""
    src = sources.register(EXAMPLE)
    yield src
    sources.unregister(src.name)
    sys.modules.pop("swiglu_kernels.ops", None)


# --- the manifest -------------------------------------------------------------------------------


def test_the_manifests(tmp_path: Path) -> None:
    assert read_manifest(ROOT, builtin=True) is not None
    assert Tree.at(ROOT) == DEFAULT
    ext = Tree.at(EXAMPLE)
    assert (ext.name, ext.package, ext.generated) == (
        "swiglu",
        "swiglu_kernels",
        EXAMPLE / "swiglu_kernels",
    )
    assert read_manifest(tmp_path) is None
    for text, words in [
        ("name: clforge\npackage: mine\n", "is clforge's own"),
        ("name: mine\npackage: generated\n", "is clforge's"),
        ("name: Mine\npackage: mine_gen\n", "lowercase Python identifier"),
        ("name: mine\n", "required key 'package'"),
        ("name: mine\npackage: mine_gen\nversion: 2\n", "unknown key 'version'"),
        ("- a list\n", "one mapping"),
    ]:
        (tmp_path / "clforge.yaml").write_text(text)
        with pytest.raises(SpecError) as exc:
            read_manifest(tmp_path)
        assert words in str(exc.value), text
        assert str(exc.value.diagnostics[0]).startswith("clforge.yaml:")


# --- the worked example, as a kernel author's CI runs it --------------------------------------


def test_the_example_lints_clean_and_is_generated(capsys: pytest.CaptureFixture[str]) -> None:
    report = lint((), Tree.at(EXAMPLE))  # includes generate --check
    assert report.findings == (), report.findings
    assert report.files == ("specs/relu.yaml", "specs/swiglu.yaml")
    assert main(["--root", str(EXAMPLE), "schema", "--check"]) == 0
    capsys.readouterr()


def test_generate_in_an_extension_folder_writes_its_own_package(tmp_path: Path) -> None:
    ext = shutil.copytree(EXAMPLE, tmp_path / "ext")
    shutil.rmtree(ext / "swiglu_kernels")
    (ext / "docs" / "ops.md").unlink()
    done = clforge("generate", cwd=ext)  # found by the clforge.yaml of the working folder
    assert done.returncode == 0, done.stderr
    assert (ext / "swiglu_kernels" / "registry.py").is_file()
    assert not (ext / "generated").exists()
    ops = (ext / "swiglu_kernels" / "ops.py").read_text()
    assert "register(__name__" in ops and "'swiglu'" in ops and "def relu" not in ops
    doc = (ext / "docs" / "ops.md").read_text()
    assert "`swiglu_kernels.ops.<op>`" in doc and "cpu_wide" in doc
    assert clforge("generate", "--check", cwd=ext).returncode == 0


@pytest.mark.slow
def test_every_command_honours_clforge_path() -> None:
    env = {"CLFORGE_PATH": str(EXAMPLE)}
    listed = clforge("list", "swiglu", **env)
    assert listed.returncode == 0, listed.stderr
    assert "swiglu__cpu__f32" in listed.stdout and "[swiglu]" in listed.stdout
    explained = clforge("explain", "relu", "--dims", "N=2000000", "--json", **env)
    doc = json.loads(explained.stdout)
    assert doc["chosen"] == "relu__cpu_wide__f32"
    trees = {c["variant"]: c["tree"] for c in doc["candidates"]}
    assert trees["cpu_wide"] == "swiglu" and trees["cpu"] == "clforge"
    table = clforge("explain", "relu", "--dims", "N=1000", **env).stdout
    assert " tree " in table and "guard 'N >= 1048576' is false" in table
    verified = clforge("verify", "swiglu", "relu", "--tunables", **env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "relu__cpu_wide__f32 [CHUNK=16384]: 3 cases match NumPy" in verified.stdout
    for chunk in (1024, 16384):  # the extension's own tunable values, besides its default
        assert f"swiglu__cpu__f32 [CHUNK={chunk}]: " in verified.stdout
    assert "swiglu__cpu__f32" in verified.stdout and "FAILED" not in verified.stdout
    assert clforge("lint", "--all", **env).returncode == 0
    checked = clforge("generate", "--check", "--all", **env)
    assert checked.returncode == 0 and "tree swiglu" in checked.stdout
    # without it, the op is unknown, and says so
    assert "unknown op 'swiglu'" in clforge("list", "swiglu").stderr


def test_register_in_process(registered: sources.Source) -> None:
    reg = loader.default()
    assert reg.home("swiglu").name == "swiglu" and reg.home("relu").name == "clforge"
    assert reg.home("relu__cpu_wide__f32").name == "swiglu"
    assert reg.tree_of(reg.instance("swiglu__cpu__f32")).root == EXAMPLE
    from swiglu_kernels import ops  # importable from the extension's folder

    for n in (0, 1, 7, 8195, 65537):
        a = np.linspace(-5, 5, n, dtype=np.float32)
        b = np.cos(a)
        np.testing.assert_allclose(ops.swiglu(a, b), a / (1 + np.exp(-a)) * b, rtol=2e-6, atol=1e-6)
    d = dispatcher()
    assert d.registry is reg  # the default dispatcher adopted the grown registry
    x = np.random.default_rng(1).standard_normal(1 << 21).astype(np.float32)
    assert d.plan_for(reg.op("relu"), {"x": x}, {}).inst.name == "relu__cpu_wide__f32"
    from clforge.generated import ops as builtin

    np.testing.assert_array_equal(builtin.relu(x), np.maximum(x, 0))
    sources.unregister("swiglu")
    assert "swiglu" not in loader.default().ops
    d = dispatcher()  # what every eager call asks: it adopts the registry without the extension
    assert d.plan_for(d.registry.op("relu"), {"x": x}, {}).inst.name == "relu__cpu__f32"


def test_registering_twice_is_harmless_and_names_never_collide(
    registered: sources.Source, tmp_path: Path
) -> None:
    assert sources.register(str(EXAMPLE)) == registered
    assert sources.register("swiglu_kernels").generated == registered.generated
    twin = shutil.copytree(EXAMPLE, tmp_path / "twin")
    with pytest.raises(ExtensionError, match="two trees are named 'swiglu'"):
        sources.register(twin)
    assert "swiglu" in loader.default().ops  # the refused registration left no trace
    with pytest.raises(ExtensionError, match="neither an extension"):
        sources.register(tmp_path)
    with pytest.raises(ExtensionError, match="not an importable package"):
        sources.register("no_such_package_xyz")


def test_a_broken_clforge_path_entry_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLFORGE_PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ExtensionError, match=r"CLFORGE_PATH: .*nowhere is not a folder"):
        loader.default()


def test_an_extension_cannot_redefine_another_trees_op(tmp_path: Path) -> None:
    ext = shutil.copytree(EXAMPLE, tmp_path / "ext")
    swiglu = (EXAMPLE / "specs" / "swiglu.yaml").read_text()
    (ext / "specs" / "gelu.yaml").write_text(swiglu.replace("op: swiglu", "op: gelu"))
    report = lint([ext / "specs" / "gelu.yaml"], Tree.at(ext))
    (finding,) = [d for d in report.findings if d.rule == "duplicate-name"]
    assert "already defined by tree 'clforge'" in finding.message
    assert "extends: gelu" in finding.message


# --- installed: the entry point -------------------------------------------------------------------


@pytest.mark.slow
def test_installed_from_a_distribution(tmp_path: Path) -> None:
    """pip installs the example (no folder of specs comes with it): found by its entry point,
    its kernels read from the installed package, its ops called through the generated module."""
    src = shutil.copytree(EXAMPLE, tmp_path / "src")
    target = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    shutil.rmtree(src)  # nothing may come from the source folder
    env = {"PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    listed = clforge("list", "swiglu", **env)
    assert listed.returncode == 0 and "[swiglu]" in listed.stdout, listed.stderr
    run = python(
        "import numpy as np, swiglu_kernels.ops as ops\n"
        "from clforge.registry import loader\n"
        "reg = loader.default(); home = reg.home('swiglu')\n"
        "print(home.found_by, home.root, home.generated)\n"
        "for n in (0, 1, 7, 8195, 100003):\n"
        "    a = np.linspace(-4, 4, n).astype(np.float32); b = a[::-1].copy()\n"
        "    want = a / (1 + np.exp(-a.astype(np.float64))) * b\n"
        "    assert np.allclose(ops.swiglu(a, b), want, rtol=1e-5, atol=1e-6), n\n"
        "print('ok')\n",
        **env,
    )
    assert run.returncode == 0, run.stderr
    first = run.stdout.split("\n")[0]  # found by the entry point, no folder, the installed kernels
    assert first.startswith("entry point 'swiglu' of clforge-swiglu-example None ")
    assert first.endswith(str(target / "swiglu_kernels"))
    verified = clforge("verify", "swiglu", **env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# --- tuning an extension's variants ---------------------------------------------------------------


@pytest.mark.slow
def test_tuning_writes_into_the_extensions_tuning_folder(tmp_path: Path) -> None:
    ext = shutil.copytree(EXAMPLE, tmp_path / "ext")
    before = sorted(p.read_text() for p in (ROOT / "tuning").glob("*.yaml"))
    done = clforge(
        "--root", str(ext), "tune", "swiglu", "--dtypes", "f32", "--shapes", "swiglu:N=100003",
        "--budget", "120", "--repeats", "3", "--fresh",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (written,) = (ext / "tuning").glob("*.yaml")
    assert "swiglu__cpu__f32" in written.read_text()
    assert sorted(p.read_text() for p in (ROOT / "tuning").glob("*.yaml")) == before


def test_each_tuned_entry_goes_to_its_instances_tree(registered: sources.Source) -> None:
    from clforge.params.database import Entry
    from clforge.tune.tuner import files_for

    reg = loader.default()
    entries = [
        Entry("relu__cpu_wide__f32", "*", (("CHUNK", 4096),), "0", time_us=1.0),
        Entry("relu__cpu__f32", "*", (("CHUNK", 4096),), "0", time_us=1.0),
        Entry("swiglu__cpu__f32", "*", (("CHUNK", 4096),), "0", time_us=1.0),
    ]
    split = files_for(reg, entries, Path("/out.yaml"), "dev", one_file=False)
    assert {p: [e.instance for e in es] for p, es in split.items()} == {
        EXAMPLE / "tuning" / "dev.yaml": ["relu__cpu_wide__f32", "swiglu__cpu__f32"],
        ROOT / "tuning" / "dev.yaml": ["relu__cpu__f32"],
    }
    assert list(files_for(reg, entries, Path("/out.yaml"), "dev", one_file=True)) == [
        Path("/out.yaml")
    ]


# --- the generated entry points are the contract --------------------------------------------------


def test_compiled_callables_take_keywords_and_keep_their_sizes() -> None:
    d = dispatcher()
    c = d.compile(
        "add", {"a": TensorType("f32", (1, 1, 3, "N")), "b": TensorType("f32", (1, 1, 3, "N"))}
    )
    a = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    np.testing.assert_array_equal(c(b=a, a=a), 2 * a)
    np.testing.assert_array_equal(c(a, b=a), 2 * a)
    with pytest.raises(
        CallError, match=r"compiled for a \[1, 1, 3, N\], called with a of shape \(1, 1, 2, 4\)"
    ):
        c(a[:, :, :2], a[:, :, :2])
    with pytest.raises(CallError, match="missing input 'b'"):
        c(a)
    with pytest.raises(CallError, match="input 'a' given by position and by keyword"):
        c(a, a=a)


def test_required_attributes_are_required_keywords() -> None:
    t = TensorSig("x", ("N",), None, ("row",), False, False, None)
    y = TensorSig("y", ("N",), None, ("row",), False, False, None)
    attrs = (AttrSig("alpha", "float", None), AttrSig("beta", "float", 0.5))
    op = OpSig("scale", "", ("N",), (t,), (y,), attrs, ("f32",), "specs/scale.yaml", call="flat")
    text = ops_source([op], DEFAULT)
    assert "    alpha: float,\n" in text and "    beta: float = 0.5,\n" in text
    from clforge.generated import ops

    params = inspect.signature(ops.permute).parameters
    assert "p0" not in params and "axes" in params  # the convention sets them
    assert "register(" not in inspect.getsource(ops)  # clforge's own package is always there


def test_the_bench_covers_an_extensions_ops(registered: sources.Source) -> None:
    from clforge.tools.bench import peer_numpy
    from clforge.tools.bench.cases import extension_cases
    from clforge.tools.bench.clforge_side import requests
    from clforge.tools.bench.timing import Call

    reg = loader.default()
    (case,) = extension_cases(reg)
    assert case.op == "swiglu" and case.sizes["N"] >= 1 << 22 and case.memory_bound
    assert case.title.startswith("swiglu [swiglu] ")
    quick = case.at(True)
    (req,) = requests(reg, [quick])
    assert req["roots"] and req["reference"] == "swiglu_refs:swiglu"
    (call,) = peer_numpy.prepare(req)  # the NumPy peer runs its reference, one way
    assert isinstance(call, Call) and call.note == "the reference"


def test_lint_finds_the_tree_of_the_files_it_is_given() -> None:
    done = clforge("lint", str(EXAMPLE / "specs" / "swiglu.yaml"), cwd=ROOT.parent)
    assert done.returncode == 0, done.stdout + done.stderr  # templates from the example's tree
    assert "in no tree" not in done.stderr


@pytest.mark.slow
def test_lint_compile_builds_an_extensions_instances() -> None:
    done = clforge("--root", str(EXAMPLE), "lint", "--compile")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


# --- a kernel author's first op: clforge's families, extends: typos ----------------------------

SOFTPLUS_TEMPLATE = """\
{% import "clforge/_common/macros.cl.j2" as cf with context %}
{{ cf.header() }}
{{ cf.signature() }}
{
    const int i_ = get_global_id(0);
    if (i_ >= N) return;
    const ACC_ v_ = {{ cf.load("x", "i_") }};
    {{ cf.store("y", "i_", "(v_ > (ACC_)20 ? v_ : log1p(exp(v_)))") }};
}
"""
SOFTPLUS_REFERENCE = """import numpy as np


def softplus(inputs, attrs):
    return {"y": np.logaddexp(0.0, inputs["x"])}
"""


def softplus_extension(root: Path, spec: str) -> Path:
    """A copy of the example with an op `softplus` of clforge's family `unary`."""
    ext = shutil.copytree(EXAMPLE, root / "ext", ignore=shutil.ignore_patterns("__pycache__"))
    (ext / "templates" / "softplus").mkdir()
    (ext / "templates" / "softplus" / "generic.cl.j2").write_text(SOFTPLUS_TEMPLATE)
    # a module of its own: swiglu_refs may be imported already, from the example
    (ext / "softplus_refs.py").write_text(SOFTPLUS_REFERENCE)
    head = "# yaml-language-server: $schema=schema.json\nop: softplus\n"
    (ext / "specs" / "softplus.yaml").write_text(
        head + "reference: softplus_refs:softplus\nfamily: unary\n" + spec
    )
    return ext


SOFTPLUS_OWN = (
    "omit_variants: [half, cpu, gpu]\nvariants:\n  generic: {template: softplus/generic.cl.j2}\n"
)


def test_an_extensions_op_may_use_clforges_families(tmp_path: Path) -> None:
    ext = softplus_extension(tmp_path, SOFTPLUS_OWN)
    report = lint((), Tree.at(ext), freshness=False)
    assert report.findings == (), [str(d) for d in report.findings]
    # inheriting clforge's templates (written for clforge's ops) is refused, saying why
    (ext / "specs" / "softplus.yaml").write_text(
        (ext / "specs" / "softplus.yaml").read_text().replace("half, cpu, gpu", "half, gpu")
    )
    (finding,) = lint((), Tree.at(ext), freshness=False).findings
    assert str(finding).startswith("specs/softplus.yaml:4:9: error [family-override] ")
    assert "family 'unary' is clforge's" in finding.message
    assert "not its templates" in finding.message and "cpu has none" in finding.message
    # an unknown family lists clforge's too
    (ext / "specs" / "softplus.yaml").write_text(
        (ext / "specs" / "softplus.yaml").read_text().replace("family: unary", "family: unray")
    )
    (finding,) = lint((), Tree.at(ext), freshness=False).findings
    assert finding.rule == "unknown-family" and "did you mean 'unary'?" in finding.message
    assert "known families: binary, cast" in finding.message


@pytest.mark.slow
def test_an_extensions_op_of_a_clforge_family_generates_and_verifies(tmp_path: Path) -> None:
    ext = softplus_extension(tmp_path, SOFTPLUS_OWN)
    done = clforge("generate", cwd=ext)
    assert done.returncode == 0, done.stderr
    assert (ext / "swiglu_kernels" / "kernels" / "softplus" / "softplus__generic__f32.cl").is_file()
    verified = clforge("verify", "--json", cwd=ext)  # the extension's instances only
    assert verified.returncode == 0, verified.stdout + verified.stderr
    doc = json.loads(verified.stdout)
    assert doc["tree"] == "swiglu" and {r["tree"] for r in doc["results"]} == {"swiglu"}
    softplus = {r["instance"]: r["status"] for r in doc["results"] if r["op"] == "softplus"}
    assert softplus == {f"softplus__generic__{t}": "passed" for t in ("f16", "f32", "f64")} or (
        softplus
        == {f"softplus__generic__{t}": "passed" for t in ("f32", "f64")}
        | {"softplus__generic__f16": "skipped"}
    )


def test_a_typo_in_extends_suggests_the_op_meant(tmp_path: Path) -> None:
    ext = shutil.copytree(EXAMPLE, tmp_path / "ext")
    relu = (EXAMPLE / "specs" / "relu.yaml").read_text()
    (ext / "specs" / "sigmod.yaml").write_text(relu.replace("extends: relu", "extends: sigmod"))
    (ext / "specs" / "relu.yaml").write_text(relu.replace("extends: relu", "extends: rleu"))
    report = lint((), Tree.at(ext), freshness=False)
    found = {str(d).split(" error ")[0]: d.message for d in report.findings}
    assert "did you mean 'sigmoid'?" in found["specs/sigmod.yaml:3:10:"]
    assert "did you mean 'relu'?" in found["specs/relu.yaml:3:10:"]  # the file's name


SHARED_VARIANT = """\
  - name: cpu_shared
    arch: cpu
    doc: clforge's own cpu template for unary ops, rendered from this tree as it is
    dtypes: [f64]
    template: clforge/elementwise/unary_cpu.cl.j2
    priority: 3  # above clforge's own cpu variant of relu, which it renders alike
    params: {CHUNK: 4096, VW: 8, NT_MIN: 4194304}
    constraints: ["CHUNK % VW == 0"]
    launch: {global_size: ["cdiv(N, CHUNK)"], local_size: [1]}
"""


def shared_template_extension(root: Path) -> Path:
    """A copy of the example whose relu gets a variant rendered from clforge's own template."""
    ext = shutil.copytree(EXAMPLE, root / "ext", ignore=shutil.ignore_patterns("__pycache__"))
    relu = ext / "specs" / "relu.yaml"
    relu.write_text(relu.read_text() + SHARED_VARIANT)
    return ext


def test_an_extension_variant_may_render_a_clforge_template(tmp_path: Path) -> None:
    """clforge's templates import their siblings unprefixed; rendered as `clforge/...` from an
    extension, those names are clforge's too, never the extension's own."""
    ext = shared_template_extension(tmp_path)
    (ext / "templates" / "_common").mkdir()  # a decoy the shared template must not pick up
    (ext / "templates" / "_common" / "macros.cl.j2").write_text("{% error %}")
    report = lint((), Tree.at(ext), freshness=False)
    assert report.findings == (), [str(d) for d in report.findings]


@pytest.mark.slow
def test_a_variant_on_a_clforge_template_generates_and_verifies(tmp_path: Path) -> None:
    ext = shared_template_extension(tmp_path)
    assert clforge("generate", cwd=ext).returncode == 0
    kernel = ext / "swiglu_kernels" / "kernels" / "relu" / "relu__cpu_shared__f64.cl"
    assert "__kernel void relu__cpu_shared__f64(" in kernel.read_text()
    verified = clforge("verify", "relu", "--json", cwd=ext)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    status = {r["instance"]: r["status"] for r in json.loads(verified.stdout)["results"]}
    assert status["relu__cpu_shared__f64"] == "passed"
