"""PoCL's CPU worker threads pinned one per core (generator/clforge/device/threads.py), so that
every process runs at one speed: the decision for each environment and CPU set, that a fresh
process gets POCL_AFFINITY=1 before PoCL starts its devices, that the user's setting wins, and
the bench's per-process report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from clforge.device.threads import AFFINITY_ENV, placement
from clforge.tools.bench.report import process_speed_lines


@pytest.mark.parametrize(
    ("env", "cpus", "pinned", "says"),
    [
        ({}, {0, 1}, True, "set by clforge (workers on CPUs 0 to 1)"),
        ({}, {0, 1, 2, 3}, True, "CPUs 0 to 3"),
        ({AFFINITY_ENV: "0"}, {0, 1}, False, "$POCL_AFFINITY=0 set in the environment"),
        ({AFFINITY_ENV: "1"}, {4, 5}, True, "set in the environment"),
        ({}, {4, 5}, False, "may run on CPUs 4,5 only"),
        ({}, {1}, False, "may run on CPUs 1 only"),
    ],
)
def test_the_decision(env: dict[str, str], cpus: set[int], pinned: bool, says: str) -> None:
    got = placement(env, cpus)
    assert got.pinned is pinned and says in got.reason, got


def _fresh(env: dict[str, str], cpus: str | None = None) -> str:
    code = (
        "import os\n"
        "from clforge import dispatcher\n"
        "dispatcher()\n"
        "from clforge.device.threads import pin_pocl_workers\n"
        "print(os.environ.get('POCL_AFFINITY'), pin_pocl_workers().pinned)\n"
    )
    cmd = [sys.executable, "-c", code]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.strip().splitlines()[-1]


def test_a_fresh_process_gets_pinned_workers_unless_the_user_says_otherwise() -> None:
    base = {k: v for k, v in os.environ.items() if k != AFFINITY_ENV}
    cpus = sorted(os.sched_getaffinity(0))
    if cpus != list(range(len(cpus))):
        pytest.skip(f"this test process runs on CPUs {cpus}")
    assert _fresh(base) == "1 True"
    assert _fresh({**base, AFFINITY_ENV: "0"}) == "0 False"


def test_a_process_confined_elsewhere_is_not_pinned() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or shutil.which("taskset") is None:
        pytest.skip("needs two CPUs and taskset")
    base = {k: v for k, v in os.environ.items() if k != AFFINITY_ENV}
    assert _fresh(base, str(cpus[-1])) == "None False"


def test_the_bench_reports_each_call_s_spread_over_the_processes() -> None:
    speed = {
        "processes": 3,
        "ms": {
            "pinned": {"softmax 4096x1024": [1.0, 1.1, 1.04]},
            "unpinned": {"softmax 4096x1024": [1.06, 1.93, 1.87]},
        },
    }
    lines = process_speed_lines(speed)
    assert "3 fresh processes per mode" in lines[0]
    assert "pinned 1.04 [1.00-1.10], unpinned 1.87 [1.06-1.93]" in lines[1]
