"""`clforge lint` and `clforge schema`: the rule catalogue, the deliberately broken specs of
tests/lint_cases with their exact findings, output formats, exit codes, the JSON Schema, the
pre-commit hook and the --compile path.

Each folder of tests/lint_cases is one case: its spec files go into specs/ of a fresh tree (its
families/ folder into specs/families/; with a copy of templates/, plus the case's own
templates/), `args.txt` holds the lint arguments (default `--no-freshness`; without that flag the
tree is generated first and the case's generated/ files are laid over it), and `expected.txt` is
the exact standard output.
`CLFORGE_UPDATE_EXPECTED=1 pytest tests/test_lint.py` rewrites the expected files; review the diff.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clforge.core.tree import DEFAULT, Tree
from clforge.emit.generate import generate
from clforge.errors import Location, SpecError
from clforge.lint import checks as lint_mod
from clforge.lint import rules
from clforge.lint.checks import lint
from clforge.lint.device_build import compiler_errors
from clforge.spec.load import check_text
from clforge.spec.schema import json_schema, schema_text
from clforge.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "lint_cases"
CASE_FILES = {"expected.txt", "args.txt"}
UPDATE = os.environ.get("CLFORGE_UPDATE_EXPECTED") == "1"
MODELINE = "# yaml-language-server: $schema=schema.json\n"

RELU = """\
op: relu
reference: clforge.references.elementwise:relu
expr: "((x) < (V)0 ? (V)0 : (x))"
dims: [N]
inputs:
  x: [N]
outputs:
  y: [N]
dtypes: [f32]
variants:
  - name: generic
    arch: generic
    template: elementwise/unary_generic.cl.j2
    launch: {global_size: [N]}
"""


def make_tree(root: Path, case: Path | None = None) -> Tree:
    """A clforge tree under `root`: templates/ copied from this repository, specs/ from `case`."""
    shutil.copytree(ROOT / "templates", root / "templates")
    (root / "specs").mkdir()
    if case is not None:
        for f in sorted(case.iterdir()):
            if f.is_file() and f.name not in CASE_FILES:
                shutil.copyfile(f, root / "specs" / f.name)
        if (case / "templates").is_dir():
            shutil.copytree(case / "templates", root / "templates", dirs_exist_ok=True)
        if (case / "families").is_dir():
            shutil.copytree(case / "families", root / "specs" / "families")
    return Tree(root)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def device() -> None:
    try:
        from clforge.device.discovery import default_device

        default_device()
    except Exception as exc:  # no pyopencl, no platform, no device that builds
        pytest.skip(f"no OpenCL device: {exc}")


# --- the catalogue ------------------------------------------------------------------------------


def _emitted_rule_ids() -> set[str]:
    """Every rule id passed as a literal where the package makes a finding:
    Diagnostic(loc, "id", ...), col.add(keys, "id", ...), rules.diagnostic(loc, "id", ...)."""
    found: set[str] = set()
    for path in sorted((ROOT / "generator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if name not in ("Diagnostic", "add", "diagnostic"):
                continue
            args = list(node.args[1:2]) + [k.value for k in node.keywords if k.arg == "rule"]
            for a in args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    found.add(a.value)
    return found


def test_catalogue_records_are_well_formed() -> None:
    ids = [r.id for r in rules.RULES]
    assert len(ids) == len(set(ids))
    for r in rules.RULES:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", r.id), r.id
        assert r.description and "\n" not in r.description and len(r.description) <= 120


def test_every_emitted_rule_is_catalogued_and_every_rule_is_emitted() -> None:
    emitted = _emitted_rule_ids()
    assert emitted - set(rules.BY_ID) == set(), "rule ids missing from generator/rules.py"
    assert set(rules.BY_ID) - emitted == set(), "catalogued rules that no code emits"


def test_an_unknown_rule_id_reads_as_internal_error() -> None:
    from clforge.errors import Location

    d = rules.diagnostic(Location("x.yaml", 1, 1), "no-such-rule", "boom")
    assert d.rule == "internal-error"


def test_list_rules(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "lint", "--list-rules")
    assert rc == 0
    lines = out.splitlines()
    assert [ln.split()[0] for ln in lines] == [r.id for r in rules.RULES]
    for ln, r in zip(lines, rules.RULES, strict=True):
        assert ln.split(None, 2)[1] == r.severity.value
        assert ln.rstrip().endswith(r.description)


# --- the deliberately broken specs ----------------------------------------------------------------

CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASE_NAMES)
def test_lint_case(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = CASES / case
    args_file = src / "args.txt"
    args = args_file.read_text().split() if args_file.exists() else ["--no-freshness"]
    if "--compile" in args:
        pytest.importorskip("pyopencl")
        try:
            from clforge.device.discovery import default_device

            default_device()
        except Exception as exc:
            pytest.skip(f"no OpenCL device: {exc}")
    make_tree(tmp_path, src)
    if "--no-freshness" not in args:
        assert main(["--root", str(tmp_path), "generate"]) == 0
        if (src / "generated").is_dir():
            shutil.copytree(src / "generated", tmp_path / "generated", dirs_exist_ok=True)
        capsys.readouterr()
    rc, out, err = cli(capsys, "--root", str(tmp_path), "lint", *args)
    expected = src / "expected.txt"
    if UPDATE:
        expected.write_text(out, encoding="utf-8")
    assert out == expected.read_text(encoding="utf-8")
    assert rc == (1 if " error [" in out else 0)
    assert "Traceback" not in err
    assert str(tmp_path) not in out  # paths are relative to the tree


def test_cases_cover_every_rule() -> None:
    seen: set[str] = set()
    for case in CASE_NAMES:
        seen |= set(re.findall(r"\[([a-z-]+)\]", (CASES / case / "expected.txt").read_text()))
    # internal-error cannot come from a spec (the fuzz test shows it); see the monkeypatch test
    spec_rules = {r.id for r in rules.RULES if r.stage != "profile"}
    assert spec_rules - seen == {"internal-error"}


# --- the project's own specs ------------------------------------------------------------------


def test_project_specs_lint_clean() -> None:
    report = lint()
    assert [str(d) for d in report.findings] == []
    ops = list(DEFAULT.specs.glob("*.yaml"))
    families = list(DEFAULT.specs.glob("families/*.yaml"))
    assert families and len(report.files) == len(ops) + len(families)


def test_plain_lint_needs_no_opencl() -> None:
    """`clforge lint` without --compile runs where pyopencl cannot even be imported."""
    code = (
        "import sys; sys.modules['pyopencl'] = None\n"
        "from clforge.tools.cli import main\n"
        "raise SystemExit(main(['lint']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_project_specs_have_the_modeline() -> None:
    for f in sorted(DEFAULT.specs.glob("*.yaml")):
        assert f.read_text(encoding="utf-8").startswith(MODELINE), f.name
    for f in sorted(DEFAULT.specs.glob("families/*.yaml")):
        text = f.read_text(encoding="utf-8")
        assert text.startswith(MODELINE.replace("schema.json", "../schema.json")), f.name


# --- output formats and exit codes ------------------------------------------------------------


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    make_tree(tmp_path, CASES / "names")
    return tmp_path


def test_text_format(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, "--root", str(broken), "lint", "--no-freshness")
    assert rc == 1
    lines = out.splitlines()
    assert lines == sorted(lines) and len(lines) == 3
    for ln in lines:
        assert re.fullmatch(r"specs/[\w.-]+\.yaml:\d+:\d+: (error|warning) \[[a-z-]+\] .+", ln)
    assert err.strip() == "clforge lint: 4 files, 3 errors, 0 warnings"


def test_json_format(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "--root", str(broken), "lint", "--no-freshness", "--format", "json")
    assert rc == 1
    doc = json.loads(out)
    assert doc["version"] == 1 and doc["errors"] == 3 and doc["warnings"] == 0
    assert doc["files"] == [
        f"specs/{n}" for n in ("exp.v2.yaml", "exp.yaml", "my-op.yaml", "wrong.yaml")
    ]
    first = doc["findings"][0]
    assert set(first) == {"path", "line", "col", "severity", "rule", "message"}
    assert (first["path"], first["line"], first["col"], first["rule"]) == (
        "specs/exp.yaml",
        2,
        5,
        "duplicate-name",
    )


def test_github_format(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "--root", str(broken), "lint", "--no-freshness", "--format", "github")
    assert rc == 1
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(
        "::error file=specs/exp.yaml,line=2,col=5,title=clforge lint [duplicate-name]::op 'exp'"
    )


def test_github_format_escapes() -> None:
    from clforge.errors import Diagnostic, Location, Severity

    report = lint_mod.Report(
        (Diagnostic(Location("specs/a,b:c.yaml"), "modeline", "50%\nnext", Severity.WARNING),),
        ("specs/a,b:c.yaml",),
    )
    assert lint_mod.format_github(report) == (
        "::warning file=specs/a%2Cb%3Ac.yaml,title=clforge lint [modeline]::50%25%0Anext\n"
    )


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_tree(tmp_path)
    root = str(tmp_path)
    (tmp_path / "specs" / "relu.yaml").write_text(MODELINE + RELU)
    assert main(["--root", root, "generate"]) == 0
    assert cli(capsys, "--root", root, "lint")[0] == 0
    (tmp_path / "specs" / "relu.yaml").write_text(RELU)  # the same spec without the modeline
    rc, out, _ = cli(capsys, "--root", root, "lint")
    assert rc == 0
    assert out == (
        "specs/relu.yaml:1:1: warning [modeline] the file does not start with "
        "`# yaml-language-server: $schema=schema.json`, so YAML editors cannot complete and check "
        "its keys (the schema is written by `clforge schema --write`)\n"
    )
    assert cli(capsys, "--root", root, "lint", "--strict")[0] == 1
    rc, _, err = cli(capsys, "--root", root, "lint", str(tmp_path / "nope.yaml"))
    assert rc == 2 and "no such file or folder" in err
    rc, _, err = cli(capsys, "--root", root, "lint", str(tmp_path / "templates"))
    assert rc == 2 and "no spec files" in err
    rc, _, err = cli(capsys, "--root", root, "lint", "--compile", str(CASES / "modeline"))
    assert rc == 2 and "--compile" in err
    with pytest.raises(SystemExit) as exc:
        main(["lint", "--format", "xml"])
    assert exc.value.code == 2
    capsys.readouterr()


def test_paths_outside_the_tree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files outside specs/ are linted as given; generated/ is not checked for them."""
    monkeypatch.chdir(ROOT)
    rc, out, _ = cli(capsys, "lint", "tests/lint_cases/modeline", "tests/lint_cases/coverage/")
    assert rc == 1
    assert [ln.split(": ", 1)[0] for ln in out.splitlines()] == [
        "tests/lint_cases/coverage/relu.yaml:10:3",
        "tests/lint_cases/modeline/relu.yaml:1:1",
    ]


def test_freshness_is_the_generate_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = make_tree(tmp_path)
    (tmp_path / "specs" / "relu.yaml").write_text(MODELINE + RELU)
    stale = [str(d) for d in lint((), layout).findings]
    assert any(
        s.startswith("generated/registry.py: error [stale-output] is missing") for s in stale
    )
    assert all("[stale-output] is missing" in s for s in stale)
    generate(layout)
    assert lint((), layout).findings == ()
    assert lint((), layout, freshness=False).findings == ()


def test_an_internal_error_is_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tree(tmp_path)
    (tmp_path / "specs" / "relu.yaml").write_text(MODELINE + RELU)

    def broken_check(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in a rule")

    monkeypatch.setattr(lint_mod, "check_text", broken_check)
    rc, out, err = cli(capsys, "--root", str(tmp_path), "lint", "--no-freshness")
    assert rc == 1
    assert out == (
        "specs/relu.yaml: error [internal-error] clforge failed while checking this file: "
        "RuntimeError: a bug in a rule; please report it\n"
    )
    assert "Traceback" not in err


# --- generation refuses what lint refuses -----------------------------------------------------


def test_generation_refuses_ambiguous_variants(tmp_path: Path) -> None:
    layout = make_tree(tmp_path, CASES / "ambiguity")
    with pytest.raises(SpecError) as exc:
        generate(layout, check=True)
    assert {d.rule for d in exc.value.diagnostics} == {"ambiguous-variants"}


def test_generation_refuses_broken_constraints(tmp_path: Path) -> None:
    layout = make_tree(tmp_path)
    spec = RELU + (
        "  - name: cpu\n    arch: cpu\n    template: elementwise/unary_cpu.cl.j2\n"
        "    params: {CHUNK: 100}\n    constraints: ['CHUNK % 8 == 0']\n"
        "    launch: {global_size: ['cdiv(N, CHUNK)'], local_size: [1]}\n"
    )
    (tmp_path / "specs" / "relu.yaml").write_text(MODELINE + spec)
    with pytest.raises(SpecError) as exc:
        generate(layout, check=True)
    assert [d.rule for d in exc.value.diagnostics] == ["constraint"]


# --- families -----------------------------------------------------------------------------------


def test_linting_one_op_of_a_broken_family_reports_the_family_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tree(tmp_path, CASES / "family_broken")
    rc, out, _ = cli(
        capsys,
        "--root",
        str(tmp_path),
        "lint",
        "--no-freshness",
        str(tmp_path / "specs" / "exp.yaml"),
        str(tmp_path / "specs" / "tanh.yaml"),
    )
    assert rc == 1
    assert [ln.split(" error ")[0] for ln in out.splitlines()] == [
        "specs/families/unary.yaml:4:7:",
        "specs/families/unary.yaml:9:7:",
        "specs/families/unary.yaml:18:19:",
    ]


def test_generation_refuses_a_broken_family_even_without_ops(tmp_path: Path) -> None:
    layout = make_tree(tmp_path, CASES / "family_broken")
    for f in (tmp_path / "specs").glob("*.yaml"):
        f.unlink()
    (tmp_path / "specs" / "relu.yaml").write_text(MODELINE + RELU)
    with pytest.raises(SpecError) as exc:
        generate(layout, check=True)
    assert {d.loc.path for d in exc.value.diagnostics} == {
        "specs/families/binary.yaml",
        "specs/families/reduce.yaml",
        "specs/families/unary.yaml",
    }


def test_a_member_and_its_full_spec_load_alike(tmp_path: Path) -> None:
    """The shipped relu, as an op of the unary family and written out in full."""
    layout = make_tree(tmp_path)
    shutil.copytree(DEFAULT.specs / "families", tmp_path / "specs" / "families")
    member = (DEFAULT.specs / "relu.yaml").read_text(encoding="utf-8")
    spec, found = check_text(member, "specs/relu.yaml", layout)
    assert found == [] and spec is not None and spec.membership is not None
    full = spec.spec.model_dump(exclude_defaults=True)
    again, found = check_text(yaml.safe_dump(full), "specs/relu.yaml", layout)
    assert found == [] and again is not None and again.spec == spec.spec
    # an inherited value is located in the family file, an override in the member's
    assert spec.where("variants", 0, "template").path == "specs/families/unary.yaml"
    assert spec.where("variants", 2, "dtypes") == Location("specs/relu.yaml", 9, 17)
    assert spec.where("dtypes") == Location("specs/relu.yaml", 7, 9)


# --- the JSON Schema ----------------------------------------------------------------------------


def test_committed_schema_is_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    assert (DEFAULT.specs / "schema.json").read_text(encoding="utf-8") == schema_text()
    assert cli(capsys, "schema", "--check")[0] == 0


def test_schema_write_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_tree(tmp_path)
    root = str(tmp_path)
    rc, _, err = cli(capsys, "--root", root, "schema", "--check")
    assert rc == 1 and "clforge schema --write" in err
    assert cli(capsys, "--root", root, "schema", "--write")[0] == 0
    text = (tmp_path / "specs" / "schema.json").read_text(encoding="utf-8")
    assert text.endswith("}\n") and json.loads(text) == json_schema()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert cli(capsys, "--root", root, "schema", "--check")[0] == 0
    rc, out, _ = cli(capsys, "--root", root, "schema")
    assert rc == 0 and out == text


def test_schema_accepts_the_shorthands() -> None:
    schema = json_schema()
    tensor = schema["$defs"]["TensorSpec"]
    assert {"type": "array", "items": {"type": "string"}}.items() <= tensor["anyOf"][0].items()
    arch = schema["$defs"]["VariantSpec"]["properties"]["arch"]
    assert arch["anyOf"][0] == {"type": "string"}
    assert "constraints" in schema["$defs"]["VariantSpec"]["properties"]


def _schema_keys() -> set[str]:
    schema = json_schema()
    keys: set[str] = set()
    for d in schema["$defs"].values():
        for part in [d, *d.get("anyOf", [])]:
            keys |= set(part.get("properties", {}))
    return keys


def _doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


def test_docs_document_every_spec_key() -> None:
    section = _doc("spec-format.md")
    missing = sorted(k for k in _schema_keys() if f"`{k}`" not in section)
    assert missing == []


def test_docs_list_every_rule() -> None:
    section = _doc("linting.md")
    for r in rules.RULES:
        assert f"| `{r.id}` | {r.severity.value} | {r.description} |" in section, r.id


# --- pre-commit and the Makefile --------------------------------------------------------------


def test_pre_commit_hook() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = [h for h in hooks if h["id"] == "clforge-lint"]
    assert hook["language"] == "python" and hook["pass_filenames"] is True
    assert hook["entry"].split()[0] == "clforge" and "lint" in hook["entry"].split()
    files = re.compile(hook["files"])
    assert files.search("specs/add.yaml") and files.search("specs/softmax.yml")
    assert not files.search("specs/schema.json") and not files.search("templates/a.yaml")


def test_make_targets_run_the_linter() -> None:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("lint", "test"):
        m = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
        assert m, target
        body = m.group(1)
        assert "$(BIN)/clforge lint" in body and "$(BIN)/clforge schema --check" in body
    test_body = re.search(r"^test:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert test_body and test_body.group(1).index("clforge lint") < test_body.group(1).index(
        "pytest"
    )


# --- --compile ----------------------------------------------------------------------------------


def test_compiler_log_lines() -> None:
    pocl = (
        "Build on <pyopencl.Device 'pthread'>:\n\n"
        "error: /root/.cache/pocl/kcache/tempfile_x.cl:8:20: use of undeclared identifier 'b'\n"
        "warning: /root/.cache/pocl/kcache/tempfile_x.cl:3:1: unused\n"
    )
    clang = "<source>:12:5: error: expected ';'\n<source>:2:1: note: here\n"
    assert compiler_errors(pocl) == [(8, 20, "use of undeclared identifier 'b'")]
    assert compiler_errors(clang) == [(12, 5, "expected ';'")]
    assert compiler_errors("clBuildProgram failed: BUILD_PROGRAM_FAILURE") == [
        (0, 0, "clBuildProgram failed: BUILD_PROGRAM_FAILURE")
    ]


def test_compile_a_clean_spec(
    tmp_path: Path, device: None, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tree(tmp_path)
    (tmp_path / "specs" / "relu.yaml").write_text(MODELINE + RELU)
    root = str(tmp_path)
    assert main(["--root", root, "generate"]) == 0
    capsys.readouterr()
    rc, out, err = cli(capsys, "--root", root, "lint", "--compile")
    assert (rc, out) == (0, "")
    assert err.strip() == "clforge lint: 1 file, 0 errors, 0 warnings"


def test_invalid_utf8_is_located_at_its_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tree(tmp_path)
    spec = tmp_path / "specs" / "relu.yaml"
    lines = (ROOT / "specs" / "relu.yaml").read_bytes().split(b"\n")
    lines[2] = b'doc: "caf\xc3\xa9 \xff"'  # line 3: a valid 2-byte character, then a bad byte
    spec.write_bytes(b"\n".join(lines))
    rc, out, _ = cli(capsys, "--root", str(tmp_path), "lint", "--no-freshness", "--format", "json")
    assert rc == 1
    (finding,) = json.loads(out)["findings"]
    assert (finding["path"], finding["line"], finding["col"], finding["rule"]) == (
        "specs/relu.yaml",
        3,
        12,  # d-o-c-:-space-"-c-a-f-é-space, then the bad byte: characters, not bytes
        "io",
    )
    assert "byte 0xff is not valid UTF-8" in finding["message"]


def test_a_typo_in_one_variant_hides_no_template_error_in_another(tmp_path: Path) -> None:
    """Every independent finding in one run, for an `extends:` file and an op of a family as
    for a plain op: the variants without findings still have their templates rendered."""
    case = CASES / "every_variant_of_a_file"
    tree = make_tree(tmp_path, case)
    report = lint((), tree, freshness=False)
    for name in ("relu", "sigmoid"):
        rules_found = {d.rule for d in report.findings if d.loc.path == f"specs/{name}.yaml"}
        assert rules_found == {"unknown-key", "template-render"}, name
