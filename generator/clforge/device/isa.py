"""The vector ISA a CPU device's compiler targets: its width and its number of vector registers,
the two figures a register-blocked kernel's parameters depend on.

One table of records (:data:`ISAS`); the live probe (:mod:`clforge.device.discovery`) reads the
compiler's predefined macros and names a record; a profile or tuning file that does not record
its ISA gets it from the LLVM CPU it was compiled for (PoCL's `arch`), else from the device's
preferred float vector width and target triple (:func:`derive`). Nothing here imports pyopencl.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ISAS",
    "Derived",
    "VectorIsa",
    "derive",
    "describe",
    "isa_by_code",
    "isa_of_llvm_cpu",
    "probe_source",
]


@dataclass(frozen=True)
class VectorIsa:
    """A vector instruction set as a register-blocked kernel sees it."""

    name: str  # the key used in profiles and tuning files
    label: str  # how messages name it
    bits: int  # the width of one vector register (SVE: the width this device's compiler assumes)
    registers: int  # architectural vector registers
    code: int  # what the probe kernel writes for it (probe_source)
    macro: str  # the compiler's predefined macro that says it targets this ISA
    family: str  # "x86" or "arm"

    @property
    def floats(self) -> int:
        return self.bits // 32


ISAS: Mapping[str, VectorIsa] = {
    isa.name: isa
    for isa in (
        # widest first: the probe takes the first whose macro the compiler defines
        VectorIsa("avx512", "AVX-512", 512, 32, 4, "__AVX512F__", "x86"),
        VectorIsa("avx2", "AVX2", 256, 16, 3, "__AVX2__", "x86"),
        VectorIsa("avx", "AVX", 256, 16, 2, "__AVX__", "x86"),
        VectorIsa("sse2", "SSE2", 128, 16, 1, "__SSE2__", "x86"),
        # SVE's width is the hardware's: the device's preferred float width tells it
        VectorIsa("sve", "SVE", 0, 32, 6, "__ARM_FEATURE_SVE", "arm"),
        VectorIsa("neon", "NEON", 128, 32, 5, "__ARM_NEON", "arm"),
    )
}


def probe_source(out: str) -> str:
    """OpenCL C that stores the code of the ISA the compiler targets (0: none known) in
    `out`: a chain of #if over each ISA's predefined macro, widest first."""
    lines = []
    for i, isa in enumerate(ISAS.values()):
        lines.append(f"#{'if' if i == 0 else 'elif'} defined({isa.macro})")
        lines.append(f"    {out} = {isa.code};")
    return "\n".join([*lines, "#else", f"    {out} = 0;", "#endif"])


def isa_by_code(code: int) -> VectorIsa | None:
    return next((isa for isa in ISAS.values() if isa.code == code), None)


def describe(name: str, bits: int, registers: int) -> str:
    """ "AVX-512 (32 x 512-bit)": how explain names an ISA."""
    label = ISAS[name].label if name in ISAS else name
    return f"{label} ({registers} x {bits}-bit)"


# LLVM's x86 CPU names (what PoCL compiles for, `arch` in a profile) by the widest vector
# extension LLVM enables for them; a name not listed falls back to the vector width.
_X86_CPUS: Mapping[str, tuple[str, ...]] = {
    "avx512": (
        "skylake-avx512",
        "skx",
        "cascadelake",
        "cooperlake",
        "cannonlake",
        "icelake-client",
        "icelake-server",
        "tigerlake",
        "rocketlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "diamondrapids",
        "knl",
        "knm",
        "znver4",
        "znver5",
        "x86-64-v4",
    ),
    "avx2": (
        "haswell",
        "core-avx2",
        "broadwell",
        "skylake",
        "alderlake",
        "raptorlake",
        "meteorlake",
        "arrowlake",
        "arrowlake-s",
        "lunarlake",
        "pantherlake",
        "gracemont",
        "sierraforest",
        "grandridge",
        "clearwaterforest",
        "znver1",
        "znver2",
        "znver3",
        "bdver4",
        "x86-64-v3",
    ),
    "avx": (
        "sandybridge",
        "corei7-avx",
        "ivybridge",
        "core-avx-i",
        "bdver1",
        "bdver2",
        "bdver3",
        "btver2",
    ),
    "sse2": (
        "x86-64",
        "x86-64-v2",
        "nehalem",
        "westmere",
        "corei7",
        "core2",
        "penryn",
        "silvermont",
        "goldmont",
        "goldmont-plus",
        "tremont",
        "btver1",
        "k8",
        "opteron",
        "athlon64",
    ),
}
_ARM_SVE_CPUS: Mapping[str, int] = {"a64fx": 512, "neoverse-v1": 256}
# LLVM's AArch64 CPU names by family (the rest are NEON: 128-bit, 32 registers)
_ARM_CPU_PREFIXES = ("cortex-", "neoverse-", "apple-", "ampere", "thunderx", "carmel", "kryo")


def isa_of_llvm_cpu(cpu: str) -> VectorIsa | None:
    """The ISA LLVM targets for the CPU name `cpu`, or None for a name this table lacks."""
    low = cpu.strip().lower()
    for name, cpus in _X86_CPUS.items():
        if low in cpus:
            return ISAS[name]
    return None


@dataclass(frozen=True)
class Derived:
    """A device's vector ISA and where it came from."""

    name: str
    bits: int
    registers: int
    basis: str  # "recorded", "LLVM CPU <arch>", "preferred float width 16", ...


def derive(
    device_type: str,
    arch: str | None,
    float_width: int,
    triple: str = "",
) -> Derived | None:
    """The vector ISA of a CPU device that does not record one: from the LLVM CPU its compiler
    targets, else from its preferred float vector width (16: AVX-512; 8: AVX2; 4: NEON on an
    ARM triple, else SSE2). None for GPUs and accelerators, and for a CPU that says neither."""
    if device_type != "cpu":
        return None
    low = (arch or "").strip().lower()
    isa = isa_of_llvm_cpu(low)
    if isa is not None:
        return Derived(isa.name, isa.bits, isa.registers, f"LLVM CPU {low}")
    if low in _ARM_SVE_CPUS:
        return Derived("sve", _ARM_SVE_CPUS[low], ISAS["sve"].registers, f"LLVM CPU {low}")
    if low.startswith(_ARM_CPU_PREFIXES):
        isa = ISAS["neon"]
        return Derived(isa.name, isa.bits, isa.registers, f"LLVM CPU {low}")
    arm = any(word in triple.lower() for word in ("aarch64", "arm64", "armv"))
    by_width = {16: "avx512", 8: "avx2", 4: "neon" if arm else "sse2"}.get(float_width)
    if by_width is None:
        return None
    isa = ISAS[by_width]
    return Derived(isa.name, isa.bits, isa.registers, f"preferred float width {float_width}")
