"""The GPU check kit (`tools/gpu-check`), here without a GPU: its preparation step's pip command,
its stop when no NVIDIA driver is there, and its run step end to end against the local device.

A lent GPU machine is scarce; these keep a typo in the kit from spending one. Downloading the
wheelhouse is left to `make gpu-check-dry` (the suite stays off the network).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "tools" / "gpu-check"
STATUS = re.compile(r"^(\w+):\s+(ok|FAIL|TIMEOUT|STOP|skipped)\b", re.MULTILINE)


def kit(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPU_CHECK_NVIDIA_ROOT")}
    return subprocess.run(
        ["bash", str(KIT), *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_locally(
    out: Path, tests: str, ops: str, tune_budget: int
) -> subprocess.CompletedProcess[str]:
    """The kit's run step against the local device, without installing anything."""
    return kit(
        "run",
        "--skip-install",
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
    )


def statuses(out: Path) -> dict[str, str]:
    """Each step's status in summary.txt (its last line, `result: ...`, left out)."""
    found = dict(STATUS.findall((out / "summary.txt").read_text(encoding="utf-8")))
    found.pop("result", None)
    return found


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


def test_prepare_dry_run_prints_the_pip_command() -> None:
    done = kit("prepare", "--dry-run", "--host-python", sys.executable)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
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
    done = run_locally(
        out, "test_instance_matches_numpy and relu__generic__f32 and not leaky", "relu,softmax", 5
    )
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
