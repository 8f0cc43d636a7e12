"""A device's fingerprint: the properties a tuned parameter set depends on, from its profile.
Two devices with one fingerprint get one tuning file.

The lookup's chain (:meth:`Fingerprint.level`): the exact device, then the same architecture,
then the nearest device of the same vendor and type (:meth:`Fingerprint.similarity`) — and
never a device whose vector ISA differs (:meth:`Fingerprint.isa_problem`): a register block
tuned for AVX-512's 32 registers of 16 floats spills on AVX2's 16 of 8, and crossovers measured
there do not hold here. The ISA fields (vector_isa, vector_bits, vector_registers) are recorded
in files written since they exist; an older file's are derived from what it records (its LLVM
CPU target, else its float vector width: :func:`clforge.device.isa.derive`)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from clforge.device.isa import derive, describe
from clforge.device.profile import DeviceProfile, isa_of

_SLUG = re.compile(r"[^a-z0-9]+")
VECTOR_KEYS = ("float", "double", "half")


@dataclass(frozen=True, order=True)
class Fingerprint:
    vendor: str
    device_type: str
    name: str  # without PoCL's driver prefixes
    arch: str  # PoCL's LLVM CPU target, NVIDIA sm_XX, AMD gfx..., or "" when the device has none
    driver: str  # driver (PoCL) version
    compute_units: int
    vector_widths: tuple[tuple[str, int], ...]  # preferred widths of float, double, half
    # the vector ISA its compiler targets (clforge.device.isa.ISAS; "" for GPUs): derived from
    # arch and the float width when not given
    vector_isa: str = ""
    vector_bits: int = 0
    vector_registers: int = 0

    def __post_init__(self) -> None:
        if self.vector_isa:
            return
        float_width = dict(self.vector_widths).get("float", 0)
        isa = derive(self.device_type, self.arch, float_width)
        if isa is not None:  # frozen: set once, here, as a dataclass's own __init__ would
            object.__setattr__(self, "vector_isa", isa.name)
            object.__setattr__(self, "vector_bits", isa.bits)
            object.__setattr__(self, "vector_registers", isa.registers)

    @classmethod
    def of(cls, profile: DeviceProfile) -> Fingerprint:
        widths = dict(profile.preferred_vector_widths)
        isa = isa_of(profile)
        return cls(
            vendor=profile.vendor,
            device_type=profile.device_type,
            name=profile.name,
            arch=profile.arch or "",
            driver=profile.driver_version,
            compute_units=profile.compute_units,
            vector_widths=tuple((k, int(widths.get(k, 0))) for k in VECTOR_KEYS),
            vector_isa=isa.name if isa else "",
            vector_bits=isa.bits if isa else 0,
            vector_registers=isa.registers if isa else 0,
        )

    def as_profile(self) -> DeviceProfile:
        """The device as far as the fingerprint records it (its ISA and vector widths; OpenCL's
        limits, which it does not record, unbounded): what its entries' parameters are checked
        against (the register constraints)."""
        return DeviceProfile(
            name=self.name,
            vendor=self.vendor,
            device_type=self.device_type,
            arch=self.arch or None,
            max_work_group_size=1 << 30,
            compute_units=self.compute_units,
            driver_version=self.driver,
            preferred_vector_widths=tuple((k, w) for k, w in self.vector_widths if w),
            vector_isa=self.vector_isa,
            vector_bits=self.vector_bits,
            vector_registers=self.vector_registers,
        )

    def identity(self) -> dict[str, Any]:
        """What names the device (and its file): everything but the ISA fields, which follow
        from its compiler target, so that a file written before they were recorded keeps its
        name and its journal."""
        return {
            "vendor": self.vendor,
            "device_type": self.device_type,
            "name": self.name,
            "arch": self.arch,
            "driver": self.driver,
            "compute_units": self.compute_units,
            "vector_widths": dict(self.vector_widths),
        }

    def as_dict(self) -> dict[str, Any]:
        out = self.identity()
        if self.vector_isa:
            out |= {"vector_isa": self.vector_isa, "vector_bits": self.vector_bits}
            out["vector_registers"] = self.vector_registers
        return out

    @property
    def isa_text(self) -> str:
        """ "AVX-512 (32 x 512-bit)"; "no known vector ISA" for a GPU or an unknown CPU."""
        if not self.vector_isa:
            return "no known vector ISA"
        return describe(self.vector_isa, self.vector_bits, self.vector_registers)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()

    @property
    def slug(self) -> str:
        """The tuning file's name: readable, and unique through a short digest."""
        words = _SLUG.sub("-", f"{self.vendor} {self.arch or self.name}".lower()).strip("-")
        return f"{words}-{self.digest[:8]}"

    def isa(self) -> tuple[str, int, int]:
        return (self.vector_isa, self.vector_bits, self.vector_registers)

    def isa_problem(self, other: Fingerprint) -> str | None:
        """Why `other`'s (a tuning file's device's) parameters and crossovers cannot serve this
        device: another vector ISA (name, width or register count; an unknown one on either
        side of two CPUs counts as another). None where the ISAs match."""
        known = bool(self.vector_isa and other.vector_isa) or self.device_type != "cpu"
        if known and other.isa() == self.isa():
            return None
        return f"{other.isa_text} vs this device's {self.isa_text}"

    def pass_reason(self, other: Fingerprint) -> str | None:
        """Why the lookup passes over `other`'s file for this device (None: it may borrow)."""
        if other.device_type != self.device_type:
            return f"a {other.device_type} device, this one is a {self.device_type}"
        if other.vendor != self.vendor:
            return f"another vendor or driver ({other.vendor}, this device: {self.vendor})"
        return self.isa_problem(other)

    def level(self, other: Fingerprint) -> int:
        """How closely `other` (a tuning file's device) matches this device: 3 the same device,
        2 the same architecture, 1 the same vendor, device type and vector ISA, 0 none (see
        :meth:`pass_reason`)."""
        if self.pass_reason(other) is not None:
            return 0
        if other.identity() == self.identity():
            return 3
        return 2 if self.arch and other.arch == self.arch else 1

    def similarity(self, other: Fingerprint) -> tuple[float, ...]:
        """The order among the devices a level admits, most similar first when sorted in
        descending order: the same driver version (one compiler), then the nearest compute unit
        count (log2 ratio: 2 and 4 units are as near as 32 and 64), then the same preferred
        vector widths. The ISA itself is not in it: an ISA that differs is never borrowed."""
        units = max(self.compute_units, 1), max(other.compute_units, 1)
        return (
            float(other.driver == self.driver),
            -abs(math.log2(units[0] / units[1])),
            float(other.vector_widths == self.vector_widths),
        )


LEVEL_NAMES = {
    3: "tuned on this device",
    2: "tuned on the same architecture",
    1: "tuned on the nearest device of this vendor, type and vector ISA",
}
