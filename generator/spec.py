"""The spec format: typed, frozen models of one op spec, and their JSON Schema.

Pydantic does the structural work (types, required keys, unknown keys, vocabularies) and gives
the JSON Schema for editors for free, so the schema can never drift from the code. Meaning that
spans fields (dims, names, guards, templates, coverage) is checked in :mod:`generator.validate`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from .dtypes import DTYPE_NAMES

DTypeName = Literal[DTYPE_NAMES]  # type: ignore[valid-type]
LayoutName = Literal["row", "col"]
AttrType = Literal["int", "float"]
DeviceType = Literal["cpu", "gpu", "accelerator"]
LimitExpr = Annotated[StrictStr, Field(pattern=r"^\s*(>=|<=|==|>|<)\s*[0-9]+\s*$")]
Expr = StrictStr | StrictInt

SCHEMA_ID = "https://clforge.dev/schema/op-spec.json"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorSpec(_Model):
    """A tensor argument: its shape in symbolic dims, and a fixed dtype if it has one."""

    shape: tuple[StrictStr, ...] = Field(description="symbolic dims, outermost first")
    dtype: DTypeName | None = Field(
        None, description="fixed element type (e.g. i32 indices); default: the instance's dtype"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `a: [M, K]` is shorthand for `a: {shape: [M, K]}`
        return {"shape": data} if isinstance(data, list) else data


class AttrSpec(_Model):
    """A scalar argument passed at call time (alpha, eps, ...)."""

    type: AttrType
    default: StrictInt | StrictFloat | None = None
    doc: StrictStr = ""


class Requires(_Model):
    """What a device must have for a variant to run there."""

    extensions: tuple[StrictStr, ...] = Field((), description="OpenCL extensions, all required")
    device_type: DeviceType | None = None
    local_mem_bytes: LimitExpr | None = Field(None, description='e.g. ">= 16384"')
    max_work_group_size: LimitExpr | None = Field(None, description='e.g. ">= 256"')
    compute_units: LimitExpr | None = None


class LaunchSpec(_Model):
    """The NDRange, as integer expressions over dims and params (see the guard language)."""

    global_size: tuple[Expr, ...] = Field(min_length=1, max_length=3)
    local_size: tuple[Expr, ...] | None = Field(
        None, min_length=1, max_length=3, description="null lets the OpenCL runtime choose"
    )


class VariantSpec(_Model):
    """One implementation of the op, for some dtypes, layouts and devices."""

    name: StrictStr
    arch: tuple[StrictStr, ...] = Field(
        description="generic | cpu | gpu | accelerator | vendor | arch:<name> | device:<name>"
    )
    template: StrictStr = Field(description="path under templates/, e.g. matmul/generic.cl.j2")
    launch: LaunchSpec
    doc: StrictStr = ""
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
    when: StrictStr | None = Field(None, description="guard over dims and params")
    requires: Requires = Field(default_factory=Requires)
    priority: StrictInt = Field(0, description="breaks ties between equally specific variants")

    @model_validator(mode="before")
    @classmethod
    def _arch_shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("arch"), str):
            return {**data, "arch": [data["arch"]]}
        return data


class OpSpec(_Model):
    """One op: its signature (dims, tensors, attributes), dtypes, layouts and variants."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        title="clforge op spec",
        json_schema_extra={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": SCHEMA_ID,
        },
    )

    op: StrictStr
    doc: StrictStr = ""
    dims: tuple[StrictStr, ...]
    inputs: dict[StrictStr, TensorSpec] = Field(min_length=1)
    outputs: dict[StrictStr, TensorSpec] = Field(min_length=1)
    attrs: dict[StrictStr, AttrSpec] = Field(default_factory=dict)
    dtypes: tuple[DTypeName, ...] = Field(min_length=1)
    layouts: dict[StrictStr, tuple[LayoutName, ...]] = Field(
        default_factory=dict, description="per tensor; tensors not listed are row-major only"
    )
    variants: tuple[VariantSpec, ...] = Field(min_length=1)

    @property
    def tensors(self) -> dict[str, TensorSpec]:
        return {**self.inputs, **self.outputs}

    def layouts_of(self, tensor: str) -> tuple[str, ...]:
        return self.layouts.get(tensor, ("row",))


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file, as exported to specs/schema.json."""
    return OpSpec.model_json_schema()
