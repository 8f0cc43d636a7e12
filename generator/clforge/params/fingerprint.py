"""A device's fingerprint: the properties a tuned parameter set depends on, from its profile.
Two devices with one fingerprint get one tuning file; the lookup falls back from the exact
fingerprint to the same architecture, then to the same vendor and device type."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from clforge.device.profile import DeviceProfile

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

    @classmethod
    def of(cls, profile: DeviceProfile) -> Fingerprint:
        widths = dict(profile.preferred_vector_widths)
        return cls(
            vendor=profile.vendor,
            device_type=profile.device_type,
            name=profile.name,
            arch=profile.arch or "",
            driver=profile.driver_version,
            compute_units=profile.compute_units,
            vector_widths=tuple((k, int(widths.get(k, 0))) for k in VECTOR_KEYS),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "device_type": self.device_type,
            "name": self.name,
            "arch": self.arch,
            "driver": self.driver,
            "compute_units": self.compute_units,
            "vector_widths": dict(self.vector_widths),
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()

    @property
    def slug(self) -> str:
        """The tuning file's name: readable, and unique through a short digest."""
        words = _SLUG.sub("-", f"{self.vendor} {self.arch or self.name}".lower()).strip("-")
        return f"{words}-{self.digest[:8]}"

    def level(self, other: Fingerprint) -> int:
        """How closely `other` (a tuning file's device) matches this device: 3 the same device,
        2 the same architecture, 1 the same vendor and device type, 0 none."""
        if other == self:
            return 3
        if (other.vendor, other.device_type) != (self.vendor, self.device_type):
            return 0
        return 2 if self.arch and other.arch == self.arch else 1


LEVEL_NAMES = {
    3: "tuned on this device",
    2: "tuned on the same architecture",
    1: "tuned on another device of this vendor and type",
}
