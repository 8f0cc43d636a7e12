"""A tuned entry must beat the default (the parameters computed for the device) in their race,
`clforge tune --check` reports the entries that do not, and `clforge tune --quick` tunes a
new machine in a few minutes into the user's tuning folder, with the plan docs/tuning.md shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from clforge.core.tree import DEFAULT
from clforge.device.profile import DeviceProfile
from clforge.params.database import CATCH_ALL, Entry, TuningFile, load, schema_hash
from clforge.params.fingerprint import Fingerprint
from clforge.params.lookup import ParamLookup
from clforge.params.space import Params, ParamSpace, as_params
from clforge.references.base import Case
from clforge.registry import loader as registry_mod
from clforge.tools.cli import main
from clforge.tune import behind, quick
from clforge.tune import tuner as tuner_mod
from clforge.tune.tuner import (
    MARGIN,
    Journal,
    beats,
    candidates,
    default_params,
    distance,
    plan_jobs,
    tune,
)

REG = registry_mod.default()
CPU = DeviceProfile(
    name="Test CPU",
    vendor="pocl",
    device_type="cpu",
    arch="testlake",
    max_work_group_size=4096,
    compute_units=2,
    driver_version="9.9",
    preferred_vector_widths=(("float", 8), ("double", 4)),
)


def _relu_job(n: int = 4096):  # type: ignore[no-untyped-def]
    (job,) = plan_jobs(REG, CPU, ["relu"], ["f32"], {"relu": (Case({"N": n}),)})
    return job


# --- the default and the candidates around it -------------------------------------------------


def test_the_default_is_what_a_call_gets_with_nothing_tuned_and_comes_first() -> None:
    job = _relu_job()
    default = default_params(REG, CPU, job)
    assert default == ParamLookup(CPU).choose(job.inst, dict(job.dims)).params
    assert dict(default)["VW"] == 8  # computed from the device's preferred width, not the spec's
    full = candidates(job, CPU, default)
    assert full[0] == default and full[1] == ParamSpace(job.inst).defaults
    assert sorted(full) == sorted(set(full))  # each once
    near = candidates(job, CPU, default, nearest=2)
    assert near[:2] == full[:2] and len(near) == 4
    rest = sorted(full[2:], key=lambda p: distance(p, default))
    assert [distance(p, default) for p in near[2:]] == [distance(p, default) for p in rest[:2]]


def test_distance_counts_powers_of_two() -> None:
    d = as_params({"A": 16, "B": 4})
    assert distance(as_params({"A": 8, "B": 4}), d) == distance(as_params({"A": 32, "B": 4}), d)
    assert distance(as_params({"A": 4, "B": 8}), d) == 3.0


def test_beating_the_default_takes_the_margin() -> None:
    assert MARGIN == 0.03
    assert beats(96.9, 100.0) and not beats(97.5, 100.0) and not beats(101.0, 100.0)


class _FakePool:
    """The measuring process, replaced: each parameter set's time from `times` (else 100)."""

    times: ClassVar[dict[Params, float]] = {}

    def __init__(self, root: Path, timeout_s: float) -> None:
        pass

    def _us(self, params: dict[str, int]) -> float:
        return self.times.get(as_params(params), 100.0)

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        if "race" in req:
            return {"ok": True, "us": [self._us(r["params"]) for r in req["race"]]}
        return {"ok": True, "us": self._us(req["params"])}

    def recycle(self) -> None:
        pass

    def close(self) -> None:
        pass


def _tune_with(
    times: dict[Params, float], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Params, Any]:
    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(tmp_path / "cache"))  # a journal of its own
    monkeypatch.setattr(tuner_mod, "WorkerPool", _FakePool)
    monkeypatch.setattr(_FakePool, "times", times)
    job = _relu_job()
    default = default_params(REG, CPU, job)
    report = tune(DEFAULT, REG, CPU, [job], out=tmp_path / "t.yaml", nearest=2, finalists=2)
    return default, report


def test_a_tuned_set_within_the_margin_leaves_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _relu_job()
    default = default_params(REG, CPU, job)
    # every other set 2% faster than the default: not worth an entry of its own
    times = dict.fromkeys(candidates(job, CPU, default), 98.0) | {default: 100.0}
    default, report = _tune_with(times, tmp_path, monkeypatch)
    by_bucket = {e.bucket: e for e in report.entries}
    assert by_bucket[job.bucket].params == default
    assert by_bucket[job.bucket].time_us == by_bucket[job.bucket].default_us == 100.0
    assert by_bucket[CATCH_ALL].params == default
    assert report.defaults_kept == {(job.inst.name, job.bucket)}
    assert behind.records_default(load(tmp_path / "t.yaml").entries[0])


def test_a_tuned_set_that_beats_the_default_by_the_margin_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _relu_job()
    default = default_params(REG, CPU, job)
    other = next(p for p in candidates(job, CPU, default, 2)[1:] if p != default)
    default, report = _tune_with({other: 90.0}, tmp_path, monkeypatch)
    entry = next(e for e in report.entries if e.bucket == job.bucket)
    assert entry.params == other
    assert (entry.time_us, entry.default_us) == (90.0, 100.0)
    assert not report.defaults_kept


# --- tune --check: entries that do not beat the default ---------------------------------------


def _entry(us: float, default_us: float, chunk: int = 16384) -> Entry:
    inst = REG.instance("relu__cpu__f32")
    params = as_params({**dict(inst.params), "CHUNK": chunk})
    return Entry(inst.name, "N~4096", params, schema_hash(inst), (("N", 4096),), us, default_us, 4)


def test_the_files_times_say_which_entries_do_not_beat_the_default() -> None:
    f = TuningFile(Fingerprint.of(CPU), (_entry(99.0, 100.0), _entry(50.0, 100.0, 4096)))
    found = behind.from_files(REG, [f])
    assert [b.entry.params for b in found] == [_entry(99.0, 100.0).params]
    assert "does not beat the default by 3% (99.0 us against 100.0 us: 1.0% faster; file)" in (
        found[0].line()
    )
    # an entry that records the default (both times the same) is not reported
    assert not behind.from_files(REG, [TuningFile(Fingerprint.of(CPU), (_entry(80, 80),))])


def test_the_journal_says_which_entries_do_not_beat_todays_default(tmp_path: Path) -> None:
    """A file written against the spec defaults: the journal's race of its set against the
    default computed today decides."""
    job = _relu_job()
    default = default_params(REG, CPU, job)
    e = _entry(50.0, 100.0)  # beat the spec defaults by 2x when tuned
    journal = Journal(tmp_path / "j.jsonl")
    runners = [(job.inst, e.params), (job.inst, default)]
    journal.record(Journal.race_key(job, runners), {"ok": True, "us": [10.0, 10.1]})
    f = TuningFile(Fingerprint.of(CPU), (e,))
    (found,) = behind.from_journal(REG, CPU, [f], journal)
    assert (found.tuned_us, found.default_us, found.source) == (10.0, 10.1, "this device's journal")
    journal.record(Journal.race_key(job, runners), {"ok": True, "us": [9.0, 10.1]})
    assert not behind.from_journal(REG, CPU, [f], journal)  # the latest race: it beats it


def test_check_reports_them_in_its_json_and_still_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("CLFORGE_TUNING_PATH", str(user))
    TuningFile(Fingerprint.of(CPU), (_entry(99.0, 100.0),)).save(user / "test.yaml")
    assert main(["tune", "--check", "--json"]) == 0  # no stale entry: reported, not failed
    doc = json.loads(capsys.readouterr().out)
    mine = [b for b in doc["behind"] if b["file"] == str(user / "test.yaml")]
    assert mine == [
        {
            "file": str(user / "test.yaml"),
            "instance": "relu__cpu__f32",
            "bucket": "N~4096",
            "tuned_us": 99.0,
            "default_us": 100.0,
            "source": "file",
        }
    ]
    assert doc["behind_count"] == len(doc["behind"]) and doc["count"] == 0
    assert main(["tune", "--remeasure"]) == 2  # it goes with --check


# --- tune --quick -----------------------------------------------------------------------------


def test_the_quick_plan_is_what_the_docs_say() -> None:
    text = (DEFAULT.docs / "tuning.md").read_text()
    for row in quick.plan_rows():
        assert row in text, f"docs/tuning.md does not show the quick plan's row {row!r}"
    assert quick.settings_line() in " ".join(text.split())
    core = {"matmul", "gemm", "conv2d", "attention", "softmax", "sum", "layer_norm", "add"}
    assert core <= set(quick.PLAN) <= set(REG.ops)
    assert quick.DTYPES == ("f32",)


def test_the_quick_plan_tunes_the_first_layouts_at_its_shapes() -> None:
    jobs = plan_jobs(REG, CPU, ["conv2d"], ["f32"], quick.cases(["conv2d"]),
                     first_layouts_only=True)  # fmt: skip
    assert jobs and all(dict(j.inst.layouts)["x"] == "row" for j in jobs)
    assert {dict(j.dims)["R"] for j in jobs} == {1, 3}


@pytest.mark.slow
def test_a_quick_tune_of_one_small_shape_writes_to_the_users_folder(tmp_path: Path) -> None:
    user = tmp_path / "user-tuning"
    shipped = {q.name: q.read_bytes() for q in DEFAULT.tuning.glob("*.yaml")}
    env = {
        **os.environ,
        "CLFORGE_TUNING_PATH": str(user),
        "CLFORGE_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "clforge", "tune", "--quick", "relu", "--shapes", "relu:N=4096",
         "--budget", "5", "--repeats", "1"],
        cwd=DEFAULT.root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = user.glob("*.yaml")
    f = load(path)
    assert {e.instance for e in f.entries} == {"relu__cpu__f32"}
    assert "quick tune: " in done.stdout and "relu " in done.stdout
    assert f"tuning file: {path}" in done.stdout
    assert {q.name: q.read_bytes() for q in DEFAULT.tuning.glob("*.yaml")} == shipped


def test_explain_says_when_a_quick_tune_would_help(monkeypatch: pytest.MonkeyPatch) -> None:
    from clforge.params.lookup import Choice
    from clforge.tools.cli import _tuning_hint

    params = (("CHUNK", 4096),)
    here = Choice(params, "tuned on this device (exact shape)")
    borrowed = Choice(params, "tuned on the nearest device of this vendor, type and vector ISA")
    computed = Choice(params, "computed for this device (vector_width=16); nothing tuned applies")
    assert _tuning_hint(here, True) is None and _tuning_hint(borrowed, False) is None
    assert _tuning_hint(Choice(params, "override"), True) is None
    assert "borrowed here: `clforge tune --quick`" in (_tuning_hint(borrowed, True) or "")
    assert "not tuned here: `clforge tune --quick`" in (_tuning_hint(computed, True) or "")
    monkeypatch.setenv("CLFORGE_TUNING", "off")
    assert "hidden ($CLFORGE_TUNING=off)" in (_tuning_hint(computed, False) or "")


def test_a_quick_tune_races_what_the_chain_gives_now(tmp_path: Path) -> None:
    """The tuned set the chain gives a shape now (here from a file of this device) is measured
    beside the default, so that a quick tune never leaves a shape worse off than before."""
    from clforge.tune.tuner import incumbent

    job = _relu_job()
    default = default_params(REG, CPU, job)
    assert incumbent(REG, ParamLookup(CPU), job) is None  # nothing tuned: the default runs
    tuned = _entry(50.0, 100.0, chunk=65536)
    held = incumbent(REG, ParamLookup(CPU, (TuningFile(Fingerprint.of(CPU), (tuned,)),)), job)
    assert held == tuned.params
    near = candidates(job, CPU, default, nearest=2, incumbent=held)
    assert near[2] == held and len(near) == 5 and len(set(near)) == 5
    assert candidates(job, CPU, default, 2, incumbent=default) == candidates(job, CPU, default, 2)
