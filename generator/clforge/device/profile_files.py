"""Device profiles as YAML files: loading with located errors, deterministic dumping, lookup.

A profile file holds one mapping whose keys are the fields of :class:`DeviceProfile` (see
`profiles/` for the shipped ones). Loading never raises anything but :class:`SpecError`, which
carries every problem of the file at once, each at its file:line:col, like a spec file's.
:func:`find_profile` resolves what `--device` names: "auto", a shipped profile, or a path.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from clforge.core.diagnostics import Collector
from clforge.core.located_yaml import LocList, LocMap, YamlProblem, load_yaml
from clforge.core.tree import DEFAULT
from clforge.device.isa import ISAS
from clforge.device.profile import (
    DEVICE_TYPES,
    LOCAL_MEM_TYPES,
    PROFILE_VENDORS,
    VECTOR_TYPES,
    DeviceProfile,
    as_dict,
    with_model,
)
from clforge.errors import DeviceError, Diagnostic, Location, SpecError

PROFILES_DIR = DEFAULT.profiles
HEADER = (
    '# A clforge device profile: see docs/devices.md, "Device profiles".\n'
    "# `clforge profile --device <this file>` checks it and prints it back.\n"
)
FIELDS = tuple(f.name for f in dataclasses.fields(DeviceProfile))
REQUIRED = tuple(
    f.name
    for f in dataclasses.fields(DeviceProfile)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
_SHIPPED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


# --- loading ------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    """How a wrong value reads in a message: its YAML type and, for scalars, itself."""
    if isinstance(value, LocMap | dict):
        return "a mapping"
    if isinstance(value, LocList | list):
        return "a list"
    if value is None:
        return "null"
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} ({value!r})"


class _Checker(Collector):
    """The collector, with readers of typed profile fields."""

    def string(self, key: str, *, nullable: bool = False, nonempty: bool = False) -> Any:
        value = self.tree[key]
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            hint = (
                " (quote it, e.g. '1.2', or YAML reads a number)"
                if isinstance(value, int | float) and not isinstance(value, bool)
                else ""
            )
            expected = "a string or null" if nullable else "a string"
            self.add((key,), "type", f"{key}: expected {expected}, got {_shown(value)}{hint}")
            return None
        if nonempty and not value.strip():
            self.add((key,), "value", f"{key}: must not be empty")
        return value

    def choice(self, key: str, options: tuple[str, ...]) -> Any:
        value = self.string(key)
        if isinstance(value, str) and value not in options:
            shown = ", ".join(o or "''" for o in options)
            self.add((key,), "vocabulary", f"{key}: {value!r} is not one of {shown}")
            return None
        return value

    def integer(self, key: str, minimum: int) -> Any:
        value = self.tree[key]
        if not isinstance(value, int) or isinstance(value, bool):
            self.add((key,), "type", f"{key}: expected an integer, got {_shown(value)}")
            return None
        if value < minimum:
            self.add((key,), "value", f"{key}: must be at least {minimum}, got {value}")
            return None
        return value

    def boolean(self, key: str) -> Any:
        value = self.tree[key]
        if not isinstance(value, bool):
            self.add((key,), "type", f"{key}: expected true or false, got {_shown(value)}")
            return None
        return value

    def extensions(self) -> Any:
        value = self.tree["extensions"]
        if not isinstance(value, LocList):
            self.add(
                ("extensions",),
                "type",
                f"extensions: expected a list of extension names, got {_shown(value)}",
            )
            return None
        seen: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item or any(c.isspace() for c in item):
                self.add(
                    ("extensions", i),
                    "type",
                    f"extensions[{i}]: expected an extension name without spaces, "
                    f"got {_shown(item)}",
                )
            elif item in seen:
                self.add(("extensions", i), "duplicate", f"extensions: {item!r} is listed twice")
            seen.add(item if isinstance(item, str) else "")
        return tuple(value)

    def widths(self) -> Any:
        value = self.tree["preferred_vector_widths"]
        if not isinstance(value, LocMap):
            self.add(
                ("preferred_vector_widths",),
                "type",
                "preferred_vector_widths: expected a mapping of scalar type to width, e.g. "
                f"{{float: 1}}, got {_shown(value)}",
            )
            return None
        out = []
        for key, width in value.items():
            where = ("preferred_vector_widths", key)
            if key not in VECTOR_TYPES:
                self.add(
                    where,
                    "unknown-key",
                    f"preferred_vector_widths: unknown type {key!r}; only the following are "
                    f"supported: {', '.join(VECTOR_TYPES)}",
                    at_key=True,
                )
            elif not isinstance(width, int) or isinstance(width, bool) or width < 0:
                self.add(
                    where,
                    "type",
                    f"preferred_vector_widths.{key}: expected an integer >= 0, got {_shown(width)}",
                )
            else:
                out.append((key, width))
        return tuple(out)

    def raw(self) -> Any:
        value = self.tree["raw"]
        if not isinstance(value, LocMap):
            self.add(("raw",), "type", f"raw: expected a mapping of strings, got {_shown(value)}")
            return None
        for key, item in value.items():
            if not isinstance(item, str):
                self.add(("raw", key), "type", f"raw.{key}: expected a string, got {_shown(item)}")
        return tuple((k, v) for k, v in value.items() if isinstance(v, str))


def parse_profile(text: str, path: str) -> DeviceProfile:
    """A profile from YAML text; raise SpecError carrying every problem, located."""
    try:
        tree = load_yaml(text, path)
    except YamlProblem as exc:
        raise SpecError([exc.diagnostic]) from None
    if not isinstance(tree, LocMap):
        loc = getattr(tree, "loc", None) or Location(path, 1, 1)
        raise SpecError(
            [
                Diagnostic(
                    loc,
                    "type",
                    "a profile file must hold one mapping (name:, vendor:, device_type:, ...)",
                )
            ]
        )
    check = _Checker(path, tree)
    for key in tree:
        if key not in FIELDS:
            check.add(
                (key,),
                "unknown-key",
                f"unknown key {key!r} in a device profile; only the following keys are "
                f"supported: {', '.join(FIELDS)}",
                at_key=True,
            )
    for key in REQUIRED:
        if key not in tree:
            check.add((), "missing-key", f"required key {key!r} is missing")

    readers = {
        "name": lambda: check.string("name", nonempty=True),
        "vendor": lambda: check.choice("vendor", PROFILE_VENDORS),
        "device_type": lambda: check.choice("device_type", DEVICE_TYPES),
        "arch": lambda: check.string("arch", nullable=True, nonempty=True),
        "extensions": check.extensions,
        "local_mem_bytes": lambda: check.integer("local_mem_bytes", 0),
        "local_mem_type": lambda: check.choice("local_mem_type", LOCAL_MEM_TYPES),
        "max_work_group_size": lambda: check.integer("max_work_group_size", 1),
        "compute_units": lambda: check.integer("compute_units", 1),
        "opencl_c_version": lambda: check.string("opencl_c_version"),
        "driver_version": lambda: check.string("driver_version"),
        "preferred_vector_widths": check.widths,
        "subgroups": lambda: check.boolean("subgroups"),
        "sub_group_size": lambda: check.integer("sub_group_size", 0),
        "vector_isa": lambda: check.choice("vector_isa", ("", *ISAS)),
        "vector_bits": lambda: check.integer("vector_bits", 0),
        "vector_registers": lambda: check.integer("vector_registers", 0),
        "cores": lambda: check.integer("cores", 0),
        "l1d_bytes": lambda: check.integer("l1d_bytes", 0),
        "l2_bytes": lambda: check.integer("l2_bytes", 0),
        "l3_bytes": lambda: check.integer("l3_bytes", 0),
        "source": lambda: check.string("source"),
        "raw": check.raw,
    }
    values = {key: read() for key, read in readers.items() if key in tree}
    if check.diags:
        raise SpecError(check.diags)
    # the device model's fields a file leaves out (an older profile) are derived, as for a live
    # device: the vector ISA from the LLVM CPU or the preferred float width, a CPU's cores
    return with_model(DeviceProfile(**values))


def load_profile(path: str | Path) -> DeviceProfile:
    """Load one profile file; raise SpecError (located) when it cannot be read or is invalid."""
    p = Path(path)
    shown = DEFAULT.rel(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            [Diagnostic(Location(shown), "io", f"cannot read profile: {exc}")]
        ) from None
    return parse_profile(text, shown)


# --- dumping ------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings as literal blocks, for readable `source:` fields."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_profile(profile: DeviceProfile) -> str:
    """The profile as YAML: fixed key order, no timestamps; load_profile reads it back equal."""
    body = yaml.dump(
        as_dict(profile),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=100,
    )
    return HEADER + body


# --- lookup -------------------------------------------------------------------------------------


def shipped_profiles(profiles_dir: Path = PROFILES_DIR) -> list[str]:
    """The names (file stems) of the profiles under `profiles_dir`, sorted."""
    if not profiles_dir.is_dir():
        return []
    return sorted(p.stem for p in profiles_dir.glob("*.yaml") if p.is_file())


def find_profile(spec: str, *, profiles_dir: Path = PROFILES_DIR) -> DeviceProfile:
    """The profile `spec` names: "auto" (the live default device), a shipped profile's name, or
    the path of a YAML file. DeviceError when it names none of them; SpecError for a bad file."""
    text = spec.strip()
    if text == "auto":
        from clforge.device.discovery import default_device
        from clforge.device.query import from_device

        return from_device(default_device())
    if _SHIPPED_NAME.match(text) and (profiles_dir / f"{text}.yaml").is_file():
        return load_profile(profiles_dir / f"{text}.yaml")
    if text and Path(text).is_file():
        return load_profile(Path(text))
    names = ", ".join(shipped_profiles(profiles_dir)) or "none"
    raise DeviceError(
        f"no device profile {spec!r}: use 'auto' (the live default device), a shipped profile "
        f"({names}) or the path of a profile YAML file"
    )
