"""Tuning files are data: a damaged or hand-edited one gives a located error (file:line:col,
what is wrong) or, where the lookup reads a folder, is skipped with a warning; never a
traceback. Reading them is fast: libyaml's loader, an index of parsed files in the cache folder
(keyed by the files' hashes, through the checked envelope), entries made only when asked for."""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

from clforge.errors import ClforgeWarning
from clforge.params import database
from clforge.params.database import TuningError, load, load_folder, parse

SHIPPED = sorted((Path(__file__).parents[1] / "tuning").glob("*.yaml"))
GOOD = SHIPPED[0].read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CLFORGE_CACHE_DIR", str(tmp_path / "cache"))


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_the_fast_and_the_located_parse_agree() -> None:
    fast = parse(GOOD, "f.yaml")
    located = database._validate(database.load_yaml(GOOD, "f.yaml"), lambda keys: "f.yaml")
    assert fast == located and len(fast.entries) > 100


def test_the_index_gives_what_the_parse_gives(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(GOOD, encoding="utf-8")
    first = load(path)  # parsed, and kept in the index
    assert list((tmp_path / "cache" / "tuning-index").glob("*.index"))
    again = load(path)  # from the index, entries made when asked for
    assert "entries" not in again.__dict__
    assert again == first == parse(GOOD, str(path)) and again.path == path


@pytest.mark.parametrize(
    ("edit", "needle", "message"),
    [
        (lambda t: t.replace("    VW: 16", "    VW: sixteen", 1), "VW: sixteen", "integers"),
        (lambda t: t.replace("  params:", "  parms:", 1), "parms:", "unknown key 'parms'"),
        (lambda t: t.replace("  sha: ", "  sha: [", 1), "sha: [", "YAML syntax error"),
        (lambda t: t.replace("  tried: ", "  tried: .inf #", 1), "tried: .inf", "finite"),
        (lambda t: t.replace("  vendor: pocl", "  vendor: [pocl]", 1), "vendor: [", "text"),
        (lambda t: t.replace("schema: 1", "schema: 7", 1), "schema: 7", "schema 1"),
        (lambda t: t.replace("entries:\n", "entries:\n- 42\n", 1), "- 42", "expected a mapping"),
    ],
)
def test_a_hand_edit_gives_a_located_error(edit, needle: str, message: str) -> None:
    text = edit(GOOD)
    assert text != GOOD
    with pytest.raises(TuningError) as caught:
        parse(text, "t.yaml")
    said = str(caught.value)
    assert message in said
    m = re.match(r"t\.yaml:(\d+)(:\d+)?: ", said)
    assert m, said
    assert abs(int(m.group(1)) - _line_of(text, needle)) <= 1, said


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how.startswith("truncate"):
        path.write_bytes(data[: int(len(data) * float(how.split("-")[1]))])
    elif how.startswith("flip"):
        at = int(len(data) * float(how.split("-")[1]))
        flipped = bytearray(data)
        for i in range(at, min(at + 8, len(flipped))):
            flipped[i] ^= 0xFF
        path.write_bytes(bytes(flipped))
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "another-kind":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    elif how == "another-yaml":
        path.write_text("# yaml-language-server: $schema=schema.json\nop: add\n")
    elif how == "unreadable":
        path.chmod(0)
    elif how == "folder":
        path.unlink()
        path.mkdir()
    elif how == "dangling-symlink":
        path.unlink()
        path.symlink_to(path.with_name("nowhere"))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "truncate-0.001",
        "truncate-0.3",
        "truncate-0.5",
        "truncate-0.999",
        "flip-0.0",
        "flip-0.02",
        "flip-0.5",
        "flip-0.99",
        "emptied",
        "another-kind",
        "another-yaml",
        "unreadable",
        "folder",
        "dangling-symlink",
    ],
)
def test_a_damaged_user_tuning_file_is_skipped_with_one_located_warning_or_still_valid(
    tmp_path: Path, how: str
) -> None:
    folder = tmp_path / "tuning"
    folder.mkdir()
    path = folder / SHIPPED[0].name
    shutil.copyfile(SHIPPED[0], path)
    _damage(path, how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = load_folder(folder)  # never raises
        entries = [f.entries for f in files]  # nor does asking for the entries
    assert len(caught) <= 1, [str(w.message) for w in caught]
    if caught:  # skipped: at once, or its entries when asked for
        assert issubclass(caught[0].category, ClforgeWarning)
        said = str(caught[0].message)
        assert "skipped a tuning file" in said and str(path) in said
        assert entries in ([], [()])
    else:  # damage a YAML file cannot see (cut at an entry's end, a changed value): still valid
        assert len(files) == 1
        for e in entries[0]:
            assert e.instance and e.bucket and all(isinstance(v, int) for _, v in e.params)


def test_a_damaged_file_a_command_reads_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(GOOD.replace("  bucket: ", "  bucket: {", 1), encoding="utf-8")
    with pytest.raises(TuningError, match=rf"^{re.escape(str(path))}:\d+:\d+: "):
        load(path)


def _other_device(text: str) -> str:
    return text.replace("  vendor: pocl", "  vendor: somebody else", 1)


def test_a_folder_is_read_from_its_index_and_entries_only_when_asked_for(tmp_path: Path) -> None:
    folder = tmp_path / "tuning"
    folder.mkdir()
    (folder / "a.yaml").write_text(GOOD, encoding="utf-8")
    (folder / "b.yaml").write_text(_other_device(GOOD), encoding="utf-8")
    first = load_folder(folder)  # a first look: devices from the heads, nothing parsed whole
    assert [("entries" in f.__dict__) for f in first] == [False, False]
    assert first[0].entries == parse(GOOD, "x").entries  # parsed now, and indexed
    index = list((tmp_path / "cache" / "tuning-index").glob("*.tuning-folder"))
    assert len(index) == 1
    again = load_folder(folder)
    assert [f.device for f in again] == [f.device for f in first]
    assert again[0].entries == first[0].entries
    assert again[1].entries == parse(_other_device(GOOD), "x").entries


def test_a_file_changed_behind_the_index_is_read_again(tmp_path: Path) -> None:
    folder = tmp_path / "tuning"
    folder.mkdir()
    path = folder / "a.yaml"
    path.write_text(GOOD, encoding="utf-8")
    assert len(load_folder(folder)[0].entries) > 2
    st = path.stat()
    # the same size and modification time, other entries: only the change time (and the hash)
    # tell; a file changed this close to the index's writing is hashed again anyway
    edited = GOOD.replace("  bucket: '*'", "  bucket: '+'", 1)
    assert len(edited) == len(GOOD)
    path.write_text(edited, encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    (f,) = load_folder(folder)
    assert "+" in {e.bucket for e in f.entries}


def test_a_file_whose_entries_are_broken_is_skipped_when_they_are_asked_for(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "tuning"
    folder.mkdir()
    path = folder / "a.yaml"
    path.write_text(GOOD.replace("    VW: 16", "    VW: x", 1), encoding="utf-8")
    (f,) = load_folder(folder)  # its head is fine
    with pytest.warns(ClforgeWarning, match=rf"skipped a tuning file: {re.escape(str(path))}:\d+"):
        assert f.entries == ()


def test_a_file_past_the_located_loaders_size_says_what_libyaml_says(tmp_path: Path) -> None:
    entries = GOOD[GOOD.index("- instance") :]
    copies = database.MAX_YAML_BYTES // len(entries) + 1
    big = GOOD + entries * copies
    assert len(parse(big, "big.yaml").entries) == len(parse(GOOD, "x").entries) * (copies + 1)
    bad = big.replace("  sha: ", "  sha: [", 1)
    line = _line_of(bad, "sha: [")
    with pytest.raises(TuningError, match=rf"^big\.yaml:{line + 1}:\d+: YAML syntax error"):
        parse(bad, "big.yaml")
