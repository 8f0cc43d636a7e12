"""The JSON Schema of a spec file, exported to specs/schema.json: an op spec, an op of a family
(a file with both `op:` and `family:`), a family file (`family:` without `op:`) or variants for
another tree's op (`extends:`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import models_json_schema

from clforge.spec.family_model import FamilySpec, MemberSpec
from clforge.spec.model import ExtendsSpec, OpSpec

SCHEMA_ID = "https://clforge.dev/schema/op-spec.json"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file, as exported to specs/schema.json."""
    _, top = models_json_schema(
        [
            (OpSpec, "validation"),
            (MemberSpec, "validation"),
            (FamilySpec, "validation"),
            (ExtendsSpec, "validation"),
        ],
        ref_template="#/$defs/{model}",
    )

    def ref(model: type) -> dict[str, str]:
        return {"$ref": f"#/$defs/{model.__name__}"}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "clforge spec file",
        "description": "specs/<op>.yaml: an op spec, or, with family:, an op of that family, or, "
        "with extends: instead of op:, variants for another tree's op; "
        "specs/families/<family>.yaml: a family (family: without op:)",
        "if": {"required": ["family"]},
        "then": {"if": {"required": ["op"]}, "then": ref(MemberSpec), "else": ref(FamilySpec)},
        "else": {"if": {"required": ["extends"]}, "then": ref(ExtendsSpec), "else": ref(OpSpec)},
        "$defs": top["$defs"],
    }


def schema_text() -> str:
    """specs/schema.json exactly: sorted keys, two-space indent, a trailing newline."""
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
