"""The launch contract: what the generated registry records about each op and kernel instance.

These frozen records are what `generated/registry.py` is made of, and all a caller needs to
launch an instance: argument order and kinds, the NDRange as expressions, requirements, guard.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

ArgKind = Literal["input", "output", "dim", "stride", "attr"]


@dataclass(frozen=True)
class TensorSig:
    name: str
    shape: tuple[str, ...]
    dtype: str | None = None  # fixed dtype; None means the instance's dtype
    layouts: tuple[str, ...] = ("row",)
    broadcast: bool = False  # size-1 axes stretch; the kernel gets per-axis element strides
    optional: bool = False  # may be omitted, then filled with `fill`
    fill: int | float | None = None


@dataclass(frozen=True)
class AttrSig:
    name: str
    type: Literal["int", "float"]
    default: int | float | None = None
    # an int attribute's values by name, as PyTorch spells them (gelu: none 0, tanh 1)
    names: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class OpSig:
    """An op's signature, shared by all its instances."""

    name: str
    doc: str
    dims: tuple[str, ...]
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    attrs: tuple[AttrSig, ...]
    dtypes: tuple[str, ...]
    spec: str  # the spec file, relative to the tree's root
    derived: tuple[tuple[str, str], ...] = ()  # (dim, expression over dims and int attrs)
    checks: tuple[tuple[str, str], ...] = ()  # (condition, message) checked on every call
    call: str = "direct"  # the eager function's calling convention
    reference: str | None = None  # the NumPy reference, `module:name` (clforge.references)
    # an elementwise op's expression (core/elementwise_expr.py): ("float", text), ("int", text)
    expr: tuple[tuple[str, str], ...] = ()

    def expression(self, is_float: bool) -> str | None:
        """The op's elementwise expression for a float or an integer compute type (None: the
        op states none)."""
        return dict(self.expr).get("float" if is_float else "int")

    def dims_of(self, env: Mapping[str, int]) -> dict[str, int]:
        """The op's dims among `env` (a guard environment also holds the int attributes): what
        the tuner keys its shape buckets by."""
        return {d: env[d] for d in self.dims if d in env}

    def tensor(self, name: str) -> TensorSig:
        for t in self.inputs + self.outputs:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class Arg:
    """One kernel argument, in order: a buffer (input/output) or a scalar (dim, stride, attr).

    A stride is the element stride of axis `axis` of broadcast input `tensor` (0 where the
    axis stretches)."""

    kind: ArgKind
    name: str
    ctype: str  # OpenCL C type of the element (buffers) or of the value (scalars)
    dtype: str | None = None  # clforge dtype of a buffer's elements
    tensor: str | None = None  # strides: the tensor
    axis: int | None = None  # strides: the axis


@dataclass(frozen=True)
class Launch:
    """The NDRange as integer expressions over dims and params (guard language)."""

    global_size: tuple[str, ...]
    local_size: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Scratch:
    """An intermediate buffer of a routine, taken from the pool for each call."""

    name: str
    size: str  # element count: an integer expression over dims and params
    dtype: str | None = None  # None: the instance's dtype


@dataclass(frozen=True)
class Step:
    """One kernel of an instance, in launch order: its entry point, its arguments (buffers are
    the op's tensors or the routine's scratch, by name) and its NDRange."""

    name: str
    kernel: str  # the OpenCL entry point
    args: tuple[Arg, ...]
    launch: Launch
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    # a packing step: the param giving the rows of the panels it copies its input into (the
    # spec's `panels:`; graph/handoff.py), None for any other step
    panels: str | None = None


@dataclass(frozen=True)
class Requirements:
    extensions: tuple[str, ...] = ()
    device_type: str | None = None
    limits: tuple[tuple[str, str, int], ...] = ()  # (profile field, comparison, value)


@dataclass(frozen=True)
class Instance:
    """One kernel: a variant of an op for one dtype and one layout per tensor."""

    name: str  # also the OpenCL entry point
    op: str
    variant: str
    dtype: str
    layouts: tuple[tuple[str, str], ...]  # (tensor, layout) for every tensor
    targets: tuple[str, ...]  # arch entries of the variant
    priority: int
    params: tuple[tuple[str, int], ...]
    guard: str | None
    requires: Requirements
    args: tuple[Arg, ...]
    launch: Launch
    source: str  # path of the .cl file, relative to generated/
    template: str  # the template it was rendered from, relative to templates/
    sha256: str = ""
    # the sha256 of its template and every template that imports (Renderer.templates_digest):
    # what a rendering with other parameters (a tuned set) depends on besides the instance
    templates_sha: str = ""
    tunables: tuple[tuple[str, tuple[int, ...]], ...] = field(default=())
    # params computed from device properties where nothing tuned applies: (param, expression)
    device_params: tuple[tuple[str, str], ...] = ()
    # conditions over params and the register file every tuned choice must meet
    constraints: tuple[str, ...] = ()
    build_options: str = ""  # passed to clBuildProgram
    # the output whose stores pass through the template's epilogue hook (None: no epilogue
    # point; a graph does not fuse elementwise ops into this instance)
    epilogue: str | None = None
    # a routine: its kernels in order (all in `source`) and the scratch buffers between them
    steps: tuple[Step, ...] = ()
    scratch: tuple[Scratch, ...] = ()
    # the analytic crossover (dims and device properties): where nothing measured decides, the
    # variant ranks below its level's others when this is false at the call's dims
    prefer_when: str | None = None

    @property
    def kernels(self) -> tuple[Step, ...]:
        """The kernels one call runs, in order: a routine's steps, else the instance itself."""
        if self.steps:
            return self.steps
        reads = tuple(a.name for a in self.args if a.kind == "input")
        writes = tuple(a.name for a in self.args if a.kind == "output")
        return (Step("main", self.name, self.args, self.launch, reads, writes),)

    def layout_of(self, tensor: str) -> str:
        return dict(self.layouts)[tensor]

    @property
    def param_map(self) -> dict[str, int]:
        return dict(self.params)

    def constant_steps(self, constant: Collection[str]) -> tuple[tuple[int, ...], frozenset[str]]:
        """The routine's steps whose results are the same every call, as indices into
        `kernels`, and the scratch they write: a step that reads only `constant` tensors (a
        compiled graph's weights, or scratch such steps wrote) and writes only scratch that no
        other step writes (gemm's `pack_b` of a constant `b`). Run once, with scratch of their
        own, they need not run again; none where a later step overwrites what they wrote."""
        scratch = {s.name for s in self.scratch}
        known = set(constant)
        found: list[int] = []
        written: set[str] = set()
        for i, step in enumerate(self.steps):
            if (
                step.reads
                and step.writes
                and known.issuperset(step.reads)
                and scratch.issuperset(step.writes)
            ):
                known.update(step.writes)
                found.append(i)
            else:
                written.update(step.writes)
        hoisted = frozenset(w for i in found for w in self.steps[i].writes)
        return ((), frozenset()) if hoisted & written else (tuple(found), hoisted)

    def packs_once(self, constant: Collection[str]) -> bool:
        """Whether a step of this routine runs once per specialization where the tensors of
        `constant` are a compiled graph's weights (:meth:`constant_steps`: gemm's pack_b), so
        that the parameters tuned that way apply (`clforge tune --hoisted`)."""
        return bool(self.constant_steps(constant)[0])
