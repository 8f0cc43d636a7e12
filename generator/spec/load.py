"""Loading spec files into :class:`OpSpec` models, with every problem located at file:line:col.

Loading a file never raises anything but :class:`SpecError`, which carries all of the file's
diagnostics at once: YAML syntax, structure (via pydantic, re-worded with the valid keys), and
the meaning that spans fields (names, dims, guards, templates, coverage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from generator.core.diagnostics import Collector
from generator.core.located_yaml import LocMap, YamlProblem, load_yaml, locate
from generator.core.tree import DEFAULT, Tree
from generator.errors import Diagnostic, Location, SpecError
from generator.registry.records import OpSig
from generator.spec.model import OpSpec
from generator.spec.op_checks import check_op
from generator.spec.signature import signature_of
from generator.spec.structure import structure_findings


@dataclass(frozen=True)
class LoadedSpec:
    """A valid spec, the file it came from, and its located YAML tree for later messages."""

    path: str  # as shown in messages: relative to the tree's root
    spec: OpSpec
    tree: LocMap

    def signature(self) -> OpSig:
        return signature_of(self.spec, self.path)

    def where(self, *keys: int | str, at_key: bool = False) -> Location:
        return locate(self.tree, keys, at_key=at_key) or Location(self.path)


# --- entry points -------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "an empty document"
    if isinstance(value, list):
        return "a list"
    return f"a single {type(value).__name__} value"


def check_text(
    text: str, path: str, tree: Tree = DEFAULT
) -> tuple[LoadedSpec | None, list[Diagnostic]]:
    """Load one spec from text; return it (if valid) and every diagnostic found."""
    try:
        doc = load_yaml(text, path)
    except YamlProblem as exc:
        return None, [exc.diagnostic]
    col = Collector(path, doc)
    if not isinstance(doc, LocMap):
        col.diags.append(
            Diagnostic(
                getattr(doc, "loc", None) or Location(path, 1, 1),
                "type",
                f"a spec file must hold one mapping (op:, dims:, inputs:, ...), not {_kind(doc)}",
            )
        )
        return None, col.diags
    try:
        spec = OpSpec.model_validate(doc)
    except ValidationError as err:
        structure_findings(col, err)
        return None, col.diags
    stem = Path(path).name.split(".")[0]
    check_op(col, spec, tree, stem)
    if col.diags:
        return None, col.diags
    return LoadedSpec(path, spec, doc), []


def spec_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.yaml") if p.is_file())


def read_spec(path: Path, tree: Tree = DEFAULT) -> tuple[str | None, list[Diagnostic]]:
    """The text of one spec file, or None and why it cannot be read (located, for bytes that
    are not UTF-8)."""
    shown = tree.rel(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, [Diagnostic(Location(shown), "io", f"cannot read spec: {exc}")]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        return None, [utf8_problem(data, exc, shown)]


def utf8_problem(data: bytes, exc: UnicodeDecodeError, path: str) -> Diagnostic:
    """Where the first byte that is not UTF-8 sits, as line and column (of characters)."""
    before = data[: exc.start]
    line = before.count(b"\n") + 1
    col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", errors="replace")) + 1
    return Diagnostic(
        Location(path, line, col),
        "io",
        f"byte 0x{data[exc.start]:02x} is not valid UTF-8 ({exc.reason}); specs are UTF-8 text",
    )


def duplicate_ops(loaded: Sequence[LoadedSpec]) -> list[Diagnostic]:
    """An op defined by two files (e.g. add.yaml and add.v2.yaml): the later one is reported."""
    diags: list[Diagnostic] = []
    ops: dict[str, str] = {}
    for spec in loaded:
        if spec.spec.op in ops:
            diags.append(
                Diagnostic(
                    spec.where("op"),
                    "duplicate-name",
                    f"op {spec.spec.op!r} is also defined in {ops[spec.spec.op]}",
                )
            )
        else:
            ops[spec.spec.op] = spec.path
    return diags


def load_specs(tree: Tree = DEFAULT, files: list[Path] | None = None) -> list[LoadedSpec]:
    """Load every spec of a tree; raise one SpecError carrying all diagnostics of all files."""
    loaded: list[LoadedSpec] = []
    diags: list[Diagnostic] = []
    for f in files if files is not None else spec_files(tree.specs):
        text, problems = read_spec(f, tree)
        diags.extend(problems)
        if text is None:
            continue
        spec, found = check_text(text, tree.rel(f), tree)
        diags.extend(found)
        if spec is not None:
            loaded.append(spec)
    diags.extend(duplicate_ops(loaded))
    if diags:
        raise SpecError(diags)
    return loaded
