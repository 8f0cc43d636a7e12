"""clforge as a user installs it: the wheel, in a fresh virtual environment, run from another
folder. Every test of the rest of the suite runs from the checkout's editable install, which finds
its data through the same package mapping; these show that the wheel alone is the product.

The fresh environment has no pip and no dependencies of its own: clforge's wheel is installed
into it (by this environment's pip, `--python`), and a `.pth` line puts this environment's
site-packages after its own, for numpy, pyopencl and the rest. A path from a `.pth` line is not
itself a site folder, so the editable install's import hook there never loads: `clforge` can only
come from the wheel (checked)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

import clforge
from clforge.core.tree import DEFAULT

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT / "generator" / "clforge"
EXAMPLE = ROOT / "examples" / "swiglu"
# what the checkout keeps beside the code and the wheel must not carry
_NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".git", "__pycache__", "*.egg-info", "build", "bench-results", ".*cache*", "tests"
)


def test_pyproject_lists_every_package() -> None:
    """Every package under generator/clforge is in pyproject's list (a package left out is a
    wheel that fails with ModuleNotFoundError once installed)."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {".".join(p.parent.relative_to(CODE.parent).parts) for p in CODE.rglob("__init__.py")}
    assert found - listed == set(), "packages missing from pyproject.toml's list"
    assert {n for n in listed if n.startswith("clforge.") and n.split(".")[1] != "data"} - {
        "clforge.generated"
    } <= found


def test_the_lowest_versions_ci_tests_are_the_lower_bounds() -> None:
    """`make test-lowest` installs .ci/lowest.txt: exactly pyproject's lower bounds, so the
    versions a user may install are the versions CI tested."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {}
    for dep in deps:
        name, _, version = dep.partition(">=")
        assert version, f"{dep}: every dependency has a lower bound"
        bounds[name.strip().lower()] = version.split(";")[0].strip()
    lines = (ROOT / ".ci" / "lowest.txt").read_text().splitlines()
    pins = dict(ln.split("==") for ln in lines if ln.strip() and not ln.startswith("#"))
    assert sorted(pins) == sorted(bounds)
    for name, version in bounds.items():  # 2.6 is pinned as 2.6.0
        assert pins[name] == version or pins[name] == f"{version}.0", (name, version, pins[name])


def test_the_checkout_is_the_default_tree_through_the_package() -> None:
    assert DEFAULT.root == ROOT
    assert DEFAULT.generated == ROOT / "generated"
    assert DEFAULT.writable


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clforge's wheel, built from a copy of the working tree (so that the build writes nothing
    into the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(base / "dist"), str(src)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (whl,) = (base / "dist").glob("clforge-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_carries_code_kernels_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"clforge"}, "one import name, nothing else at the top of site-packages"
    for py in CODE.rglob("*.py"):
        assert f"clforge/{py.relative_to(CODE).as_posix()}" in names
    for sub, folder in (("generated", "generated"), ("data/specs", "specs"),
                        ("data/templates", "templates"), ("data/tuning", "tuning"),
                        ("data/profiles", "profiles")):  # fmt: skip
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and f.suffix in (".cl", ".py", ".yaml", ".json", ".j2"):
                assert f"clforge/{sub}/{f.relative_to(ROOT / folder).as_posix()}" in names, f
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert any(n.endswith(".dist-info/entry_points.txt") for n in names)


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed (non-editable)."""
    env = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    py = env / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
         str(wheel)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "clforge_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env


def run(venv: Path, *argv: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A command of the fresh environment (its `clforge` or `python`), run in `cwd`."""
    exe = venv / "bin" / argv[0]
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CLFORGE_PATH")}
    done = subprocess.run(
        [str(exe), *argv[1:]], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working folder outside the checkout, with no clforge.yaml above it."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.mark.slow
def test_installed_clforge_is_the_wheel_with_its_data(venv: Path, elsewhere: Path) -> None:
    out = run(venv, "python", "-c", (
        "import clforge, json; from clforge.core import resources as r; "
        "from clforge.core.tree import DEFAULT as t; print(json.dumps({"
        "'file': clforge.__file__, 'version': clforge.__version__, 'installed': r.installed(),"
        "'writable': t.writable, 'specs': len(list(t.specs.glob('*.yaml'))),"
        "'tuning': len(list(t.tuning.glob('*.yaml'))),"
        "'kernels': len(list(t.generated.rglob('*.cl')))"
        "}))"
    ), cwd=elsewhere).stdout  # fmt: skip
    got = json.loads(out)
    assert str(venv) in got["file"] and str(ROOT) not in got["file"]
    assert got["version"] == clforge.__version__ and got["installed"] and not got["writable"]
    assert got["specs"] == len(list(DEFAULT.specs.glob("*.yaml")))
    assert got["tuning"] == len(list(DEFAULT.tuning.glob("*.yaml")))
    assert got["kernels"] == len(list(DEFAULT.generated.rglob("*.cl")))


@pytest.mark.slow
def test_installed_commands(venv: Path, elsewhere: Path) -> None:
    assert run(venv, "clforge", "--version", cwd=elsewhere).stdout.strip() == (
        f"clforge {clforge.__version__}"
    )
    assert "relu__generic__f32" in run(venv, "clforge", "list", "relu", cwd=elsewhere).stdout
    assert "pocl" in run(venv, "clforge", "profile", "--device", "pocl-cpu", cwd=elsewhere).stdout
    assert "0 errors" in run(venv, "clforge", "lint", cwd=elsewhere).stderr
    # explain sees the shipped tuning as the checkout does: the same choice, the same parameters
    # from the same file
    argv = ("explain", "matmul", "--dims", "M=256,N=256,K=256,BATCH=1,BA=1,BB=1")
    installed = run(venv, "clforge", *argv, cwd=elsewhere).stdout
    here = subprocess.run(
        [sys.executable, "-m", "clforge", *argv], capture_output=True, text=True, check=True
    ).stdout
    params = [ln for ln in installed.splitlines() if "params of the chosen" in ln]
    assert params and params == [ln for ln in here.splitlines() if "params of the chosen" in ln]
    assert installed.splitlines()[-1] == here.splitlines()[-1]
    run(venv, "clforge", "verify", "relu", cwd=elsewhere)
    # generating clforge's own tree would write into site-packages: refused, with the way out
    refused = run(venv, "clforge", "generate", cwd=elsewhere, check=False)
    assert refused.returncode != 0 and "site-packages" in refused.stderr + refused.stdout


@pytest.mark.slow
def test_installed_eager_calls_match_numpy(venv: Path, elsewhere: Path) -> None:
    code = """
import numpy as np
import clforge
from clforge import ops

rng = np.random.default_rng(0)
a = rng.standard_normal((67, 45)).astype(np.float32)
b = rng.standard_normal((45, 31)).astype(np.float32)
np.testing.assert_allclose(ops.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
x = rng.standard_normal((13, 101)).astype(np.float32)
e = np.exp(x - x.max(-1, keepdims=True))
y = ops.softmax(x, axis=-1)
np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(ops.add(x, x[:1]), x + x[:1], rtol=0, atol=0)
np.testing.assert_allclose(ops.sum(x, axis=1), x.sum(1), rtol=1e-4, atol=1e-4)
ex = clforge.explain("matmul", a, b)
assert ex.instance and ex.instance.startswith("matmul__"), ex
try:
    ops.matmul(a, a)
except clforge.CallError as err:
    assert "matmul" in str(err)
else:
    raise AssertionError("a bad call was accepted")
print("ok")
"""
    assert run(venv, "python", "-c", code, cwd=elsewhere).stdout.strip() == "ok"


@pytest.mark.slow
def test_an_extension_builds_on_the_installed_clforge(venv: Path, tmp_path: Path) -> None:
    """The worked example, copied out of the checkout: lint, generate (its templates reach
    clforge's shared macros; `extends:` clforge's relu) and verify, against the wheel; the
    pre-commit hook's own entry, as pre-commit would run it in that repository."""
    ext = tmp_path / "swiglu"
    shutil.copytree(EXAMPLE, ext, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.rmtree(ext / "swiglu_kernels")
    run(venv, "clforge", "generate", cwd=ext)
    assert (ext / "swiglu_kernels" / "registry.py").is_file()
    run(venv, "clforge", "generate", "--check", cwd=ext)
    run(venv, "clforge", "lint", cwd=ext)
    run(venv, "clforge", "verify", "swiglu", cwd=ext)
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    entry = hook["entry"].split()
    specs = [str(p.relative_to(ext)) for p in sorted((ext / "specs").glob("*.yaml"))]
    assert entry[0] == "clforge"
    run(venv, *entry, *specs, cwd=ext)
    # the GitHub Actions workflow of docs/linting.md: its clforge steps, after its pip install
    for cmd in workflow_commands():
        run(venv, *cmd, cwd=ext)


def workflow_commands() -> list[list[str]]:
    """The `clforge ...` steps of the GitHub Actions workflow that docs/linting.md shows (the one
    whose `run:` installs clforge with pip)."""
    text = (ROOT / "docs" / "linting.md").read_text()
    for block in text.split("```yaml")[1:]:
        doc = yaml.safe_load(block.split("```")[0])
        steps = [s.get("run", "") for job in (doc or {}).get("jobs", {}).values()
                 for s in job.get("steps", [])]  # fmt: skip
        if any(s.startswith("pip install") and "clforge" in s for s in steps):
            found = [s.split() for s in steps if s.startswith("clforge ")]
            assert found, "the workflow runs no clforge command"
            return found
    raise AssertionError("docs/linting.md shows no GitHub Actions workflow that installs clforge")


@pytest.mark.slow
def test_tuning_on_an_installed_clforge_goes_to_the_user_folder(
    venv: Path, elsewhere: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user-tuning"
    site = Path(run(venv, "python", "-c", "import clforge; print(clforge.__file__)",
                    cwd=elsewhere).stdout.strip()).parent  # fmt: skip
    before = sorted(p.name for p in (site / "data" / "tuning").iterdir())
    done = subprocess.run(
        [str(venv / "bin" / "clforge"), "tune", "relu", "--dtypes", "f32", "--shapes",
         "relu:N=4096", "--budget", "20", "--repeats", "3"],
        cwd=elsewhere, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "CLFORGE_TUNING_PATH": str(user)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(user.glob("*.yaml")), "the tuning file goes to $CLFORGE_TUNING_PATH"
    assert sorted(p.name for p in (site / "data" / "tuning").iterdir()) == before
