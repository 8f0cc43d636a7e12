"""The GPU check kit (`tools/gpu-check`), here without a GPU: its preparation step's pip commands,
its stop when no NVIDIA driver is there, and its run step end to end against the local device,
with the Python at hand as it is and with clforge installed from the wheel the kit builds.

A lent GPU machine is scarce; these keep a typo in the kit from spending one. Downloading the
wheelhouse is left to `make gpu-check-dry` (the suite stays off the network): clforge's own wheel
is built without it (`prepare --clforge-only`, into a wheelhouse of that wheel alone).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import yaml

import clforge

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "tools" / "gpu-check"
STATUS = re.compile(r"^(\w+):\s+(ok|FAIL|TIMEOUT|STOP|skipped)\b", re.MULTILINE)
QUICK_TEST = "test_instance_matches_numpy and relu__generic__f32 and not leaky"


def kit(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, root: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """The kit of the tree `root` (this one, or a snapshot of it)."""
    # no PYTHONPATH: the kit finds clforge installed (editable here), or installs its wheel
    dropped = ("OUT", "GPU_CHECK_NVIDIA_ROOT", "PYTHONPATH")
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        ["bash", str(root / KIT.relative_to(ROOT)), *args],
        cwd=root,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_locally(
    out: Path,
    tests: str,
    ops: str,
    tune_budget: int,
    wheels: Path | None = None,
    root: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """The kit's run step against the local device: without installing anything, or installing
    the wheelhouse `wheels` (here: clforge's wheel alone, over this Python's packages)."""
    install = ["--wheels", str(wheels)] if wheels else ["--skip-install"]
    return kit(
        "run",
        *install,
        "--skip-driver",
        "--python",
        sys.executable,
        "--device-match",
        local_device(),
        "--out",
        str(out),
        "--jobs",
        "1",
        "--tests",
        tests,
        "--ops",
        ops,
        "--tune-budget",
        str(tune_budget),
        root=root,
    )


def snapshot(dest: Path) -> Path:
    """A copy of this tree's files (git's tracked and untracked-but-not-ignored ones, without
    .git): a tree nobody edits while the kit checks an installed wheel against it."""
    if shutil.which("git") is None:
        pytest.skip("needs git to list the tree's files")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def statuses(out: Path) -> dict[str, str]:
    """Each step's status in summary.txt (its last line, `result: ...`, left out)."""
    found = dict(STATUS.findall((out / "summary.txt").read_text(encoding="utf-8")))
    found.pop("result", None)
    return found


def code_line(out: Path) -> str:
    """summary.txt's `code:` line: where clforge was imported from, checked against the tree."""
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    return next(ln for ln in summary.splitlines() if ln.startswith("code: "))


def clforge_wheelhouse(dest: Path, root: Path) -> Path:
    """A wheelhouse of clforge's wheel alone, built from the tree `root` for this Python
    (offline)."""
    dest.mkdir()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (dest / "gpu-check-manifest.txt").write_text(
        f"python {version}\nabi cp{version.replace('.', '')}\n", encoding="utf-8"
    )
    done = kit(
        "prepare", "--clforge-only", "--dest", str(dest), "--host-python", sys.executable, root=root
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return next(dest.glob("clforge-*.whl"))


def local_device() -> str:
    """What selects the device the rest of the suite runs on: $CLFORGE_DEVICE, else the name of
    the first device that builds kernels (as `clforge devices` prints it)."""
    if os.environ.get("CLFORGE_DEVICE", "").strip():
        return os.environ["CLFORGE_DEVICE"].strip()
    done = subprocess.run(
        [sys.executable, "-m", "clforge", "devices"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    suffix = ": builds kernels"
    label = next(ln for ln in done.stdout.splitlines() if ln.endswith(suffix))[: -len(suffix)]
    return label.rsplit(": ", 1)[-1]


def test_prepare_dry_run_prints_the_pip_commands() -> None:
    done = kit("prepare", "--dry-run", "--host-python", sys.executable)
    assert done.returncode == 0, done.stderr
    download, wheel = done.stdout.splitlines()
    words = download.split()
    assert words[1:4] == ["-m", "pip", "download"]
    for flag in (
        "--only-binary=:all:",
        "--python-version 3.12",
        "--abi cp312",
        "--implementation cp",
        "--platform manylinux2014_x86_64",
        "--platform manylinux_2_28_x86_64",
    ):
        assert flag in done.stdout, flag
    names = {re.split(r"[\\<>=!~;\s]", w)[0] for w in words[words.index("--dest") + 2 :]}
    # the runtime and test requirements of pyproject.toml, less what the GPU machine has or needs
    assert {"pyopencl", "jinja2", "pyyaml", "pydantic", "pytest", "hypothesis"} <= names
    assert not names & {"numpy", "pocl-binary-distribution", "ruff", "mypy", "import-linter"}
    # clforge itself: its wheel, built from this tree into the same wheelhouse
    partial = str(ROOT / ".gpu-wheels.partial")
    assert wheel.split()[1:6] == ["-m", "pip", "wheel", "--quiet", "--no-deps"]
    assert wheel.split()[-3:] == ["-w", partial, str(ROOT)]


def test_prepare_clforge_only_needs_a_wheelhouse_and_keeps_its_python(tmp_path: Path) -> None:
    done = kit(
        "prepare", "--clforge-only", "--dest", str(tmp_path), "--host-python", sys.executable
    )
    assert done.returncode == 2 and "no wheelhouse" in done.stderr
    done = kit("prepare", "--clforge-only", "--python", "3.12", "--dest", str(tmp_path))
    assert done.returncode == 2 and "no --python" in done.stderr


def test_run_stops_without_a_clforge_wheel(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (wheels / "gpu-check-manifest.txt").write_text(f"python {version}\n", encoding="utf-8")
    out = tmp_path / "out"
    done = kit(
        "run",
        "--skip-driver",
        "--wheels",
        str(wheels),
        "--python",
        sys.executable,
        "--out",
        str(out),
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert statuses(out) == {"driver": "skipped", "install": "STOP"}
    assert "no clforge wheel" in (out / "summary.txt").read_text(encoding="utf-8")


def test_prepare_takes_another_python_and_refuses_a_bad_one() -> None:
    done = kit("prepare", "--dry-run", "--python", "3.13", "--host-python", sys.executable)
    assert done.returncode == 0 and "--abi cp313" in done.stdout
    bad = kit("prepare", "--dry-run", "--python", "312", "--host-python", sys.executable)
    assert bad.returncode == 2 and "3.12" in bad.stderr


def test_run_stops_clearly_without_an_nvidia_driver(tmp_path: Path) -> None:
    (tmp_path / "nvidia" / "lib64").mkdir(parents=True)
    out = tmp_path / "out"
    done = kit(
        "run",
        "--skip-install",
        "--python",
        sys.executable,
        "--out",
        str(out),
        env={"GPU_CHECK_NVIDIA_ROOT": str(tmp_path / "nvidia")},
    )
    assert done.returncode == 3
    assert "no NVIDIA OpenCL driver" in done.stderr
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    assert statuses(out) == {"driver": "STOP"}
    assert "result: STOPPED at driver" in summary and "libnvidia-opencl.so" in summary
    assert sorted(p.name for p in out.iterdir()) == ["summary.txt"]


def test_driver_writes_an_icd_file_naming_the_library(tmp_path: Path) -> None:
    lib64 = tmp_path / "nvidia" / "lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libnvidia-opencl.so.580.1").write_bytes(b"")
    (lib64 / "libnvidia-opencl.so.1").symlink_to("libnvidia-opencl.so.580.1")
    done = kit(
        "driver",
        "--icd-dir",
        str(tmp_path / "icd"),
        env={"GPU_CHECK_NVIDIA_ROOT": str(tmp_path / "nvidia")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(lib64 / "libnvidia-opencl.so.1")
    icd = (tmp_path / "icd" / "nvidia.icd").read_text(encoding="utf-8")
    assert icd.strip() == str((lib64 / "libnvidia-opencl.so.580.1").resolve())


@pytest.mark.slow
def test_run_against_the_local_device(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_locally(out, QUICK_TEST, "relu,softmax", 5)
    assert done.returncode == 0, done.stdout + done.stderr
    got = statuses(out)
    assert got.pop("tune") in ("skipped", "ok")
    assert got == {
        "driver": "skipped",
        "install": "skipped",
        "devices": "ok",
        "profile": "ok",
        "tests": "ok",
        "explain": "ok",
    }
    assert "result: ok" in (out / "summary.txt").read_text(encoding="utf-8")
    # clforge as this Python imports it, without PYTHONPATH (here: this tree, installed editable)
    code = Path(clforge.__file__).resolve().parent
    assert code_line(out).startswith(f"code: {code}: ")
    if code == ROOT / "generator" / "clforge":
        assert "this tree's source, installed editable" in code_line(out)
    assert "NOT" not in code_line(out)
    assert "builds kernels" in (out / "devices.txt").read_text(encoding="utf-8")
    profile = yaml.safe_load((out / "profile-live.yaml").read_text(encoding="utf-8"))
    assert isinstance(profile["name"], str) and profile["name"]
    suite = ET.parse(out / "junit.xml").getroot().iter("testsuite")
    counts = [
        (int(s.get("tests", 0)), int(s.get("failures", 0)), int(s.get("errors", 0))) for s in suite
    ]
    assert counts == [(1, 0, 0)]
    explain = json.loads((out / "explain.json").read_text(encoding="utf-8"))
    calls = {(c["op"], c["dtype"]): c for c in explain["calls"]}
    assert {op for op, _ in calls} == {"relu", "softmax"}
    assert ("relu", "i32") in calls and ("softmax", "f16") in calls
    assert all(c["exit"] == 0 and c["selection"]["chosen"] for c in calls.values())
    assert explain["without_choice"] == 0
    # the device tool brings back at most 8 files
    assert len(list(out.iterdir())) <= 8


@pytest.mark.slow
def test_run_goes_on_past_a_failing_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_locally(out, "no_test_has_this_name", "relu", 0)
    assert done.returncode == 1
    got = statuses(out)
    assert got["tests"] == "FAIL" and got["explain"] == "ok"
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    assert "pytest exit 5" in summary and "result: FINDINGS in tests" in summary


@pytest.mark.slow
def test_run_installs_clforge_from_its_wheel_and_flags_another(tmp_path: Path) -> None:
    """As on the GPU machine: clforge imported from the wheel `prepare` built from the tree (the
    tests run from the tree's tests/); a wheel that is not the tree's is a finding. On a snapshot
    of this tree, which is not a git checkout (the device tool's copy may not be either)."""
    tree = snapshot(tmp_path / "tree")
    wheels = tmp_path / "wheels"
    wheel = clforge_wheelhouse(wheels, tree)
    manifest = (wheels / "gpu-check-manifest.txt").read_text(encoding="utf-8")
    assert f"clforge {wheel.name} built " in manifest and f"wheel {wheel.name}" in manifest
    assert "from not a git checkout" in manifest

    out = tmp_path / "out"
    done = run_locally(out, QUICK_TEST, "relu", 0, wheels=wheels, root=tree)
    assert done.returncode == 0, done.stdout + done.stderr
    got = statuses(out)
    assert got.pop("tune") in ("skipped", "ok")
    assert set(got.values()) == {"ok", "skipped"} and got["install"] == "ok"
    line = code_line(out)
    assert re.match(r"code: /\S+/site/clforge: the wheel clforge-\S+, built from this tree", line)
    assert "NOT" not in line and "leaves out" not in line

    # the same wheel with one file changed and one left out
    changed, dropped = "clforge/generated/registry.py", "clforge/tools/bench/report.py"
    tampered = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):  # the wheel's list, less `dropped`
                rows = data.decode().splitlines(keepends=True)
                data = "".join(r for r in rows if not r.startswith(f"{dropped},")).encode()
            if item.filename != dropped:
                dst.writestr(item, data + b"# changed\n" if item.filename == changed else data)
    tampered.replace(wheel)
    out = tmp_path / "out-tampered"
    done = run_locally(out, QUICK_TEST, "relu", 0, wheels=wheels, root=tree)
    assert done.returncode == 1, done.stdout + done.stderr
    line = code_line(out)
    assert ": NOT the wheel built from this tree: 1 of the " in line and changed in line
    assert "leaves out 1 of the tree's files: generator/clforge/tools/bench/report.py" in line
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    assert "result: FINDINGS in code" in summary
