"""Nothing clforge keeps in its cache folder can crash it or run code (issue 33): every kind of
entry (program binaries, compiled templates, generation stamps, the tuner's journal) is read
through the checked envelope; a damaged one of any kind is removed with one ClforgeWarning and
rebuilt; the folder is private and one another user could write is refused; many processes share
one cache without a warning."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from clforge.core import envelope
from clforge.core.cache_dir import CacheError, check_private, private_dir
from clforge.errors import ClforgeWarning

# --- the envelope itself -----------------------------------------------------------------------

ORIGIN = envelope.digest("what it was made from")


def test_an_entry_round_trips_and_another_origin_is_stale_not_damaged(tmp_path: Path) -> None:
    path = tmp_path / "e.bin"
    envelope.write(path, "test", ORIGIN, b"payload")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert envelope.read(path, "test", ORIGIN, "an entry") == (envelope.Status.OK, b"payload")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        other = envelope.digest("something else")
        assert envelope.read(path, "test", other, "an entry")[0] is envelope.Status.STALE
        assert envelope.read(tmp_path / "none", "test", ORIGIN, "x")[0] is envelope.Status.MISSING
    assert not [p for p in tmp_path.iterdir() if p.name != "e.bin"]  # no temporary left


def test_every_byte_of_an_entry_is_covered() -> None:
    data = envelope.pack("test", ORIGIN, b"0123456789" * 10)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        assert envelope.unpack("test", ORIGIN, bytes(flipped))[0] is envelope.Status.DAMAGED, i
    for cut in range(len(data)):
        assert envelope.unpack("test", ORIGIN, data[:cut])[0] is envelope.Status.DAMAGED, cut
    assert envelope.unpack("test", ORIGIN, data + b"\0")[0] is envelope.Status.DAMAGED
    assert envelope.unpack("other", ORIGIN, data)[0] is envelope.Status.DAMAGED


def test_a_log_record_round_trips_and_a_changed_one_is_refused() -> None:
    rec = {"key": '["a", 1]', "us": [1.5, 2.25], "problem": None}
    line = envelope.pack_record("log", rec)
    assert line.endswith("\n") and json.loads(line)["key"] == rec["key"]
    assert envelope.unpack_record("log", line) == rec
    assert envelope.unpack_record("other", line) is None
    assert envelope.unpack_record("log", line.replace("1.5", "1.6")) is None
    assert envelope.unpack_record("log", line[: len(line) // 2]) is None
    assert envelope.unpack_record("log", json.dumps(rec)) is None  # no checksum: not trusted


# --- trust -------------------------------------------------------------------------------------


def test_the_cache_folder_is_created_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(tmp_path / "a" / "cache"))
    folder = private_dir("jinja")
    assert folder == tmp_path / "a" / "cache" / "jinja"
    for level in (folder, folder.parent):
        assert stat.S_IMODE(level.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])  # 1777: as /tmp
def test_a_cache_folder_others_can_write_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch, mode: int
) -> None:
    base = tmp_path / "shared"
    base.mkdir()
    base.chmod(mode)
    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(base))
    with pytest.raises(CacheError, match=r"group or others may write it.*chmod 700"):
        private_dir("stamps")
    base.chmod(0o700)
    (base / "stamps").mkdir(mode=0o700)
    (base / "stamps").chmod(mode)
    with pytest.raises(CacheError, match="stamps"):
        private_dir("stamps")


def test_a_cache_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user")
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(CacheError, match="owned by uid 65534"):
        check_private(folder)


def test_an_entry_others_can_write_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "e.bin"
    envelope.write(path, "test", ORIGIN, b"payload")
    path.chmod(0o666)
    with pytest.warns(ClforgeWarning, match="another user") as caught:
        assert envelope.read(path, "test", ORIGIN, "an entry")[0] is envelope.Status.DAMAGED
    assert len(caught) == 1 and not path.exists()


def test_the_program_cache_refuses_a_shared_folder(runtime, tmp_path: Path) -> None:
    from clforge.runtime.program_cache import ProgramCache

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    inst = runtime.registry.instance("add__generic__f32")
    cache = ProgramCache(shared)
    with pytest.raises(CacheError, match="chmod 700"):
        cache.program(runtime.context, runtime.device, inst.name, runtime.registry.source(inst))


# --- many processes, one cache -----------------------------------------------------------------

# a dozen ops, each checked against NumPy; every warning is reported, not shown
DOZEN = r"""
import json, sys, warnings
import numpy as np
warnings.simplefilter("always")
caught = []
warnings.showwarning = lambda m, c, *a, **k: caught.append(f"{c.__name__}: {m}")
from clforge import ops
from clforge.call.dispatcher import dispatcher

rng = np.random.default_rng(7)
def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)

a, b, x, v = r(96, 80), r(80, 72), r(24, 300), r(4096)
img, w = r(1, 8, 12, 12), r(16, 8, 3, 3)
q, k, vv = r(1, 2, 16, 8), r(1, 2, 16, 8), r(1, 2, 16, 8)

def softmax(t):
    e = np.exp(t - t.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def conv(t, f):
    n, c, h, wd = t.shape
    kk, _, rr, ss = f.shape
    out = np.zeros((n, kk, h - rr + 1, wd - ss + 1), np.float64)
    for i in range(rr):
        for j in range(ss):
            win = t[:, :, i:i + h - rr + 1, j:j + wd - ss + 1]
            out += np.einsum("nchw,kc->nkhw", win, f[:, :, i, j])
    return out

mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
cases = {
    "matmul": (lambda: ops.matmul(a, b), a @ b),
    "gemm_like_matmul": (lambda: ops.matmul(b.T.copy(), a.T.copy()), b.T @ a.T),
    "add": (lambda: ops.add(v, v[::-1].copy()), v + v[::-1]),
    "mul": (lambda: ops.mul(x, x), x * x),
    "relu": (lambda: ops.relu(v), np.maximum(v, 0)),
    "exp": (lambda: ops.exp(x), np.exp(x)),
    "gelu": (lambda: ops.gelu(v), None),
    "softmax": (lambda: ops.softmax(x), softmax(x)),
    "sum": (lambda: ops.sum(x, axis=-1), x.sum(-1)),
    "mean": (lambda: ops.mean(x, axis=0), x.mean(0)),
    "layer_norm": (lambda: ops.layer_norm(x), (x - mean) / np.sqrt(var + 1e-5)),
    "conv2d": (lambda: ops.conv2d(img, w), conv(img, w)),
    "attention": (lambda: ops.attention(q, k, vv), softmax(s) @ vv),
    "permute": (lambda: ops.permute(img, axes=(0, 2, 3, 1)), img.transpose(0, 2, 3, 1)),
}
wrong = []
for name, (call, want) in cases.items():
    got = np.asarray(call())
    if want is not None and not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        wrong.append(name)
stats = vars(dispatcher().runtime.cache.stats)
print(json.dumps({"warnings": caught, "wrong": wrong, "stats": stats}))
"""


def _dozen(cache: Path, pocl: Path, n: int) -> list[dict]:
    env = {**os.environ, "CLFORGE_CACHE_DIR": str(cache), "POCL_CACHE_DIR": str(pocl)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DOZEN],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _entries(cache: Path) -> dict[str, list[Path]]:
    """Every file in the cache folder, by kind."""
    kinds: dict[str, list[Path]] = {}
    for p in sorted(cache.rglob("*")):
        if p.is_file():
            kinds.setdefault(p.suffix, []).append(p)
    return kinds


@pytest.mark.slow
def test_many_processes_build_and_read_one_cache(tmp_path: Path) -> None:
    cache, pocl = tmp_path / "cache", tmp_path / "pocl"
    writers = _dozen(cache, pocl, 4)
    for w in writers:  # the warnings whole (a build log is long), should one ever come
        assert w["warnings"] == [] and w["wrong"] == [], "\n".join(w["warnings"]) + str(w)
    kinds = _entries(cache)
    # no temporary file left: programs, compiled templates, parsed tuning files and their index
    assert set(kinds) <= {".bin", ".jinja", ".index", ".tuning-folder"}, kinds
    assert kinds.get(".bin")
    readers = _dozen(cache, pocl, 4)
    for r in readers:
        assert r["warnings"] == [] and r["wrong"] == [], r
        assert r["stats"]["builds"] == 0 and r["stats"]["rebuilt_corrupt"] == 0, r
    assert _entries(cache) == kinds
    from clforge.emit.render import CheckedBytecodeCache
    from clforge.runtime.program_cache import KIND

    for path in kinds[".bin"]:  # each one whole and checked (its origin is its key)
        origin = bytes.fromhex(path.stem)
        assert envelope.read(path, KIND, origin, "x")[0] is envelope.Status.OK
    others = {".jinja": CheckedBytecodeCache.KIND, ".index": "tuning-index"}
    others[".tuning-folder"] = "tuning-folder"
    for suffix, kind in others.items():
        for path in kinds.get(suffix, []):  # intact (an origin checked when it is used)
            assert envelope.unpack(kind, bytes(32), path.read_bytes())[0] in (
                envelope.Status.STALE,
            ), path


# --- every damage, every kind of entry ---------------------------------------------------------

ROOT_READS_ANYWAY = hasattr(os, "geteuid") and os.geteuid() == 0


def _damage(entry: Path, how: str, other: Path) -> None:
    """Damage `entry` in one way; `other` is an intact entry of another kind."""
    data = entry.read_bytes()
    if how.startswith("truncate"):
        at = {"truncate-1": 1, "truncate-head": 20, "truncate-half": len(data) // 2}.get(
            how, len(data) - 1
        )
        entry.write_bytes(data[:at])
    elif how.startswith("flip"):
        at = {"flip-start": 0, "flip-middle": len(data) // 2}.get(how, len(data) - 8)
        flipped = bytearray(data)
        for i in range(at, min(at + 8, len(data))):
            flipped[i] ^= 0xFF
        entry.write_bytes(bytes(flipped))
    elif how == "emptied":
        entry.write_bytes(b"")
    elif how == "another-kind":
        entry.write_bytes(other.read_bytes())
    elif how == "unreadable":
        entry.chmod(0)
    elif how == "symlink":  # to an intact copy of itself: still never followed
        copy = entry.with_name("elsewhere")
        copy.write_bytes(data)
        copy.chmod(0o600)
        entry.unlink()
        entry.symlink_to(copy)
    elif how == "folder":
        entry.unlink()
        entry.mkdir()
        (entry / "inside").write_bytes(data)
    else:
        raise AssertionError(how)


DAMAGE = [
    "truncate-1",
    "truncate-head",
    "truncate-half",
    "truncate-last",
    "flip-start",
    "flip-middle",
    "flip-end",
    "emptied",
    "another-kind",
    "unreadable",
    "symlink",
    "folder",
]


class _Kind:
    """One kind of entry in the cache folder: how to make it, use it (from a fresh start, as a
    new process would), and find it."""

    name = ""
    suffix = ""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    def use(self) -> object:
        raise NotImplementedError

    def entry(self) -> Path:
        return sorted(self.cache.rglob(f"*{self.suffix}"))[0]


class _Program(_Kind):
    name, suffix = "program binary", ".bin"

    def __init__(self, cache: Path, runtime) -> None:
        super().__init__(cache)
        self.runtime = runtime

    def use(self) -> object:
        from clforge.runtime.program_cache import ProgramCache

        reg = self.runtime.registry
        inst = reg.instance("add__generic__f32")
        cache = ProgramCache(self.cache / "programs")
        prog = cache.program(self.runtime.context, self.runtime.device, inst.name, reg.source(inst))
        return prog.get_info(__import__("pyopencl").program_info.KERNEL_NAMES)


class _Template(_Kind):
    name, suffix = "compiled template", ".jinja"

    def use(self) -> object:
        from clforge.emit.render import Renderer
        from clforge.registry.loader import default

        reg = default()
        inst = reg.instance("matmul__cpu_packed__f32__a_row__b_row")
        return Renderer().render(inst, reg.op(inst.op), inst.template)

    def entry(self) -> Path:  # the template's own (the largest), not a macro file it imports
        return max(self.cache.rglob("*.jinja"), key=lambda p: p.stat().st_size)


class _Stamp(_Kind):
    name, suffix = "generation stamp", ".stamp"

    def use(self) -> object:
        from clforge.core.tree import Tree
        from clforge.emit import stamp

        tree = Tree.at(self.cache.parent / "tree")
        got = stamp.fresh(tree, ())
        if got is None:
            stamp.record(tree, ())
        return "stamped"


class _Index(_Kind):
    name, suffix = "parsed tuning file", ".index"

    def use(self) -> object:
        from clforge.params.database import load

        f = load(Path(__file__).parents[1] / "tuning" / "pocl-icelake-client-07c8ba99.yaml")
        return (f.device, f.entries)


class _Folder(_Kind):
    name, suffix = "index of a tuning folder", ".tuning-folder"

    def use(self) -> object:
        from clforge.params.database import load_folder

        folder = self.cache.parent / "tuning"
        if not folder.is_dir():
            folder.mkdir()
            shipped = Path(__file__).parents[1] / "tuning" / "pocl-icelake-client-07c8ba99.yaml"
            (folder / shipped.name).write_bytes(shipped.read_bytes())
        return [(f.device, f.entries) for f in load_folder(folder)]


class _Journal(_Kind):
    name, suffix = "tuner's journal", ".jsonl"

    def use(self) -> object:
        from clforge.tune.tuner import Journal

        path = self.cache / "tune" / "dev.jsonl"
        journal = Journal(path)
        for i in range(5):
            key = f'["inst", {i}]'
            if key not in journal.done:
                journal.record(key, {"us": [float(i)]})
        return sorted(journal.done.items())


@pytest.fixture
def kinds(tmp_path: Path, monkeypatch, runtime) -> dict[str, _Kind]:
    cache = tmp_path / "cache"
    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(cache))
    (tmp_path / "tree").mkdir()
    made = [
        _Program(cache, runtime),
        _Template(cache),
        _Stamp(cache),
        _Index(cache),
        _Folder(cache),
        _Journal(cache),
    ]
    (cache / "tune").mkdir(parents=True, mode=0o700)
    return {k.suffix: k for k in made}


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize(
    "suffix", [".bin", ".jinja", ".stamp", ".index", ".tuning-folder", ".jsonl"]
)
def test_a_damaged_entry_is_removed_with_one_warning_and_rebuilt(
    kinds: dict[str, _Kind], suffix: str, how: str
) -> None:
    kind = kinds[suffix]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = kind.use()  # made, then
        assert kind.use() == want  # read back, quietly
    entry = kind.entry()
    other = next(k for s, k in kinds.items() if s != suffix)
    if not list(other.cache.rglob(f"*{other.suffix}")):
        other.use()
    _damage(entry, how, other.entry())
    expect_warning = not (
        (how == "unreadable" and ROOT_READS_ANYWAY)  # root reads a mode-000 file: it is intact
        or (how == "emptied" and suffix == ".jsonl")  # an empty log is a valid log
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kind.use() == want
    ours = [w for w in caught if issubclass(w.category, ClforgeWarning)]
    assert len(ours) == int(expect_warning), [str(w.message) for w in caught]
    assert len(caught) == len(ours), [str(w.message) for w in caught]
    if expect_warning:
        assert str(entry) in str(ours[0].message)
    with warnings.catch_warnings():  # rebuilt: intact again
        warnings.simplefilter("error")
        if entry.exists() and not entry.is_symlink():
            entry.chmod(0o600)
        assert kind.use() == want
    assert entry.is_file() and not entry.is_symlink()


def test_an_unreadable_entry_is_removed_and_rebuilt(tmp_path: Path, monkeypatch) -> None:
    """What a user who is not root sees for a mode-000 entry (root reads it anyway, and finds
    it intact): opening fails, and the entry is removed with one warning."""
    path = tmp_path / "e.bin"
    envelope.write(path, "test", ORIGIN, b"payload")
    real_open = os.open

    def refusing(p, *args, **kwargs):  # type: ignore[no-untyped-def]
        if Path(p) == path:
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(envelope.os, "open", refusing)
    with pytest.warns(ClforgeWarning, match="cannot be read") as caught:
        assert envelope.read(path, "test", ORIGIN, "an entry")[0] is envelope.Status.DAMAGED
    assert len(caught) == 1 and not path.exists()


def test_a_hand_edited_journal_line_is_named_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    from clforge.tune.tuner import Journal

    path = tmp_path / "dev.jsonl"
    journal = Journal(path)
    for i in range(4):
        journal.record(f'["inst", {i}]', {"us": [float(i)]})
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"us": [2.0]', '"us": [0.5]')  # faster, by hand
    path.write_text("".join(lines))
    with pytest.warns(ClforgeWarning, match=r"1 damaged line\(s\) \(line 3:") as caught:
        again = Journal(path)
    assert len(caught) == 1
    assert sorted(again.done) == ['["inst", 0]', '["inst", 1]', '["inst", 3]']
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(Journal(path).done) == sorted(again.done)  # rewritten without it


RENDER = r"""
import hashlib, json, warnings
warnings.simplefilter("always")
caught = []
warnings.showwarning = lambda m, c, *a, **k: caught.append(str(m))
from clforge.runtime.launch import Runtime
rt = Runtime()
inst = rt.registry.instance("matmul__cpu_packed__f32__a_row__b_row")
params = tuple(sorted({**inst.param_map, "KB": 64}.items()))  # not the defaults: rendered here
rt.kernel(inst, params)
source = hashlib.sha256(rt.source(inst, params).encode()).hexdigest()
print(json.dumps({"warnings": caught, "source": source}))
"""


@pytest.mark.slow
def test_flipped_compiled_templates_are_never_run(tmp_path: Path) -> None:
    """The issue's reproduction: 16 bytes flipped in every compiled template made the next
    process that rendered a tuned set die with SIGSEGV inside Jinja. Now each is refused by its
    checksum, removed with one warning, and compiled again from the template."""
    env = {
        **os.environ,
        "CLFORGE_CACHE_DIR": str(tmp_path / "cache"),
        "POCL_CACHE_DIR": str(tmp_path / "pocl"),
    }

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, "-c", RENDER], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run()
    assert first["warnings"] == []
    compiled = sorted((tmp_path / "cache" / "jinja").glob("*.jinja"))
    assert compiled
    for path in compiled:
        data = bytearray(path.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 16):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    second = run()
    assert second["source"] == first["source"]
    assert len(second["warnings"]) == len(compiled), second["warnings"]
    assert all("a compiled template" in w for w in second["warnings"])
    assert run() == first  # compiled again, intact


def test_an_eager_call_on_a_shared_cache_folder_says_the_fix(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)  # what a umask of 002 made of a cache folder before it was made 0700
    code = (
        "import numpy as np\nimport clforge\nfrom clforge import ops\n"
        "try:\n    ops.relu(np.ones(8, np.float32))\n"
        "except clforge.CacheError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    env = {**os.environ, "CLFORGE_CACHE_DIR": str(shared)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    said = done.stdout.strip()
    assert said.startswith("CacheError "), said + done.stderr[-2000:]
    assert str(shared) in said and "mode 0775" in said and f"chmod 700 {shared}" in said
    assert not list(shared.iterdir())  # nothing written there either
