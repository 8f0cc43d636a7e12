"""Rendering instances to OpenCL C with Jinja: sandboxed, strict, confined to templates/.

A tree's templates import clforge's shared macros by a stable name, under the prefix
`clforge/` (``{% import "clforge/_common/macros.cl.j2" as cf %}``), from any tree; a tree's
own names never shadow them and never collide with clforge's. An extension may also render one
of clforge's kernel templates as it is (``template: clforge/elementwise/unary_cpu.cl.j2``): the
names it imports are then clforge's too (:meth:`Environment.join_path`).
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import sys
import types
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from clforge.core import elementwise_expr, envelope
from clforge.core.cache_dir import private_dir
from clforge.core.dtypes import DTYPES
from clforge.core.identifiers import identifier_problem
from clforge.core.tree import DEFAULT, SHARED_TEMPLATES, Tree
from clforge.errors import TemplateError
from clforge.registry.records import Instance, OpSig


def _template_line(exc: BaseException, root: Path) -> str:
    """`family/template.cl.j2:LINE` (relative to the template folder) of the innermost template
    frame of a rendering error."""
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"{exc.name or exc.filename}:{exc.lineno}"
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.endswith(".j2"):
            try:
                shown = Path(name).resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                shown = Path(name).name
            where = f"{shown}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where or "?"


class CheckedBytecodeCache(jinja2.BytecodeCache):
    """Jinja's compiled templates (code objects, run when a template renders) kept in clforge's
    cache folder through the checked envelope: an entry is used only when it is intact, was
    written by this user in a folder nobody else can write, and was compiled from this very
    template source by this Jinja and this Python; a damaged one is removed with a warning and
    recompiled. Jinja's own file format (a pickle and a marshal, unchecked) is not used.

    Measured on a 2-core Xeon: the first rendering of the 18 CPU templates with tunables takes
    ~28 ms in a process that finds them compiled here, ~350 ms in one that compiles them, and a
    process renders each template whose tuned parameters it runs."""

    KIND = "jinja"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _where(self, bucket: jinja2.bccache.Bucket) -> tuple[Path, bytes]:
        origin = envelope.digest(
            jinja2.__version__, sys.version, str(marshal.version), bucket.key, bucket.checksum
        )
        return self.directory / f"{bucket.key}.jinja", origin

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        path, origin = self._where(bucket)
        what = "a compiled template"
        status, code = envelope.read(path, self.KIND, origin, what)
        if status is envelope.Status.OK:
            try:
                loaded = marshal.loads(code)
            except (EOFError, ValueError, TypeError):  # intact but not ours: never seen
                return
            if isinstance(loaded, types.CodeType):
                bucket.code = loaded

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if bucket.code is None:
            return
        path, origin = self._where(bucket)
        with contextlib.suppress(OSError):  # a read-only cache: compile again next time
            envelope.write(path, self.KIND, origin, marshal.dumps(bucket.code))


class Environment(ImmutableSandboxedEnvironment):
    """The sandboxed environment, with one rule for names: inside a template reached as
    `clforge/...` (clforge's, rendered from another tree), an unprefixed import, include or
    extends names clforge's template too (``_common/macros.cl.j2`` is
    ``clforge/_common/macros.cl.j2`` there), never the rendering tree's own."""

    def join_path(self, template: str, parent: str) -> str:
        prefix = f"{SHARED_TEMPLATES}/"
        if parent.startswith(prefix) and not template.startswith(prefix):
            return prefix + template
        return template


class SharedLoader(jinja2.BaseLoader):
    """clforge's templates under the prefix `clforge/`, each keeping that prefix in its name
    (Jinja's PrefixLoader drops it, and with it what :class:`Environment` needs to know)."""

    def __init__(self, folder: Path) -> None:
        self.folder = jinja2.FileSystemLoader(str(folder))

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str | None, Any]:
        prefix = f"{SHARED_TEMPLATES}/"
        if not template.startswith(prefix):
            raise jinja2.TemplateNotFound(template)
        return self.folder.get_source(environment, template.removeprefix(prefix))


class Renderer:
    """Renders instances of one tree's templates; one Jinja environment, loaded lazily."""

    def __init__(self, tree: Tree = DEFAULT) -> None:
        self.tree = tree
        self._digests: dict[str, str] = {}

    @cached_property
    def env(self) -> jinja2.Environment:
        compiled = private_dir("jinja")  # compiled templates, keyed by name and source hash
        env = Environment(
            loader=jinja2.ChoiceLoader(
                [
                    SharedLoader(DEFAULT.templates),
                    jinja2.FileSystemLoader(str(self.tree.templates)),
                ]
            ),
            bytecode_cache=CheckedBytecodeCache(compiled) if compiled else None,
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        env.globals["dtypes"] = DTYPES
        env.globals["elementwise_expression"] = elementwise_expr.of_op
        return env

    def templates_digest(self, template: str) -> str:
        """The sha256 of `template` and of every template it imports, includes or extends,
        recursively (names and sources, in name order): everything a rendering of it depends on
        besides the instance, whatever its parameters."""
        digest = self._digests.get(template)
        if digest is not None:
            return digest
        sources: dict[str, str] = {}
        todo = [template]
        while todo:
            name = todo.pop()
            if name in sources:
                continue
            try:
                sources[name] = self.env.loader.get_source(self.env, name)[0]  # type: ignore[union-attr]
            except jinja2.TemplateNotFound:
                sources[name] = ""  # reported by render(), with the instance that wants it
                continue
            refs = jinja2.meta.find_referenced_templates(self.env.parse(sources[name]))
            todo.extend(self.env.join_path(r, name) for r in refs if r is not None)
        h = hashlib.sha256()
        for name in sorted(sources):
            h.update(f"{name}\0{sources[name]}\0".encode())
        self._digests[template] = digest = h.hexdigest()
        return digest

    def render(
        self, inst: Instance, op: OpSig, template: str, extra: dict[str, Any] | None = None
    ) -> str:
        """`inst` of `op` rendered from `template`; `extra`: more names for the template (a
        fused kernel's description, :mod:`clforge.graph.fused_kernel`)."""
        for name in [a.name for a in inst.args] + [p for p, _ in inst.params]:
            problem = identifier_problem(name)
            if problem:  # validation already refused these; this is the last line of defence
                raise TemplateError(f"{inst.name}: {problem}")
        context: dict[str, Any] = {
            "inst": inst,
            "op": op,
            "T": DTYPES[inst.dtype],
            "params": inst.param_map,
            "layout": dict(inst.layouts),
            "shape": {
                **{t.name: t.shape for t in op.inputs + op.outputs},
                **{s.name: (s.size,) for s in inst.scratch},
            },
            "tdtype": {
                **{t.name: DTYPES[t.dtype or inst.dtype] for t in op.inputs + op.outputs},
                **{s.name: DTYPES[s.dtype or inst.dtype] for s in inst.scratch},
            },
            "steps": {s.name: s for s in inst.steps},
            "spec_path": op.spec,
            **(extra or {}),
        }
        try:
            text = self.env.get_template(template).render(context)
        except jinja2.TemplateNotFound as exc:
            raise TemplateError(
                f"{inst.name}: template {exc.name!r} not found under "
                f"{self.tree.rel(self.tree.templates)}/"
            ) from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
            msg = getattr(exc, "message", None) or str(exc)
            raise TemplateError(
                f"{_template_line(exc, self.tree.templates)}: rendering {inst.name} failed: {msg}"
            ).with_traceback(None) from None
        except RecursionError:
            raise TemplateError(f"{template}: rendering {inst.name} recursed too deeply") from None
        for step in inst.steps:
            if f"__kernel void {step.kernel}(" not in text:
                raise TemplateError(
                    f"{template}: rendering {inst.name} defined no kernel for step {step.name} "
                    f"(expected `__kernel void {step.kernel}(`: declare it with "
                    f"cf.signature(step=steps.{step.name}))"
                )
        return "\n".join(line.rstrip() for line in text.strip().splitlines()) + "\n"
