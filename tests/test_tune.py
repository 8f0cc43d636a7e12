"""Ahead-of-time tuning: parameter spaces, the tuning database and its fallback chain, and the
tuner end to end on a tiny space (a planted wrong candidate, a killed run, a changed kernel)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clforge.core.tree import DEFAULT, Tree
from clforge.device.profile import DeviceProfile
from clforge.emit.generate import generate
from clforge.errors import CallError, TemplateError
from clforge.params.database import (
    CATCH_ALL,
    HOIST,
    Entry,
    TuningError,
    TuningFile,
    bucket_of,
    load,
    load_folder,
    merge,
    parse,
    schema_hash,
)
from clforge.params.fingerprint import Fingerprint
from clforge.params.lookup import ParamLookup, parse_overrides
from clforge.params.space import ParamSpace
from clforge.references.base import Case
from clforge.registry import loader as registry_mod

REG = registry_mod.default()
CPU = DeviceProfile(
    name="Test CPU",
    vendor="pocl",
    device_type="cpu",
    arch="testlake",
    max_work_group_size=4096,
    compute_units=2,
    driver_version="9.9",
    preferred_vector_widths=(("float", 16), ("double", 8)),
)
GPU = DeviceProfile(
    name="Test GPU", vendor="nvidia", device_type="gpu", arch="sm_90", max_work_group_size=128
)


# --- spaces -----------------------------------------------------------------------------------


def test_space_starts_at_the_defaults_and_keeps_only_valid_points() -> None:
    inst = REG.instance("relu__cpu__f32")
    space = ParamSpace(inst)
    points = list(space.candidates(CPU))
    assert points[0] == space.defaults
    assert len(points) == space.size == len(set(points))
    narrowed = dataclasses.replace(inst, constraints=("CHUNK % 4096 == 0",))
    default = dict(inst.params)
    chunks = [
        dict(p)["CHUNK"]
        for p in ParamSpace(narrowed).candidates(CPU)
        if all(dict(p)[k] == default[k] for k in ("VW", "NT_MIN"))
    ]
    assert chunks == [4096, 16384, 65536]


def test_space_is_pruned_by_the_work_group_limit() -> None:
    inst = REG.instance("relu__gpu__f32")
    wgs = {dict(p)["WG"] for p in ParamSpace(inst).candidates(GPU)}
    assert max(wgs - {dict(inst.params)["WG"]}) <= GPU.max_work_group_size
    assert "work-group size 256 exceeds" in (
        ParamSpace(inst).problem(ParamSpace(inst).complete({"WG": 256}), GPU) or ""
    )


# --- the database -----------------------------------------------------------------------------


def _entry(inst: str, bucket: str, chunk: int, us: float = 10.0) -> Entry:
    params = (("CHUNK", chunk), ("NT_MIN", 4194304), ("VW", 16))
    return Entry(inst, bucket, params, schema_hash(REG.instance(inst)), (), us, 20.0, 4)


def test_files_are_deterministic_and_round_trip() -> None:
    f = TuningFile(Fingerprint.of(CPU)).with_entries(
        [_entry("relu__cpu__f32", "N~1024", 1024), _entry("exp__cpu__f32", CATCH_ALL, 16384)]
    )
    text = f.text()
    assert parse(text, "x.yaml").text() == text
    shuffled = TuningFile(Fingerprint.of(CPU), tuple(reversed(f.entries))).with_entries([])
    assert shuffled.text() == text


def test_merge_keeps_the_faster_entry_and_refuses_two_devices() -> None:
    me = Fingerprint.of(CPU)
    a = TuningFile(me).with_entries([_entry("relu__cpu__f32", "N~1024", 1024, us=9.0)])
    b = TuningFile(me).with_entries(
        [_entry("relu__cpu__f32", "N~1024", 4096, us=5.0), _entry("exp__cpu__f32", "*", 1024)]
    )
    m = merge(a, b)
    assert {e.instance: dict(e.params)["CHUNK"] for e in m.entries} == {
        "relu__cpu__f32": 4096,
        "exp__cpu__f32": 1024,
    }
    with pytest.raises(TuningError, match="two devices"):
        merge(a, TuningFile(Fingerprint.of(dataclasses.replace(CPU, compute_units=64))))


def test_every_level_of_the_fallback_chain() -> None:
    inst = REG.instance("relu__cpu__f32")
    dims = {"N": 1000}

    def file_of(profile: DeviceProfile, chunk: int) -> TuningFile:
        return TuningFile(Fingerprint.of(profile)).with_entries(
            [_entry(inst.name, bucket_of(dims), chunk)]
        )

    same_arch = dataclasses.replace(CPU, name="Another CPU", compute_units=8)
    same_vendor = dataclasses.replace(CPU, name="Old CPU", arch="oldlake")
    other = dataclasses.replace(CPU, vendor="intel")
    files = (file_of(other, 64), file_of(same_vendor, 16384), file_of(same_arch, 1024))
    exact = file_of(CPU, 65536)

    def origin(fs: tuple[TuningFile, ...]) -> tuple[int, str]:
        c = ParamLookup(CPU, fs).choose(inst, dims)
        return dict(c.params)["CHUNK"], c.origin

    assert origin((*files, exact)) == (65536, "tuned on this device")
    assert origin(files) == (1024, "tuned on the same architecture")
    nearest = "tuned on the nearest device of this vendor, type and vector ISA"
    assert origin(files[:2]) == (16384, nearest)
    computed = "computed for this device (vector_width=16); nothing tuned applies"
    assert origin(files[:1]) == (4096, computed)  # relu's VW: the device's vector width
    norm = REG.instance("layer_norm__cpu__f32")  # no device_params: the spec's own defaults
    c = ParamLookup(CPU, files[:1]).choose(norm, {"B": 9})
    assert (c.params, c.origin) == (
        ParamSpace(norm).defaults,
        "spec default; nothing tuned applies",
    )
    # a variant with device_params: computed from the device where nothing tuned applies, the
    # packed block from the registers (6 x 4 vectors of 16 on AVX-512, 6 x 2 of 8 on AVX2)
    packed = REG.instance("matmul__cpu_packed__f32__a_row__b_row")
    avx2 = dataclasses.replace(CPU, preferred_vector_widths=(("float", 8), ("double", 4)))
    for profile, block in [(avx2, (6, 16, 8)), (CPU, (6, 64, 16))]:
        c = ParamLookup(profile, ()).choose(packed, {"M": 99})
        assert (dict(c.params)["MR"], dict(c.params)["NR"], dict(c.params)["VW"]) == block
        assert c.origin.startswith("computed for this device (")
    # the direct matmul's block from the vector width: 8 x 2 vectors of 16 on AVX-512 (f64:
    # 8 x 2 of 8), 4 x 2 of 8 on AVX2 (16 registers); f64 there: 8 doubles take two of AVX2's
    # registers, so 2 rows ((2 + 1) x 2 x 2 = 12 of 16, 2 spare)
    for name, profile, block in [
        ("matmul__cpu_blocked__f32__a_row__b_row", CPU, (8, 32, 16)),
        ("matmul__cpu_blocked__f64__a_row__b_row", CPU, (8, 16, 8)),
        ("matmul__cpu_blocked__f32__a_row__b_row", avx2, (4, 16, 8)),
        ("gemm__cpu_blocked__f64__a_row__b_row", avx2, (2, 16, 8)),
    ]:
        got = dict(ParamLookup(profile, ()).choose(REG.instance(name), {"M": 99}).params)
        assert (got["TM"], got["TN"], got["VW"]) == block, name
    # a register file too small for any block: the computed set breaks the register
    # constraint, and the spec defaults stand
    odd = dataclasses.replace(CPU, vector_isa="avx512", vector_bits=512, vector_registers=3)
    c = ParamLookup(odd, ()).choose(packed, {"M": 99})
    assert c.params == ParamSpace(packed).defaults and "but constraint" in c.origin
    # shape: the exact bucket, else the catch-all
    catch_all = TuningFile(Fingerprint.of(CPU)).with_entries([_entry(inst.name, CATCH_ALL, 1024)])
    chosen = ParamLookup(CPU, (catch_all,)).choose(inst, {"N": 7}).params
    assert chosen == (("CHUNK", 1024), ("NT_MIN", 4194304), ("VW", 16))
    # a stale entry is skipped and remembered
    stale = TuningFile(Fingerprint.of(CPU)).with_entries(
        [dataclasses.replace(_entry(inst.name, CATCH_ALL, 1024), sha="0" * 16)]
    )
    lookup = ParamLookup(CPU, (stale,))
    assert lookup.choose(inst, dims).origin == computed
    assert lookup.stale == {(Fingerprint.of(CPU).slug, inst.name)}


# --- the chain across vector ISAs -------------------------------------------------------------

# Synthetic CPUs of PoCL, by their LLVM CPU target: their vector ISAs follow from it
ZEN3 = dataclasses.replace(
    CPU,
    name="AMD EPYC 7B13",
    arch="znver3",
    driver_version="3.0-rc2",
    preferred_vector_widths=(("float", 8), ("double", 4), ("half", 0)),
)
ZEN4 = dataclasses.replace(CPU, name="AMD EPYC 9B14", arch="znver4", driver_version="3.0-rc2")
SHIPPED = load_folder(DEFAULT.tuning)
PACKED = "matmul__cpu_packed__f32__a_row__b_row"
MM = {"BATCH": 1, "M": 1024, "N": 1024, "K": 1024, "BA": 1, "BB": 1}
# an instance the two other machines' files tune and this Xeon's (rocketlake) does not, at a
# shape they hold (their cpu_packed conv entries, used here before, were pruned when that
# kernel changed)
CONV = "conv2d__cpu__f32__x_nhwc__y_row"
CV = {"N": 1, "C": 256, "CG": 256, "H": 64, "W": 64, "K": 64, "R": 1, "S": 1, "OH": 64, "OW": 64}


def _registers(params: dict[str, int]) -> int:
    """The vector registers a packed block holds: MR x NR/VW accumulators and NR/VW of b."""
    return params["MR"] * (params["NR"] // params["VW"]) + params["NR"] // params["VW"]


def test_the_shipped_files_are_avx512_by_what_they_record() -> None:
    """Every shipped file is AVX-512 by what it records (the two tuned before the device model got
    their ISA derived from their LLVM targets, icelake-client and skylake-avx512, and recorded
    when they were next written), and the names (digests) stay those of the files."""
    archs = {f.device.arch for f in SHIPPED}
    assert {"icelake-client", "skylake-avx512", "rocketlake"} <= archs
    for f in SHIPPED:
        assert f.device.isa() == ("avx512", 512, 32)
        assert f.device.isa_text == "AVX-512 (32 x 512-bit)"
        assert f.path is not None and f.path.stem == f.device.slug
        assert "vector_isa: avx512" in f.path.read_text(encoding="utf-8")
        again = parse(f.text(), "again.yaml").device  # written with the ISA, read back equal
        assert again == f.device and again.slug == f.device.slug
    # a recorded ISA is read back as recorded, not derived again from the LLVM target
    avx2 = dataclasses.replace(SHIPPED[0].device, vector_isa="avx2", vector_bits=256)
    avx2 = dataclasses.replace(avx2, vector_registers=16)
    assert parse(TuningFile(avx2).text(), "r.yaml").device.isa() == ("avx2", 256, 16)
    # a file whose ISA is not derivable and a device whose ISA is unknown borrow nothing
    blank = Fingerprint.of(dataclasses.replace(CPU, arch="mystery", preferred_vector_widths=()))
    assert blank.isa() == ("", 0, 0) and blank.level(blank) == 0
    assert blank.pass_reason(blank) == "no known vector ISA vs this device's no known vector ISA"


def test_an_avx2_device_borrows_nothing_from_avx512_files() -> None:
    lookup = ParamLookup(ZEN3, SHIPPED)
    c = lookup.choose(REG.instance(PACKED), MM)
    assert c.entry is None and c.origin.startswith("computed for this device (")
    assert _registers(dict(c.params)) <= 16 - 2, c.describe()
    why = "AVX-512 (32 x 512-bit) vs this device's AVX2 (16 x 256-bit)"
    assert lookup.passed == tuple((f.path.name, why) for f in SHIPPED)  # type: ignore[union-attr]
    assert lookup.passed_over()[0] == f"{SHIPPED[0].path.name}: {why}: not borrowed"  # type: ignore[union-attr]
    # nor the crossovers measured there: no times at this shape or the nearest
    names = [PACKED, "matmul__cpu_blocked__f32__a_row__b_row"]
    assert lookup.times(REG.instances, names, MM).times == {}
    # every instance either tuned file holds: nothing served from them
    for inst in {e.instance for f in SHIPPED for e in f.entries}:
        assert lookup.choose(REG.instance(inst), MM).entry is None, inst


def test_an_avx512_device_borrows_nothing_from_avx2_files() -> None:
    """The reverse: an AVX2 device's file (the Zen 3's, entries at every shipped key) serves
    no AVX-512 device, which gets its own computed block (32 registers)."""
    avx2_file = TuningFile(Fingerprint.of(ZEN3), tuple(e for f in SHIPPED for e in f.entries))
    lookup = ParamLookup(ZEN4, (avx2_file,))
    c = lookup.choose(REG.instance(PACKED), MM)
    # KB: a 64-column panel of b fills half of an L1 of 32 KiB (the size read where unknown);
    # at M = 1024 (over 16 row panels) the compute step takes one panel over the whole k range
    assert c.entry is None and dict(c.params) == {
        "KB": 64,
        "MR": 6,
        "NR": 64,
        "VW": 16,
        "KC": 1024,
        "RB": 1,
        "PF": 0,
        "PA": 0,
    }
    assert 16 < _registers(dict(c.params)) <= 32 - 2
    assert lookup.passed == (
        (avx2_file.device.slug, "AVX2 (16 x 256-bit) vs this device's AVX-512 (32 x 512-bit)"),
    )
    # the same file, recorded as an AVX-512 one, would have served
    recorded = dataclasses.replace(
        avx2_file.device, vector_isa="avx512", vector_bits=512, vector_registers=32
    )
    same_isa = TuningFile(recorded, avx2_file.entries)
    assert ParamLookup(ZEN4, (same_isa,)).choose(REG.instance(PACKED), MM).entry is not None


def test_the_nearest_device_of_the_same_isa_serves_beyond_the_architecture() -> None:
    """A Zen 4 (AVX-512, znver4) has no file of its own or of its architecture: both shipped
    files are AVX-512 ones of its vendor (PoCL), and the nearer by the documented similarity
    serves: the same driver version first (the Xeon's PyPI PoCL 3.0-rc2, not Debian's 3.1)."""
    lookup = ParamLookup(ZEN4, SHIPPED)
    assert lookup.passed == ()
    c = lookup.choose(REG.instance(CONV), CV)
    assert c.origin.startswith("tuned on the nearest device of this vendor, type and vector ISA")
    assert c.file == "pocl-icelake-client-07c8ba99.yaml"
    debian = dataclasses.replace(ZEN4, driver_version="3.1+debian")
    assert ParamLookup(debian, SHIPPED).choose(REG.instance(CONV), CV).file == (
        "pocl-skylake-avx512-22ac387f.yaml"
    )
    # then the nearest compute unit count (log2 ratio), files in the given order on a tie
    me = Fingerprint.of(ZEN4)
    near, far = (
        Fingerprint.of(dataclasses.replace(ZEN4, name=n, arch="sapphirerapids", compute_units=u))
        for n, u in (("near", 4), ("far", 64))
    )
    assert me.level(near) == me.level(far) == 1 and me.similarity(near) > me.similarity(far)
    files = tuple(TuningFile(fp, SHIPPED[0].entries) for fp in (far, near))
    assert ParamLookup(ZEN4, files).choose(REG.instance(CONV), CV).file == near.slug


def test_explain_says_which_files_were_passed_over_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`clforge explain` on a synthetic AVX2 profile (a file that does not record its ISA:
    derived from znver3): computed parameters that fit 16 registers, and each AVX-512 file named
    with the reason it was not borrowed."""
    import json

    from clforge.device.profile_files import dump_profile
    from clforge.tools.cli import main

    bare = dataclasses.replace(ZEN3, vector_isa="", vector_bits=0, vector_registers=0)
    path = tmp_path / "zen3.yaml"
    path.write_text(dump_profile(bare), encoding="utf-8")
    assert "vector_isa" not in path.read_text(encoding="utf-8")
    dims = ",".join(f"{k}={v}" for k, v in MM.items())
    assert main(["explain", "matmul", "--dims", dims, "--device", str(path)]) == 0
    out = capsys.readouterr().out
    why = "AVX-512 (32 x 512-bit) vs this device's AVX2 (16 x 256-bit): not borrowed"
    for f in SHIPPED:
        assert f"  tuning file passed over: {f.path.name}: {why}" in out  # type: ignore[union-attr]
    assert "computed for this device (" in out and "tuned on" not in out
    assert main(["explain", "matmul", "--dims", dims, "--device", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["device_isa"] == "AVX2 (16 x 256-bit)"
    passed = {p["file"]: p["reason"] for p in doc["tuning_passed_over"]}
    assert all(passed[f.path.name] == why[: -len(": not borrowed")] for f in SHIPPED)  # type: ignore[union-attr]
    if doc["params"].keys() >= {"MR", "NR", "VW"}:  # the packed routine: its block's registers
        assert _registers(doc["params"]) <= 16 - 2
    # the same device as AVX-512 (its float width 16, LLVM CPU znver4): a file serves
    zen4 = tmp_path / "zen4.yaml"
    zen4.write_text(dump_profile(ZEN4), encoding="utf-8")
    assert main(["explain", "matmul", "--dims", dims, "--device", str(zen4)]) == 0
    out = capsys.readouterr().out
    assert "tuned on the nearest device of this vendor, type and vector ISA" in out
    assert "passed over" not in out


def test_overrides_from_python_and_the_environment() -> None:
    inst = REG.instance("relu__cpu__f32")
    assert parse_overrides("relu__cpu__f32:CHUNK=1024; exp__cpu__f32:CHUNK=64") == {
        "relu__cpu__f32": {"CHUNK": 1024},
        "exp__cpu__f32": {"CHUNK": 64},
    }
    lookup = ParamLookup(CPU, (), parse_overrides("relu__cpu__f32:CHUNK=1024"))
    assert lookup.choose(inst, {"N": 9}).describe() == "CHUNK=1024,NT_MIN=4194304,VW=16: override"
    lookup.override(inst.name, {"CHUNK": 12})
    with pytest.raises(CallError, match="constraint 'CHUNK % VW == 0' does not hold"):
        lookup.choose(inst, {"N": 9})
    lookup.override(inst.name, {"TILE": 8})
    with pytest.raises(CallError, match="TILE is no parameter"):
        lookup.choose(inst, {"N": 9})


def test_an_override_reaches_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from clforge.generated import ops

    from clforge.call.dispatcher import dispatcher

    d = dispatcher()
    d.override_params("relu__cpu__f32", {"CHUNK": 1024})
    try:
        x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
        np.testing.assert_array_equal(ops.relu(x), np.maximum(x, 0))
        plan = next(p for p in d._plans.values() if p.inst.name == "relu__cpu__f32")
        assert plan.params == (("CHUNK", 1024), ("NT_MIN", 4194304), ("VW", 16))
        assert plan.launches[0].geometry.global_size == (10,)  # cdiv(10000, 1024)
    finally:
        d.override_params("relu__cpu__f32", None)


def test_a_shape_tuned_hoisted_serves_the_compiled_graphs_calls_first() -> None:
    """`clforge tune --hoisted` times gemm's compute with b packed once, as a compiled graph
    runs it, and keys the entry with HOIST~1: a graph's call (hoisted dims) takes that entry,
    an eager call (which packs b every call) never does, and a graph's call at a shape tuned
    only eagerly takes the eager entry before the catch-all."""
    inst = REG.instance("gemm__cpu_packed__f32__a_row__b_row")
    dims = {"M": 32, "N": 768, "K": 768}
    hoist = {**dims, HOIST: 1}
    base = dict(inst.params)

    def entry(dims: dict[str, int], **kw: int) -> Entry:
        params = tuple(sorted({**base, **kw}.items()))
        return Entry(inst.name, bucket_of(dims), params, schema_hash(inst), (), 1.0, 2.0, 3)

    both = TuningFile(Fingerprint.of(CPU)).with_entries(
        [entry(dims, RB=1, KC=1024, PF=0), entry(hoist, RB=4, KC=64, PF=2)]
    )
    lookup = ParamLookup(CPU, (both,))
    assert dict(lookup.choose(inst, hoist).params)["RB"] == 4
    assert dict(lookup.choose(inst, dims).params)["RB"] == 1
    eager_only = TuningFile(Fingerprint.of(CPU)).with_entries([entry(dims, RB=1, KC=1024, PF=0)])
    c = ParamLookup(CPU, (eager_only,)).choose(inst, hoist)
    assert dict(c.params)["RB"] == 1 and c.entry is not None and c.entry.bucket == bucket_of(dims)
    hoisted_only = TuningFile(Fingerprint.of(CPU)).with_entries([entry(hoist, RB=4, KC=64, PF=2)])
    assert ParamLookup(CPU, (hoisted_only,)).choose(inst, dims).entry is None


def test_the_hoisted_plan_times_the_routines_that_pack_weights() -> None:
    """`--hoisted` plans only routines with a step that reads only weights (gemm's pack_b),
    each shape marked HOIST; the blocked gemm, which packs nothing, is not planned."""
    from clforge.tune.tuner import plan_jobs

    cases = {"gemm": (Case({"M": 32, "N": 768, "K": 768}),)}
    jobs = plan_jobs(REG, CPU, ["gemm"], ["f32"], cases, hoisted=True)
    assert jobs and {j.inst.variant for j in jobs} == {"cpu_packed"}
    assert all(dict(j.dims)[HOIST] == 1 for j in jobs)
    eager = plan_jobs(REG, CPU, ["gemm"], ["f32"], cases)
    assert "cpu_blocked" in {j.inst.variant for j in eager}
    assert all(HOIST not in dict(j.dims) for j in eager)


def test_a_hoisted_call_packs_the_weights_once_and_computes_right(runtime) -> None:
    """The tuner's hoisted timing (measure.hoisted_call) runs pack_b once, then enqueues only
    pack_a and compute per call, on the same buffers, and the result is the product."""
    import gc

    import numpy as np
    import pyopencl.array as cla

    from clforge.tune.measure import hoisted_call

    inst = REG.instance("gemm__cpu_packed__f32__a_row__b_row")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 101)).astype(np.float32)
    b = rng.standard_normal((101, 67)).astype(np.float32)
    bias = rng.standard_normal((1, 67)).astype(np.float32)
    dims = {"M": 37, "N": 67, "K": 101}
    shapes = {"a": a.shape, "b": b.shape, "bias": bias.shape}
    params = ParamSpace(inst).complete({"RB": 4, "KC": 64, "PF": 2})
    plan = runtime.plan(inst, dims, {"alpha": 1.0, "beta": 1.0}, shapes, params)
    # the inputs as a temporary, as the worker passes them: the call must hold them (the
    # kernels hold only their handles; released, every hoisted candidate crashed or hung)
    call = hoisted_call(
        runtime,
        plan,
        {k: cla.to_device(runtime.queue, v) for k, v in (("a", a), ("b", b), ("bias", bias))},
    )
    gc.collect()
    for _ in range(3):  # ... and buffers the pool hands out meanwhile must not be theirs
        cla.to_device(runtime.queue, np.full_like(a, np.nan)), runtime.empty(plan.outputs[0])
    assert len(call.launches) == len(plan.launches) - 1  # pack_b ran once, in hoisted_call
    call()
    runtime.queue.finish()
    np.testing.assert_allclose(call.outputs["c"].get(), a @ b + bias, rtol=1e-4, atol=1e-4)


def test_the_plan_covers_channels_last_convs_and_the_layouts_asked_for() -> None:
    """Jobs run in every tensor's first layout and in the convention's others (channels-last
    convs, which the benchmarks run); `--layouts` adds combinations, and a tensor or layout
    the op does not have is a usage error that names what it has."""
    from clforge.errors import UsageError
    from clforge.tune.cases import parse_layouts
    from clforge.tune.tuner import plan_jobs

    conv = {j.inst.name for j in plan_jobs(REG, CPU, ["conv2d"], ["f32"])}
    assert "conv2d__cpu_packed__f32__x_row__y_row" in conv
    assert "conv2d__cpu_im2col__f32__x_nhwc__y_nhwc" in conv
    small = (Case({"BATCH": 1, "M": 300, "N": 200, "K": 100, "BA": 1, "BB": 1}),)
    plain = {j.inst.name for j in plan_jobs(REG, CPU, ["matmul"], ["f32"], {"matmul": small})}
    assert all("a_row__b_row" in n for n in plain)
    asked = parse_layouts("matmul:b=col;matmul:a=col,b=col")
    both = {j.inst.name for j in plan_jobs(REG, CPU, ["matmul"], ["f32"], {"matmul": small}, asked)}
    assert {"matmul__cpu_packed__f32__a_row__b_col", "matmul__cpu_packed__f32__a_col__b_col"} < both
    with pytest.raises(UsageError, match="matmul's b has no layout 'nhwc' \\(it has row, col\\)"):
        plan_jobs(REG, CPU, ["matmul"], ["f32"], {"matmul": small}, parse_layouts("matmul:b=nhwc"))
    with pytest.raises(UsageError, match="is not OP:TENSOR=LAYOUT"):
        parse_layouts("matmul:b")
    short = {"matmul": (Case({"M": 64, "N": 64, "K": 64}),)}
    with pytest.raises(UsageError, match="matmul:M=64,N=64,K=64 does not give BA, BB"):
        plan_jobs(REG, CPU, ["matmul"], ["f32"], short)


def test_every_bench_case_is_tuned_at_its_own_shape_bucket() -> None:
    """The tuner's default shapes are the benchmarks' (docs/tuning.md: "the benchmarks'
    sizes"): each bench case's op, dtype, layouts, attributes and shape bucket is a job the
    default plan makes, wherever the case's instance has parameters to tune (attributes aside:
    entries are keyed by instance and bucket)."""
    from clforge.call.binding import bind_dims, resolve_attrs
    from clforge.call.selection import select
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device
    from clforge.tools.bench.cases import CASES
    from clforge.tune.tuner import plan_jobs

    device = from_device(default_device())
    jobs = plan_jobs(REG, device, sorted({c.op for c in CASES}), ["f32", "f64"])
    planned = {(j.inst.name, j.bucket) for j in jobs}  # entries are keyed so: no attributes
    for case in CASES:
        op = REG.op(case.op)
        shapes = {
            t.name: tuple(case.shapes.get(t.name, tuple(case.sizes[d] for d in t.shape)))
            for t in op.inputs
        }
        attrs = resolve_attrs(op, case.attrs)
        dims = bind_dims(op, shapes, attrs)
        first = {t.name: t.layouts[0] for t in op.inputs + op.outputs}
        layouts = {**first, **case.layouts}
        if "x" in case.layouts and "y" in first:  # conv2d's y follows x
            layouts["y"] = case.layouts["x"]
        env = {**dims, **{k: int(v) for k, v in attrs.items() if float(v).is_integer()}}
        sel = select(REG, device, case.op, case.dtype, layouts, env)
        assert sel.chosen is not None, f"{case.label}: nothing runs it"
        chosen = REG.instance(sel.chosen.instance) if sel.chosen.instance else None
        if chosen is None or not chosen.tunables:
            continue
        key = (chosen.name, bucket_of(dims))
        assert key in planned, f"{case.label}: {chosen.name} is not tuned at {key[1]}"


# --- the tuner, end to end --------------------------------------------------------------------

WRONG = ' ~ (" + 1" if params.CHUNK == 1024 else "")'


@pytest.fixture
def planted(tmp_path: Path) -> Tree:
    """A tree whose cpu unary kernels are wrong for CHUNK=1024 only (and fastest there, maybe)."""
    shutil.copytree(DEFAULT.specs, tmp_path / "specs")
    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    tpl = tmp_path / "templates/elementwise/unary_cpu.cl.j2"
    text = tpl.read_text()
    for acc in ("ACCV_", "ACC_"):
        call = f'cf.unary(op.name, "v_", "{acc}")'
        assert call in text
        text = text.replace(call, f"({call}{WRONG})")
    tpl.write_text(text)
    tree = Tree(tmp_path)
    generate(tree)
    return tree


def _tune(tree: Tree, **kw):  # type: ignore[no-untyped-def]
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device
    from clforge.tune.tuner import plan_jobs, tune

    reg = registry_mod.load(tree)
    profile = from_device(default_device())
    cases = {"relu": (Case({"N": 100_003}),)}
    jobs = plan_jobs(reg, profile, ["relu"], ["f32"], cases)
    assert [j.inst.name for j in jobs] == ["relu__cpu__f32"]
    return reg, profile, tune(tree, reg, profile, jobs, repeats=3, **kw)


def test_a_budget_that_runs_out_leaves_every_job_its_first_candidates(tmp_path: Path) -> None:
    """Breadth first: each job's defaults, then each job's second candidate, ...; a clock that
    ticks once per look lets exactly three candidates in, one round and a half."""
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device
    from clforge.tune.tuner import plan_jobs, tune

    profile = from_device(default_device())
    cases = {op: (Case({"N": 1009}),) for op in ("abs", "relu")}
    jobs = plan_jobs(REG, profile, ["abs", "relu"], ["f32"], cases)
    assert [j.inst.name for j in jobs] == ["abs__cpu__f32", "relu__cpu__f32"]
    ticks = iter(range(1_000_000))
    report = tune(
        DEFAULT,
        REG,
        profile,
        jobs,
        repeats=1,
        budget_s=3,
        fresh=True,
        out=tmp_path / "t.yaml",
        clock=lambda: float(next(ticks)),
        catch_all=False,
    )
    measured = sum(len(list(ParamSpace(j.inst).candidates(profile))) for j in jobs)
    assert report.skipped == measured - 3
    assert {e.instance for e in report.entries} == {"abs__cpu__f32", "relu__cpu__f32"}
    # a second run with no budget at all still takes the three from the journal
    again = tune(
        DEFAULT,
        REG,
        profile,
        jobs,
        repeats=1,
        budget_s=0,
        out=tmp_path / "t.yaml",
        clock=lambda: float(next(ticks)),
        catch_all=False,
    )
    assert again.skipped == measured - 3 and again.reused >= 3
    assert {e.instance for e in again.entries} == {"abs__cpu__f32", "relu__cpu__f32"}


@pytest.mark.slow
def test_a_wrong_candidate_is_never_chosen_and_the_kernel_change_makes_entries_stale(
    planted: Tree,
) -> None:
    from clforge.tune.tuner import stale_entries

    reg, profile, report = _tune(planted, fresh=True)
    rejected = [(i, dict(kv.split("=") for kv in p.split(","))) for i, p, _ in report.rejected]
    assert {i for i, _ in rejected} == {"relu__cpu__f32"}
    assert len(rejected) == 6 and all(p["CHUNK"] == "1024" for _, p in rejected)  # x VW, NT_MIN
    assert "wrong" in report.rejected[0][2]
    assert report.entries and all(dict(e.params)["CHUNK"] != 1024 for e in report.entries)
    (f,) = load_folder(planted.tuning)
    assert f.device == Fingerprint.of(profile) and f.path == report.path
    assert {e.bucket for e in f.entries} == {"N~131072", CATCH_ALL}
    assert not stale_entries(reg, (f,))
    # the kernel changes: its entries are stale, reported, and no longer used
    tpl = planted.templates / "elementwise/unary_cpu.cl.j2"
    tpl.write_text(tpl.read_text() + "\n// changed\n")
    generate(planted)
    reg2 = registry_mod.load(planted)
    assert {e.instance for _, e, _ in stale_entries(reg2, (f,))} == {"relu__cpu__f32"}
    lookup = ParamLookup(profile, (f,))
    assert lookup.choose(reg2.instance("relu__cpu__f32"), {"N": 100_003}).origin == (
        "computed for this device (vector_width=16); nothing tuned applies"
    )


@pytest.mark.slow
def test_a_killed_run_resumes_where_it_stopped(
    planted: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clforge.params.fingerprint import Fingerprint as Fp

    # a cache folder of its own: a journal an earlier test left in this process's folder (for
    # this device, with lines in it) would end the wait below before the run wrote anything
    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    cmd = [
        sys.executable,
        "-m",
        "clforge",
        "--root",
        str(planted.root),
        "tune",
        "relu",
        "--dtypes",
        "f32",
        "--shapes",
        "relu:N=100003",
        "--repeats",
        "3",
        "--fresh",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from clforge.core.cache_dir import cache_dir
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device

    journal = cache_dir("tune", f"{Fp.of(from_device(default_device())).slug}.jsonl")
    assert journal is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.is_file() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run ended before it could be killed"
    done = len(journal.read_text().splitlines())
    assert done >= 2, "the run was not killed half-way"
    _, _, report = _tune(planted)
    assert report.reused >= done - 1  # a line cut short by the kill is measured again
    assert report.measured + report.reused >= 5  # 4 candidates, then a race of the best 3
    assert not os.environ.get("CLFORGE_PARAMS")


def test_a_tuned_set_that_cannot_be_rendered_falls_back_to_the_defaults(tmp_path: Path) -> None:
    """An installed tree has generated/ but no templates/: a tuned or computed parameter set is
    then unavailable, and the call runs the generated defaults, with a warning."""
    import numpy as np

    from clforge.call.dispatcher import Dispatcher, dispatcher
    from clforge.errors import ClforgeWarning
    from clforge.runtime.launch import Runtime
    from clforge.runtime.program_cache import ProgramCache

    shutil.copytree(DEFAULT.specs, tmp_path / "specs")
    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    tree = Tree(tmp_path)
    generate(tree)
    shutil.rmtree(tree.templates)
    rt = Runtime(dispatcher().runtime.queue, registry_mod.load(tree), ProgramCache(None))
    d = Dispatcher.for_runtime(rt)
    d.override_params("relu__cpu__f32", {"CHUNK": 1024})
    try:  # an override is the device's: every dispatcher of it would keep it
        x = np.random.default_rng(3).standard_normal(5000).astype(np.float32)
        not_available = "CHUNK=1024,NT_MIN=4194304,VW=16: override is not available"
        with pytest.warns(ClforgeWarning, match=not_available):
            got = d.call("relu", {"x": x})["y"]
        np.testing.assert_array_equal(got, np.maximum(x, 0))
        d.strict = True
        d._plans.clear()
        with pytest.raises(TemplateError, match="not found"):
            d.call("relu", {"x": x})
    finally:
        d.override_params("relu__cpu__f32", None)


def test_selection_follows_the_measured_crossover(runtime) -> None:
    """Where the tuner timed two accepted variants at a call's shape bucket, the faster runs,
    whatever their priorities; explain says so. A shape nobody tuned takes the side of the
    nearest tuned bucket that times two of them; with no such bucket, the ranking stands."""
    import numpy as np

    from clforge.call.dispatcher import Dispatcher
    from clforge.device.query import from_device
    from clforge.params.database import Entry, bucket_of, schema_hash
    from clforge.params.lookup import ParamLookup

    reg = runtime.registry
    profile = from_device(runtime.device)
    # a shape where the routine is also the analytic choice (prefer_when holds: b of 4 MB)
    dims = {"BATCH": 1, "M": 600, "N": 1000, "K": 1000, "BA": 1, "BB": 1}
    packed = reg.instance("matmul__cpu_packed__f32__a_row__b_row")
    blocked = reg.instance("matmul__cpu_blocked__f32__a_row__b_row")

    def entry(inst, us, at=dims):
        return Entry(inst.name, bucket_of(at), tuple(sorted(inst.params)), schema_hash(inst),
                     tuple(sorted(at.items())), us, us, 1)  # fmt: skip

    big = {**dims, "M": 4096, "N": 4096, "K": 4096}
    small_wins = [entry(packed, 900.0), entry(blocked, 90.0)]
    large_wins = [entry(packed, 5e5, big), entry(blocked, 9e5, big)]
    timed = TuningFile(Fingerprint.of(profile)).with_entries(small_wins + large_wins)
    d = Dispatcher(runtime, profile, params=ParamLookup(profile, (timed,)))
    layouts = {"a": "row", "b": "row", "c": "row"}
    sel = d.select("matmul", "f32", layouts, dims)
    assert sel.chosen.instance == blocked.name and sel.chosen.measured_us == 90.0
    assert "measured fastest at this shape: 90.0 us vs cpu_packed 900.0 us" in sel.chosen.reason
    assert d.choose("matmul", "f32", layouts, dims) == blocked
    # it stands where the routine it outran would: a NumPy b is not copied column-major for
    # the routine's b=col instance, which only outranks the direct kernel by priority
    routine = next(c for c in sel.candidates if c.variant == "cpu_packed")
    assert sel.standing == routine.rank > sel.chosen.rank
    x, y = np.ones((1, 600, 1000), np.float32), np.ones((1, 1000, 1000), np.float32)
    assert d.plan_for(reg.op("matmul"), {"a": x, "b": y}, {}).inst.name == blocked.name
    # buckets nobody tuned: the nearest tuned one decides, and explain says which
    tiny = {**dims, "M": 8, "N": 8, "K": 8}
    sel = d.select("matmul", "f32", layouts, tiny)
    assert sel.chosen.instance == blocked.name
    assert "measured fastest at the nearest tuned shape: 90.0 us" in sel.chosen.reason
    assert bucket_of(dims) in sel.chosen.reason
    assert d.choose("matmul", "f32", layouts, {**dims, "M": 3000, "N": 2500, "K": 6000}) == packed
    # a file that times one variant only: nothing to compare, the ranking stands
    alone = TuningFile(Fingerprint.of(profile)).with_entries([entry(blocked, 90.0)])
    d = Dispatcher(runtime, profile, params=ParamLookup(profile, (alone,)))
    # (the analytic crossover's: the direct kernel at 8^3, the routine at 600 x 1000 x 1000)
    assert d.choose("matmul", "f32", layouts, tiny) == blocked
    assert d.choose("matmul", "f32", layouts, dims) == packed


def test_shape_distance_is_size_then_shape_in_powers_of_two() -> None:
    from clforge.params.database import bucket_dims, bucket_of, shape_distance

    b = bucket_of({"M": 64, "N": 64, "K": 64})
    assert bucket_dims(b) == {"K": 64, "M": 64, "N": 64}
    assert shape_distance({"M": 64, "N": 64, "K": 64}, b) == (0, 0)
    assert shape_distance({"M": 8, "N": 64, "K": 256}, b) == (1, 5)
    assert shape_distance({"M": 0, "N": 64, "K": 64}, b) == (6, 6)  # an empty dim counts as 1
    assert shape_distance({"M": 64, "N": 64}, b) == (float("inf"), float("inf"))
    # a matrix-vector product is nearer a small square in size than a large one in shape
    gemv = {"M": 1, "N": 4096, "K": 4096}
    assert shape_distance(gemv, bucket_of({"M": 256, "N": 256, "K": 256}))[0] == 0
    assert shape_distance(gemv, bucket_of({"M": 2048, "N": 2048, "K": 2048}))[0] == 9


def test_a_parameter_set_the_guard_refuses_at_a_shape_is_not_timed_there() -> None:
    """conv2d's depthwise kernel takes KB channels of one group per work-item, so its guard
    needs KB to divide K / groups: KB=2 passes the op's cases with a channel multiplier of 2,
    but at a depthwise shape (multiplier 1) it would compute half the channels, fast. The
    tuner's worker refuses to time it there (it once won the tuning so)."""
    from clforge.tune.worker import Worker

    worker = Worker()
    dims = {"N": 1, "C": 8, "H": 9, "W": 9, "K": 8, "CG": 1, "R": 3, "S": 3, "OH": 9, "OW": 9}
    attrs = {"stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1, "dil_h": 1, "dil_w": 1}
    req = {
        "instance": "conv2d__cpu_depthwise__f32__x_row__y_row",
        "dims": dims,
        "shapes": {"x": [1, 8, 9, 9], "w": [8, 1, 3, 3], "bias": [8]},
        "attrs": {**attrs, "groups": 8},
        "repeats": 1,
    }
    refused = worker.handle({**req, "params": {"KB": 2, "NB": 1, "TH": 1, "VW": 4}})
    assert refused["ok"] is False
    assert (
        refused["problem"].startswith("its guard ")
        and "does not hold at this shape" in (refused["problem"])
    )
    timed = worker.handle({**req, "params": {"KB": 1, "NB": 1, "TH": 1, "VW": 4}})
    assert timed["ok"] is True and timed["us"] > 0
    # in a race, the refused set gets its reason and no time; the others are timed
    runners = [{"instance": req["instance"], "params": {"KB": kb, "NB": 1, "TH": 1, "VW": 4}}
               for kb in (2, 1)]  # fmt: skip
    raced = worker.handle({**req, "race": runners})
    assert raced["ok"] is True and raced["us"][0] is None and raced["us"][1] > 0
    assert "does not hold at this shape" in raced["problems"][0] and raced["problems"][1] is None


def test_a_race_times_its_runners_interleaved() -> None:
    """Each round times every runner once, from a different one each round, so a slow spell
    of the machine lands on all of them; the medians keep their order."""
    from clforge.tune.measure import race_times

    order: list[int] = []

    def runner(i: int, seconds: float):  # type: ignore[no-untyped-def]
        def call() -> None:
            order.append(i)
            time.sleep(seconds)

        return call

    times = race_times([runner(0, 0.004), runner(1, 0.001)], lambda: None, rounds=4,
                       target_s=0.001)  # fmt: skip
    assert times[1] < times[0] and 0.003 < times[0] < 0.02
    timed = order[4:]  # after each runner's warm-up and calibrating call
    assert timed == [0, 1, 1, 0, 0, 1, 1, 0]


@pytest.mark.slow
def test_the_variants_chosen_at_a_shape_race_each_other(tmp_path: Path, monkeypatch) -> None:
    """softmax's cpu and cpu_vec8 variants both run a 64 x 256 row: each variant's finalists
    race, then the two winners race, and the entries carry that race's times (the crossover
    that selection follows)."""
    import json

    from clforge.core.cache_dir import cache_dir
    from clforge.device.discovery import default_device
    from clforge.device.query import from_device
    from clforge.tune.tuner import plan_jobs, tune

    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    profile = from_device(default_device())
    cases = {"softmax": (Case({"B": 64, "R": 256, "I": 1}),)}
    jobs = plan_jobs(REG, profile, ["softmax"], ["f32"], cases)
    names = {j.inst.name for j in jobs}
    assert names == {"softmax__cpu__f32", "softmax__cpu_vec8__f32"}
    report = tune(DEFAULT, REG, profile, jobs, repeats=3, out=tmp_path / "t.yaml", fresh=True)
    journal = cache_dir("tune", f"{Fingerprint.of(profile).slug}.jsonl")
    assert journal is not None
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    races = [r for r in records if r["key"].startswith('["race"')]
    assert len(races) == 3  # each variant's finalists, then the two winners
    final = races[-1]
    runners = json.loads(final["key"])[1]
    assert {r[0] for r in runners} == names
    by_name = {e.instance: e for e in report.entries if e.bucket != CATCH_ALL}
    for (name, _, params), us in zip(runners, final["us"], strict=True):
        assert [list(kv) for kv in by_name[name].params] == params
        assert by_name[name].time_us == pytest.approx(us)


@pytest.mark.slow
def test_a_run_at_chosen_shapes_keeps_the_catch_all_entries(planted: Tree) -> None:
    """`clforge tune --shapes ...` measures a few shapes picked by hand: it writes their
    buckets' entries and leaves the file's catch-all (from a run at the representative shapes)
    as it was."""
    _, _, first = _tune(planted, fresh=True)
    f = load(first.path)
    (catch_all,) = [e for e in f.entries if e.bucket == CATCH_ALL]
    # a catch-all another run chose: another valid CHUNK (never the planted, wrong 1024)
    chunk = 65536 if dict(catch_all.params)["CHUNK"] == 4096 else 4096
    other = dataclasses.replace(
        catch_all, params=tuple((k, chunk if k == "CHUNK" else v) for k, v in catch_all.params)
    )
    f.with_entries([other]).save(first.path)
    _, _, second = _tune(planted, catch_all=False)
    assert second.entries and all(e.bucket != CATCH_ALL for e in second.entries)
    assert [e for e in load(second.path).entries if e.bucket == CATCH_ALL] == [other]


def test_a_change_to_an_imported_template_makes_entries_stale_though_defaults_render_the_same(
    tmp_path: Path,
) -> None:
    """A tuned set is rendered from the templates, not read from generated/: a change that only
    other parameters see (here a Jinja comment, which renders nothing) still changes what an
    entry measured, so the entry must not be reused."""
    from clforge.emit.render import Renderer

    shutil.copytree(DEFAULT.specs, tmp_path / "specs")
    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    tree = Tree(tmp_path)
    generate(tree)
    before = registry_mod.load(tree).instance("exp__cpu__f32")
    shared = tmp_path / "templates/_common/transcendentals.cl.j2"  # imported by unary_cpu
    shared.write_text(shared.read_text() + "{# a change no default rendering shows #}\n")
    generate(tree)
    after = registry_mod.load(tree).instance("exp__cpu__f32")
    assert after.sha256 == before.sha256  # the generated kernel is the same
    assert after.templates_sha != before.templates_sha
    assert schema_hash(after) != schema_hash(before)
    untouched = registry_mod.load(tree).instance("permute__cpu__f32")  # imports none of it
    assert untouched.templates_sha == Renderer(DEFAULT).templates_digest(untouched.template)


def test_prune_drops_only_the_stale_entries(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A device not at hand cannot be re-tuned after its kernel changed: `tune --prune` drops
    its stale entries (and those of instances that no longer exist) and keeps the rest."""
    from clforge.tools.cli import main

    shutil.copytree(DEFAULT.specs, tmp_path / "specs")
    shutil.copytree(DEFAULT.templates, tmp_path / "templates")
    tree = Tree(tmp_path)
    generate(tree)
    reg = registry_mod.load(tree)
    live = dataclasses.replace(
        _entry("relu__cpu__f32", "N~1024", 1024), sha=schema_hash(reg.instance("relu__cpu__f32"))
    )
    changed = dataclasses.replace(_entry("exp__cpu__f32", CATCH_ALL, 16384), sha="0" * 16)
    gone = dataclasses.replace(live, instance="nosuch__cpu__f32")
    path = tree.tuning / "some-device.yaml"
    path.parent.mkdir()
    TuningFile(Fingerprint.of(CPU)).with_entries([live, changed, gone]).save(path)
    assert main(["--root", str(tmp_path), "tune", "--check"]) == 1
    capsys.readouterr()
    assert main(["--root", str(tmp_path), "tune", "--prune"]) == 0
    assert "dropped 2 stale entries, kept 1" in capsys.readouterr().out
    assert load_folder(tree.tuning)[0].entries == (live,)
    assert main(["--root", str(tmp_path), "tune", "--check"]) == 0


def test_the_measuring_process_is_recycled(tmp_path: Path) -> None:
    """A measuring process serves at most `recycle` requests, and `recycle()` (before each
    race) hands the next request to a fresh one: a process that had run a few hundred packed
    candidates once timed every packed candidate 7-8x slow (tune/pool.py)."""
    from clforge.tune.pool import WorkerPool

    pool = WorkerPool(DEFAULT.root, recycle=2)
    req = {
        "instance": "relu__cpu__f32",
        "params": dict(REG.instance("relu__cpu__f32").params),
        "dims": {"N": 1000},
        "shapes": {"x": [1000]},
        "attrs": {},
        "repeats": 1,
    }
    try:
        assert all(pool.request(req)["ok"] for _ in range(3))
        assert pool.started == 2 and pool.served == 1
        pool.recycle()
        assert pool.request(req)["ok"] and pool.started == 3 and pool.restarts == 0
    finally:
        pool.close()


def test_the_measuring_process_ends_with_a_killed_tuner(tmp_path: Path) -> None:
    """A tuner killed mid-race must not leave its measuring process running (timing a race at
    n = 2048 can take minutes, on a machine others then measure)."""
    parent = (
        "import os, subprocess, sys, time\n"
        "w = subprocess.Popen([sys.executable, '-c', 'from clforge.tune.worker import "
        "exit_with_parent; import time; exit_with_parent(%d, 0.05); time.sleep(60)' % os.getpid()],"
        " stdin=subprocess.PIPE)\n"
        "print(w.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    stat = Path(f"/proc/{child}/stat")
    while time.monotonic() < deadline:
        try:  # gone, or a zombie its new parent has not reaped
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the measuring process outlived its tuner")


def test_progress_in_a_log_is_a_line_now_and_then(capsys) -> None:  # type: ignore[no-untyped-def]
    from clforge.tools.tune_cmd import progress_bar

    now = [0.0]
    with progress_bar(10, tty=False, every_s=60, clock=lambda: now[0]) as update:
        for _ in range(9):
            now[0] += 20  # a candidate every 20 s: a line at 60 s, 120 s, 180 s
            update(1)
        update(1)  # the last one always prints
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "tune: 3/10 candidates (30%), 1.0 min",
        "tune: 6/10 candidates (60%), 2.0 min",
        "tune: 9/10 candidates (90%), 3.0 min",
        "tune: 10/10 candidates (100%), 3.0 min",
    ]
