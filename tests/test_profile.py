"""Device profiles: normalization of real driver strings, the live device, YAML files, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from clforge.device.profile import VECTOR_TYPES, DeviceProfile
from clforge.device.profile_files import (
    FIELDS,
    PROFILES_DIR,
    dump_profile,
    find_profile,
    load_profile,
    parse_profile,
    shipped_profiles,
)
from clforge.device.vendors import (
    intel_gpu_arch,
    intel_ip_version,
    normalize_vendor,
    opencl_c_number,
    split_device_name,
)
from clforge.errors import DeviceError, SpecError
from clforge.tools.cli import main

POCL = "Portable Computing Language"

# (vendor string, platform name, raw device name) as drivers report them, and the vendor.
VENDOR_CASES = [
    # PoCL 3.1 (Debian) and 3.0 (PyPI) on this project's AMD EPYC machines
    ("AuthenticAMD", POCL, "pthread-skylake-avx512-AMD EPYC", "pocl"),
    ("AuthenticAMD", POCL, "pthread-AMD EPYC", "pocl"),
    # PoCL 6.0 (Debian) on an Intel N150 (openbenchmarking.org clinfo)
    ("GenuineIntel", POCL, "cpu-haswell-Intel(R) N150", "pocl"),
    # PoCL's CUDA back end keeps the GPU's vendor (pocl/pocl#910)
    ("NVIDIA Corporation", POCL, "Tesla V100-SXM2-16GB", "nvidia"),
    ("NVIDIA Corporation", "NVIDIA CUDA", "NVIDIA H100 80GB HBM3", "nvidia"),
    (
        "Advanced Micro Devices, Inc.",
        "AMD Accelerated Parallel Processing",
        "gfx90a:sramecc+:xnack-",
        "amd",
    ),
    ("AuthenticAMD", "AMD Accelerated Parallel Processing", "AMD Ryzen 7 1800X", "amd"),
    (
        "AMD",
        "Clover",
        "AMD Radeon RX 5500 XT (navi14, LLVM 15.0.7, DRM 3.52, 6.3.9-arch1-1)",
        "amd",
    ),
    ("Intel(R) Corporation", "Intel(R) OpenCL Graphics", "Intel(R) Graphics [0x56a0]", "intel"),
    ("Intel(R) Corporation", "Intel(R) OpenCL", "13th Gen Intel(R) Core(TM) i7-13700K", "intel"),
    ("Apple", "Apple", "Apple M1", "apple"),
    ("ARM", "ARM Platform", "Mali-G78", "arm"),
    ("QUALCOMM", "QUALCOMM Snapdragon(TM)", "QUALCOMM Adreno(TM)", "qualcomm"),
    ("", "NVIDIA CUDA", "NVIDIA GeForce RTX 4070", "nvidia"),
    ("Imagination Technologies", "PowerVR", "PowerVR B-Series BXE-4-32", "unknown"),
]


@pytest.mark.parametrize(("vendor", "platform", "name", "expected"), VENDOR_CASES)
def test_normalize_vendor(vendor: str, platform: str, name: str, expected: str) -> None:
    assert normalize_vendor(vendor, platform, name) == expected


# (raw CL_DEVICE_NAME, CL_DEVICE_VERSION, board name) and the (name, arch) they give.
NAME_CASES = [
    # PoCL 3.1: the LLVM CPU sits between the driver prefix and the name
    (
        "pthread-skylake-avx512-AMD EPYC",
        "OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512",
        "",
        ("AMD EPYC", "skylake-avx512"),
    ),
    # PoCL 3.0 from PyPI: no CPU in the name, and a "generic" target (LLVM 14 lacks the CPU)
    (
        "pthread-AMD EPYC",
        "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-generic",
        "",
        ("AMD EPYC", None),
    ),
    # PoCL 6: the driver is called "cpu"
    (
        "cpu-haswell-Intel(R) N150",
        "OpenCL 3.0 PoCL HSTR: cpu-x86_64-pc-linux-gnu-haswell",
        "",
        ("Intel(R) N150", "haswell"),
    ),
    (
        "Tesla V100-SXM2-16GB",
        "OpenCL 1.2 pocl HSTR: CUDA-sm_70",
        "",
        ("Tesla V100-SXM2-16GB", "sm_70"),
    ),
    # ROCm: the device name is the LLVM target id, the board name the product
    (
        "gfx90a:sramecc+:xnack-",
        "OpenCL 2.0 ",
        "AMD Instinct MI250X/MI250",
        ("AMD Instinct MI250X/MI250", "gfx90a"),
    ),
    ("gfx90a:sramecc+:xnack-", "OpenCL 2.0 ", "", ("gfx90a", "gfx90a")),
    ("gfx1010", "OpenCL 2.0 ", "Device 731f", ("Device 731f", "gfx1010")),
    ("gfx906+sram-ecc", "OpenCL 2.0 ", "", ("gfx906", "gfx906")),
    ("NVIDIA H100 80GB HBM3", "OpenCL 3.0 CUDA", "", ("NVIDIA H100 80GB HBM3", None)),
    (
        "Intel(R) Data Center GPU Max 1100",
        "OpenCL 3.0 NEO ",
        "",
        ("Intel(R) Data Center GPU Max 1100", "xe-hpc"),
    ),
    ("Intel(R) Graphics [0x56a0]", "OpenCL 3.0 NEO", "", ("Intel(R) Graphics [0x56a0]", "xe-hpg")),
    (
        "Intel(R) UHD Graphics [0x9bca]",
        "OpenCL 3.0 NEO ",
        "",
        ("Intel(R) UHD Graphics [0x9bca]", "gen9"),
    ),
    (
        "Intel(R) Arc(TM) B580 Graphics",
        "OpenCL 3.0 NEO ",
        "",
        ("Intel(R) Arc(TM) B580 Graphics", "xe2-hpg"),
    ),
    ("Intel(R) UHD Graphics 770", "OpenCL 3.0 NEO ", "", ("Intel(R) UHD Graphics 770", "gen12lp")),
    (
        "13th Gen Intel(R) Core(TM) i7-13700K",
        "OpenCL 3.0 (Build 0)",
        "",
        ("13th Gen Intel(R) Core(TM) i7-13700K", None),
    ),
]


@pytest.mark.parametrize(("raw", "version", "board", "expected"), NAME_CASES)
def test_split_device_name(
    raw: str, version: str, board: str, expected: tuple[str, str | None]
) -> None:
    assert split_device_name(raw, version, board_name=board) == expected


def test_intel_ip_version_as_current_drivers_encode_it() -> None:
    # An Arc A380 (PCI id 22181 = 0x56a5); clinfo shows "Device IP (Intel) 0x30e0005 (12.224.5)"
    # because it decodes the value as a cl_version: the GMD id is 12.56.5 (DG2_G11_B1).
    assert intel_ip_version(0x30E0005) == (12, 56, 5)
    assert intel_gpu_arch(0x30E0005) == "xe-hpg"


# PRODUCT_CONFIG values from Intel compute-runtime's third_party/aot_config_headers/platforms.h
@pytest.mark.parametrize(
    ("value", "arch"),
    [
        (0x02400009, "gen9"),  # SKL
        (0x02C00000, "gen11"),  # ICL
        (0x03000000, "gen12lp"),  # TGL
        (0x03028000, "gen12lp"),  # DG1
        (0x030DC008, "xe-hpg"),  # DG2_G10_C0 (Arc A770)
        (0x030F0007, "xe-hpc"),  # PVC_XT_C0 (Data Center GPU Max)
        (0x03118004, "xe-lpg"),  # MTL_U_B0
        (0x03128000, "xe-lpgplus"),  # ARL_H_A0
        (0x05004000, "xe2-hpg"),  # BMG_G21_A0 (Arc B580)
        (0x05010004, "xe2-lpg"),  # LNL_B0
        (0x07800000, "xe3-lpg"),  # PTL_H_A0
    ],
)
def test_intel_gpu_arch_of_published_ip_versions(value: int, arch: str) -> None:
    assert intel_gpu_arch(value) == arch


def test_intel_ip_version_older_encoding_and_unknown_ips() -> None:
    assert intel_ip_version((12 << 16) | (0 << 8) | 1) == (12, 0, 1)
    assert intel_gpu_arch((12 << 16) | 1) == "gen12lp"
    assert intel_gpu_arch((9 << 16) | (5 << 8)) == "gen9"
    assert intel_gpu_arch((12 << 22) | (99 << 14)) == "12.99"


def test_opencl_c_number() -> None:
    assert opencl_c_number("OpenCL C 1.2 PoCL") == "1.2"
    assert opencl_c_number("OpenCL C 2.0 ") == "2.0"
    assert opencl_c_number("weird") == "weird"


# --- the live device ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_device():
    from clforge.device.discovery import default_device

    dev = default_device()
    if "portable computing language" not in dev.platform.name.lower():
        pytest.skip(f"the default device is not PoCL's CPU device: {dev.platform.name}")
    return dev


def test_live_profile_of_the_pocl_cpu_device(live_device) -> None:
    from clforge.device.query import from_device

    p = from_device(live_device)
    assert (p.device_type, p.vendor) == ("cpu", "pocl")
    assert p.extensions and list(p.extensions) == sorted(set(p.extensions))
    assert p.has("cl_khr_byte_addressable_store")
    assert not p.name.startswith(("pthread-", "cpu-"))
    assert [t for t, _ in p.preferred_vector_widths] == list(VECTOR_TYPES)
    assert p.local_mem_type in ("local", "global")
    assert p.local_mem_bytes > 0 and p.compute_units >= 1 and p.max_work_group_size >= 1
    assert p.opencl_c_version[0].isdigit()
    assert p.source.startswith("live query via pyopencl on Portable Computing Language OpenCL")
    assert dict(p.raw)["name"] == live_device.name
    assert p.limit("local_mem_bytes") == p.local_mem_bytes
    assert parse_profile(dump_profile(p), "live.yaml") == p
    # the device model: the ISA is the probe's (what the compiler targets), caches from sysfs
    from clforge.device.discovery import probe
    from clforge.device.host import host_cpu
    from clforge.device.isa import ISAS

    isa = ISAS[probe(live_device).compiled_isa]
    assert (p.vector_isa, p.vector_bits, p.vector_registers) == (isa.name, isa.bits, isa.registers)
    host = host_cpu()
    assert p.cores == host.cores >= 1
    if host.l1d_bytes:  # sysfs is readable here: its sizes, not OpenCL's
        assert (p.l1d_bytes, p.l2_bytes, p.l3_bytes) == (
            host.l1d_bytes,
            host.l2_bytes,
            host.l3_bytes,
        )
    else:
        assert p.l3_bytes == live_device.global_mem_cache_size


def test_raw_queries_through_ctypes_agree_with_pyopencl(live_device) -> None:
    import ctypes

    from clforge.device.query import _opencl_library, query_uint

    lib = _opencl_library()
    assert lib is not None
    out = ctypes.c_uint32(0)
    status = lib.clGetDeviceInfo(
        ctypes.c_void_p(live_device.int_ptr), 0x1002, 4, ctypes.byref(out), None
    )  # CL_DEVICE_MAX_COMPUTE_UNITS, asked directly
    assert (status, out.value) == (0, live_device.max_compute_units)
    assert query_uint(live_device, 0x1002) == live_device.max_compute_units
    # an Intel-only query that PoCL does not answer (and pyopencl does not know)
    assert query_uint(live_device, 0x4250) is None


def test_find_profile_auto_is_the_live_device(live_device) -> None:
    assert find_profile("auto").vendor == "pocl"


# --- YAML files ---------------------------------------------------------------------------------


def test_the_shipped_profiles() -> None:
    assert shipped_profiles() == [
        "amd-mi250x",
        "arm-mali-g78",
        "intel-max-1100",
        "nvidia-h100",
        "pocl-cpu",
        "qualcomm-adreno-740",
    ]
    model = {
        name: (p.vector_isa, p.vector_registers, p.sub_group_size)
        for name in shipped_profiles()
        for p in [load_profile(PROFILES_DIR / f"{name}.yaml")]
    }
    assert model == {
        "amd-mi250x": ("", 0, 64),
        "arm-mali-g78": ("", 0, 16),
        "intel-max-1100": ("", 0, 16),
        "nvidia-h100": ("", 0, 32),
        "pocl-cpu": ("avx512", 32, 0),
        "qualcomm-adreno-740": ("", 0, 64),
    }
    archs = {name: load_profile(PROFILES_DIR / f"{name}.yaml").arch for name in shipped_profiles()}
    assert archs == {
        "amd-mi250x": "gfx90a",
        "arm-mali-g78": "valhall",
        "intel-max-1100": "xe-hpc",
        "nvidia-h100": "sm_90",
        "pocl-cpu": "skylake-avx512",
        "qualcomm-adreno-740": "adreno-7xx",
    }


@pytest.mark.parametrize("name", shipped_profiles())
def test_shipped_profile_round_trips_exactly(name: str) -> None:
    path = PROFILES_DIR / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    p = load_profile(path)
    assert dump_profile(p) == text  # shipped files are in the canonical form
    again = parse_profile(dump_profile(p), str(path))
    assert again == p and again.raw == p.raw
    assert p.source.strip(), "every shipped profile says where its figures came from"
    assert find_profile(name) == p


def test_round_trip_of_unusual_values() -> None:
    p = DeviceProfile(
        name="Odd: device # with 'quotes'",
        vendor="unknown",
        device_type="accelerator",
        arch=None,
        extensions=("cl_z", "cl_a"),
        opencl_c_version="3.0",
        driver_version="1.0",
        preferred_vector_widths=(("half", 2), ("float", 4)),
        subgroups=True,
        source="line one\nline two: with a colon\n",
        raw=(("z", "last"), ("a", "yes")),
    )
    text = dump_profile(p)
    again = parse_profile(text, "odd.yaml")
    assert again == p and again.raw == p.raw
    assert dump_profile(again) == text


# a CPU profile as files written before the device model have it: no vector ISA, cores, caches
OLD_CPU = (
    "name: Some CPU\nvendor: pocl\ndevice_type: cpu\narch: {arch}\ncompute_units: 4\n"
    "preferred_vector_widths: {{float: {width}}}\n"
    "raw: {{device_version: 'OpenCL 3.0 PoCL HSTR: pthread-{triple}-{arch}'}}\n"
)


@pytest.mark.parametrize(
    ("arch", "width", "triple", "isa"),
    [
        ("znver3", 8, "x86_64-pc-linux-gnu", ("avx2", 256, 16)),  # by the LLVM CPU
        ("icelake-client", 16, "x86_64-pc-linux-gnu", ("avx512", 512, 32)),
        ("sandybridge", 8, "x86_64-pc-linux-gnu", ("avx", 256, 16)),
        ("a64fx", 16, "aarch64-unknown-linux-gnu", ("sve", 512, 32)),
        ("futurelake", 16, "x86_64-pc-linux-gnu", ("avx512", 512, 32)),  # by the float width
        ("futurelake", 8, "x86_64-pc-linux-gnu", ("avx2", 256, 16)),
        ("cortex-x9", 4, "aarch64-unknown-linux-gnu", ("neon", 128, 32)),
        ("neoverse-n2", 4, "", ("neon", 128, 32)),  # by the LLVM CPU's family, no triple
        ("futurecore", 4, "aarch64-unknown-linux-gnu", ("neon", 128, 32)),  # by the triple
        ("futurelake", 4, "x86_64-pc-linux-gnu", ("sse2", 128, 16)),
    ],
)
def test_a_profile_without_the_device_model_derives_it(
    arch: str, width: int, triple: str, isa: tuple[str, int, int]
) -> None:
    from clforge.device.profile import isa_text

    p = parse_profile(OLD_CPU.format(arch=arch, width=width, triple=triple), "old.yaml")
    assert (p.vector_isa, p.vector_bits, p.vector_registers) == isa
    assert p.cores == 4 and (p.l1d_bytes, p.l2_bytes, p.l3_bytes) == (0, 0, 0)  # never guessed
    assert isa_text(p).endswith(f" ({isa[2]} x {isa[1]}-bit)")
    assert parse_profile(dump_profile(p), "again.yaml") == p  # written out, it is recorded


def test_a_recorded_vector_isa_wins_and_a_gpu_gets_none() -> None:
    recorded = OLD_CPU.format(arch="znver4", width=16, triple="x86_64") + "vector_isa: avx2\n"
    assert parse_profile(recorded, "r.yaml").vector_registers == 16  # the probe's word, not arch's
    gpu = parse_profile("name: G\nvendor: amd\ndevice_type: gpu\n", "g.yaml")
    assert (gpu.vector_isa, gpu.cores, gpu.sub_group_size) == ("", 0, 0)
    assert "vector_isa" not in dump_profile(gpu)  # unknown model fields are left out


def test_the_device_model_in_one_line() -> None:
    from clforge.device.profile import model_dict, model_text

    cpu = load_profile(PROFILES_DIR / "pocl-cpu.yaml")
    assert model_text(cpu).startswith(
        "cpu: AVX-512 (32 x 512-bit), 2 cores, L1d 48 KiB, L2 1 MiB, L3 32 MiB; preferred vector "
        "widths char 16, short 16"
    )
    gpu = load_profile(PROFILES_DIR / "nvidia-h100.yaml")
    assert model_text(gpu).startswith(
        "gpu: 132 compute units, local memory 48 KiB, work-groups up to 1024, sub-group size 32;"
    )
    assert model_dict(gpu)["sub_group_size"] == 32 and model_dict(cpu)["vector_bits"] == 512


def test_host_caches_and_cores_from_sysfs(tmp_path: Path) -> None:
    from clforge.device.host import host_cpu

    for cpu, core in (("cpu0", "0"), ("cpu1", "0"), ("cpu2", "1")):  # 2 cores, 3 threads
        (tmp_path / cpu / "topology").mkdir(parents=True)
        (tmp_path / cpu / "topology" / "core_id").write_text(core + "\n")
        (tmp_path / cpu / "topology" / "physical_package_id").write_text("0\n")
    for i, (level, kind, size) in enumerate(
        [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"),
         ("3", "Unified", "32M")]
    ):  # fmt: skip
        index = tmp_path / "cpu0" / "cache" / f"index{i}"
        index.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (index / name).write_text(value + "\n")
    got = host_cpu(tmp_path)
    assert (got.cores, got.l1d_bytes, got.l2_bytes, got.l3_bytes) == (
        2,
        48 << 10,
        2 << 20,
        32 << 20,
    )
    empty = host_cpu(tmp_path / "nothing")  # unreadable: no caches, the OS's CPU count
    assert (empty.l1d_bytes, empty.l2_bytes, empty.l3_bytes) == (0, 0, 0) and empty.cores >= 1


def _diags(tmp_path: Path, text: str) -> tuple[str, list[str]]:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_profile(path)
    return path.as_posix(), [str(d) for d in info.value.diagnostics]


def test_unknown_key_and_wrong_type_are_located(tmp_path: Path) -> None:
    path, diags = _diags(
        tmp_path,
        "name: Some GPU\nvendor: nvidia\ndevice_type: gpu\ncolour: green\nlocal_mem_bytes: 64K\n",
    )
    assert diags == [
        f"{path}:4:1: error [unknown-key] unknown key 'colour' in a device profile; only the "
        f"following keys are supported: {', '.join(FIELDS)}",
        f"{path}:5:18: error [type] local_mem_bytes: expected an integer, got a string ('64K')",
    ]
    assert "name, vendor, device_type, arch, extensions, local_mem_bytes" in diags[0]


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    path, diags = _diags(
        tmp_path,
        "vendor: nvdia\n"
        "device_type: gpu\n"
        "opencl_c_version: 1.2\n"
        "compute_units: 0\n"
        "subgroups: yes please\n"
        "extensions: [cl_khr_fp64, cl_khr_fp64]\n"
        "preferred_vector_widths: {float: 1, quad: 2}\n",
    )
    assert diags == [
        f"{path}:1:1: error [missing-key] required key 'name' is missing",
        f"{path}:1:9: error [vocabulary] vendor: 'nvdia' is not one of amd, apple, arm, intel, "
        "nvidia, pocl, qualcomm, unknown",
        f"{path}:3:19: error [type] opencl_c_version: expected a string, got a number (1.2) "
        "(quote it, e.g. '1.2', or YAML reads a number)",
        f"{path}:4:16: error [value] compute_units: must be at least 1, got 0",
        f"{path}:5:12: error [type] subgroups: expected true or false, got a string ('yes please')",
        f"{path}:6:27: error [duplicate] extensions: 'cl_khr_fp64' is listed twice",
        f"{path}:7:37: error [unknown-key] preferred_vector_widths: unknown type 'quad'; only "
        "the following are supported: char, short, int, long, float, double, half",
    ]


def test_files_that_are_not_profiles(tmp_path: Path) -> None:
    path, diags = _diags(tmp_path, "- just\n- a list\n")
    assert diags == [
        f"{path}:1:1: error [type] a profile file must hold one mapping (name:, vendor:, "
        "device_type:, ...)"
    ]
    path, diags = _diags(tmp_path, "name: [unclosed\n")
    assert len(diags) == 1 and diags[0].startswith(f"{path}:2:1: error [yaml-syntax] ")
    with pytest.raises(SpecError, match=r"\[io\] cannot read profile"):
        load_profile(tmp_path / "missing.yaml")


def test_find_profile_names_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(DeviceError) as info:
        find_profile("h100")
    assert str(info.value) == (
        "no device profile 'h100': use 'auto' (the live default device), a shipped profile "
        "(amd-mi250x, arm-mali-g78, intel-max-1100, nvidia-h100, pocl-cpu, qualcomm-adreno-740) "
        "or the path of a profile YAML file"
    )
    mine = tmp_path / "mine.yaml"
    mine.write_text(dump_profile(DeviceProfile("Mine", "amd", "gpu", "gfx942")), encoding="utf-8")
    assert find_profile(str(mine)).arch == "gfx942"
    with pytest.raises(DeviceError):
        find_profile("../profiles/nvidia-h100")  # a name never walks out of profiles/


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_profile_list_and_print(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == shipped_profiles()
    assert "NVIDIA H100 80GB HBM3 (nvidia gpu, arch sm_90)" in out[3]
    assert main(["profile", "--device", "amd-mi250x"]) == 0
    text = capsys.readouterr().out
    assert text == (PROFILES_DIR / "amd-mi250x.yaml").read_text(encoding="utf-8")


def test_cli_profile_refuses_an_unknown_vector_isa(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvendor: pocl\ndevice_type: cpu\nvector_isa: avx1024\n")
    assert main(["profile", "--device", str(bad)]) == 1
    assert capsys.readouterr().err == (
        f"{bad.as_posix()}:4:13: error [vocabulary] vector_isa: 'avx1024' is not one of '', "
        "avx512, avx2, avx, sse2, sve, neon\n"
    )


def test_cli_profile_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvendor: nvidia\ndevice_type: tpu\n", encoding="utf-8")
    assert main(["profile", "--device", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"{bad.as_posix()}:3:14: error [vocabulary] device_type: 'tpu' is not one of "
        "accelerator, cpu, gpu\n"
    )
    assert main(["profile", "--device", "nope"]) == 1
    assert "shipped profile (amd-mi250x, " in capsys.readouterr().err
