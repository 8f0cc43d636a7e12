"""What a variant targets (`arch:` in a spec) and how specific that target is.

A target is one of: `generic`; a device type (`cpu`, `gpu`, `accelerator`); a vendor (`nvidia`,
`amd`, `intel`, `apple`, `arm`, `qualcomm`, `pocl`); `arch:<name>` (an architecture a device
reports, e.g. `arch:sm_90`, `arch:gfx90a`, `arch:znver3`); or `device:<name>` (one exact device
name). Ranking prefers the most specific: device > arch > vendor > device type > generic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum


class Level(IntEnum):
    GENERIC = 0
    DEVICE_TYPE = 1
    VENDOR = 2
    ARCH = 3
    DEVICE = 4


DEVICE_TYPES = ("accelerator", "cpu", "gpu")
VENDORS = ("amd", "apple", "arm", "intel", "nvidia", "pocl", "qualcomm")
# a device whose vendor is none of those has a profile, but no variant can target its vendor
UNKNOWN_VENDOR = "unknown"
PROFILE_VENDORS = (*VENDORS, UNKNOWN_VENDOR)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+\- ]{0,63}\Z")


@dataclass(frozen=True, order=True)
class Target:
    level: Level
    value: str

    def __str__(self) -> str:
        if self.level is Level.ARCH:
            return f"arch:{self.value}"
        if self.level is Level.DEVICE:
            return f"device:{self.value}"
        return self.value


def parse_target(text: str) -> Target:
    """Parse one `arch:` entry; raise ValueError with the vocabulary when it is none of them."""
    if text == "generic":
        return Target(Level.GENERIC, text)
    if text in DEVICE_TYPES:
        return Target(Level.DEVICE_TYPE, text)
    if text in VENDORS:
        return Target(Level.VENDOR, text)
    for prefix, level in (("arch:", Level.ARCH), ("device:", Level.DEVICE)):
        if text.startswith(prefix):
            name = text[len(prefix) :].strip()
            if not _NAME.match(name):
                raise ValueError(
                    f"{text!r}: the name after {prefix!r} is 1-64 letters, digits, '_.+- '"
                )
            return Target(level, name)
    raise ValueError(
        f"unknown target {text!r}; use generic, a device type ({', '.join(DEVICE_TYPES)}), "
        f"a vendor ({', '.join(VENDORS)}), arch:<name> or device:<name>"
    )
