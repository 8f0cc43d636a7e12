"""The tuning database: one human-readable, schema-versioned YAML file per device under a tree's
`tuning/` folder, sorted and deterministic, so results from many machines merge by adding
files. An entry is keyed by instance (op, variant, dtype, layouts) and shape bucket, and
carries the hash of what it measured (the instance's rendered source and parameter schema), so
an entry for a changed kernel is stale: reported, never used."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from clforge.core.atomic_file import atomic_write
from clforge.errors import ClforgeError
from clforge.params.fingerprint import VECTOR_KEYS, Fingerprint
from clforge.params.space import Params, as_params
from clforge.registry.records import Instance

SCHEMA = 1
CATCH_ALL = "*"
HEADER = (
    "# clforge tuning database for one device: written by `clforge tune`, merged by\n"
    '# `clforge tune --merge A B`; see docs/tuning.md. Edit by hand only to delete\n'
    "# entries.\n"
)


class TuningError(ClforgeError):
    """A tuning file that cannot be read, or a merge of files of two devices."""


def bucket_of(dims: Mapping[str, int]) -> str:
    """The shape bucket of a call: each dim rounded to the nearest power of two."""
    if not dims:
        return CATCH_ALL
    return " ".join(
        f"{d}~{2 ** round(math.log2(n)) if n > 0 else 0}" for d, n in sorted(dims.items())
    )


def bucket_dims(bucket: str) -> dict[str, int]:
    """The dims of a bucket :func:`bucket_of` wrote (none for the catch-all)."""
    if bucket == CATCH_ALL:
        return {}
    return {d: int(n) for d, _, n in (part.partition("~") for part in bucket.split())}


def shape_distance(dims: Mapping[str, int], bucket: str) -> tuple[float, float]:
    """How far a call's dims are from a shape bucket, in powers of two (an empty dim counts as
    1): first in size (the product of the dims, which decides most crossovers: launch-bound
    against compute-bound, packing paid off or not), then in shape (the sum over dims);
    infinite for a bucket of other dims."""
    at = bucket_dims(bucket)
    if set(at) != set(dims):
        return (math.inf, math.inf)
    steps = [math.log2(max(dims[d], 1)) - math.log2(max(n, 1)) for d, n in at.items()]
    return (abs(sum(steps)), sum(abs(x) for x in steps))


def schema_hash(inst: Instance) -> str:
    """What an entry measured: the instance's source (its hash), the templates any parameter
    set of it is rendered from (so that a template change which leaves the defaults' source
    alone still makes tuned sets stale), and its parameter schema."""
    schema = {
        "source": inst.sha256,
        "templates": inst.templates_sha,
        "params": dict(inst.params),
        "tunables": {k: list(v) for k, v in inst.tunables},
        "constraints": list(inst.constraints),
    }
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, order=True)
class Entry:
    instance: str
    bucket: str  # bucket_of(dims), or CATCH_ALL
    params: Params
    sha: str  # schema_hash of the instance it was measured on
    shape: tuple[tuple[str, int], ...] = ()  # the dims measured (none for a catch-all)
    time_us: float = 0.0  # median of the chosen parameters
    default_us: float = 0.0  # median of the spec defaults, same run
    tried: int = 0  # candidates measured (verified ones)

    @property
    def key(self) -> tuple[str, str]:
        return (self.instance, self.bucket)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "instance": self.instance,
            "bucket": self.bucket,
            "params": dict(self.params),
            "sha": self.sha,
        }
        if self.shape:
            out["shape"] = dict(self.shape)
        out.update({"time_us": round(self.time_us, 2), "default_us": round(self.default_us, 2)})
        out["tried"] = self.tried
        return out


@dataclass(frozen=True)
class TuningFile:
    device: Fingerprint
    entries: tuple[Entry, ...] = ()
    path: Path | None = field(default=None, compare=False)

    def with_entries(self, entries: Iterable[Entry]) -> TuningFile:
        merged = {e.key: e for e in self.entries}
        merged.update({e.key: e for e in entries})
        return replace(self, entries=tuple(sorted(merged.values())))

    def text(self) -> str:
        doc = {
            "schema": SCHEMA,
            "device": self.device.as_dict(),
            "entries": [e.as_dict() for e in sorted(self.entries)],
        }
        return HEADER + yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)

    def save(self, path: Path) -> None:
        atomic_write(path, self.text())


def _int_map(value: Any, what: str, where: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise TuningError(f"{where}: {what} must map names to integers, got {value!r}")
    return value


def parse(text: str, where: str) -> TuningFile:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TuningError(f"{where}: not YAML: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise TuningError(f"{where}: not a clforge tuning file of schema {SCHEMA} (schema: {got})")
    unknown = sorted(set(doc) - {"schema", "device", "entries"})
    if unknown:
        raise TuningError(f"{where}: unknown keys {', '.join(unknown)} (schema, device, entries)")
    dev = doc.get("device")
    if not isinstance(dev, dict):
        raise TuningError(f"{where}: device: expected a mapping, got {dev!r}")
    try:
        device = Fingerprint(
            vendor=str(dev["vendor"]),
            device_type=str(dev["device_type"]),
            name=str(dev["name"]),
            arch=str(dev["arch"] or ""),
            driver=str(dev["driver"]),
            compute_units=int(dev["compute_units"]),
            vector_widths=tuple(
                (k, int(_int_map(dev["vector_widths"], "vector_widths", where).get(k, 0)))
                for k in VECTOR_KEYS
            ),
            # the vector ISA: absent from older files, then derived (Fingerprint.__post_init__)
            vector_isa=str(dev.get("vector_isa") or ""),
            vector_bits=int(dev.get("vector_bits") or 0),
            vector_registers=int(dev.get("vector_registers") or 0),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise TuningError(f"{where}: device: missing or bad field {exc}") from None
    entries = []
    for i, e in enumerate(doc.get("entries") or ()):
        here = f"{where}: entries[{i}]"
        try:
            entries.append(
                Entry(
                    instance=str(e["instance"]),
                    bucket=str(e["bucket"]),
                    params=as_params(_int_map(e["params"], "params", here)),
                    sha=str(e["sha"]),
                    shape=as_params(_int_map(e.get("shape", {}), "shape", here)),
                    time_us=float(e.get("time_us", 0.0)),
                    default_us=float(e.get("default_us", 0.0)),
                    tried=int(e.get("tried", 0)),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TuningError(f"{here}: missing or bad field {exc}") from None
    return TuningFile(device, tuple(sorted(entries)))


def load(path: Path) -> TuningFile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TuningError(f"{path}: cannot read: {exc}") from None
    return replace(parse(text, str(path)), path=path)


def load_folder(folder: Path) -> tuple[TuningFile, ...]:
    if not folder.is_dir():
        return ()
    return tuple(load(p) for p in sorted(folder.glob("*.yaml")))


def load_folders(folders: Sequence[Path]) -> tuple[TuningFile, ...]:
    """The tuning files of several trees (clforge's and its extensions'), in that order."""
    return tuple(f for folder in folders for f in load_folder(folder))


def merge(a: TuningFile, b: TuningFile, current: Mapping[str, str] | None = None) -> TuningFile:
    """The union of two files of one device. Where both tuned one key for the same kernel, the
    faster entry wins; for different kernels, `b`'s. With `current` (instance -> schema hash of
    the registry in use), stale entries are dropped."""
    if a.device != b.device:
        raise TuningError(
            f"cannot merge tuning files of two devices ({a.device.slug} and {b.device.slug})"
        )
    best: dict[tuple[str, str], Entry] = {}
    for e in (*a.entries, *b.entries):
        if current is not None and current.get(e.instance) != e.sha:
            continue
        old = best.get(e.key)
        if old is None or old.sha != e.sha or e.time_us < old.time_us:
            best[e.key] = e
    return TuningFile(a.device, tuple(sorted(best.values())), a.path)
