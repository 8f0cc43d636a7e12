"""attention, PyTorch's scaled_dot_product_attention: eager calls against the NumPy reference
(PyTorch's math written out) with boolean and additive masks of every rank, broadcast views,
grouped-query heads, the soft-cap, fully masked rows, f16 and f64; bad calls; and the
dispatcher's choice on each shipped device profile. Every instance is also verified on the
reference's own cases (odd sizes, masks, grouped heads, soft-cap) in test_instances.py."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.call.eager import eager_plan, prepare
from clforge.call.explain import explain
from clforge.call.selection import select
from clforge.device.profile import DeviceProfile
from clforge.device.profile_files import find_profile
from clforge.errors import CallError
from clforge.params.space import as_params
from clforge.references import expected
from clforge.registry import loader as registry_mod
from clforge.tune.verify import verify

REG = registry_mod.default()
ATTENTION = REG.op("attention")
UNKNOWN = DeviceProfile(
    "Mystery Accelerator", "unknown", "accelerator", None, (), 0, "global", 64, 1
)
F = np.float32
rng = np.random.default_rng(11)
TOL = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}


def _inputs(b, h, sq, sk, d, dv, hk=None, dtype=F):
    """q, k, v of (B, H, S, D) (B, HK, S, D) shapes, or (B, S, D) with h=0."""
    heads = ((h,), (hk or h,), (hk or h,)) if h else ((), (), ())
    return tuple(
        rng.standard_normal((b, *lead, s, n)).astype(dtype)
        for lead, s, n in zip(heads, (sq, sk, sk), (d, d, dv), strict=True)
    )


def _want(q, k, v, mask=None, causal=False, scale=None, softcap=0.0):
    """The reference output for eager-call arguments (q, k, v of rank 4)."""
    attrs = {"causal": int(causal), "scale": q.shape[-1] ** -0.5 if scale is None else scale}
    inputs = {"q": q, "k": k, "v": v}
    if mask is not None:
        additive = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask
        inputs["mask"] = np.broadcast_to(additive, (*q.shape[:3], k.shape[2]))
    return expected(ATTENTION, inputs, attrs | {"softcap": softcap})["o"]


def _close(got, want, dtype=F) -> None:
    assert got.dtype == dtype
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("sq", "sk", "d", "dv"), [(7, 13, 5, 11), (19, 6, 16, 8), (40, 40, 64, 64), (97, 130, 64, 40)]
)
def test_attention_matches_numpy(causal, sq, sk, d, dv) -> None:
    q, k, v = _inputs(2, 3, sq, sk, d, dv)
    _close(ops.attention(q, k, v, causal=causal), _want(q, k, v, causal=causal))
    got = ops.attention(q, k, v, causal=causal, scale=0.3)
    _close(got, _want(q, k, v, causal=causal, scale=0.3))


def test_attention_without_heads_on_device_and_empty() -> None:
    q, k, v = _inputs(3, 0, 9, 4, 6, 5)
    want = _want(q[:, None], k[:, None], v[:, None])[:, 0]
    got = ops.attention(q, k, v)
    assert got.shape == (3, 9, 5)
    _close(got, want)
    mask = rng.random((3, 9, 4)) > 0.3  # (B, SQ, SK) without heads
    headed = _want(q[:, None], k[:, None], v[:, None], mask[:, None])[:, 0]
    _close(ops.attention(q, k, v, mask), headed)
    queue = dispatcher().runtime.queue
    dev = ops.attention(*(cla.to_device(queue, a) for a in (q, k, v)))
    assert isinstance(dev, cla.Array) and dev.shape == (3, 9, 5)
    np.testing.assert_allclose(dev.get(), want, rtol=1e-4, atol=1e-4)
    assert ops.attention(*_inputs(0, 2, 5, 5, 8, 8)).shape == (0, 2, 5, 8)
    assert not ops.attention(*_inputs(1, 2, 5, 0, 8, 8)).any()  # SK = 0: zeros
    # large scores: the softmax subtracts the row max and does not overflow
    q, k, v = (a * 30 for a in _inputs(1, 1, 5, 7, 4, 3))
    assert np.isfinite(ops.attention(q, k, v, scale=1.0)).all()


@pytest.mark.parametrize(
    "shape",
    [(70,), (37, 70), (1, 70), (37, 1), (3, 37, 70), (2, 1, 37, 70), (2, 3, 37, 70), (1, 1, 1, 1)],
)
def test_boolean_and_additive_masks_broadcast_from_any_rank(shape) -> None:
    q, k, v = _inputs(2, 3, 37, 70, 64, 24)
    keep = rng.random(shape) > 0.3
    _close(ops.attention(q, k, v, keep), _want(q, k, v, keep))
    additive = np.where(keep, rng.standard_normal(shape), -np.inf).astype(F)
    _close(ops.attention(q, k, v, additive, causal=True), _want(q, k, v, additive, causal=True))
    # a boolean mask is its additive form: True adds 0, False -inf
    zero_inf = np.where(keep, 0.0, -np.inf).astype(F)
    np.testing.assert_array_equal(ops.attention(q, k, v, keep), ops.attention(q, k, v, zero_inf))


def test_a_boolean_mask_is_cast_and_read_as_a_keep_mask() -> None:
    """The convention asks the eager layer to cast a boolean mask to q's dtype (1 and 0, on the
    host, at the mask's own size) and sets bool_mask; an additive mask is passed as it is."""
    q, k, v = _inputs(1, 2, 9, 11, 8, 8)
    keep = rng.random((9, 11)) > 0.3
    call = prepare("attention", (q, k, v, keep), {}, {})
    assert call.attrs["bool_mask"] == 1 and call.inputs["mask"].dtype == F
    np.testing.assert_array_equal(call.inputs["mask"][0, 0], keep.astype(F))
    additive = np.where(keep, 0.0, -np.inf).astype(F)
    call = prepare("attention", (q, k, v, additive), {}, {})
    assert call.attrs["bool_mask"] == 0 and call.inputs["mask"].dtype == F


def test_a_broadcast_view_of_a_mask_is_passed_at_its_own_size() -> None:
    q, k, v = _inputs(2, 3, 37, 70, 16, 16)
    keep = rng.random((37, 70)) > 0.3
    view = np.broadcast_to(keep, (2, 3, 37, 70))  # strides 0 on B and H
    call = prepare("attention", (q, k, v, view), {}, {})
    assert call.inputs["mask"].shape == (1, 1, 37, 70)
    _close(ops.attention(q, k, v, view), _want(q, k, v, keep))


def test_fully_masked_rows_give_zeros_as_pytorch() -> None:
    """PyTorch's math backend (_safe_softmax, PyTorch 2.5 on): a query that sees no key gives
    a zero row, not NaN; here for boolean and additive masks, on the flash kernel and on the
    generic fallback."""
    q, k, v = _inputs(1, 2, 40, 90, 64, 64)
    keep = rng.random((2, 40, 90)) > 0.5
    keep[0, 3] = keep[1, 39] = False
    additive = np.where(keep, 0.0, -np.inf).astype(F)
    for mask in (keep, additive):
        got = ops.attention(q, k, v, mask)
        assert np.isfinite(got).all()
        assert not got[0, 0, 3].any() and not got[0, 1, 39].any()
        assert got[0, 0, 4].any()
        _close(got, _want(q, k, v, mask))
    plan = eager_plan("attention", (q, k, v, keep))
    generic = REG.instance(plan.inst.name.replace(f"__{plan.inst.variant}__", "__generic__"))
    d = dispatcher()
    call = prepare("attention", (q, k, v, keep), {}, {})
    dev = {n: cla.to_device(d.runtime.queue, a) for n, a in call.inputs.items()}
    b = {n: tuple(a.shape) for n, a in call.inputs.items()}
    dims = {"B": 1, "H": 2, "HK": 2, "SQ": 40, "SK": 90, "D": 64, "DV": 64}
    out = d.runtime.enqueue(d.runtime.plan(generic, dims, {**call.attrs}, b), dev)["o"].get()
    assert not out[0, 0, 3].any() and np.isfinite(out).all()
    _close(out, _want(q, k, v, keep))


@pytest.mark.parametrize(("h", "hk"), [(6, 2), (6, 3), (8, 1), (4, 4)])
def test_grouped_query_attention_is_repeated_kv_heads(h, hk) -> None:
    """Query head i reads kv head i // (H / HK), as PyTorch's enable_gqa (repeat_interleave)."""
    q, k, v = _inputs(2, h, 33, 75, 32, 20, hk=hk)
    mask = rng.random((33, 75)) > 0.2
    got = ops.attention(q, k, v, mask, causal=True, enable_gqa=True)
    group = h // hk
    repeated = ops.attention(q, np.repeat(k, group, 1), np.repeat(v, group, 1), mask, causal=True)
    np.testing.assert_allclose(got, repeated, rtol=1e-6, atol=1e-6)
    _close(got, _want(q, k, v, mask, causal=True))


def test_softcap_caps_the_scores_before_the_mask() -> None:
    q, k, v = (a * 4 for a in _inputs(1, 2, 29, 50, 64, 64))
    mask = rng.standard_normal((29, 50)).astype(F)
    capped = ops.attention(q, k, v, mask, softcap=2.0)
    _close(capped, _want(q, k, v, mask, softcap=2.0))
    assert not np.allclose(capped, ops.attention(q, k, v, mask), atol=1e-3)
    np.testing.assert_array_equal(ops.attention(q, k, v, softcap=0.0), ops.attention(q, k, v))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_f16_and_f64(dtype) -> None:
    q, k, v = _inputs(1, 4, 45, 67, 64, 40, hk=2, dtype=dtype)
    mask = rng.random((45, 67)) > 0.25
    got = ops.attention(q, k, v, mask, causal=True, softcap=5.0, enable_gqa=True)
    _close(got, _want(q, k, v, mask, causal=True, softcap=5.0), dtype)
    additive = np.where(mask, 0, -np.inf).astype(dtype)
    _close(ops.attention(q, k, v, additive, enable_gqa=True), _want(q, k, v, additive), dtype)


@pytest.mark.parametrize(
    ("instance", "params"),
    [
        (
            "attention__cpu_flash__f32__q_row__k_row__v_row__o_row",
            {"MR": 4, "NR": 48, "VW": 16, "OV": 2, "CB": 1},
        ),
        (
            "attention__cpu_flash__f32__q_row__k_row__v_row__o_row",
            {"MR": 8, "NR": 32, "VW": 8, "OV": 2, "CB": 4},
        ),
        (
            "attention__cpu_flash64__f64__q_row__k_row__v_row__o_row",
            {"MR": 4, "NR": 24, "VW": 4, "OV": 2, "CB": 2},
        ),
    ],
)
def test_the_flash_routine_is_right_with_other_blocks(runtime, instance, params) -> None:
    """The tuner's candidates are verified before they are timed; this checks a few block
    shapes other than the defaults on every case of the reference (canary-padded)."""
    verdict = verify(runtime, REG.instance(instance), as_params(params))
    assert verdict.ok, str(verdict)
    assert verdict.ran >= 10


def _q(*shape):
    return np.ones(shape, F)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.attention(_q(1, 2, 3, 4), _q(1, 2, 3, 4), _q(1, 2, 3, 4), causal=1),
            "attention: causal must be True or False, got 1 (int)",
        ),
        (
            lambda: ops.attention(_q(1, 2, 3, 4), _q(2, 3, 4), _q(1, 2, 3, 4)),
            "attention: q, k and v must all be (B, H, S, D) or all (B, S, D); got q (1, 2, 3, 4), "
            "k (2, 3, 4), v (1, 2, 3, 4)",
        ),
        (
            lambda: ops.attention(*(np.ones((1, 2, 3, 4), np.int32),) * 3),
            "attention: dtype i32 is not supported (supported: f32, f64, f16)",
        ),
        (
            lambda: ops.attention(_q(1, 9, 5, 4), _q(1, 3, 6, 4), _q(1, 3, 6, 4)),
            "attention: q has 9 heads (shape (1, 9, 5, 4)) but k has 3 (shape (1, 3, 6, 4)); "
            "grouped-query attention (q's heads a multiple of k's and v's) needs enable_gqa=True",
        ),
        (
            lambda: ops.attention(_q(1, 9, 5, 4), _q(1, 4, 6, 4), _q(1, 4, 6, 4), enable_gqa=True),
            "attention: q's heads H must be a multiple of k's and v's heads HK (grouped-query "
            "attention) (H == HK or HK > 0 and H % HK == 0 is false for H=9, HK=4)",
        ),
        (
            lambda: ops.attention(_q(1, 6, 5, 4), _q(1, 3, 6, 4), _q(1, 2, 6, 4), enable_gqa=True),
            "attention: dim HK is 3 in k (shape (1, 3, 6, 4)) but 2 in v (shape (1, 2, 6, 4)); "
            "one name means one size",
        ),
        (
            lambda: ops.attention(_q(1, 2, 5, 4), _q(1, 2, 6, 4), _q(1, 2, 6, 4), _q(5, 7)),
            "attention: mask of shape (5, 7) does not broadcast to the scores' shape "
            "(B, H, SQ, SK) = (1, 2, 5, 6)",
        ),
        (
            lambda: ops.attention(
                _q(1, 2, 5, 4), _q(1, 2, 6, 4), _q(1, 2, 6, 4), _q(1, 1, 1, 5, 6)
            ),
            "attention: mask of shape (1, 1, 1, 5, 6) does not broadcast to the scores' shape "
            "(B, H, SQ, SK) = (1, 2, 5, 6)",
        ),
        (
            lambda: ops.attention(_q(2, 5, 4), _q(2, 6, 4), _q(2, 6, 4), _q(3, 5, 6)),
            "attention: mask of shape (3, 5, 6) does not broadcast to the scores' shape "
            "(B, SQ, SK) = (2, 5, 6)",
        ),
        (
            lambda: ops.attention(
                _q(1, 2, 5, 4), _q(1, 2, 6, 4), _q(1, 2, 6, 4), np.zeros((5, 6), np.float64)
            ),
            "attention: inputs have different dtypes (f32 and f64 for 'mask'); cast one of them",
        ),
        (
            lambda: ops.attention(*(_q(1, 2, 3, 4),) * 3, softcap=-1.0),
            "attention: softcap must be a finite number >= 0 (0: off), got -1.0",
        ),
        (
            lambda: ops.attention(*(_q(1, 2, 3, 4),) * 3, scale="0.5"),
            "attention: scale must be a number, got '0.5'",
        ),
        (
            lambda: ops.attention(
                *(_q(1, 2, 3, 4),) * 3,
                cla.to_device(dispatcher().runtime.queue, np.ones((3, 3), bool)),
            ),
            "attention: mask is a boolean device array (shape (3, 3)); pass it as a NumPy array, "
            "or as an additive mask of q's dtype (0 to attend, -inf to mask out)",
        ),
    ],
)
def test_bad_calls(call, message: str) -> None:
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- the dispatcher's choice on each shipped profile ----------------------------------------

DIMS = {"B": 1, "H": 8, "HK": 2, "SQ": 128, "SK": 128, "D": 64, "DV": 64}


def _interleaved(t) -> bool:
    """Whether (B, H, S, D) array `t` holds its heads interleaved (B, S, H, D in memory)."""
    return t.shape[1] > 1 and t.shape[2] > 1 and t.strides[1] < t.strides[2]


@pytest.mark.parametrize("which", ["qkv", "q", "kv", ""])
@pytest.mark.parametrize(("sq", "sk", "h", "hk"), [(1, 1, 1, 1), (37, 37, 3, 3), (29, 53, 4, 2)])
def test_heads_interleaved_views_are_read_and_written_in_place(which, sq, sk, h, hk) -> None:
    """PyTorch's heads, x.view(B, S, H, D).transpose(1, 2), reach the kernel as they are (the
    bshd layout), from the host and as device views; the output follows q's layout."""
    b, d = 2, 16
    queue = dispatcher().runtime.queue

    def heads(s: int, n: int, tensor: str) -> tuple[np.ndarray, cla.Array]:
        x = rng.standard_normal((b, s, n, d)).astype(F)
        if tensor in which:  # the view, host and device
            return x.transpose(0, 2, 1, 3), cla.to_device(queue, x).transpose((0, 2, 1, 3))
        y = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
        return y, cla.to_device(queue, y)

    (q, dq), (k, dk), (v, dv) = heads(sq, h, "q"), heads(sk, hk, "k"), heads(sk, hk, "v")
    gqa = {"enable_gqa": True} if hk != h else {}
    rep = h // hk
    want = _want(q, np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1), causal=True)
    got = ops.attention(q, k, v, causal=True, **gqa)
    assert _interleaved(got) == ("q" in which and _interleaved(q))
    _close(np.asarray(got), want)
    out = ops.attention(dq, dk, dv, causal=True, **gqa)
    assert _interleaved(out) == _interleaved(got)
    host = (
        out.transpose((0, 2, 1, 3)).get().transpose(0, 2, 1, 3) if _interleaved(out) else out.get()
    )
    _close(host, want)
    chosen = explain("attention", dq, dk, dv, causal=True, **gqa).selection.chosen
    assert chosen is not None and chosen.instance is not None
    for t, tensor in zip((dq, dk, dv), "qkv", strict=True):
        assert (f"__{tensor}_bshd" in chosen.instance) == _interleaved(t), chosen.instance


def test_explain_takes_the_eager_calls_arguments() -> None:
    """`explain` spells a call as the eager function does: optional inputs left off or given by
    name, and the convention's own parameters (attention's causal as a bool)."""
    q, k, v = _inputs(1, 2, 5, 5, 8, 8)
    for e in (
        explain("attention", q, k, v, causal=True),
        explain("attention", q, k, v, mask=q[0, 0, :, :5]),
    ):
        assert e.selection.chosen is not None and e.selection.chosen.instance is not None


def _chosen(profile, dtype: str, dims=DIMS) -> str | None:
    c = select(REG, profile, "attention", dtype, {}, dims).chosen
    return c.instance if c else None


@pytest.mark.parametrize(
    ("profile", "f32", "f64", "f16"),
    [
        ("nvidia-h100", "gpu_tiled", "generic", "gpu_tiled"),
        ("amd-mi250x", "gpu_tiled", "generic", "gpu_tiled"),
        ("intel-max-1100", "gpu_tiled", "generic", "gpu_tiled"),
        ("pocl-cpu", "cpu_flash", "cpu_flash64", "generic"),
        (UNKNOWN, "generic", None, "generic"),  # no cl_khr_fp64: no f64 instance
    ],
)
def test_choice_on_each_profile(profile, f32: str, f64: str | None, f16: str) -> None:
    p = find_profile(profile) if isinstance(profile, str) else profile
    for dtype, variant in (("f32", f32), ("f64", f64), ("f16", f16)):
        want = f"attention__{variant}__{dtype}__q_row__k_row__v_row__o_row" if variant else None
        assert _chosen(p, dtype) == want


def test_head_dims_past_the_gpu_tile_fall_back() -> None:
    dims = {**DIMS, "D": 256}
    assert (
        _chosen(find_profile("nvidia-h100"), "f32", dims)
        == "attention__generic__f32__q_row__k_row__v_row__o_row"
    )
