"""The one error hierarchy of clforge, and the located diagnostics that spec errors carry.

Every error a user can see derives from :class:`ClforgeError`. Each layer has its own type
(spec, template, generation, guard, dispatch, call, build) and each carries where it happened:
a file:line:col for specs, an op/argument/sizes for calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, order=True)
class Location:
    """A place in a text file; line and column are 1-based (0 means 'unknown')."""

    path: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if self.line <= 0:
            return self.path
        if self.col <= 0:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line}:{self.col}"


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding about a spec: where, which rule, what is wrong and how to fix it."""

    loc: Location
    rule: str
    message: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        return f"{self.loc}: {self.severity.value} [{self.rule}] {self.message}"


class ClforgeError(Exception):
    """Base of every error clforge raises on purpose."""


class SpecError(ClforgeError):
    """One or more problems in spec files; carries every diagnostic found, not just the first."""

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]) -> None:
        self.diagnostics = tuple(sorted(diagnostics))
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class GuardError(ClforgeError):
    """A guard or launch expression that does not parse or type-check."""

    def __init__(self, text: str, pos: int, message: str) -> None:
        self.text = text
        self.pos = pos
        self.message = message
        super().__init__(f"{message} at column {pos + 1} of {text!r}")


class TemplateError(ClforgeError):
    """A template that is missing, escapes the template folders, or fails to render."""


class GenerationError(ClforgeError):
    """Generation could not produce a consistent output tree (e.g. two instances, one name)."""


class StaleError(GenerationError):
    """`generated/` differs from what the specs give."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = tuple(paths)
        listing = "\n".join(f"  {p}" for p in self.paths)
        super().__init__(
            f"generated files are stale; run `make generate`. Differing files:\n{listing}"
        )


class CallError(ClforgeError):
    """A call with bad arguments: names the op, the argument and the sizes involved."""


class GraphError(ClforgeError):
    """A graph that cannot be built, compiled or loaded: names the graph, the op, the tensors
    and the dims involved (a call that breaks a compiled graph's guards is a CallError)."""


class DispatchError(ClforgeError):
    """No instance can serve a call; the message lists every candidate and why it was rejected."""


class BuildError(ClforgeError):
    """An OpenCL program failed to build; carries the instance and the compiler log."""

    def __init__(self, instance: str, log: str) -> None:
        self.instance = instance
        self.log = log
        super().__init__(f"building {instance} failed:\n{log}")


class ReferenceLookupError(ClforgeError):
    """An op's NumPy reference is not named in its spec, or its `module:name` does not resolve
    to a Reference or a function."""


class ExtensionError(ClforgeError):
    """An extension that cannot be found or read, or two trees with one name."""


class UsageError(ClforgeError):
    """Bad command-line arguments or paths (the CLI exits with status 2)."""


class DeviceError(ClforgeError):
    """No usable OpenCL device, or a device profile that cannot be read."""


class CacheError(ClforgeError):
    """A cache folder another user could write (owned by someone else, or writable by group or
    others), which clforge will not load code or binaries from; the message says the fix."""


class ClforgeWarning(UserWarning):
    """A fallback was taken (e.g. the chosen kernel failed to build on this device, or a cached
    binary was damaged and rebuilt)."""
