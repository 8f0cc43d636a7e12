"""References named by `module:name` in the specs: resolution and its errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from generator import references
from generator.errors import ReferenceLookupError
from generator.references import locate
from generator.registry.records import OpSig


def _op(reference: str | None) -> OpSig:
    return OpSig("twice", "", ("N",), (), (), (), ("f32",), "specs/twice.yaml", reference=reference)


def test_a_bare_function_is_a_reference_with_the_default_cases(tmp_path: Path) -> None:
    (tmp_path / "twice_refs.py").write_text(
        "def twice(inputs, attrs):\n    return {'y': 2 * inputs['x']}\n"
    )
    ref = references.reference_of(_op("twice_refs:twice"), (tmp_path,))
    assert ref.cases is None and ref.domains == {}
    got = references.expected(_op("twice_refs:twice"), {"x": np.arange(3, dtype=np.float32)})
    assert got["y"].dtype == np.float64 and list(got["y"]) == [0, 2, 4]
    assert [c.dims["N"] for c in references.cases_of(ref, ("N",))] == [1, 7, 130, 8195, 0]
    sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (None, "has no NumPy reference"),
        ("no_colon", "is not a path `module:name`"),
        ("generator.references.elementwise:nope", "has no 'nope'"),
        ("no_such_module_xyz:f", "cannot import"),
        ("generator.references.base:_TYPE", "has no"),
        ("numpy:pi", "is a float, not a Reference or a function"),
    ],
)
def test_bad_references_say_what_is_wrong(path: str | None, words: str) -> None:
    with pytest.raises(ReferenceLookupError, match="op 'twice'") as exc:
        references.reference_of(_op(path))
    assert words in str(exc.value)


def test_a_broken_reference_module_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "broken_refs_mod.py").write_text("raise RuntimeError('boom')\n")
    problem = locate.problem("broken_refs_mod:f", (tmp_path,))
    assert problem is not None and "RuntimeError: boom" in problem
    sys.path.remove(str(tmp_path))
