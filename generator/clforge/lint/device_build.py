"""`clforge lint --compile`: every instance of the linted ops built on the default OpenCL
device, each compiler error mapped back to the variant's `template:` line."""

from __future__ import annotations

import re
from collections.abc import Sequence

from clforge.core.tree import Tree
from clforge.errors import BuildError, ClforgeError, DeviceError, Diagnostic
from clforge.registry.records import Instance
from clforge.spec.load import LoadedSpec

_COMPILER_LINE = re.compile(
    r"^(?:(?P<pre>error|fatal error):\s*)?(?P<file>[^\n]*?):(?P<line>\d+):(?P<col>\d+):\s*"
    r"(?:(?P<post>error|fatal error|warning|note):\s*)?(?P<msg>.*)$",
    re.MULTILINE,
)


def compiler_errors(log: str) -> list[tuple[int, int, str]]:
    """(line, column, message) of each error in a compiler log, in the two common spellings:
    `<source>:3:5: error: msg` (clang, NVIDIA, AMD, Intel) and `error: file:3:5: msg` (PoCL)."""
    out = []
    for m in _COMPILER_LINE.finditer(log):
        kind = m.group("pre") or m.group("post")
        if kind in ("error", "fatal error"):
            out.append((int(m.group("line")), int(m.group("col")), m.group("msg").strip()))
    if not out:
        lines = [ln.strip() for ln in log.splitlines() if "error" in ln.lower()]
        out.append((0, 0, (lines[-1] if lines else log.strip())[:300] or "build failed"))
    return out


def compile_problems(tree: Tree, loaded: Sequence[LoadedSpec]) -> list[Diagnostic]:
    """Build every instance of the loaded ops on the default OpenCL device; each compiler error
    becomes a finding at the variant's `template:`, quoting the generated file's line."""
    from clforge.registry import loader as registry

    try:
        import pyopencl as cl

        from clforge.runtime.launch import Runtime
    except ImportError as exc:
        raise DeviceError(f"--compile needs pyopencl and an OpenCL driver: {exc}") from None
    reg = registry.for_tree(tree)
    try:
        rt = Runtime(reg=reg)
    except cl.Error as exc:
        raise DeviceError(f"cannot open the default OpenCL device: {exc}") from None
    where = {(s.spec.op, v.name): (s, i) for s in loaded for i, v in enumerate(s.spec.variants)}
    # one finding per variant and message: the instances of a variant mostly fail alike
    groups: dict[tuple[str, str, str], list[tuple[str, Instance]]] = {}
    for inst in sorted(reg.instances.values(), key=lambda i: i.name):
        if (inst.op, inst.variant) not in where:
            continue
        gen = f"{tree.package}/{inst.source}"
        try:
            rt.build(inst)
        except BuildError as exc:
            for line, col, msg in compiler_errors(exc.log):
                at = f"{gen}:{line}:{col}" if line else gen
                groups.setdefault((inst.op, inst.variant, msg), []).append((at, inst))
        except ClforgeError as exc:
            groups.setdefault((inst.op, inst.variant, str(exc)), []).append((gen, inst))
    out = []
    for (op, variant, msg), places in groups.items():
        at, first = places[0]
        more = len(places) - 1
        also = f"; also in {more} more instance{'s' * (more != 1)}" if more else ""
        spec, i = where[(op, variant)]
        out.append(
            spec.diagnostic(
                ("variants", i, "template"),
                "compile-error",
                f"{at}: {msg} (instance {first.name}, from template {first.template}{also})",
            )
        )
    return out
