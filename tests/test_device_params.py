"""Computed defaults (a variant's `device_params`) on synthetic and shipped device profiles.

The register blocks of the packed matmul, gemm and convolutions and of flash attention fit the
register file of the device they are computed for (16 on AVX2, 32 on AVX-512 and NEON), the
packed routine's KB follows L1 as the BLIS model says, every computed default passes its
variant's constraints on every profile that accepts the variant, the computed sets of the
synthetic devices build and match NumPy here, GPUs of any vendor (the shipped ARM Mali and
Qualcomm Adreno profiles) get the tiled variants with tiles inside their limits, and every
tunable variant without device_params is one docs/tuning.md says is device-independent.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from clforge.call.selection import requirement_problem, target_matches
from clforge.core.dtypes import DTYPES
from clforge.core.targets import parse_target
from clforge.device.profile import DeviceProfile
from clforge.device.profile_files import find_profile, shipped_profiles
from clforge.params.database import CATCH_ALL, Entry, TuningFile, schema_hash
from clforge.params.fingerprint import Fingerprint
from clforge.params.lookup import ParamLookup
from clforge.params.properties import register_file
from clforge.params.space import ParamSpace
from clforge.references.base import Case
from clforge.registry import loader as registry_mod
from clforge.registry.records import Instance
from clforge.spec.model import CONSTRAINT_PROPERTIES
from clforge.tools.cli import main
from clforge.tune.tuner import candidates, default_params, plan_jobs, stale_entries
from clforge.tune.verify import verify

REG = registry_mod.default()
KIB = 1024
COMPUTED = "computed for this device ("


def _cpu(name: str, arch: str, isa: str, bits: int, regs: int, l1: int) -> DeviceProfile:
    floats = bits // 32
    return DeviceProfile(
        name=name,
        vendor="pocl",
        device_type="cpu",
        arch=arch,
        max_work_group_size=4096,
        compute_units=2,
        preferred_vector_widths=(("float", floats), ("double", floats // 2), ("int", floats)),
        vector_isa=isa,
        vector_bits=bits,
        vector_registers=regs,
        cores=2,
        l1d_bytes=l1,
        l2_bytes=512 * KIB,
    )


ZEN3 = _cpu("AMD EPYC 7B13", "znver3", "avx2", 256, 16, 32 * KIB)  # AVX2: 16 x 8 floats
XEON = _cpu("Intel Xeon", "icelake-server", "avx512", 512, 32, 48 * KIB)  # 32 x 16 floats
NEOVERSE = _cpu("Neoverse-N1", "neoverse-n1", "neon", 128, 32, 64 * KIB)  # 32 x 4 floats
SYNTHETIC = (ZEN3, XEON, NEOVERSE)
PROFILES = (*SYNTHETIC, *(find_profile(n) for n in shipped_profiles()))

# the register-blocked CPU variants: (instance, its block's row, column and vector params)
BLOCKED = [
    ("matmul__cpu_packed__f32__a_row__b_row", "MR", "NR", "VW"),
    ("matmul__cpu_packed64__f64__a_row__b_row", "MR", "NR", "VW"),
    ("gemm__cpu_packed__f32__a_row__b_row", "MR", "NR", "VW"),
    ("conv2d__cpu_packed__f32__x_row__y_row", "MR", "NR", "VW"),
    ("conv2d__cpu_im2col__f32__x_row__y_row", "MR", "NR", "VW"),
    ("attention__cpu_flash__f32__q_row__k_row__v_row__o_row", "MR", "NR", "VW"),
    ("matmul__cpu_blocked__f32__a_row__b_row", "TM", "TN", "VW"),
    ("matmul__cpu_blocked__f64__a_row__b_row", "TM", "TN", "VW"),
]


def _accepts(inst: Instance, profile: DeviceProfile) -> bool:
    targeted = any(target_matches(parse_target(t), profile) for t in inst.targets)
    fp64 = inst.dtype != "f64" or profile.has("cl_khr_fp64") or profile.device_type == "cpu"
    return targeted and fp64 and requirement_problem(inst, profile) is None


def _registers(inst: Instance, params: dict[str, int], rows: str, cols: str, vw: str, bits: int):
    """The vector registers a block takes on a device of `bits`-wide registers: rows + 1 rows
    (the accumulators and one of b) of cols / vw vectors, each vw elements wide."""
    per_vector = math.ceil(params[vw] * 8 * DTYPES[inst.dtype].size / bits)
    return (params[rows] + 1) * (params[cols] // params[vw]) * per_vector


@pytest.mark.parametrize(("name", "rows", "cols", "vw"), BLOCKED)
def test_register_blocks_fit_the_device_they_are_computed_for(
    name: str, rows: str, cols: str, vw: str
) -> None:
    inst = REG.instance(name)
    used = {}
    for profile in SYNTHETIC:
        c = ParamLookup(profile).choose(inst, {})
        assert c.origin.startswith(COMPUTED), (profile.name, c.describe())
        assert "vector_registers=" in c.origin
        params = dict(c.params)
        used[profile.vector_isa] = _registers(inst, params, rows, cols, vw, profile.vector_bits)
        assert used[profile.vector_isa] <= profile.vector_registers - 2, (profile.name, params)
    # AVX2's 16 registers bound its block; AVX-512 and NEON use more than 16 of their 32
    assert used["avx512"] > 16 and used["neon"] > 16, used


def test_the_packed_block_on_each_isa() -> None:
    """6 x 2 vectors of 8 floats on AVX2 (the block hand-set in issue 32's measurement), 6 x 4
    of 16 on AVX-512, 6 x 4 of 4 on NEON."""
    inst = REG.instance("matmul__cpu_packed__f32__a_row__b_row")
    blocks = {
        p.vector_isa: tuple(
            dict(ParamLookup(p).choose(inst, {}).params)[k] for k in ("MR", "NR", "VW")
        )
        for p in SYNTHETIC
    }
    assert blocks == {"avx2": (6, 16, 8), "avx512": (6, 64, 16), "neon": (6, 16, 4)}


def test_the_spec_defaults_spill_on_avx2_and_the_constraint_says_so() -> None:
    """The constraint reads the device's registers: AVX-512's 6 x 64 block breaks it on AVX2."""
    for profile in (None, ZEN3):  # what constraints read is what the spec checks allow
        assert set(register_file(profile, "f32")) == set(CONSTRAINT_PROPERTIES)
    space = ParamSpace(REG.instance("matmul__cpu_packed__f32__a_row__b_row"))
    assert space.problem(space.defaults, XEON) is None
    problem = space.problem(space.defaults, ZEN3)
    assert problem is not None and "vector_registers - 2" in problem and "AMD EPYC" in problem
    assert space.problem(space.defaults) is None  # no device named: the widest ISA's registers


def test_kb_follows_l1_as_the_blis_model_says() -> None:
    """KB: the pack's KB x NR panel of b fills half of L1 (a multiple of 16): 256 at 32 KiB
    and 16 columns, twice that at 64 KiB; an unknown L1 reads 32 KiB."""
    inst = REG.instance("matmul__cpu_packed__f32__a_row__b_row")
    kb = {}
    for l1 in (32 * KIB, 64 * KIB, 0):
        params = dict(ParamLookup(dataclasses.replace(ZEN3, l1d_bytes=l1)).choose(inst, {}).params)
        kb[l1] = params["KB"]
        panel = params["KB"] * params["NR"] * 4
        assert panel <= (l1 or 32 * KIB) // 2 < panel + 16 * params["NR"] * 4
    assert kb == {32 * KIB: 256, 64 * KIB: 512, 0: 256}
    f64 = REG.instance("matmul__cpu_packed64__f64__a_row__b_row")
    params = dict(ParamLookup(XEON).choose(f64, {}).params)  # 8 doubles x 4 vectors, 48 KiB
    assert (params["NR"], params["KB"]) == (32, 96)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_computed_default_passes_its_constraints(profile: DeviceProfile) -> None:
    """On each profile, every instance it accepts that has device_params gets them computed
    (they pass the variant's constraints and the device's work-group limit), not the spec
    defaults' fallback."""
    checked = 0
    for inst in REG.instances.values():
        if not inst.device_params or not _accepts(inst, profile):
            continue
        c = ParamLookup(profile).choose(inst, {})
        assert c.origin.startswith(COMPUTED), f"{profile.name}: {inst.name}: {c.describe()}"
        checked += 1
    assert checked


# the tiled GPU variants: how much local memory a tile set takes (from their templates)
LOCAL_BYTES = {
    "matmul": lambda p, acc, _: 2 * p["TS"] * p["TS"] * acc,
    "gemm": lambda p, acc, _: 2 * p["TS"] * p["TS"] * acc,
    "conv2d": lambda p, acc, _: 2 * p["TS"] * (p["TS"] + 1) * acc,
    "permute": lambda p, _, elem: p["TS"] * (p["TS"] + 1) * elem,
    "attention": lambda p, acc, _: 2 * p["BK"] * p["DMAX"] * acc,
}


@pytest.mark.parametrize("device", ["arm-mali-g78", "qualcomm-adreno-740"])
def test_mobile_gpus_get_the_tiled_variants_within_their_limits(
    device: str, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = find_profile(device)
    for op, group in LOCAL_BYTES.items():
        assert main(["explain", op, "--device", device, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["chosen"].startswith(f"{op}__gpu_tiled__f32"), data["chosen"]
        assert data["params_origin"].split(": ", 1)[1].startswith(COMPUTED)
        p = data["params"]
        size = p.get("TS", 0) ** 2 or p["BQ"]  # one work-item per output of a tile, or query
        assert size <= profile.max_work_group_size
        assert group(p, 4, 4) <= profile.local_mem_bytes
    # and the rest of the ops a model runs: not the one-element-per-work-item generic kernels
    for op in ("softmax", "sum", "layer_norm", "add", "relu"):
        assert main(["explain", op, "--device", device, "--json"]) == 0
        chosen = json.loads(capsys.readouterr().out)["chosen"]
        assert chosen and "generic" not in chosen, (op, chosen)


BLOCKED_GPU = (
    "matmul__gpu_tiled__f32__a_row__b_row",
    "attention__gpu_tiled__f32__q_row__k_row__v_row__o_row",
)


def test_small_gpus_get_smaller_tiles() -> None:
    """A GPU whose work-groups stop at 128 gets 8 x 8 matmul tiles, one with 16 KiB of local
    memory 8 keys a step in attention, one with 1.5 KiB 8 x 8 tiles too."""
    mali = find_profile("arm-mali-g78")
    small = dataclasses.replace(mali, max_work_group_size=128, local_mem_bytes=16 * KIB)
    tight = dataclasses.replace(mali, local_mem_bytes=1536)  # two 16 x 16 tiles need 2 KiB

    def param(profile: DeviceProfile, name: str, key: str) -> int:
        c = ParamLookup(profile).choose(REG.instance(name), {})
        assert c.origin.startswith(COMPUTED), c.describe()
        return dict(c.params)[key]

    assert [param(p, BLOCKED_GPU[0], "TS") for p in (mali, small, tight)] == [16, 8, 8]
    assert [param(p, BLOCKED_GPU[1], "BK") for p in (mali, small)] == [16, 8]


def _computed_sets() -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """Each distinct computed set of the synthetic CPUs, for the ops whose defaults changed."""
    out: dict[tuple[str, tuple[tuple[str, int], ...]], None] = {}
    ops = {"matmul", "gemm", "conv2d", "attention", "sum", "mean", "max", "argmax", "permute"}
    for inst in sorted(REG.instances.values(), key=lambda i: i.name):
        if inst.op not in ops or not inst.device_params or "cpu" not in inst.targets:
            continue
        if any(lay != "row" for _, lay in inst.layouts):
            continue
        for profile in SYNTHETIC:
            c = ParamLookup(profile).choose(inst, {})
            if c.params != ParamSpace(inst).defaults:
                out[(inst.name, c.params)] = None
    return list(out)


@pytest.mark.parametrize(("name", "params"), _computed_sets(), ids=str)
def test_computed_sets_build_and_match_numpy(runtime, name: str, params) -> None:
    """What AVX2, AVX-512 and NEON devices would run is correct code (checked here, on this
    machine's device, with the tuner's canary-padded verification)."""
    verdict = verify(runtime, REG.instance(name), params)
    assert verdict.ok, str(verdict)


def test_every_tunable_variant_has_device_params_or_a_documented_reason() -> None:
    """The table in docs/tuning.md ("Computed defaults") names each tunable variant that has no
    device_params, with why its spec default does not depend on the device; a variant it names
    must exist and still lack them."""
    text = (Path(__file__).parents[1] / "docs" / "tuning.md").read_text(encoding="utf-8")
    section = text.split("## Computed defaults", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([a-z0-9_]+:[a-z0-9_]+)`", section))
    missing = {
        f"{i.op}:{i.variant}" for i in REG.instances.values() if i.tunables and not i.device_params
    }
    with_params = {f"{i.op}:{i.variant}" for i in REG.instances.values() if i.device_params}
    assert not missing - documented, f"undocumented: {sorted(missing - documented)}"
    assert not documented & with_params, f"have device_params: {sorted(documented & with_params)}"


def test_the_tuner_tries_only_blocks_that_fit_the_device() -> None:
    """On AVX2 the tuner starts from the computed 6 x 16 block and never measures the spec's
    AVX-512 block (nor any other that breaks the register constraint there)."""
    shape = {"BATCH": 1, "M": 256, "N": 256, "K": 256, "BA": 1, "BB": 1}
    jobs = plan_jobs(REG, ZEN3, ["matmul"], ["f32"], {"matmul": (Case(shape),)})
    (job,) = [j for j in jobs if j.inst.variant == "cpu_packed"]
    default = default_params(REG, ZEN3, job)
    points = candidates(job, ZEN3, default)
    space = ParamSpace(job.inst)
    assert points[0] == default and space.defaults not in points
    assert all(space.problem(p, ZEN3) is None for p in points)
    xeon_jobs = plan_jobs(REG, XEON, ["matmul"], ["f32"], {"matmul": (Case(shape),)})
    (xeon_job,) = [j for j in xeon_jobs if j.inst.variant == "cpu_packed"]
    xeon = candidates(xeon_job, XEON, default_params(REG, XEON, xeon_job))
    assert xeon[1] == space.defaults and len(xeon) > len(points)


def test_tune_check_reports_entries_that_break_a_constraint_on_their_device() -> None:
    """An entry whose block its own device's registers do not hold is stale (`tune --check`
    lists it, `--prune` drops it): AVX-512's 6 x 64 block in an AVX2 device's file, not in an
    AVX-512 one's."""
    inst = REG.instance("matmul__cpu_packed__f32__a_row__b_row")
    entry = Entry(inst.name, CATCH_ALL, ParamSpace(inst).defaults, schema_hash(inst))
    for profile, stale in ((ZEN3, True), (XEON, False)):
        f = TuningFile(Fingerprint.of(profile)).with_entries([entry])
        found = stale_entries(REG, (f,))
        assert bool(found) is stale, found
        if stale:
            assert "no longer fit its device: constraint '(MR + 1)" in found[0][2]


# --- the analytic crossover between variants (prefer_when) ---------------------------------


def _select(profile: DeviceProfile, op: str, dims: dict[str, int], dtype: str = "f32"):
    from clforge.call.selection import select

    return select(REG, profile, op, dtype, {}, {"BATCH": 1, "BA": 1, "BB": 1, **dims})


@pytest.mark.parametrize("op", ["matmul", "gemm"])
def test_the_packed_routine_is_preferred_only_where_packing_pays_off(op: str) -> None:
    """Where nothing measured the crossover, the routine (b packed, a read in place) is
    chosen where the direct kernel would re-read a b that outgrew L2 by half (K N bytes over
    1.5 L2; 1 MiB read where L2 is unknown) for more than two of its row panels (M over 16
    where vectors of 16 floats come, over 8 with 8). The synthetic profiles' L2 is 512 KiB:
    the direct kernel keeps small products, 16 rows and a matrix-vector product; the routine
    takes 1024^2 and the transformer's skinny 32 x 768 x 3072; K counts; a larger L2 keeps
    the direct kernel longer; unknown dims count as holding (a symbolic compile keeps the
    routine); the reason says which way it went and on what."""
    direct, routine = (
        f"{op}__cpu_blocked__f32__a_row__b_row",
        f"{op}__cpu_packed__f32__a_row__b_row",
    )

    def pick(profile: DeviceProfile, M: int, N: int, K: int = 512) -> str | None:
        c = _select(profile, op, {"M": M, "N": N, "K": K}).chosen
        return c.instance if c else None

    for M, N in ((64, 64), (256, 256), (1, 4096), (16, 1000)):  # b of 128 KiB to 2 MiB
        assert pick(XEON, M, N) == direct, (M, N)
    assert pick(XEON, 128, 768, K=256) == direct  # b of 768 KiB: 1.5 x 512 KiB, not over
    for M, N, K in ((1024, 1024, 512), (256, 3072, 512), (3000, 3000, 512), (32, 3072, 768)):
        assert pick(XEON, M, N, K) == routine, (M, N, K)
    assert pick(XEON, 12, 1024, K=1024) == direct and pick(ZEN3, 12, 1024, K=1024) == routine
    assert pick(XEON, 256, 256, K=1) == direct and pick(XEON, 256, 256, K=8192) == routine
    roomy = dataclasses.replace(XEON, l2_bytes=4096 * KIB)
    assert pick(roomy, 1024, 1024) == direct and pick(roomy, 1024, 1024, K=4096) == routine
    unknown = dataclasses.replace(XEON, l2_bytes=0)  # read as 1 MiB: b of 2 MiB is over 1.5
    assert pick(unknown, 1024, 1024) == routine and pick(unknown, 1024, 1024, K=256) == direct
    sel = _select(XEON, op, {"K": 64})
    assert sel.chosen is not None and sel.chosen.instance == routine  # M, N unknown
    reasons = {
        c.variant: c.reason for c in _select(XEON, op, {"M": 64, "N": 64, "K": 64}).candidates
    }
    assert "prefer_when" in reasons["cpu_packed"] and "is false" in reasons["cpu_packed"]
    assert "M=64" in reasons["cpu_packed"] and "l2_bytes=524288" in reasons["cpu_packed"]
    # a layout only the routine takes still gets it: preference ranks, it never excludes
    col = _select_layouts(XEON, op, {"M": 8, "N": 8, "K": 8}, {"b": "col"})
    assert col.chosen is not None and col.chosen.instance == routine.replace("b_row", "b_col")
    # and a NumPy b stays row-major for the direct kernel, which stands higher there
    assert col.standing < _select(XEON, op, {"M": 8, "N": 8, "K": 8}).standing


def _select_layouts(profile, op, dims, layouts):
    from clforge.call.selection import select

    return select(REG, profile, op, "f32", layouts, {"BATCH": 1, "BA": 1, "BB": 1, **dims})


def test_a_measured_crossover_outranks_the_analytic_one(runtime) -> None:
    """Where a tuning file of the device timed both variants at the call's bucket, the faster
    measured one runs whichever way prefer_when goes."""
    from clforge.call.selection import measured, select
    from clforge.params.database import bucket_of

    dims = {"BATCH": 1, "BA": 1, "BB": 1, "M": 64, "N": 64, "K": 64}
    packed = REG.instance("matmul__cpu_packed__f32__a_row__b_row")
    blocked = REG.instance("matmul__cpu_blocked__f32__a_row__b_row")

    def entry(inst: Instance, us: float) -> Entry:
        return Entry(inst.name, bucket_of(dims), tuple(sorted(inst.params)), schema_hash(inst),
                     tuple(sorted(dims.items())), us, us, 1)  # fmt: skip

    timed = TuningFile(Fingerprint.of(XEON)).with_entries([entry(packed, 5.0), entry(blocked, 9.0)])
    sel = select(REG, XEON, "matmul", "f32", {}, dims)
    assert sel.chosen is not None and sel.chosen.instance == blocked.name  # analytic
    again = measured(sel, REG, ParamLookup(XEON, (timed,)), dims)
    assert again.chosen is not None and again.chosen.instance == packed.name
    assert again.chosen.measured_us == 5.0


def test_reductions_and_transposes_compute_their_blocks_from_the_device() -> None:
    """A middle-axis reduction's IB is four native vectors (a 256-byte run of each row on
    AVX-512, 32 floats on AVX2); the transpose's TB is a 64-byte line of elements and its TC
    fills half of L1 with the two blocks (192 f32 on 48 KiB, 128 on 32 KiB, a multiple of TB)."""
    ib = {p.vector_isa: dict(ParamLookup(p).choose(REG.instance("sum__cpu__f32"), {}).params)["IB"]
          for p in SYNTHETIC}  # fmt: skip
    assert ib == {"avx512": 64, "avx2": 32, "neon": 16}
    expected = [
        (XEON, "f32", (16, 192)),
        (ZEN3, "f32", (16, 128)),
        (XEON, "f64", (8, 192)),
        (NEOVERSE, "f16", (32, 256)),
    ]
    for profile, dtype, want in expected:
        c = ParamLookup(profile).choose(REG.instance(f"permute__cpu__{dtype}"), {})
        got = dict(c.params)
        assert (got["TB"], got["TC"]) == want, (profile.name, dtype, c.describe())
        assert c.origin.startswith(COMPUTED) and "l1d_bytes=" in c.origin


@pytest.mark.parametrize(
    ("groups", "per_group", "kb"), [(8, 4, 4), (8, 2, 2), (6, 3, 1), (16, 1, 1)]
)
def test_defaults_may_read_the_call_s_dims(runtime, groups: int, per_group: int, kb: int) -> None:
    """A depthwise/grouped conv's KB (output channels a work-item takes) is computed from the
    call's dims: as many of the group's P = K / G outputs as divide it, up to 4; NB and TH
    shrink so that the accumulators fit half the registers. With no dims (a symbolic compile)
    KB keeps its spec default while VW is still computed. The computed sets run and match the
    reference here, on a dispatcher with no tuning file at all."""
    from clforge.call.dispatcher import Dispatcher
    from clforge.device.query import from_device
    from clforge.references import expected

    inst = REG.instance("conv2d__cpu_depthwise__f32__x_row__y_row")
    C, K = 2 * groups, groups * per_group
    dims = {"N": 1, "C": C, "H": 11, "W": 13, "K": K, "CG": 2, "R": 3, "S": 3, "OH": 11, "OW": 13}
    c = ParamLookup(XEON).choose(inst, dims)
    params = dict(c.params)
    assert c.origin.startswith(COMPUTED) and f"K={K}" in c.origin, c.describe()
    assert params["KB"] == kb and K // groups % params["KB"] == 0
    assert params["KB"] * params["NB"] * params["TH"] <= XEON.vector_registers // 2
    avx2 = dict(ParamLookup(ZEN3).choose(inst, dims).params)
    assert avx2["KB"] * avx2["NB"] * avx2["TH"] <= ZEN3.vector_registers // 2
    symbolic = ParamLookup(XEON).choose(inst, {})
    assert dict(symbolic.params)["KB"] == 1 and dict(symbolic.params)["VW"] == 8
    assert "K=" not in symbolic.origin

    profile = from_device(runtime.device)
    d = Dispatcher(runtime, profile, params=ParamLookup(profile))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, C, 11, 13)).astype(np.float32)
    w = rng.standard_normal((K, 2, 3, 3)).astype(np.float32)
    inputs = {"x": x, "w": w, "bias": rng.standard_normal(K).astype(np.float32)}
    attrs = {"groups": groups, "pad_h": 1, "pad_w": 1}
    plan = d.plan_for(REG.op("conv2d"), inputs, attrs)
    assert plan.inst.name == inst.name and dict(plan.params)["KB"] == kb
    got = d.call("conv2d", inputs, attrs)["y"]
    want = expected(REG.op("conv2d"), inputs, attrs)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
