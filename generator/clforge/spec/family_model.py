"""The models of an op family and of its members, derived field by field from :class:`OpSpec`
and :class:`VariantSpec`, so that the three kinds of spec file cannot drift apart.

A family file (`specs/families/<family>.yaml`) is an op spec without `op:`: `family:` names it,
and its `doc` says what the family's ops share (it is not inherited). A member file
(`specs/<op>.yaml`) names its family; every other key it writes replaces the family's, its
`variants:` change the family's variants by name (each key written replaces the variant's), and
`omit_variants:` drops some. These models check the structure of each file alone (types, unknown
keys, with the valid ones listed); the merged op is then checked as an :class:`OpSpec`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonDict

from clforge.spec.model import OpSpec, VariantSpec, arch_shorthand

SchemaHook = Callable[[JsonDict], None]


def _no_default(hook: Any) -> SchemaHook:
    """A schema hook that drops `default: null`: an override left out inherits, it has no
    default of its own."""

    def fix(schema: JsonDict) -> None:
        schema.pop("default", None)
        if callable(hook):
            hook(schema)

    return fix


def _annotation(field: FieldInfo) -> Any:
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _override(field: FieldInfo, what: str) -> tuple[Any, Any]:
    """The field as an override: the same type and constraints, not required; left out, the
    value is inherited. (`null` stays an error wherever the op spec refuses it.)"""
    return (
        _annotation(field),
        Field(
            None,
            description=f"replaces the {what}'s: {field.description or ''}".rstrip(": "),
            json_schema_extra=_no_default(field.json_schema_extra),
        ),
    )


def _same(field: FieldInfo) -> tuple[Any, FieldInfo]:
    return (field.annotation, field)


class _Override(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _arch_shorthand(cls, data: Any) -> Any:
        return arch_shorthand(data)


VariantOverride = create_model(  # type: ignore[call-overload]
    "VariantOverride",
    __base__=_Override,
    __doc__="Changes to one of the family's variants: each key written replaces the variant's; "
    "the variant keeps its name and every key not written.",
    **{
        name: _override(f, "family variant")
        for name, f in VariantSpec.model_fields.items()
        if name != "name"
    },
)

_OWN = ("op", "doc", "reference", "expr")  # an op's own keys: a family has none of them
_BODY = {n: f for n, f in OpSpec.model_fields.items() if n not in _OWN}
_FAMILY_NAME = Field(
    description="the family's name, a C identifier; the file is families/<family>.yaml"
)

FamilySpec = create_model(  # type: ignore[call-overload]
    "FamilySpec",
    __config__=ConfigDict(frozen=True, extra="forbid", title="clforge op family"),
    __doc__="The body that several ops share (specs/families/<family>.yaml): an op spec without "
    "op:, complete and valid on its own. Each member file names it and may override any key.",
    family=(StrictStr, _FAMILY_NAME),
    doc=(
        StrictStr,
        Field("", description="what the family's ops share; not inherited (each op has its own)"),
    ),
    **{name: _same(f) for name, f in _BODY.items()},
)

MemberSpec = create_model(  # type: ignore[call-overload]
    "MemberSpec",
    __config__=ConfigDict(frozen=True, extra="forbid", title="clforge op of a family"),
    __doc__="An op whose body comes from a family: every key written here replaces the "
    "family's; variants are changed by name, or omitted.",
    op=_same(OpSpec.model_fields["op"]),
    doc=_same(OpSpec.model_fields["doc"]),
    reference=_same(OpSpec.model_fields["reference"]),
    expr=_same(OpSpec.model_fields["expr"]),
    family=(
        StrictStr,
        Field(
            description="the family this op belongs to: specs/families/<family>.yaml gives every "
            "key not written here"
        ),
    ),
    **{name: _override(f, "family") for name, f in _BODY.items() if name != "variants"},
    variants=(
        dict[StrictStr, VariantOverride],  # type: ignore[valid-type]
        Field(
            default_factory=dict,
            description="changes to the family's variants, by variant name: each key written "
            "replaces the variant's (e.g. cpu: {dtypes: [f32, f64, i32]})",
        ),
    ),
    omit_variants=(
        tuple[StrictStr, ...],
        Field((), description="names of the family's variants this op does not have"),
    ),
)

MEMBER_ONLY = ("family", "variants", "omit_variants")  # keys of a member that are not op keys
# keys of a family file that its members do not inherit
NOT_INHERITED = ("family", "doc", "reference", "expr")
