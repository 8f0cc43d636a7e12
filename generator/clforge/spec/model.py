"""The spec format: typed, frozen models of one op spec, and their JSON Schema.

Pydantic does the structural work (types, required keys, unknown keys, vocabularies) and gives
the JSON Schema for editors for free, so the schema can never drift from the code. Meaning that
spans fields (dims, names, guards, templates, coverage) is checked in :mod:`clforge.spec.load`.
The models of op families and their members are derived from these in :mod:`family_model`, and
the JSON Schema of all three kinds of spec file is composed in :mod:`schema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic.json_schema import JsonDict

from clforge.conventions.names import CONVENTION_NAMES
from clforge.core.dtypes import DTYPE_NAMES
from clforge.core.layouts import LAYOUT_NAMES
from clforge.core.targets import DEVICE_TYPES, VENDORS

DTypeName = Literal[DTYPE_NAMES]  # type: ignore[valid-type]
LayoutName = Literal[LAYOUT_NAMES]  # type: ignore[valid-type]
ConventionName = Literal[CONVENTION_NAMES]  # type: ignore[valid-type]
AttrType = Literal["int", "float"]
DeviceType = Literal["cpu", "gpu", "accelerator"]
LimitExpr = Annotated[StrictStr, Field(pattern=r"^\s*(>=|<=|==|>|<)\s*[0-9]+\s*$")]
Expr = StrictStr | StrictInt


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_NAMES: JsonDict = {"type": "array", "items": {"type": "string"}}


def _tensor_schema(schema: JsonDict) -> None:
    # the JSON Schema also accepts the `a: [M, K]` shorthand that _shorthand turns into {shape:}
    full = dict(schema)
    schema.clear()
    schema.update(
        title=full.pop("title", "TensorSpec"),
        description=full.pop("description", ""),
        anyOf=[{**_NAMES, "description": "shorthand for {shape: [...]}"}, full],
    )


def _arch_schema(schema: JsonDict) -> None:
    # `arch: cpu` is shorthand for `arch: [cpu]`
    listed: JsonDict = {k: schema.pop(k) for k in ("type", "items", "minItems") if k in schema}
    schema["anyOf"] = [{"type": "string"}, listed]


class TensorSpec(_Model):
    """A tensor argument: its shape in symbolic dims, and a fixed dtype if it has one."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_tensor_schema)

    shape: tuple[StrictStr, ...] = Field(description="symbolic dims, outermost first")
    dtype: DTypeName | None = Field(
        None, description="fixed element type (e.g. i32 indices); default: the instance's dtype"
    )
    broadcast: StrictBool = Field(
        False,
        description="inputs only: size-1 axes stretch like NumPy broadcasting; the kernel gets "
        "the element stride of every axis as <name>_s<axis> (0 on stretched axes)",
    )
    optional: StrictBool = Field(
        False, description="inputs only: a call may omit it; it is then filled with `fill`"
    )
    fill: StrictInt | StrictFloat | None = Field(
        None, description="the value of every element of an omitted optional input"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `a: [M, K]` is shorthand for `a: {shape: [M, K]}`
        return {"shape": data} if isinstance(data, list) else data


class AttrSpec(_Model):
    """A scalar argument passed at call time (alpha, eps, ...)."""

    type: AttrType = Field(description="int or float (float is the instance's compute type)")
    default: StrictInt | StrictFloat | None = Field(
        None, description="value used when a call does not pass it; none: the call must"
    )
    doc: StrictStr = Field("", description="what the attribute means")
    names: dict[StrictStr, StrictInt] = Field(
        default_factory=dict,
        description=(
            "an int attribute's values by name, as PyTorch spells them (gelu's approximate: "
            "{none: 0, tanh: 1}); an eager call may pass the name instead of the number"
        ),
    )

    @model_validator(mode="after")
    def _names_of_ints(self) -> AttrSpec:
        if self.names and self.type != "int":
            raise ValueError("names: only an int attribute has named values")
        return self


class CheckSpec(_Model):
    """A precondition on a call's sizes and int attributes, checked before any kernel runs."""

    expr: StrictStr = Field(description="a condition in the guard language over dims and attrs")
    message: StrictStr = Field(description="what the caller did wrong, shown when it fails")


class Requires(_Model):
    """What a device must have for a variant to run there."""

    extensions: tuple[StrictStr, ...] = Field((), description="OpenCL extensions, all required")
    device_type: DeviceType | None = Field(None, description="cpu, gpu or accelerator")
    local_mem_bytes: LimitExpr | None = Field(None, description='e.g. ">= 16384"')
    max_work_group_size: LimitExpr | None = Field(None, description='e.g. ">= 256"')
    compute_units: LimitExpr | None = Field(None, description='e.g. ">= 4"')


class LaunchSpec(_Model):
    """The NDRange, as integer expressions over dims and params (see the guard language)."""

    global_size: tuple[Expr, ...] = Field(
        min_length=1, max_length=3, description="1 to 3 integer expressions"
    )
    local_size: tuple[Expr, ...] | None = Field(
        None, min_length=1, max_length=3, description="null lets the OpenCL runtime choose"
    )


# what a variant's device_params may read of the device (see clforge.params.lookup)
DEVICE_PROPERTIES = (
    "vector_width",  # the preferred width of the instance's own dtype
    "vector_width_float",
    "vector_width_double",
    "vector_width_half",
    "vector_width_int",
    "compute_units",
    "max_work_group_size",
    "local_mem_bytes",
    # the device model (clforge.device.profile): a CPU's vector ISA, cores and caches, a GPU's
    # sub-group size
    "vector_registers",
    "vector_bits",
    "cores",
    "l1d_bytes",
    "l2_bytes",
    "l3_bytes",
    "sub_group_size",
    "dtype_bits",  # the width of the instance's element (32 for f32)
)
# what a variant's constraints may read beside params: the register file (params.properties)
CONSTRAINT_PROPERTIES = ("vector_registers", "vector_bits", "dtype_bits")


class StepSpec(_Model):
    """One kernel of a routine, in launch order."""

    name: StrictStr = Field(
        description="a C identifier, unique within the routine; its kernel is <instance>__<name>"
    )
    reads: tuple[StrictStr, ...] = Field(
        min_length=1,
        description="buffers it reads: the op's inputs, or scratch an earlier step wrote",
    )
    writes: tuple[StrictStr, ...] = Field(
        min_length=1, description="buffers it writes: the op's outputs, or scratch"
    )
    launch: LaunchSpec = Field(description="the step's NDRange")
    doc: StrictStr = Field("", description="what the step does")
    panels: StrictStr | None = Field(
        None,
        description="a step that only packs: it copies its one input, read as [batch,] M rows "
        "by K (the input's last axis), into its one scratch as panels of this many rows (a "
        "param of the variant) interleaved along K: element (z, i, k) at ((z * cdiv(M, R) + "
        "i / R) * K + k) * R + i % R, rows past M repeating row M - 1. A compiled graph's "
        "producer may then store that input there itself and the step is not launched "
        "(docs/graph.md, 'Packed hand-offs')",
    )


class RoutineSpec(_Model):
    """A variant whose work is several kernels (pack, compute, reduce, ...) run in order on
    one queue, with scratch buffers between them; the variant's template renders every step's
    kernel into one program."""

    scratch: dict[StrictStr, StrictStr] = Field(
        default_factory=dict,
        description="scratch buffers by name, each of the instance's dtype: its element count, "
        "an integer expression over dims and params",
    )
    steps: tuple[StepSpec, ...] = Field(min_length=1, description="the kernels, in order")


class VariantSpec(_Model):
    """One implementation of the op, for some dtypes, layouts and devices."""

    name: StrictStr = Field(description="a C identifier, unique within the op")
    arch: tuple[StrictStr, ...] = Field(
        min_length=1,
        description=f"targets, one or a list: generic | a device type ({', '.join(DEVICE_TYPES)}) "
        f"| a vendor ({', '.join(VENDORS)}) | arch:<name> | device:<name>",
        json_schema_extra=_arch_schema,
    )
    template: StrictStr = Field(description="path under templates/, e.g. matmul/generic.cl.j2")
    launch: LaunchSpec | None = Field(
        None, description="the NDRange (of a one-kernel variant; a routine's steps have theirs)"
    )
    routine: RoutineSpec | None = Field(
        None, description="the steps of a variant that runs several kernels (instead of launch)"
    )
    doc: StrictStr = Field("", description="what this variant does differently")
    dtypes: tuple[DTypeName, ...] | None = Field(None, description="default: all of the op's")
    layouts: dict[StrictStr, tuple[LayoutName, ...]] | None = Field(
        None, description="per tensor; default: all of the op's"
    )
    params: dict[StrictStr, StrictInt] = Field(
        default_factory=dict, description="compile-time integer constants given to the template"
    )
    tunables: dict[StrictStr, tuple[StrictInt, ...]] = Field(
        default_factory=dict, description="values the tuner may try for each param"
    )
    device_params: dict[StrictStr, StrictStr] = Field(
        default_factory=dict,
        description="params computed from the device where nothing tuned applies: integer "
        "expressions over " + ", ".join(DEVICE_PROPERTIES) + ", the op's dims (where a call's "
        "sizes are known; a param reading an unknown one keeps its default) and the variant's "
        "other device_params",
    )
    constraints: tuple[StrictStr, ...] = Field(
        (),
        description="conditions over params and the device's register file (guard language; "
        + ", ".join(CONSTRAINT_PROPERTIES)
        + ") that every tried combination of params and tunables must satisfy, the defaults "
        "included",
    )
    when: StrictStr | None = Field(
        None, description="guard over dims and params, checked for each call"
    )
    prefer_when: StrictStr | None = Field(
        None,
        description="the analytic crossover: a condition over dims and device properties ("
        + ", ".join(DEVICE_PROPERTIES)
        + "); where no tuning file measured the crossover at the call's shape, a variant "
        "whose prefer_when is false ranks below its target level's variants whose holds (or "
        "that have none); unknown dims count as holding",
    )
    requires: Requires = Field(
        default_factory=Requires, description="what a device needs to run this variant"
    )
    priority: StrictInt = Field(0, description="breaks ties between equally specific variants")
    epilogue: StrictStr | None = Field(
        None,
        description="an epilogue point: the output whose every element store passes through "
        "the template's epilogue hook (matmul/_matmul.cl.j2: mm.store, mm.store_vector), where "
        "a graph's fuse stage applies the elementwise ops that follow the op before the store "
        "(docs/templates.md, 'Epilogue hooks'); lint renders the variant with a probe to check",
    )
    build_options: tuple[StrictStr, ...] = Field(
        (),
        description="OpenCL build options for this variant's programs, from a fixed set: "
        "-cl-std=CL1.1|CL1.2|CL2.0|CL3.0, -cl-fast-relaxed-math, -cl-mad-enable, "
        "-cl-no-signed-zeros, -cl-finite-math-only, -cl-unsafe-math-optimizations, "
        "-cl-denorms-are-zero, -DNAME or -DNAME=INTEGER",
    )

    @model_validator(mode="before")
    @classmethod
    def _arch_shorthand(cls, data: Any) -> Any:
        return arch_shorthand(data)


def arch_shorthand(data: Any) -> Any:
    """`arch: cpu` is shorthand for `arch: [cpu]` (in a variant, and in a member's override)."""
    if isinstance(data, dict) and isinstance(data.get("arch"), str):
        return {**data, "arch": [data["arch"]]}
    return data


class AccuracySpec(_Model):
    """A measured accuracy bound of some of the op's instances against float64, over a dense
    sweep of inputs (docs/spec-format.md, 'Accuracy bounds'); the test suite holds the
    instances to it and docs/ops.md shows it."""

    variants: tuple[StrictStr, ...] = Field(min_length=1, description="the variants it holds for")
    dtypes: tuple[DTypeName, ...] = Field(min_length=1, description="the dtypes it holds for")
    attrs: dict[StrictStr, StrictInt] = Field(
        default_factory=dict,
        description="values of int attributes it holds for (e.g. gelu's approximate); the "
        "others at their defaults",
    )
    range: tuple[StrictInt | StrictFloat, StrictInt | StrictFloat] = Field(
        (-20, 20),
        description="[lo, hi], swept densely on top of the whole line's sweep",
    )
    max_abs: StrictInt | StrictFloat = Field(
        gt=0, description="the largest absolute error where |ref| <= 1"
    )
    max_rel: StrictInt | StrictFloat = Field(
        gt=0,
        description="the largest relative error where |ref| is at least the dtype's smallest "
        "normal",
    )
    doc: StrictStr = Field("", description="where the largest errors are, and why")


class ExprForms(_Model):
    """An elementwise expression whose form differs between float and integer dtypes."""

    float: StrictStr = Field(description="the form for f16, f32 and f64 (computed in float/double)")
    int: StrictStr = Field(description="the form for i32")


class OpSpec(_Model):
    """One op: its signature (dims, tensors, attributes), dtypes, layouts and variants."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="clforge op spec")

    op: StrictStr = Field(description="the op's name, a C identifier; the file is <op>.yaml")
    doc: StrictStr = Field("", description="what the op computes")
    reference: StrictStr | None = Field(
        None,
        description="its NumPy reference, `module:name`: a Reference (clforge.references) or "
        "a function (inputs, attrs) -> outputs, computing in float64; `clforge verify`, the "
        "tuner and the tests check kernels against it (e.g. clforge.references.elementwise:relu)",
    )
    expr: StrictStr | ExprForms | None = Field(
        None,
        description="an elementwise op's expression, stated once: OpenCL C over its inputs by "
        "name (each in parentheses or as a function argument), its attributes, V (the compute "
        "type, scalar or vector) and a fixed list of built-ins (docs/spec-format.md, "
        "'Elementwise expressions'); the op's own kernels and every fused kernel are rendered "
        "from it",
    )
    dims: tuple[StrictStr, ...] = Field(
        description="symbolic dims; one name means one size everywhere"
    )
    inputs: dict[StrictStr, TensorSpec] = Field(
        min_length=1, description="input tensors by name, in kernel argument order"
    )
    outputs: dict[StrictStr, TensorSpec] = Field(
        min_length=1, description="output tensors by name, in kernel argument order"
    )
    attrs: dict[StrictStr, AttrSpec] = Field(
        default_factory=dict, description="scalar arguments by name"
    )
    derived: dict[StrictStr, StrictStr] = Field(
        default_factory=dict,
        description="dims computed from other dims and int attrs (e.g. a convolution's output "
        "size), as integer expressions in the guard language",
    )
    checks: tuple[CheckSpec, ...] = Field(
        (), description="preconditions on each call's sizes and int attrs"
    )
    call: ConventionName = Field(
        "direct",
        description="the Python calling convention of the eager function (docs/calling.md, "
        "'Calling conventions'): how arrays of any shape map to the op's dims",
    )
    dtypes: tuple[DTypeName, ...] = Field(min_length=1, description="element types the op supports")
    layouts: dict[StrictStr, tuple[LayoutName, ...]] = Field(
        default_factory=dict, description="per tensor; tensors not listed are row-major only"
    )
    variants: tuple[VariantSpec, ...] = Field(
        min_length=1, description="implementations; one must be a generic fallback"
    )
    accuracy: tuple[AccuracySpec, ...] = Field(
        (),
        description="measured accuracy bounds of some instances against float64 (the test "
        "suite holds them to these; docs/ops.md shows them)",
    )

    @property
    def tensors(self) -> dict[str, TensorSpec]:
        return {**self.inputs, **self.outputs}

    def layouts_of(self, tensor: str) -> tuple[str, ...]:
        return self.layouts.get(tensor, ("row",))


class ExtendsSpec(_Model):
    """Variants an extension adds to an op that another tree defines (clforge's own, or another
    registered extension's): the op's signature stays the other tree's; these variants are
    checked against it, and for ties with every other variant of the op in every tree."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="clforge variants for an op")

    extends: StrictStr = Field(
        description="the op these variants serve, defined by another registered tree; the file "
        "is <op>.yaml"
    )
    doc: StrictStr = Field("", description="what these variants add (e.g. the hardware)")
    variants: tuple[VariantSpec, ...] = Field(
        min_length=1, description="the variants added, as in an op spec; names unique in the op"
    )
