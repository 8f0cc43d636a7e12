"""`clforge lint`: every check on spec files at once, as sorted, located findings.

The checks are the ones generation relies on (:mod:`clforge.spec.load`: YAML, schema, names,
dims, guards, templates' paths, coverage, ambiguity, tunables and constraints), plus what only a
linter wants to know: the editor modeline, that each template renders for every instance it
serves, that `generated/` is fresh, and, with `compile=True`, that every instance builds on the
present OpenCL device. Findings in spec content never raise: a check that fails unexpectedly
becomes an `internal-error` finding at the file it was checking. Only usage problems (a path
that does not exist) and a missing device for `compile=True` raise.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from clforge.core.dtypes import DTYPES
from clforge.core.tree import DEFAULT, Tree
from clforge.emit.expand import expand
from clforge.emit.render import Renderer
from clforge.errors import (
    DeviceError,
    Diagnostic,
    GenerationError,
    Location,
    Severity,
    SpecError,
    StaleError,
    TemplateError,
    UsageError,
)
from clforge.lint import rules
from clforge.lint.device_build import compile_problems
from clforge.references import locate
from clforge.registry.records import Instance
from clforge.spec.families import Families, load_families
from clforge.spec.files import FAMILIES, family_files, is_family_file
from clforge.spec.load import (
    LoadedSpec,
    check_text,
    clean_variants,
    duplicate_ops,
    read_spec,
    spec_files,
)
from clforge.spec.variant_checks import dead_tunable_values

MODELINE = "# yaml-language-server: $schema=schema.json"
FAMILY_MODELINE = "# yaml-language-server: $schema=../schema.json"  # in specs/families/
_MODELINE = re.compile(r"#\s*yaml-language-server:\s*\$schema=\S+")


@dataclass(frozen=True)
class Report:
    """The findings of one lint run, sorted by file, line, column and rule."""

    findings: tuple[Diagnostic, ...]
    files: tuple[str, ...]

    @property
    def errors(self) -> int:
        return sum(d.severity is Severity.ERROR for d in self.findings)

    @property
    def warnings(self) -> int:
        return sum(d.severity is Severity.WARNING for d in self.findings)

    def exit_code(self, *, strict: bool = False) -> int:
        """0 clean (warnings alone are clean unless strict), 1 findings."""
        return int(self.errors > 0 or (strict and self.warnings > 0))

    def summary(self) -> str:
        return (
            f"clforge lint: {len(self.files)} file{'s' * (len(self.files) != 1)}, "
            f"{self.errors} error{'s' * (self.errors != 1)}, "
            f"{self.warnings} warning{'s' * (self.warnings != 1)}"
        )


# --- which files --------------------------------------------------------------------------------


def spec_paths(paths: Sequence[Path], tree: Tree = DEFAULT) -> list[Path]:
    """The spec files named by `paths` (files, or folders of *.yaml and their families/*.yaml);
    the tree's specs and families if none."""
    if not paths:
        found = spec_files(tree.specs) + family_files(tree.specs)
        if not found:
            raise UsageError(f"no spec files (*.yaml) in {tree.rel(tree.specs)}/")
        return found
    out: dict[Path, Path] = {}
    for p in paths:
        if p.is_dir():
            found = spec_files(p) + family_files(p)
            if not found:
                raise UsageError(f"{p}: no spec files (*.yaml) in this folder")
        elif p.is_file():
            found = [p]
        else:
            raise UsageError(f"{p}: no such file or folder")
        for f in found:
            out.setdefault(f.resolve(), f)
    return list(out.values())


# --- the checks ---------------------------------------------------------------------------------


def _guarded(where: str, check: Callable[[], list[Diagnostic]]) -> list[Diagnostic]:
    """Run one check; an unexpected exception becomes a finding instead of a traceback."""
    try:
        return check()
    except DeviceError:
        raise  # no device for --compile: an environment error, not a finding
    except Exception as exc:
        return [
            Diagnostic(
                Location(where),
                "internal-error",
                f"clforge failed while checking this file: {type(exc).__name__}: {exc}; "
                "please report it",
            )
        ]


def modeline_problem(text: str, path: str, modeline: str = MODELINE) -> Diagnostic | None:
    """A warning when the leading comment lines lack the yaml-language-server modeline."""
    for line in text.splitlines():
        stripped = line.strip()
        if _MODELINE.match(stripped):
            return None
        if stripped and not stripped.startswith("#"):
            break
    return Diagnostic(
        Location(path, 1, 1),
        "modeline",
        f"the file does not start with `{modeline}`, so YAML editors cannot complete and check "
        "its keys (the schema is written by `clforge schema --write`)",
    )


class _FamilyTables:
    """The families of each specs folder met in one lint run, each folder's loaded once."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.tables: dict[Path, Families] = {}

    def of(self, specs: Path) -> Families:
        key = specs.resolve()
        if key not in self.tables:
            self.tables[key] = load_families(specs, self.tree)
        return self.tables[key]


def _check_file(
    f: Path, tree: Tree, loaded: list[LoadedSpec], families: _FamilyTables
) -> list[Diagnostic]:
    rel = tree.rel(f)
    text, found = read_spec(f, tree)
    if text is None:
        return found
    if is_family_file(f):
        # checked once per folder; a broken family's findings also come back from each of its
        # members, and the run reports each finding once
        modeline = modeline_problem(text, rel, FAMILY_MODELINE)
        found = list(families.of(f.parent.parent).problems.get(f.name.removesuffix(".yaml"), ()))
    else:
        modeline = modeline_problem(text, rel)
        table = families.of(f.parent)
        spec, found = check_text(text, rel, tree, table)
        if spec is not None:
            loaded.append(spec)
            found = found + reference_problems(spec, tree) + tunable_problems(spec)
        else:  # the variants without findings still get their templates rendered
            part = clean_variants(text, rel, found, tree, table)
            if part is not None:
                found = found + render_problems(part, Renderer(tree))
    return found + ([modeline] if modeline else [])


def reference_problems(loaded: LoadedSpec, tree: Tree) -> list[Diagnostic]:
    """The op's `reference:` must name an importable NumPy reference (a warning when absent:
    `clforge verify`, the tuner and the tests cannot check the op's kernels without one)."""
    path = loaded.spec.reference
    if path is None:
        return [
            loaded.diagnostic(
                ("op",),
                "no-reference",
                f"op {loaded.spec.op!r} names no NumPy reference, so its kernels cannot be "
                "verified or tuned; add `reference: module:name` (docs/spec-format.md)",
            )
        ]
    problem = locate.problem(path, (tree.root,))
    if problem is None:
        return []
    return [loaded.diagnostic(("reference",), "reference", problem)]


def tunable_problems(loaded: LoadedSpec) -> list[Diagnostic]:
    """A warning at each tunable value that no combination meeting the variant's constraints
    uses: the tuner would never try it."""
    return [
        loaded.diagnostic(
            ("variants", i, "tunables", param, j),
            "dead-tunable",
            f"variant {v.name}: tunable {param}={value} is in no combination that satisfies "
            "the constraints, so the tuner never tries it; drop the value or relax the "
            "constraints",
        )
        for i, v in enumerate(loaded.spec.variants)
        for param, j, value in dead_tunable_values(v)
    ]


# what the epilogue hook writes where it applies an epilogue (templates/fused/_chain.cl.j2)
EPILOGUE_MARK = "/* epilogue */"


def _probe(inst: Instance) -> dict[str, Any]:
    """A probe epilogue for `inst`: the stored value itself, through the hook."""
    compute = DTYPES[inst.dtype].compute
    given = {"name": "in0", "index": 0, "kind": "given", "compute": compute, "half": False}
    chain = {"inputs": [given], "ops": [], "outputs": [], "fast": [], "strided": False, "rank": 1}
    return {"epilogue": {**chain, "result": "a0_", "vector_ok": "", "packed": None}}


def render_problems(loaded: LoadedSpec, renderer: Renderer) -> list[Diagnostic]:
    """Render every instance of a valid spec; one finding per variant whose template fails,
    located at the variant's `template:` and quoting the template's file:line."""
    try:
        instances = expand(loaded)
    except SpecError as exc:
        return list(exc.diagnostics)
    sig = loaded.signature()
    failed: dict[str, list[str]] = {}
    total: dict[str, int] = {}
    hookless: set[str] = set()
    for inst in instances:
        total[inst.variant] = total.get(inst.variant, 0) + 1
        try:
            renderer.render(inst, sig, inst.template)
            if inst.epilogue is not None:
                probe = renderer.render(inst, sig, inst.template, _probe(inst))
                if EPILOGUE_MARK not in probe:
                    hookless.add(inst.variant)
        except TemplateError as exc:
            failed.setdefault(inst.variant, []).append(str(exc))
    out: list[Diagnostic] = []
    for i, v in enumerate(loaded.spec.variants):
        if v.name in hookless and v.name not in failed:
            out.append(
                loaded.diagnostic(
                    ("variants", i, "epilogue"),
                    "epilogue",
                    f"variant {v.name}: declares an epilogue point on {v.epilogue!r}, but "
                    f"template {v.template} never applies the epilogue hook (it renders no "
                    f"{EPILOGUE_MARK}; store {v.epilogue} through mm.store / mm.store_vector)",
                )
            )
    for i, v in enumerate(loaded.spec.variants):
        messages = failed.get(v.name)
        if not messages:
            continue
        more = (
            f" (and {len(messages) - 1} more of its {total[v.name]} instances)"
            if len(messages) > 1
            else ""
        )
        out.append(
            loaded.diagnostic(
                ("variants", i, "template"),
                "template-render",
                f"variant {v.name}: template {v.template} does not render: {messages[0]}{more}",
            )
        )
    return out


def freshness_problems(tree: Tree) -> list[Diagnostic]:
    """`clforge generate --check` as findings, one per differing file under generated/. None
    for an installed clforge's own tree: its wheel was generated from these very specs, and its
    generated package is not under the tree's root (nor is docs/ops.md shipped)."""
    from clforge.emit.generate import generate

    if not tree.writable:
        return []
    try:
        generate(tree, check=True)
    except StaleError as exc:
        out = []
        for p in exc.paths:
            what = (
                "differs from what the specs give, or is no longer produced by them"
                if (tree.root / p).exists()
                else "is missing: the specs give this file"
            )
            out.append(Diagnostic(Location(p), "stale-output", f"{what}; run `clforge generate`"))
        return out
    except (SpecError, TemplateError, GenerationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [
            Diagnostic(
                Location(tree.rel(tree.generated)),
                "stale-output",
                f"cannot check generated/: the tree's specs do not generate ({first}); lint "
                "all of specs/",
            )
        ]
    return []


# --- the run ------------------------------------------------------------------------------------


def lint(
    paths: Sequence[Path] = (),
    tree: Tree = DEFAULT,
    *,
    freshness: bool = True,
    compile: bool = False,
) -> Report:
    """Lint the spec files named by `paths` (default: the tree's specs).

    `generated/` is checked for freshness (and, with `compile`, built) only when every linted
    file is one of the tree's own specs (or families) and no spec has an error.
    """
    files = spec_paths(paths, tree)
    folders = (tree.specs.resolve(), (tree.specs / FAMILIES).resolve())
    own = all(f.resolve().parent in folders for f in files)
    if compile and not own:
        raise UsageError("--compile builds the tree's own specs: lint files under specs/")
    findings: list[Diagnostic] = []
    loaded: list[LoadedSpec] = []
    families = _FamilyTables(tree)
    for f in files:
        findings += _guarded(tree.rel(f), partial(_check_file, f, tree, loaded, families))
    findings += _guarded(tree.rel(tree.specs), partial(duplicate_ops, loaded))
    renderer = Renderer(tree)
    for spec in loaded:
        findings += _guarded(spec.path, partial(render_problems, spec, renderer))
    blocked = any(d.severity is Severity.ERROR for d in findings)
    if own and (freshness or compile) and not blocked:
        stale = _guarded(tree.rel(tree.generated), partial(freshness_problems, tree))
        findings += stale
        if compile and not stale:
            findings += _guarded(tree.rel(tree.generated), partial(compile_problems, tree, loaded))
    return Report(
        tuple(sorted({_printable(rules.normalized(d)) for d in findings})),
        tuple(tree.rel(f) for f in files),
    )


def combined(reports: Sequence[Report], trees: Sequence[Tree]) -> Report:
    """The reports of several trees as one, each path made relative to the working folder."""

    def moved(path: str, tree: Tree) -> str:
        return os.path.relpath(tree.root / path) if path else path

    findings = [
        dataclasses.replace(d, loc=dataclasses.replace(d.loc, path=moved(d.loc.path, t)))
        for r, t in zip(reports, trees, strict=True)
        for d in r.findings
    ]
    files = [moved(f, t) for r, t in zip(reports, trees, strict=True) for f in r.files]
    return Report(tuple(sorted(findings)), tuple(files))


def _printable(d: Diagnostic) -> Diagnostic:
    """`d` with control, line-separator and bidi characters escaped: one finding, one line, and
    no text that displays differently from what it is."""
    if d.message.isprintable():
        return d
    message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in d.message)
    return Diagnostic(d.loc, d.rule, message, d.severity)


# --- output formats -----------------------------------------------------------------------------


def format_text(report: Report) -> str:
    return "".join(f"{d}\n" for d in report.findings)


def format_json(report: Report) -> str:
    doc = {
        "version": 1,
        "files": list(report.files),
        "errors": report.errors,
        "warnings": report.warnings,
        "findings": [
            {
                "path": d.loc.path,
                "line": d.loc.line,
                "col": d.loc.col,
                "severity": d.severity.value,
                "rule": d.rule,
                "message": d.message,
            }
            for d in report.findings
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(report: Report) -> str:
    """GitHub Actions workflow commands: one annotation per finding on the file and line."""
    out = []
    for d in report.findings:
        props = [f"file={_gh_prop(d.loc.path)}"]
        if d.loc.line > 0:
            props.append(f"line={d.loc.line}")
            if d.loc.col > 0:
                props.append(f"col={d.loc.col}")
        props.append(f"title={_gh_prop(f'clforge lint [{d.rule}]')}")
        out.append(f"::{d.severity.value} {','.join(props)}::{_gh_data(d.message)}\n")
    return "".join(out)


FORMATS: dict[str, Callable[[Report], str]] = {
    "text": format_text,
    "json": format_json,
    "github": format_github,
}


def list_rules() -> str:
    """The rule catalogue, one rule a line: id, default severity, description."""
    width = max(len(r.id) for r in rules.RULES)
    return "".join(f"{r.id:{width}}  {r.severity.value:7}  {r.description}\n" for r in rules.RULES)
