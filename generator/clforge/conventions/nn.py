"""The neural-network conventions: conv2d (NCHW or NHWC arrays, PyTorch-style stride, padding
and dilation) and channels (PyTorch's (N, C, *) arrays with per-channel vectors, for
batch_norm); attention's is in attention.py."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clforge.conventions.base import Canonical, Convention, PyParam, array_of, reshape
from clforge.errors import CallError
from clforge.registry.records import OpSig

_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("stride", "stride_h", "stride_w"),
    ("padding", "pad_h", "pad_w"),
    ("dilation", "dil_h", "dil_w"),
)
_CONV_DIMS = (("N", "C", "H", "W"), ("K", "CG", "R", "S"))


def _pair(op: OpSig, name: str, value: Any) -> tuple[int, int]:
    """An int or a pair of ints, as (height, width)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return int(value[0]), int(value[1])
    raise CallError(f"{op.name}: {name} must be an int or a pair of ints, got {value!r}")


def _named_padding(op: OpSig, arrays: Mapping[str, Any], options: Mapping[str, Any]) -> Any:
    """PyTorch's padding='valid' (none) or 'same' (the output keeps the input's height and
    width: stride 1, and (kernel - 1) * dilation even on both axes, which PyTorch would pad on
    one side only) as the padding of each axis."""
    padding = options["padding"]
    if padding == "valid":
        return 0
    if padding != "same":
        raise CallError(
            f"{op.name}: padding must be an int, an (h, w) pair, 'valid' or 'same'; got {padding!r}"
        )
    if _pair(op, "stride", options.get("stride", 1)) != (1, 1):
        raise CallError(f"{op.name}: padding='same' needs stride 1, as PyTorch's does")
    w = op.inputs[1].name
    kernel = tuple(int(n) for n in arrays[w].shape[2:])
    dil = _pair(op, "dilation", options.get("dilation", 1))
    total = tuple(d * (k - 1) for d, k in zip(dil, kernel, strict=True))
    if any(t % 2 for t in total):
        raise CallError(
            f"{op.name}: padding='same' with kernel {kernel} and dilation {dil} needs padding "
            "on one side only, which the kernels do not take; pass the padding as ints"
        )
    return (total[0] // 2, total[1] // 2)


class Conv2d(Convention):
    name = "conv2d"
    doc = (
        "x is (N, C, H, W) with layout='NCHW' or (N, H, W, C) with layout='NHWC' (viewed as "
        "NCHW stored channels-last, no copy); w is (K, C / groups, R, S); stride, padding and "
        "dilation are an int or an (h, w) pair (padding also 'valid' or 'same', as PyTorch's); "
        "y comes back in x's layout"
    )

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        pair = "int | tuple[int, int]"
        return (
            PyParam("layout", "str", "'NCHW'"),
            PyParam("stride", pair, "1"),
            PyParam("padding", f"{pair} | str", "0"),
            PyParam("dilation", pair, "1"),
        )

    def positional(self, op: OpSig) -> tuple[str, ...]:
        # torch.nn.functional.conv2d(input, weight, bias, stride, padding, dilation, groups)
        return ("stride", "padding", "dilation", *(a.name for a in op.attrs if a.name == "groups"))

    def supplies(self, op: OpSig) -> tuple[str, ...]:
        return tuple(n for _, *hw in _PAIRS for n in hw)

    def problems(self, op: OpSig) -> list[str]:
        out = []
        shapes = tuple(t.shape for t in op.inputs[:2])
        if shapes != _CONV_DIMS or len(op.outputs) != 1 or len(op.outputs[0].shape) != 4:
            out.append(
                "call: conv2d needs inputs x [N, C, H, W], w [K, CG, R, S] and one 4-d output"
            )
        names = {a.name for a in op.attrs if a.type == "int"}
        missing = [n for n in self.supplies(op) if n not in names]
        if missing:
            out.append(f"call: conv2d needs the int attributes {', '.join(missing)}")
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        arrays = {k: array_of(op, k, v) for k, v in inputs.items() if v is not None}
        layout = options.get("layout", "NCHW")
        if layout not in ("NCHW", "NHWC"):
            raise CallError(f"{op.name}: layout must be 'NCHW' or 'NHWC', got {layout!r}")
        x, y = op.inputs[0].name, op.outputs[0].name
        if arrays[x].ndim != 4:
            raise CallError(
                f"{op.name}: input {x!r} has rank {arrays[x].ndim} (shape "
                f"{tuple(arrays[x].shape)}); it must be 4-d ({layout})"
            )
        attrs: dict[str, Any] = {}
        given = dict(options)
        if isinstance(given.get("padding"), str):
            given["padding"] = _named_padding(op, arrays, options)
        for option, h, w in _PAIRS:
            attrs[h], attrs[w] = _pair(
                op, option, given.get(option, 1 if option != "padding" else 0)
            )
        if layout == "NCHW":
            return Canonical(arrays, attrs)
        arrays[x] = arrays[x].transpose((0, 3, 1, 2))  # logical NCHW over channels-last memory

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {**outs, y: outs[y].transpose((0, 2, 3, 1))}

        return Canonical(arrays, attrs, finish)


class Channels(Convention):
    name = "channels"
    doc = (
        "x is (N, C, *) as PyTorch's batch_norm takes it, viewed as [N, C, S] (S the product of "
        "the trailing axes, 1 for (N, C)); the other inputs are per-channel vectors (C,); the "
        "output takes x's shape"
    )

    def problems(self, op: OpSig) -> list[str]:
        if len(op.dims) != 3 or not op.inputs or op.inputs[0].shape != op.dims:
            return ["call: channels needs dims [N, C, S] and a first input shaped [N, C, S]"]
        c = op.dims[1]
        bad = [t.name for t in op.inputs[1:] if t.shape != (c,)]
        bad += [t.name for t in op.outputs if t.shape != op.dims]
        if bad:
            return [
                f"call: channels needs per-channel inputs shaped [{c}] and outputs shaped "
                f"[{', '.join(op.dims)}]; not {', '.join(bad)}"
            ]
        return []

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        name = op.inputs[0].name
        x = array_of(op, name, inputs[name])
        if x.ndim < 2:
            raise CallError(
                f"{op.name}: input {name!r} has rank {x.ndim} (shape {tuple(x.shape)}); it must "
                "be (N, C) or (N, C, ...)"
            )
        shape = tuple(x.shape)
        out = {name: reshape(op, name, x, (shape[0], shape[1], math.prod(shape[2:])))}
        for t in op.inputs[1:]:
            v = inputs.get(t.name)
            if v is None:
                continue
            v = array_of(op, t.name, v)
            if tuple(v.shape) != (shape[1],):
                raise CallError(
                    f"{op.name}: {t.name} has shape {tuple(v.shape)}, expected ({shape[1]},): "
                    f"one value per channel of {name} (shape {shape})"
                )
            out[t.name] = v

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(shape) for k, v in outs.items()}

        return Canonical(out, finish=finish)


class Pool2d(Convention):
    name = "pool2d"
    doc = (
        "x is (N, C, H, W) or, unbatched, (C, H, W), NCHW as PyTorch's pooling takes it; "
        "kernel_size (required), stride (default: kernel_size), padding and dilation are an int "
        "or an (h, w) pair; ceil_mode, and where the op has them count_include_pad and "
        "divisor_override (None: none); y takes x's rank"
    )

    def _has(self, op: OpSig, name: str) -> bool:
        return any(a.name == name for a in op.attrs)

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        pair = "int | tuple[int, int]"
        out = [
            PyParam("kernel_size", f"{pair} | None", "None"),
            PyParam("stride", f"{pair} | None", "None"),
            PyParam("padding", pair, "0"),
            PyParam("dilation", pair, "1"),
            PyParam("ceil_mode", "bool", "False"),
        ]
        if self._has(op, "count_include_pad"):
            out.append(PyParam("count_include_pad", "bool", "True"))
        if self._has(op, "divisor_override"):
            out.append(PyParam("divisor_override", "int | None", "None"))
        return tuple(out)

    def positional(self, op: OpSig) -> tuple[str, ...]:
        # PyTorch's order: max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode);
        # avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
        # divisor_override), which has no dilation (clforge's avg_pool2d takes it by keyword)
        if self._has(op, "count_include_pad"):
            names = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")
            return names + (("divisor_override",) if self._has(op, "divisor_override") else ())
        return ("kernel_size", "stride", "padding", "dilation", "ceil_mode")

    def supplies(self, op: OpSig) -> tuple[str, ...]:
        names = ("kernel_h", "kernel_w", *(n for _, *hw in _PAIRS for n in hw), "ceil_mode")
        extra = tuple(n for n in ("count_include_pad", "divisor_override") if self._has(op, n))
        return names + extra

    def problems(self, op: OpSig) -> list[str]:
        out = []
        if (
            len(op.inputs) != 1
            or op.inputs[0].shape != op.dims[:4]
            or len(op.outputs) != 1
            or len(op.outputs[0].shape) != 4
        ):
            out.append("call: pool2d needs one input x [N, C, H, W] and one 4-d output")
        names = {a.name for a in op.attrs if a.type == "int"}
        needed = ("kernel_h", "kernel_w", *(n for _, *hw in _PAIRS for n in hw), "ceil_mode")
        missing = [n for n in needed if n not in names]
        if missing:
            out.append(f"call: pool2d needs the int attributes {', '.join(missing)}")
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        name = op.inputs[0].name
        x = array_of(op, name, inputs[name])
        if x.ndim not in (3, 4):
            raise CallError(
                f"{op.name}: input {name!r} has rank {x.ndim} (shape {tuple(x.shape)}); it must "
                "be (N, C, H, W) or (C, H, W)"
            )
        kernel = options.get("kernel_size")
        if kernel is None:
            raise CallError(f"{op.name}: kernel_size is required (an int or an (h, w) pair)")
        attrs: dict[str, Any] = {}
        attrs["kernel_h"], attrs["kernel_w"] = _pair(op, "kernel_size", kernel)
        stride = options.get("stride")
        given = {"stride": kernel if stride is None else stride}
        for option, h, w in _PAIRS:
            value = given.get(option, options.get(option, 0 if option == "padding" else 1))
            attrs[h], attrs[w] = _pair(op, option, value)
        attrs["ceil_mode"] = int(bool(options.get("ceil_mode", False)))
        if self._has(op, "count_include_pad"):
            attrs["count_include_pad"] = int(bool(options.get("count_include_pad", True)))
        if self._has(op, "divisor_override"):
            div = options.get("divisor_override")
            if div is not None and (isinstance(div, bool) or not isinstance(div, int) or div == 0):
                raise CallError(
                    f"{op.name}: divisor_override must be a nonzero int or None, got {div!r}"
                )
            attrs["divisor_override"] = 0 if div is None else div
        if x.ndim == 4:
            return Canonical({name: x}, attrs)
        batched = {name: reshape(op, name, x, (1, *x.shape))}

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(v.shape[1:]) for k, v in outs.items()}

        return Canonical(batched, attrs, finish)
