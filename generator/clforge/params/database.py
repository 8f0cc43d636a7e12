"""The tuning database: one human-readable, schema-versioned YAML file per device under a tree's
`tuning/` folder, sorted and deterministic, so results from many machines merge by adding
files. An entry is keyed by instance (op, variant, dtype, layouts) and shape bucket, and
carries the hash of what it measured (the instance's rendered source and parameter schema), so
an entry for a changed kernel is stale: reported, never used.

Reading stays fast however many device files there are. A folder's index in clforge's cache
folder (through the checked envelope, core/envelope.py) records each file's status (size, times,
inode), the SHA-256 of its bytes and its device: a file whose status has not changed is not read
at all. A file it does not know is read and hashed and its device taken from its head; its
entries are parsed (with libyaml's loader; PyYAML's own, 15-40x slower, only where libyaml is
missing or finds fault, to say where) only when the lookup asks for them, which it does for the
files of devices it can use, and kept in the cache under that hash. A file that is not a valid
tuning file gives a located error (file:line:col, what is wrong); the lookup skips it with a
warning. tools/bench_tuning_lookup.py times this with 100 device files."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import marshal
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from clforge import __version__
from clforge.core import envelope
from clforge.core.atomic_file import atomic_write
from clforge.core.cache_dir import CACHE_ENV, CacheError, private_dir
from clforge.core.located_yaml import MAX_BYTES as MAX_YAML_BYTES
from clforge.core.located_yaml import YamlProblem, load_yaml, locate
from clforge.errors import ClforgeError, ClforgeWarning
from clforge.params.fingerprint import VECTOR_KEYS, Fingerprint
from clforge.params.space import Params, as_params
from clforge.registry.records import Instance, OpSig

SCHEMA = 1
CATCH_ALL = "*"
# the pseudo-dim of a shape measured as a compiled graph runs a routine, its steps that read
# only weights (every input but the first) run once and not timed (`clforge tune --hoisted`):
# gemm's compute on b packed once, where an eager call packs b every call
HOIST = "HOIST"


HEADER = (
    "# clforge tuning database for one device: written by `clforge tune`, merged by\n"
    "# `clforge tune --merge A B`; see docs/tuning.md. Edit by hand only to delete\n"
    "# entries.\n"
)


def weights(op: OpSig) -> set[str]:
    """The inputs a HOIST shape takes for a compiled graph's constants: every input but the
    op's first (gemm's b and bias)."""
    return {t.name for t in op.inputs[1:]}


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


@dataclass(frozen=True, init=False)
class TuningFile:
    """One device's tuning file. The entries of a file read from disk are made when first asked
    for (the lookup asks only for the files of devices it can use)."""

    device: Fingerprint
    entries: tuple[Entry, ...]
    path: Path | None = field(compare=False)

    def __init__(
        self,
        device: Fingerprint,
        entries: tuple[Entry, ...] = (),
        path: Path | None = None,
        *,
        lazy: Callable[[], tuple[Entry, ...]] | None = None,
    ) -> None:
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "path", path)
        if lazy is None:
            object.__setattr__(self, "entries", entries)
        else:
            object.__setattr__(self, "_lazy", lazy)

    def __getattr__(self, name: str) -> Any:  # only for an attribute not set: lazy entries
        if name != "entries" or "_lazy" not in self.__dict__:
            raise AttributeError(name)
        entries = self.__dict__["_lazy"]()
        object.__setattr__(self, "entries", entries)
        return entries

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


Where = Callable[[tuple[int | str, ...]], str]  # where a path of keys into the document is


def _int_map(value: Any, what: str, where: Where, keys: tuple[int | str, ...]) -> dict[str, int]:
    """`value` as names -> integers, or a TuningError at the first item that is not one."""
    if not isinstance(value, dict):
        raise TuningError(f"{where(keys)}: {what} must map names to integers, got {value!r}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, int) or isinstance(v, bool):
            raise TuningError(
                f"{where((*keys, str(k)))}: {what} must map names to integers, got {k}: {v!r}"
            )
    return dict(value)


def _number(e: Mapping[str, Any], key: str, here: str, kind: type) -> Any:
    value = e.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TuningError(f"{here}: {key} must be a finite number, got {value!r}")
    if kind is int and value != int(value):
        raise TuningError(f"{here}: {key} must be an integer, got {value!r}")
    return kind(value)


_DEVICE_KEYS = ("vendor", "device_type", "name", "arch", "driver", "compute_units")


def _device(dev: Any, where: Where) -> Fingerprint:
    """The fingerprint a file's `device:` records: the fields every file has, and any other
    field of a Fingerprint (int or text, as its default) that the file records."""
    if not isinstance(dev, dict):
        raise TuningError(f"{where(('device',))}: device: expected a mapping, got {dev!r}")
    missing = [k for k in (*_DEVICE_KEYS, "vector_widths") if k not in dev]
    if missing:
        raise TuningError(f"{where(('device',))}: device: missing field {missing[0]!r}")
    for key in _DEVICE_KEYS[:-1]:
        if not isinstance(dev[key], str | int | float | None) or isinstance(dev[key], bool):
            raise TuningError(f"{where(('device', key))}: device: {key} must be text")
    widths = _int_map(dev["vector_widths"], "vector_widths", where, ("device", "vector_widths"))
    more: dict[str, Any] = {}
    for f in dataclasses.fields(Fingerprint):
        if f.name in dev and f.name not in (*_DEVICE_KEYS, "vector_widths"):
            if isinstance(f.default, bool) or not isinstance(f.default, int | str):
                continue
            if isinstance(f.default, int):
                more[f.name] = _number(dev, f.name, where(("device", f.name)), int)
            elif not isinstance(dev[f.name], str):
                raise TuningError(f"{where(('device', f.name))}: device: {f.name} must be text")
            else:
                more[f.name] = dev[f.name]
    return Fingerprint(
        vendor=str(dev["vendor"]),
        device_type=str(dev["device_type"]),
        name=str(dev["name"]),
        arch=str(dev["arch"] or ""),
        driver=str(dev["driver"]),
        compute_units=_number(dev, "compute_units", where(("device", "compute_units")), int),
        vector_widths=tuple((k, int(widths.get(k, 0))) for k in VECTOR_KEYS),
        **more,
    )


def _entry(e: Any, i: int, where: Where) -> Entry:
    here = where(("entries", i))
    if not isinstance(e, dict):
        raise TuningError(f"{here}: entries[{i}]: expected a mapping, got {e!r}")
    unknown = sorted(set(map(str, e)) - set(_ENTRY_KEYS))
    if unknown:
        raise TuningError(
            f"{where(('entries', i, unknown[0]))}: entries[{i}]: unknown key {unknown[0]!r} "
            f"({', '.join(_ENTRY_KEYS)})"
        )
    for key in ("instance", "bucket", "params", "sha"):
        if key not in e:
            raise TuningError(f"{here}: entries[{i}]: missing field {key!r}")
    for key in ("instance", "bucket", "sha"):
        if not isinstance(e[key], str):
            raise TuningError(f"{where(('entries', i, key))}: {key} must be text, got {e[key]!r}")
    return Entry(
        instance=e["instance"],
        bucket=e["bucket"],
        params=as_params(_int_map(e["params"], "params", where, ("entries", i, "params"))),
        sha=e["sha"],
        shape=as_params(_int_map(e.get("shape", {}), "shape", where, ("entries", i, "shape"))),
        time_us=_number(e, "time_us", where(("entries", i, "time_us")), float),
        default_us=_number(e, "default_us", where(("entries", i, "default_us")), float),
        tried=_number(e, "tried", where(("entries", i, "tried")), int),
    )


_ENTRY_KEYS = ("instance", "bucket", "params", "sha", "shape", "time_us", "default_us", "tried")


def _validate(doc: Any, where: Where) -> TuningFile:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise TuningError(
            f"{where(('schema',))}: not a clforge tuning file of schema {SCHEMA} (schema: {got!r})"
        )
    unknown = sorted(set(map(str, doc)) - {"schema", "device", "entries"})
    if unknown:
        raise TuningError(
            f"{where((unknown[0],))}: unknown key {unknown[0]!r} (schema, device, entries)"
        )
    device = _device(doc.get("device"), where)
    listed = doc.get("entries") or []
    if not isinstance(listed, list):
        raise TuningError(f"{where(('entries',))}: entries: expected a list, got {listed!r}")
    return TuningFile(device, tuple(sorted(_entry(e, i, where) for i, e in enumerate(listed))))


_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse(text: str, where: str) -> TuningFile:
    """A tuning file's text as a TuningFile, or a TuningError that says where (file:line:col)
    and what is wrong. libyaml's loader reads it; only a text it or the checks find fault with
    is read again by the located loader, which knows every value's line."""
    try:
        doc = yaml.load(text, Loader=_FAST_LOADER)
        return _validate(doc, lambda keys: where)
    except TuningError as exc:
        fast = str(exc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        place = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        fast = f"{place}: YAML syntax error: {exc.problem or exc.context}"
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        fast = f"{where}: not YAML: {exc}"
    if len(text) > MAX_YAML_BYTES:  # past what the located loader reads: libyaml's own word
        raise TuningError(fast)
    try:
        located = load_yaml(text, where)
    except YamlProblem as exc:
        d = exc.diagnostic
        raise TuningError(f"{d.loc}: {d.message}") from None

    def at(keys: tuple[int | str, ...]) -> str:
        return str(locate(located, keys) or where)

    try:
        return _validate(located, at)
    except RecursionError:
        raise TuningError(f"{where}: nested too deeply") from None


# --- the index of parsed files, in clforge's cache folder ----------------------------------------

_INDEX_KIND = "tuning-index"
# what an index entry depends on besides the file's bytes: Python, this code and the device's
_CODE = envelope.digest(
    __version__,
    sys.version,
    str(marshal.version),
    str(SCHEMA),
    # the parse and the fingerprint, and what derives a fingerprint's fields (device/isa.py)
    *(p.read_bytes() for p in sorted(Path(__file__).parent.glob("*.py"))),
    *(p.read_bytes() for p in sorted(Path(__file__).parents[1].joinpath("device").glob("*.py"))),
)


_FOLDER_KIND = "tuning-folder"
# a file changed this close to (or after) the moment the folder's index was written may have
# changed without its size, times or inode showing it (git's "racy" entries): it is hashed again
_RACY_NS = 2_000_000_000
_index_folders: dict[tuple[str, str], Path | None] = {}


def _index_folder() -> Path | None:
    """The cache's folder of parsed tuning files (checked once a process), or None."""
    key = (os.environ.get("CLFORGE_CACHE", ""), os.environ.get(CACHE_ENV, ""))
    if key not in _index_folders:
        try:
            _index_folders[key] = private_dir("tuning-index")
        except CacheError:  # reported where code or binaries would be loaded; data parses anyway
            _index_folders[key] = None
    return _index_folders[key]


def _pack_index(f: TuningFile) -> bytes:
    """The device as JSON, a newline, the entries as a marshalled list of tuples (read back
    only through the envelope, so only as written here: 2x faster than JSON to load)."""
    rows = [
        (e.instance, e.bucket, e.params, e.sha, e.shape, e.time_us, e.default_us, e.tried)
        for e in f.entries
    ]
    head = json.dumps(f.device.as_dict(), sort_keys=True)
    return head.encode() + b"\n" + marshal.dumps(rows)


_ENTRY_FIELDS = tuple(f.name for f in dataclasses.fields(Entry))


def _entries_of(rows: bytes) -> tuple[Entry, ...]:
    try:
        loaded = marshal.loads(rows)
    except (EOFError, ValueError, TypeError):  # intact, so ours: never seen
        return ()
    new = object.__new__
    out = []
    for row in loaded:  # a frozen dataclass's __init__ sets each field through object.__setattr__
        e = new(Entry)
        e.__dict__.update(zip(_ENTRY_FIELDS, row, strict=True))
        out.append(e)
    return tuple(out)


def _indexed(folder: Path, digest: str) -> tuple[dict[str, Any], bytes] | None:
    """The device and the packed entries of a parsed file of this hash, if the index has it."""
    entry = folder / f"{digest}.index"
    origin = envelope.digest(_CODE, digest)
    status, packed = envelope.read(entry, _INDEX_KIND, origin, "the parsed copy of a tuning file")
    if status is not envelope.Status.OK:
        return None
    head, _, rows = packed.partition(b"\n")
    try:
        device = json.loads(head)
    except ValueError:  # intact, so written by a clforge of another format: never seen
        return None
    return (device, rows) if isinstance(device, dict) else None


def _read(path: Path) -> tuple[bytes, str]:
    try:
        data = path.read_bytes()
        return data, data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TuningError(f"{path}: cannot read: {exc}") from None


def _load(path: Path, read: tuple[bytes, str] | None = None) -> tuple[TuningFile, str]:
    """The tuning file at `path` (its bytes and text, when already read) and the SHA-256 of
    its bytes."""
    data, text = read or _read(path)
    digest = hashlib.sha256(data).hexdigest()
    folder = _index_folder()
    if folder is None:
        return replace(parse(text, str(path)), path=path), digest
    found = _from_index(path, _indexed(folder, digest))
    if found is not None:
        return found, digest
    parsed = replace(parse(text, str(path)), path=path)
    with contextlib.suppress(OSError):  # a read-only cache: parse again next time
        entry = folder / f"{digest}.index"
        envelope.write(entry, _INDEX_KIND, envelope.digest(_CODE, digest), _pack_index(parsed))
    return parsed, digest


def _from_index(path: Path, found: tuple[dict[str, Any], bytes] | None) -> TuningFile | None:
    if found is None:
        return None
    device, rows = found
    try:
        fp = _device(device, _at(str(path)))
    except TuningError:  # intact, so written by a clforge of another format: never seen
        return None
    return TuningFile(fp, path=path, lazy=lambda: _entries_of(rows))


def load(path: Path) -> TuningFile:
    """The tuning file at `path`: TuningError (located) when it cannot be read or is not one."""
    return _load(path)[0]


def _later(path: Path, digest: str, device: Fingerprint) -> Callable[[], tuple[Entry, ...]]:
    """The entries of a file the folder's index listed, made when first asked for: from the
    index of parsed files, else parsed now (a file that changed meanwhile into one of another
    device, or into no tuning file, then gives none, with a warning)."""

    def entries() -> tuple[Entry, ...]:
        folder = _index_folder()
        found = _indexed(folder, digest) if folder is not None else None
        if found is not None:
            return _entries_of(found[1])
        try:
            now = load(path)
            if now.device == device:
                return now.entries
            problem = f"{path}: it changed to a file for another device"
        except TuningError as exc:
            problem = str(exc)
        warnings.warn(f"clforge: skipped a tuning file: {problem}", ClforgeWarning, stacklevel=2)
        return ()

    return entries


def _header(text: str) -> Fingerprint | None:
    """The device of a tuning file from its text before `entries:` alone (libyaml, a fraction
    of a millisecond), or None when that part is not a valid head of a tuning file."""
    cut = text.find("\nentries:")
    head = text[: cut + 1] if cut >= 0 else text
    try:
        doc = yaml.load(head, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or set(doc) != {"schema", "device"}:
        return None
    try:
        return _device(doc["device"], _at(""))
    except TuningError:
        return None


def _first_look(path: Path, cache: Path | None) -> tuple[TuningFile, str]:
    """A file the folder's index does not know (yet): from the index of parsed files when it
    has its hash; else its device from its head, its entries parsed when first asked for (so a
    new file of a device the lookup does not use costs its reading and hashing only); a head
    that is not valid is parsed whole at once, for the located error."""
    data, text = _read(path)
    digest = hashlib.sha256(data).hexdigest()
    if cache is not None:
        found = _from_index(path, _indexed(cache, digest))
        if found is not None:
            return found, digest
        device = _header(text)
        if device is not None:
            return TuningFile(device, path=path, lazy=_later(path, digest, device)), digest
    return _load(path, (data, text))


def _at(where: str) -> Where:
    return lambda keys: where


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def load_folder(folder: Path) -> tuple[TuningFile, ...]:
    """The tuning files of a folder; one that is not a valid tuning file is skipped with a
    warning that says where and what is wrong.

    A folder's index in the cache lists each file's size, times and inode, the SHA-256 of its
    bytes and its device: a file whose status is unchanged (and was not changed within 2 s of
    the index being written) is not read at all, and its entries only when asked for."""
    if not folder.is_dir():
        return ()
    cache = _index_folder()
    where = envelope.digest(_CODE, str(folder.resolve()))
    index_path = cache / f"{where.hex()[:32]}.tuning-folder" if cache is not None else None
    known: dict[str, Any] = {}
    written = 0
    if index_path is not None:
        status, data = envelope.read(index_path, _FOLDER_KIND, where, "the index of " + str(folder))
        with contextlib.suppress(ValueError):
            index = json.loads(data) if status is envelope.Status.OK else {}
            if isinstance(index, dict) and isinstance(index.get("files"), dict):
                known, written = index["files"], int(index.get("written_ns", 0))
    listed: dict[str, Any] = {}
    out = []
    racy = False
    for p in sorted(folder.glob("*.yaml")):
        try:
            try:
                st = p.stat()
            except OSError as exc:
                raise TuningError(f"{p}: cannot read: {exc}") from None
            sig, rec = _signature(st), known.get(p.name)
            f: TuningFile | None = None
            same = isinstance(rec, dict) and rec.get("stat") == sig
            if same and max(st.st_mtime_ns, st.st_ctime_ns) >= written - _RACY_NS:
                racy, same = True, False
            if same and isinstance(rec, dict):
                with contextlib.suppress(TuningError, TypeError, ValueError, KeyError):
                    device = _device(rec["device"], _at(str(p)))
                    f = TuningFile(device, path=p, lazy=_later(p, str(rec["sha"]), device))
                    listed[p.name] = rec
            if f is None:
                f, digest = _first_look(p, cache)
                listed[p.name] = {"stat": sig, "sha": digest, "device": f.device.as_dict()}
            out.append(f)
        except TuningError as exc:
            warnings.warn(f"clforge: skipped a tuning file: {exc}", ClforgeWarning, stacklevel=2)
    if index_path is not None and (listed != known or racy):
        index = {"written_ns": time.time_ns(), "files": listed}
        with contextlib.suppress(OSError):
            envelope.write(index_path, _FOLDER_KIND, where, json.dumps(index).encode())
    return tuple(out)


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
