"""The main job and the small commands, end to end through the CLI."""

from __future__ import annotations

import re

import pytest

from clforge.tools.cli import main


def test_demo_dispatches_every_op_and_matches_numpy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device: ")
    m = re.search(r"^(\d+) of (\d+) calls match NumPy", out, re.MULTILINE)
    assert m and m.group(1) == m.group(2)
    assert "FAIL" not in out


def test_devices_lists_one_that_builds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--check"]) == 0
    assert "builds kernels" in capsys.readouterr().out


def test_list_filters_by_op(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "softmax"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("softmax__") for line in lines)


def test_verify_checks_every_instance_of_an_op(capsys) -> None:
    assert main(["verify", "relu"]) == 0
    out, err = capsys.readouterr()
    assert "relu__cpu__f32 [CHUNK=4096,NT_MIN=4194304,VW=16]: " in out
    assert "cases match NumPy" in out
    assert "relu__half__f16: skipped (the device lacks cl_khr_fp16)" in out or (
        "relu__half__f16 []: " in out
    )
    assert "0 failed" in err
    assert main(["verify", "nope"]) == 2


def test_verify_tunables_builds_a_cover_and_reports_build_failures(
    capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["verify", "argmax", "--tunables"]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("argmax__cpu__f32 [")]
    assert len(lines) >= 3  # the defaults, then points using LANES 8 and 32, IB 8 and 32
    assert "argmax__cpu__f32 [IB=16,LANES=16]: " in lines[0]
    assert all("cases match NumPy" in line for line in lines)
    assert "0 failed" in err

    from clforge.errors import BuildError
    from clforge.tune import verify as verify_mod

    def broken(rt, inst, params=None):  # type: ignore[no-untyped-def]
        raise BuildError(inst.name, "x.cl:3:1: error: something\n1 error generated.")

    monkeypatch.setattr(verify_mod, "verify", broken)
    assert main(["verify", "relu"]) == 1
    out, err = capsys.readouterr()
    assert (
        "relu__cpu__f32 [CHUNK=4096,NT_MIN=4194304,VW=16]: FAILED: does not build: "
        "x.cl:3:1: error: something\n    x.cl:3:1: error: something\n    1 error generated." in out
    )
    assert "relu__generic__f32 [(none)]: FAILED" in out  # every instance is still tried
