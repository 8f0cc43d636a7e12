"""The one catalogue of lint rules: every finding clforge reports names one of these.

Rule ids are stable (users silence, grep and count them): kebab-case, never reused for another
meaning. Each rule has a default severity and a one-line description (`clforge lint --list-rules`).
The code that emits a finding passes the id as a string literal; a test inspects the package to
check that every such literal is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from clforge.errors import Diagnostic, Location, Severity


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    description: str
    stage: str  # file, schema, names, dims, templates, selection, tunables, output, device,
    # profile (device profile files, which share the file and schema rules)


_E = Severity.ERROR
_W = Severity.WARNING

RULES: tuple[Rule, ...] = (
    Rule("io", _E, "a file cannot be read, or is not UTF-8 text", "file"),
    Rule(
        "yaml-syntax",
        _E,
        "not YAML, or YAML that specs forbid (merge keys, non-scalar keys, alias bombs, "
        "deep nesting)",
        "file",
    ),
    Rule("duplicate-key", _E, "a key appears twice in one YAML mapping", "file"),
    Rule("modeline", _W, "the spec lacks the `# yaml-language-server: $schema=...` line", "file"),
    Rule(
        "unknown-key",
        _E,
        "a key the spec format does not know (the valid keys are listed)",
        "schema",
    ),
    Rule("missing-key", _E, "a required key is missing", "schema"),
    Rule("type", _E, "a value of the wrong type, or a file that is not one mapping", "schema"),
    Rule(
        "vocabulary",
        _E,
        "a value outside its vocabulary: dtype, layout, arch target, device type, extension",
        "schema",
    ),
    Rule(
        "c-identifier",
        _E,
        "a name that reaches OpenCL C is not a plain C identifier, or is a reserved word",
        "names",
    ),
    Rule(
        "duplicate-name",
        _E,
        "a name used twice where it must be unique (argument, param, variant, op, instance)",
        "names",
    ),
    Rule(
        "file-name",
        _E,
        "an op must live in a file named <op>.yaml, a family in families/<family>.yaml",
        "names",
    ),
    Rule(
        "unknown-family",
        _E,
        "an op names a family that its specs folder does not define in families/",
        "names",
    ),
    Rule(
        "family-override",
        _E,
        "an op changes or omits a variant its family does not have, or changes one it omits",
        "names",
    ),
    Rule(
        "no-reference",
        _W,
        "an op names no NumPy reference (`reference:`), so its kernels cannot be verified",
        "names",
    ),
    Rule(
        "reference",
        _E,
        "an op's `reference:` is not an importable `module:name` of a Reference or a function",
        "names",
    ),
    Rule(
        "extends",
        _E,
        "an `extends:` file names an op that no other registered tree defines, or one that fails",
        "names",
    ),
    Rule("undeclared-dim", _E, "a tensor shape uses a dim that `dims` does not declare", "dims"),
    Rule(
        "unbound-dim",
        _E,
        "a declared dim appears in no input shape, so no call can size it",
        "dims",
    ),
    Rule(
        "undeclared-tensor", _E, "`layouts` names a tensor that is not an input or output", "dims"
    ),
    Rule(
        "derived-dim",
        _E,
        "a derived dim that is undeclared, also bound by an input, or "
        "computed from names out of scope",
        "dims",
    ),
    Rule(
        "tensor-option",
        _E,
        "broadcast/optional/fill on an output, fill without optional, "
        "or a required input after an optional one",
        "dims",
    ),
    Rule(
        "convention", _E, "the op's signature does not fit its calling convention (call:)", "dims"
    ),
    Rule(
        "elementwise-expr",
        _E,
        "an expr: naming what it may not, with an input out of parentheses, or on an op that "
        "is not elementwise",
        "dims",
    ),
    Rule(
        "epilogue",
        _E,
        "an epilogue point on a tensor that is not an output, or a template without the hook",
        "dims",
    ),
    Rule(
        "build-option",
        _E,
        "a build option outside the set clforge passes to the OpenCL compiler",
        "schema",
    ),
    Rule("layout", _E, "a layout the tensor's rank or the op's declaration does not allow", "dims"),
    Rule(
        "guard-syntax",
        _E,
        "a guard, constraint or launch size does not parse or type-check in the guard language",
        "dims",
    ),
    Rule("guard-name", _E, "an expression names something that is not in its scope", "dims"),
    Rule(
        "routine",
        _E,
        "a variant lacks launch: or routine:, or a routine reads what no earlier step wrote or "
        "leaves an output unwritten",
        "dims",
    ),
    Rule(
        "template-path",
        _E,
        "a template that is missing, not *.cl.j2, or outside the template folder",
        "templates",
    ),
    Rule(
        "template-render",
        _E,
        "a template fails to render for an instance it serves (e.g. an undefined variable)",
        "templates",
    ),
    Rule(
        "generic-coverage",
        _E,
        "no unconditional generic variant covers every dtype and layout of the op",
        "selection",
    ),
    Rule(
        "ambiguous-variants",
        _E,
        "two variants can match one call with equal rank (same target, priority, dtype, layout)",
        "selection",
    ),
    Rule(
        "tunable",
        _E,
        "a tunable without a default param, with no values, or whose values omit the default",
        "tunables",
    ),
    Rule(
        "constraint",
        _E,
        "the default params break a constraint, or no tunable combination satisfies them",
        "tunables",
    ),
    Rule(
        "dead-tunable",
        _W,
        "a tunable value in no combination that satisfies the constraints: never tried",
        "tunables",
    ),
    Rule(
        "accuracy",
        _E,
        "an accuracy bound names a variant, dtype or attribute the op lacks, an empty range, or "
        "repeats another bound",
        "selection",
    ),
    Rule("stale-output", _E, "generated/ differs from what the specs give", "output"),
    Rule(
        "compile-error", _E, "an instance fails to build on the OpenCL device (--compile)", "device"
    ),
    Rule("value", _E, "a device profile value out of range (empty, below its minimum)", "profile"),
    Rule("duplicate", _E, "a device profile lists one item twice", "profile"),
    Rule(
        "internal-error",
        _E,
        "clforge itself failed while checking a file (please report it)",
        "file",
    ),
)

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def diagnostic(loc: Location, rule_id: str, message: str) -> Diagnostic:
    """A finding with the rule's default severity (an unknown id reads as internal-error)."""
    rule = BY_ID.get(rule_id)
    if rule is None:
        return Diagnostic(loc, "internal-error", f"unknown rule {rule_id!r}: {message}")
    return Diagnostic(loc, rule.id, message, rule.severity)


def normalized(d: Diagnostic) -> Diagnostic:
    """`d` with its rule's default severity, so every layer's findings read alike."""
    return diagnostic(d.loc, d.rule, d.message)
