"""References named by `module:name` in the specs: resolution and its errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from clforge import references
from clforge.errors import ReferenceLookupError
from clforge.references import locate
from clforge.registry.records import OpSig


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
        ("clforge.references.elementwise:nope", "has no 'nope'"),
        ("no_such_module_xyz:f", "cannot import"),
        ("clforge.references.base:_TYPE", "has no"),
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


def test_the_attention_mask_domain_masks_keys_and_whole_rows() -> None:
    f32 = np.dtype(np.float32)
    m = references.make_input(np.random.default_rng(0), (2, 5, 40), f32, "attn_mask")
    assert np.isneginf(m[:, -1]).all()  # the last query sees no key (an additive mask)
    assert (m[:, -2] == 0).all()  # nor the one before (a keep mask)
    body = m[:, :-2]
    assert np.isneginf(body).any() and (body == 0).any() and (np.isfinite(body) & (body != 0)).any()
    one = references.make_input(np.random.default_rng(0), (1, 1, 1, 1), f32, "attn_mask")
    assert np.isfinite(one).all()  # a one-element mask (no mask) masks nothing


def test_the_attention_reference_is_pytorchs_formula_element_by_element() -> None:
    """The reference against loops over PyTorch's math: grouped heads (query head h reads kv
    head h // (H / HK)), scale, soft-cap, additive mask, causal, zeros for a row with no key."""
    rng = np.random.default_rng(3)
    b, h, hk, sq, sk, d, dv = 1, 4, 2, 5, 6, 3, 2
    q, k = rng.standard_normal((b, h, sq, d)), rng.standard_normal((b, hk, sk, d))
    v, mask = rng.standard_normal((b, hk, sk, dv)), rng.standard_normal((1, h, sq, sk))
    mask[0, 1, 2, :] = -np.inf
    attrs = {"scale": 0.7, "softcap": 1.5, "causal": 1}
    ref = "clforge.references.conv:attention"
    op = OpSig("attention", "", (), (), (), (), ("f64",), "", reference=ref)
    got = references.expected(op, {"q": q, "k": k, "v": v, "mask": mask}, attrs)["o"]
    want = np.zeros((b, h, sq, dv))
    for hh in range(h):
        kv = hh // (h // hk)
        for i in range(sq):
            s = [
                1.5 * np.tanh(0.7 * q[0, hh, i] @ k[0, kv, j] / 1.5) + mask[0, hh, i, j]
                for j in range(i + 1)
            ]
            if np.isneginf(s).all():
                continue
            p = np.exp(np.array(s) - max(s))
            want[0, hh, i] = (p / p.sum()) @ v[0, kv, : i + 1]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not got[0, 1, 2].any()


def test_a_keep_mask_is_its_additive_form() -> None:
    """bool_mask = 1: PyTorch's boolean mask as 1 and 0; where it is 0 the key is masked out."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 6, 4)) for _ in range(3))
    keep = (rng.random((1, 1, 6, 6)) > 0.4).astype(np.float64)
    keep[..., 2, :] = 0
    ref = "clforge.references.conv:attention"
    op = OpSig("attention", "", (), (), (), (), ("f64",), "", reference=ref)
    base = {"q": q, "k": k, "v": v}
    got = references.expected(op, base | {"mask": keep}, {"scale": 0.5, "bool_mask": 1})["o"]
    additive = np.where(keep != 0, 0.0, -np.inf)
    want = references.expected(op, base | {"mask": additive}, {"scale": 0.5})["o"]
    np.testing.assert_array_equal(got, want)
    assert not got[0, :, 2].any()
