"""conv2d: eager calls against NumPy (both layouts, NumPy and device arrays), bad calls, and the
dispatcher's choice on each shipped device profile (attention's are in test_ops_attention.py)."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.call.selection import select
from clforge.device.profile import DeviceProfile
from clforge.device.profile_files import find_profile
from clforge.errors import CallError
from clforge.params.space import as_params
from clforge.references import expected
from clforge.registry import loader as registry_mod
from clforge.tune.verify import canary_launch

from .checking import assert_close

REG = registry_mod.default()
UNKNOWN = DeviceProfile(
    "Mystery Accelerator", "unknown", "accelerator", None, (), 0, "global", 64, 1
)
rng = np.random.default_rng(11)


def _conv_ref(x, w, bias=None, **attrs):
    inputs = {"x": x, "w": w} | ({"bias": bias} if bias is not None else {})
    return expected(REG.op("conv2d"), inputs, attrs)["y"]


def _tol(dtype) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


# --- conv2d --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("shape", "wshape", "options", "attrs"),
    [
        ((2, 3, 9, 11), (5, 3, 3, 3), {"padding": 1}, {"pad_h": 1, "pad_w": 1}),
        ((1, 4, 13, 7), (6, 2, 1, 1), {"groups": 2}, {"groups": 2}),
        (
            (2, 4, 17, 19),
            (4, 1, 3, 3),
            {"stride": 2, "padding": (1, 0), "groups": 4},
            {"stride_h": 2, "stride_w": 2, "pad_h": 1, "groups": 4},
        ),
        (
            (1, 3, 15, 16),
            (7, 3, 3, 2),
            {"dilation": (2, 3), "stride": (1, 2), "padding": 2},
            {"dil_h": 2, "dil_w": 3, "stride_w": 2, "pad_h": 2, "pad_w": 2},
        ),
    ],
)
def test_conv2d_matches_numpy_in_both_layouts(dtype, shape, wshape, options, attrs) -> None:
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(wshape).astype(dtype)
    bias = rng.standard_normal(wshape[0]).astype(dtype)
    want = _conv_ref(x, w, bias, **attrs)
    got = ops.conv2d(x, w, bias, **options)
    np.testing.assert_allclose(got, want, **_tol(dtype))
    # NHWC: the same data channels-last in, channels-last out
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = ops.conv2d(nhwc, w, bias, layout="NHWC", **options)
    assert got.shape == (want.shape[0], want.shape[2], want.shape[3], want.shape[1])
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), **_tol(dtype))


def test_conv2d_without_bias_f16_and_empty_batch() -> None:
    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(ops.conv2d(x, w), _conv_ref(x, w), rtol=1e-4, atol=1e-4)
    h = ops.conv2d(x.astype(np.float16), w.astype(np.float16), padding=1)
    assert h.dtype == np.float16
    want = _conv_ref(x.astype(np.float16), w.astype(np.float16), pad_h=1, pad_w=1)
    np.testing.assert_allclose(h.astype(np.float64), want, rtol=2e-2, atol=2e-2)
    empty = ops.conv2d(np.ones((0, 3, 8, 9), np.float32), w, layout="NCHW")
    assert empty.shape == (0, 4, 6, 7)
    empty = ops.conv2d(np.ones((0, 8, 9, 3), np.float32), w, layout="NHWC")
    assert empty.shape == (0, 6, 7, 4)


def _nhwc_device_call():
    q = dispatcher().runtime.queue
    x = rng.standard_normal((2, 7, 6, 5)).astype(np.float32)  # NHWC
    w = rng.standard_normal((3, 5, 3, 3)).astype(np.float32)
    xd, wd = cla.to_device(q, x), cla.to_device(q, w)
    want = _conv_ref(x.transpose(0, 3, 1, 2), w, pad_h=1, pad_w=1).transpose(0, 2, 3, 1)
    return xd, wd, ops.conv2d(xd, wd, layout="NHWC", padding=1), want


def test_conv2d_on_device_arrays_is_channels_last_in_and_out() -> None:
    xd, wd, got, want = _nhwc_device_call()
    assert isinstance(got, cla.Array) and got.shape == (2, 7, 6, 3)
    assert got.flags.c_contiguous  # an NHWC input gives an NHWC output, read in place
    np.testing.assert_allclose(got.get(), want, rtol=1e-4, atol=1e-4)
    d = dispatcher()
    plan = d.plan_for(
        REG.op("conv2d"),
        {"x": xd.transpose((0, 3, 1, 2)), "w": wd, "bias": cla.zeros(wd.queue, 3, np.float32)},
        {},
    )
    assert (plan.inst.layout_of("x"), plan.inst.layout_of("y")) == ("nhwc", "nhwc")


F = np.float32


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.conv2d(np.ones((1, 6, 5, 5), F), np.ones((4, 2, 3, 3), F), groups=4),
            "conv2d: x's channels C must be groups times w's channels per group CG (w is "
            "[K, C / groups, R, S]) (C == CG * groups is false for C=6, CG=2, groups=4)",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 4, 5, 5), F), np.ones((3, 2, 3, 3), F), groups=2),
            "conv2d: w's output channels K must be divisible by groups (K % groups == 0 is "
            "false for K=3, groups=2)",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 1, 2, 2), F), np.ones((1, 1, 3, 3), F)),
            "conv2d: the padded input is smaller than the dilated filter, so the output would "
            "be empty (H + 2 * pad_h >= dil_h * (R - 1) + 1 and W + 2 * pad_w >= dil_w * "
            "(S - 1) + 1 is false for H=2, R=3, S=3, W=2, dil_h=1, dil_w=1, pad_h=0, pad_w=0)",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 1, 5, 5), F), np.ones((1, 1, 3, 3), F), stride=(0, 1)),
            "conv2d: strides must be at least 1 (stride_h >= 1 and stride_w >= 1 is false for "
            "stride_h=0, stride_w=1)",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 1, 5, 5), F), np.ones((1, 1, 3, 3), F), padding=-1),
            "conv2d: padding must not be negative (pad_h >= 0 and pad_w >= 0 is false for "
            "pad_h=-1, pad_w=-1)",
        ),
        (
            lambda: ops.conv2d(
                np.ones((1, 1, 5, 5), F), np.ones((1, 1, 3, 3), F), padding=(1, 2, 3)
            ),
            "conv2d: padding must be an int or a pair of ints, got (1, 2, 3)",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 1, 5, 5), F), np.ones((1, 1, 3, 3), F), layout="NWHC"),
            "conv2d: layout must be 'NCHW' or 'NHWC', got 'NWHC'",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 5, 5), F), np.ones((1, 1, 3, 3), F)),
            "conv2d: input 'x' has rank 3 (shape (1, 5, 5)); it must be 4-d (NCHW)",
        ),
        (
            lambda: ops.conv2d(np.ones((1, 1, 5, 5), F), np.ones((1, 1, 3, 3), F), np.ones(2, F)),
            "conv2d: dim K is 1 in w (shape (1, 1, 3, 3)) but 2 in bias (shape (2,)); one name "
            "means one size",
        ),
    ],
)
def test_bad_calls(call, message: str) -> None:
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- the dispatcher's choice on each shipped profile ----------------------------------------

CONV_DIMS = {"N": 1, "C": 8, "H": 16, "W": 16, "K": 8, "CG": 8, "R": 3, "S": 3}


# the attributes of a plain convolution: guards that read them are decided, as in a call
CONV_ATTRS = {"stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0, "dil_h": 1, "dil_w": 1}


def _chosen(profile, op, dtype="f32", layouts=None, dims=None) -> str | None:
    if op == "conv2d":
        dims = {**CONV_ATTRS, "groups": 1, **(dims or {})}
    c = select(REG, profile, op, dtype, layouts or {}, dims or {}).chosen
    return c.instance if c else None


@pytest.mark.parametrize(
    ("profile", "conv", "conv_f16"),
    [
        ("nvidia-h100", "gpu_tiled", "generic"),  # the H100 profile lacks fp16
        ("amd-mi250x", "gpu_tiled", "generic_half"),
        ("intel-max-1100", "gpu_tiled", "generic_half"),
        # where nothing measured: priority, cpu_rows for NCHW (stride 1, no padding), then
        # cpu_packed above im2col
        ("pocl-cpu", ("cpu_rows", "cpu_packed"), "generic"),
        (UNKNOWN, "generic", "generic"),
    ],
)
def test_choice_on_each_profile(profile, conv: str | tuple[str, str], conv_f16: str) -> None:
    p = find_profile(profile) if isinstance(profile, str) else profile
    by_layout = (conv, conv) if isinstance(conv, str) else conv
    for lay, variant in zip(("row", "nhwc"), by_layout, strict=True):
        got = _chosen(p, "conv2d", layouts={"x": lay, "y": lay}, dims=CONV_DIMS)
        assert got == f"conv2d__{variant}__f32__x_{lay}__y_{lay}"
    got = _chosen(p, "conv2d", "f16", {"x": "nhwc"}, CONV_DIMS)  # y follows x
    assert got == f"conv2d__{conv_f16}__f16__x_nhwc__y_nhwc"


@pytest.mark.parametrize(
    ("dims", "variant"),
    [
        ({"groups": 2, "CG": 4}, "cpu_depthwise"),  # narrow groups: the direct vector kernel
        ({"C": 128, "K": 128, "CG": 1, "groups": 128}, "cpu_depthwise"),  # depthwise
        ({"C": 34, "K": 38, "CG": 17, "groups": 2}, "cpu_packed"),  # a GEMM per group
        ({"C": 24, "K": 24, "CG": 12, "groups": 2}, "cpu"),  # 12 channels: neither
    ],
)
def test_grouped_convolutions_choice(dims, variant: str) -> None:
    """Grouped convolutions: the packed GEMM per group where the groups fill its panels
    (K / groups >= 16, CG >= 4), the depthwise kernel for CG <= 8 (NCHW only), else cpu."""
    p = find_profile("pocl-cpu")
    grouped = {**CONV_DIMS, **dims}
    assert _chosen(p, "conv2d", dims=grouped) == f"conv2d__{variant}__f32__x_row__y_row"
    nhwc = {"x": "nhwc", "y": "nhwc"}
    if variant == "cpu_depthwise":  # channels-last: the direct kernel
        assert _chosen(p, "conv2d", layouts=nhwc, dims=grouped).startswith("conv2d__cpu__")


@pytest.mark.parametrize(
    ("shape", "wshape", "options"),
    [
        ((1, 6, 9, 21), (6, 1, 3, 3), {"padding": 1, "groups": 6}),  # depthwise
        ((2, 4, 11, 19), (8, 1, 3, 3), {"padding": 1, "stride": 2, "groups": 4}),  # x2, /2
        ((1, 34, 7, 9), (38, 17, 3, 3), {"padding": 1, "groups": 2}),  # packed per group
    ],
)
def test_grouped_and_depthwise_match_numpy_in_both_layouts(shape, wshape, options) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    bias = rng.standard_normal(wshape[0]).astype(np.float32)
    stride, pad = options.get("stride", 1), options["padding"]
    attrs = {"pad_h": pad, "pad_w": pad, "groups": options["groups"]}
    attrs |= {"stride_h": stride, "stride_w": stride}
    want = _conv_ref(x, w, bias, **attrs)
    np.testing.assert_allclose(ops.conv2d(x, w, bias, **options), want, rtol=1e-4, atol=1e-4)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = ops.conv2d(nhwc, w, bias, layout="NHWC", **options)
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("attrs", "layout", "variant"),
    [
        ({"R": 1, "S": 1}, "row", "cpu_rows"),  # 1x1, stride 1, no padding, one group, NCHW
        ({}, "row", "cpu_rows"),  # 3x3
        ({"R": 5, "S": 2, "dil_h": 2, "dil_w": 3}, "row", "cpu_rows"),  # any filter, dilated
        ({"stride_h": 2}, "row", "cpu_packed"),
        ({"stride_w": 2, "R": 1, "S": 1}, "row", "cpu_packed"),
        ({"pad_h": 1, "pad_w": 1}, "row", "cpu_packed"),
        ({"pad_w": 1, "R": 1, "S": 1}, "row", "cpu_packed"),
        ({"groups": 2, "CG": 4}, "row", "cpu_depthwise"),
        ({}, "nhwc", "cpu_packed"),
    ],
)
def test_cpu_rows_takes_unpadded_stride_one_nchw_convs(attrs, layout: str, variant: str) -> None:
    """cpu_rows (the filters times x's rows in place, the taps as shifts along them) takes
    exactly the convolutions of stride 1 without padding in one group, NCHW, whatever the
    filter; any other stride, padding, grouping or layout leaves the choice as it was (here, on a
    profile where nothing is measured: by priority)."""
    p = find_profile("pocl-cpu")
    dims = {**CONV_DIMS, **attrs}
    lay = {"x": layout, "y": layout}
    got = _chosen(p, "conv2d", layouts=lay, dims=dims)
    assert got == f"conv2d__{variant}__f32__x_{layout}__y_{layout}"


ROWS = "conv2d__cpu_rows__f32__x_row__y_row"


@pytest.mark.parametrize(
    "params",
    [
        {},  # the spec's
        {"MR": 8, "NR": 48, "PO": 1, "PD": 0},
        {"MR": 4, "NR": 16, "VW": 8, "PO": 1, "PD": 8},
        {"MR": 12, "NR": 32, "PO": 0, "PD": 32},
    ],
)
@pytest.mark.parametrize(
    ("xshape", "wshape", "dil"),
    [
        ((1, 3, 7, 11), (5, 3, 3, 3), (1, 1)),  # primes; OW = 9 of W = 11: pixels dropped
        ((3, 2, 5, 4), (7, 2, 2, 3), (1, 1)),  # a batch; planes of 20 shorter than a panel
        ((2, 5, 13, 17), (13, 5, 3, 2), (2, 3)),  # dilated; K not a multiple of MR
        ((1, 4, 1, 29), (3, 4, 1, 5), (1, 1)),  # one row
        ((2, 3, 9, 1), (4, 3, 4, 1), (1, 1)),  # one column: every pixel in a row of its own
        ((1, 37, 9, 9), (2, 37, 1, 1), (1, 1)),  # 1x1: y's pixels are the panel's
        ((1, 1, 8, 8), (1, 1, 8, 8), (1, 1)),  # the filter as large as the image: one pixel
    ],
)
def test_cpu_rows_matches_numpy_at_odd_sizes(runtime, params, xshape, wshape, dil) -> None:  # type: ignore[no-untyped-def]
    """Every block shape and order of cpu_rows against the NumPy reference (canary-padded, so
    that a run read past x's end or a pixel stored past a row's end is caught), at sizes no
    panel divides: dropped pixels past each output row, planes shorter than a panel's reach
    (read lane by lane near x's end), a batch, dilation, filters of one row or column."""
    _canary_conv(runtime, ROWS, xshape, wshape, {"dil_h": dil[0], "dil_w": dil[1]}, params)


def _canary_conv(runtime, name, xshape, wshape, attrs, params) -> None:  # type: ignore[no-untyped-def]
    """Instance `name` with `params` on random x, w and bias of these shapes, canary-padded
    (canary_launch), against the NumPy reference."""
    inst = REG.instance(name)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    bias = rng.standard_normal(wshape[0]).astype(np.float32)
    want = _conv_ref(x, w, bias, **attrs)
    n, c, h, wd = xshape
    k, cg, r, s = wshape
    dims = {"N": n, "C": c, "H": h, "W": wd, "K": k, "CG": cg, "R": r, "S": s}
    dims |= {"OH": want.shape[2], "OW": want.shape[3]}
    full = {**CONV_ATTRS, "groups": 1, **attrs}
    chosen = as_params({**inst.param_map, **params})
    inputs = {"x": x, "w": w, "bias": bias}
    plan = runtime.plan(inst, dims, full, {t: v.shape for t, v in inputs.items()}, chosen)
    got = canary_launch(runtime, plan, inputs, dims)["y"]
    assert_close(name, "f32", got, want, cg * r * s)


@pytest.mark.parametrize(
    "params",
    [
        {},  # the spec's
        {"MR": 4, "NR": 16, "VW": 8, "PD": 0},
        {"MR": 5, "NR": 64, "PD": 4},
        {"MR": 12, "NR": 32, "PD": 16},
    ],
)
@pytest.mark.parametrize("layout", ["row", "nhwc"])
@pytest.mark.parametrize(
    ("xshape", "wshape", "attrs"),
    [
        ((1, 3, 7, 11), (5, 3, 3, 3), {"pad_h": 1, "pad_w": 1}),  # primes, ResNet's padding
        ((2, 5, 13, 17), (13, 5, 3, 2), {"stride_h": 2, "stride_w": 2, "pad_h": 2, "pad_w": 1}),
        # padding wider than the filter: whole output rows read only the zero cell (y = bias)
        ((1, 4, 5, 6), (7, 4, 3, 3), {"stride_w": 2, "pad_h": 3, "pad_w": 3}),
        ((1, 2, 8, 8), (3, 2, 3, 3), {"dil_h": 2, "dil_w": 2, "pad_h": 2, "pad_w": 2}),
        ((1, 8, 9, 9), (32, 4, 3, 3), {"pad_h": 1, "pad_w": 1, "groups": 2}),  # per group
    ],
)
def test_cpu_packed_reads_the_padding_as_zeros(  # type: ignore[no-untyped-def]
    runtime, params, layout, xshape, wshape, attrs
) -> None:
    """cpu_packed's direct kernel broadcasts every pixel from memory, one in the padding from
    the zero cell pack_w writes after the filter panels (step 0 along the channels): every
    block shape against the NumPy reference in both of x's layouts, canary-padded, at sizes no
    block divides, with padding wider than the filter's reach, strides, dilation and groups."""
    name = f"conv2d__cpu_packed__f32__x_{layout}__y_{layout}"
    _canary_conv(runtime, name, xshape, wshape, attrs, params)
