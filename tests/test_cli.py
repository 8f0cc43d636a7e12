"""The main job and the small commands, end to end through the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
    assert len(lines) >= 3  # the defaults, then points using LANES 8 and 32, IB 8 and 32, PF
    assert "argmax__cpu__f32 [IB=16,LANES=16,PF=32]: " in lines[0]
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


# --- the command line a user expects: --version, --json, exit codes, --root anywhere ------------

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "swiglu"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import clforge

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"clforge {clforge.__version__}\n"


def test_exit_codes_are_documented_in_every_help(capsys: pytest.CaptureFixture[str]) -> None:
    from clforge.tools.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, sub in [("clforge", parser), *commands.items()]:
        text = " ".join(sub.format_help().split())
        assert "Exit status: 0 " in text and "; 2 usage" in text, name
        assert "--root" in text, name  # accepted after the command too
    for name in ("list", "devices", "verify", "tune"):
        text = " ".join(commands[name].format_help().split())
        assert "--json" in text and '"version"' in text, name


def test_root_before_or_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--root", str(EXAMPLE), "--no-freshness"]) == 0
    assert main(["--root", str(EXAMPLE), "lint", "--no-freshness"]) == 0
    # after the command, it wins over one before it; absent after, the one before stays
    assert main(["--root", "/no/such/folder", "lint", "--root", str(EXAMPLE)]) == 0
    assert "2 files" in capsys.readouterr().err
    assert main(["--root", "/no/such/folder", "lint"]) == 2
    assert "--root: /no/such/folder is not a folder" in capsys.readouterr().err


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "relu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1
    rows = {r["name"]: r for r in doc["instances"]}
    cpu = rows["relu__cpu__f32"]
    assert set(cpu) == {
        "name", "op", "variant", "dtype", "layouts", "targets", "priority", "guard", "params",
        "tree",
    }  # fmt: skip
    assert [cpu[k] for k in ("op", "variant", "dtype", "tree")] == ["relu", "cpu", "f32", "clforge"]
    assert cpu["targets"] == ["cpu"] and cpu["layouts"] == {"x": "row", "y": "row"}
    assert main(["list", "rleu"]) == 2
    assert "unknown op 'rleu'; did you mean 'relu'?" in capsys.readouterr().err


def test_devices_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--json", "--check"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1 and doc["builds"] is True
    (first, *_) = doc["devices"]
    assert {"platform", "name", "builds", "builds_fully", "problem", "verdict"} <= set(first)


def test_verify_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "relu", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # nothing but the document on standard output
    assert doc["version"] == 1 and doc["failed"] == 0 and doc["tree"] is None
    by_name = {r["instance"]: r for r in doc["results"]}
    cpu = by_name["relu__cpu__f32"]
    assert cpu["status"] == "passed" and cpu["cases"] > 0 and cpu["problem"] is None
    assert cpu["params"] == {"CHUNK": 4096, "NT_MIN": 4194304, "VW": 16}
    assert doc["passed"] == sum(r["status"] == "passed" for r in doc["results"])
    assert f"{doc['passed']} passed, 0 failed" in err


def test_verify_in_an_extensions_folder_checks_its_instances(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(EXAMPLE)
    assert main(["verify", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tree"] == "swiglu"
    names = {r["instance"] for r in doc["results"]}
    assert "relu__cpu_wide__f32" in names and "swiglu__cpu__f32" in names
    assert {r["tree"] for r in doc["results"]} == {"swiglu"}
    assert main(["verify", "sigmoid"]) == 2  # clforge's op, which the example does not extend
    assert "tree 'swiglu' has no instance of sigmoid" in capsys.readouterr().err
    monkeypatch.chdir(ROOT)
    assert main(["verify", "relu", "--all", "--json", "--root", str(EXAMPLE)]) == 0
    doc = json.loads(capsys.readouterr().out)
    trees = {r["instance"]: r["tree"] for r in doc["results"]}
    assert trees["relu__cpu_wide__f32"] == "swiglu" and trees["relu__cpu__f32"] == "clforge"


def test_tune_check_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["tune", "--check", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1 and doc["count"] == len(doc["stale"])
    assert rc == (1 if doc["stale"] else 0)
    for row in doc["stale"]:
        assert set(row) == {"file", "instance", "bucket", "why"}
    assert main(["tune", "--json"]) == 2  # --json goes with --check


def test_generate_refuses_an_installed_clforges_own_tree(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from clforge.core import resources
    from clforge.emit import generate as generate_mod

    def never(*args: object, **kw: object) -> None:
        raise AssertionError("generate must not run")

    monkeypatch.setattr(resources, "installed", lambda: True)
    monkeypatch.setattr(generate_mod, "generate", never)
    monkeypatch.chdir(tmp_path)  # in no tree: clforge's own
    assert main(["generate"]) == 2
    err = capsys.readouterr().err
    assert "installed clforge" in err and "site-packages belongs to the installer" in err
    assert "extension's folder" in err and "--root" in err
    assert main(["schema", "--write"]) == 2


def test_an_extension_that_cannot_be_read_is_an_environment_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CLFORGE_PATH", str(tmp_path / "nowhere"))
    assert main(["list", "relu"]) == 2
    assert "nowhere is not a folder" in capsys.readouterr().err
