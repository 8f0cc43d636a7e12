"""The bench cases: an op, a dtype, the sizes of its dims (full and `--quick`), attributes, the
work of one call (bytes moved or flops) and its unit, a short label, and the call a peer's user
writes for it (:class:`~clforge.tools.bench.natural.Natural`: the shapes and axis of the label,
not clforge's canonical shapes with their size-1 axes)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from clforge import references
from clforge.core.dtypes import DTYPES
from clforge.core.manifest import BUILTIN_NAME
from clforge.errors import UsageError
from clforge.registry.loader import Registry
from clforge.registry.records import OpSig
from clforge.tools.bench.natural import Natural

Sizes = Mapping[str, int]


@dataclass(frozen=True)
class Case:
    op: str
    sizes: Sizes
    quick: Sizes  # the sizes of `--quick`: tiny, so that a run takes seconds
    work: Callable[[Sizes, int], float]  # bytes or flops of one call, given the element size
    unit: str  # GB/s (memory-bound: bytes moved) or GFLOP/s
    label: str  # a format string over the sizes, e.g. "matmul {M}"
    dtype: str = "f32"
    attrs: Mapping[str, float | int] = field(default_factory=dict)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # broadcast inputs
    # memory layouts other than row-major, by tensor (conv2d's x: "nhwc"); an output follows
    # its op's convention (conv2d's y follows x); the peers get the row-major equivalent
    layouts: Mapping[str, str] = field(default_factory=dict)
    natural: Natural = field(default_factory=Natural)  # the peers' call (default: canonical)
    # whether `work` is what one call does, so that its rate can be set against the device's
    # ceiling (False: causal attention, whose flops count the full product it skips half of)
    bounded: bool = True

    def at(self, quick: bool) -> Case:
        """This case with its quick sizes (the same case when not quick)."""
        return dataclasses.replace(self, sizes=self.quick) if quick else self

    @property
    def title(self) -> str:
        text = self.label.format(**self.sizes)
        return text if self.dtype == "f32" else f"{text} {self.dtype}"

    @property
    def memory_bound(self) -> bool:
        return self.unit == "GB/s"

    def amount(self) -> float:
        """The work of one call in the unit's numerator (GB or GFLOP)."""
        return self.work(self.sizes, DTYPES[self.dtype].np_dtype.itemsize) / 1e9


def _bytes(n_arrays: int) -> Callable[[Sizes, int], float]:
    """Memory-bound ops: `n_arrays` full-size arrays read or written once."""
    return lambda s, itemsize: n_arrays * float(itemsize) * math.prod(s.values())


def _mnk(s: Sizes, _: int) -> float:
    return 2.0 * s["M"] * s["N"] * s["K"]


def _conv_flops(s: Sizes, _: int) -> float:
    return 2.0 * s["N"] * s["K"] * s["OH"] * s["OW"] * s["CG"] * s["R"] * s["S"]


def _attention_flops(s: Sizes, _: int) -> float:
    return 2.0 * s["B"] * s["H"] * s["SQ"] * s["SK"] * (s["D"] + s["DV"])


def _unary(op: str, n: int = 16 * 2**20, label: str | None = None, **attrs: int) -> Case:
    text = (label or op) + " {N}"
    return Case(op, {"N": n}, {"N": 4096}, _bytes(2), "GB/s", text, attrs=attrs)


def _binary(op: str, rows: int, cols: int) -> Case:
    """A same-shape binary op: a vector of `cols` (rows == 1) or a rows x cols matrix."""
    dims = ("D3",) if rows == 1 else ("D2", "D3")
    label = f"{op} " + "x".join(f"{{{d}}}" for d in dims)
    full = {"D0": 1, "D1": 1, "D2": rows, "D3": cols}
    quick = {"D0": 1, "D1": 1, "D2": 1 if rows == 1 else 16, "D3": 256}
    natural = Natural({"a": dims, "b": dims})
    return Case(op, full, quick, _bytes(3), "GB/s", label, natural=natural)


def _reduce(op: str, b: int, r: int, i: int = 1, arrays: int = 1) -> Case:
    """An op over the middle axis of clforge's [B, R, I]: for its peers the last axis of a
    B x R matrix when I == 1, else axis 1 of the B x R x I tensor."""
    last = i == 1
    label = f"{op} " + ("{B}x{R}" if last else "{B}x{R}x{I} (middle axis)")
    quick = {"B": 16, "R": 256, "I": 1 if last else 4}
    natural = Natural({"x": ("B", "R")}, -1) if last else Natural({"x": ("B", "R", "I")}, 1)
    sizes = {"B": b, "R": r, "I": i}
    return Case(op, sizes, quick, _bytes(arrays), "GB/s", label, natural=natural)


def _norm(op: str) -> Case:
    sizes, quick = {"B": 4096, "R": 1024}, {"B": 16, "R": 256}
    return Case(op, sizes, quick, _bytes(2), "GB/s", op + " {B}x{R}", natural=Natural(axis=-1))


def _matmul(n: int, dtype: str = "f32") -> Case:
    """One [M, K] @ [K, N] (clforge's batch dims of 1 are no part of a peer's call)."""
    sizes = {"BATCH": 1, "M": n, "N": n, "K": n, "BA": 1, "BB": 1}
    quick = {**sizes, "M": 32, "N": 32, "K": 32}
    natural = Natural({"a": ("M", "K"), "b": ("K", "N")})
    return Case("matmul", sizes, quick, _mnk, "GFLOP/s", "matmul {M}", dtype, natural=natural)


def _conv_dims(c: int, hw: int, k: int, r: int, groups: int, stride: int, pad: int) -> Sizes:
    out = (hw + 2 * pad - r) // stride + 1
    dims = {"N": 1, "C": c, "H": hw, "W": hw, "K": k, "CG": c // groups, "R": r, "S": r}
    return {**dims, "OH": out, "OW": out}


def _conv(
    label: str,
    c: int,
    k: int,
    r: int = 3,
    *,
    groups: int = 1,
    stride: int = 1,
    pad: int = 0,
    quick: tuple[int, int] = (8, 8),
    layout: str = "row",
) -> Case:
    """A batch-1 f32 conv2d layer on 56 x 56 images, square filters (ResNet/MobileNet-like);
    `quick`: C and K at --quick (on 10 x 10 images), multiples of `groups`; `layout`: x's
    (y follows it)."""
    attrs = {"stride_h": stride, "stride_w": stride} if stride != 1 else {}
    attrs |= {"pad_h": pad, "pad_w": pad} if pad else {}
    attrs |= {"groups": groups} if groups != 1 else {}
    return Case(
        "conv2d",
        _conv_dims(c, 56, k, r, groups, stride, pad),
        _conv_dims(quick[0], 10, quick[1], r, groups, stride, pad),
        _conv_flops,
        "GFLOP/s",
        label,
        attrs=attrs,
        layouts={"x": layout} if layout != "row" else {},
    )


_ATTENTION = {"B": 1, "H": 8, "HK": 8, "SQ": 512, "SK": 512, "D": 64, "DV": 64}
_ATTENTION_QUICK = {"B": 1, "H": 2, "HK": 2, "SQ": 32, "SK": 32, "D": 16, "DV": 16}
_NO_MASK = {"mask": (1, 1, 1, 1)}  # what an eager call without a mask passes

CASES: tuple[Case, ...] = (
    _binary("add", 1, 16 * 2**20),
    _binary("mul", 4096, 4096),
    _binary("maximum", 1, 16 * 2**20),
    _unary("relu"),
    _unary("exp"),
    _unary("sigmoid"),
    _unary("tanh"),
    _unary("silu"),
    _unary("gelu", 4 * 2**20),
    _unary("gelu", 4 * 2**20, "gelu (tanh form)", approximate=1),
    _reduce("sum", 4096, 4096),
    _reduce("sum", 64, 4096, 64),
    _reduce("mean", 4096, 4096),
    _reduce("mean", 64, 4096, 64),
    _reduce("max", 4096, 4096),
    _reduce("max", 64, 4096, 64),
    _reduce("argmax", 4096, 4096),
    _reduce("argmax", 64, 4096, 64),
    _reduce("softmax", 4096, 1024, arrays=2),
    _reduce("softmax", 64, 1024, 64, arrays=2),
    _reduce("log_softmax", 4096, 1024, arrays=2),
    _reduce("log_softmax", 64, 1024, 64, arrays=2),
    _norm("layer_norm"),
    _norm("rms_norm"),
    Case(
        "permute",
        {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096},
        {"D0": 1, "D1": 1, "D2": 64, "D3": 64},
        _bytes(2),
        "GB/s",
        "transpose {D2}x{D3}",
        attrs={"p0": 0, "p1": 1, "p2": 3, "p3": 2},
        natural=Natural({"x": ("D2", "D3")}, perm=(1, 0)),
    ),
    *(_matmul(n) for n in (64, 128, 256, 512, 1000, 1024, 2048)),
    _matmul(1024, "f64"),
    Case(
        "gemm",
        {"M": 1024, "N": 1024, "K": 1024},
        {"M": 32, "N": 32, "K": 32},
        _mnk,
        "GFLOP/s",
        "gemm {M}",
    ),
    _conv("conv2d 3x3 {C}x{H}x{W}->{K}", 64, 64),
    _conv("conv2d 1x1 {C}x{H}x{W}->{K}", 256, 64, 1, quick=(16, 8)),
    _conv("conv2d 3x3/2 {C}x{H}x{W}->{K}x{OH}x{OW}", 128, 128, stride=2, pad=1),
    _conv("conv2d 3x3 NHWC {C}x{H}x{W}->{K}", 64, 64, layout="nhwc"),
    _conv("conv2d 3x3 g32 {C}x{H}x{W}->{K}", 128, 128, groups=32, pad=1, quick=(64, 64)),
    _conv("conv2d 3x3 depthwise {C}x{H}x{W}", 128, 128, groups=128, pad=1, quick=(128, 128)),
    *(
        Case(
            "attention",
            _ATTENTION,
            _ATTENTION_QUICK,
            _attention_flops,  # causal: counted as the full product, so compare ratios
            "GFLOP/s",
            "attention {H}h {SQ}x{SK} d{D}" + (" causal" if causal else ""),
            attrs={"causal": causal},
            shapes=_NO_MASK,
            bounded=not causal,
        )
        for causal in (0, 1)
    ),
)


def selected(quick: bool, ops: Collection[str] | None = None) -> list[Case]:
    """The cases of a run (of `ops`, if given): every case, or each distinct one at its quick
    sizes (the matmul sweep collapses to one case per dtype; cases that differ in attributes
    stay apart)."""
    out: list[Case] = []
    seen: set[tuple[str, str, str, str]] = set()
    for case in CASES:
        if ops is not None and case.op not in ops:
            continue
        c = case.at(quick)
        key = (
            c.op,
            c.dtype,
            repr(sorted(c.sizes.items())),
            repr(sorted(c.attrs.items())) + repr(sorted(c.layouts.items())),
        )
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


GROWN_ELEMENTS = 1 << 22  # an extension op's bench size: its largest case, grown to this


def extension_cases(reg: Registry) -> list[Case]:
    """A case per op of the registered extensions (the shipped ops have theirs above): the
    largest of its reference's cases, dims doubled until a tensor has GROWN_ELEMENTS elements
    (quick: the smallest non-empty case); memory-bound, every tensor moved once, compared with
    its NumPy reference in the NumPy peer's process."""
    out = []
    for name, op in sorted(reg.ops.items()):
        home = reg.home(name)
        if home is None or home.name == BUILTIN_NAME or not op.reference:
            continue
        case = _extension_case(op, home.name, references.reference_of(op, reg.roots()))
        if case is not None:
            out.append(case)
    return out


def _extension_case(op: OpSig, tree: str, ref: references.Reference) -> Case | None:
    plain = [c for c in references.cases_of(ref, op.dims) if not c.shapes and all(c.dims.values())]
    if not plain:
        return None

    def largest(dims: Sizes) -> int:
        return max(math.prod(dims.get(d, 1) for d in t.shape) for t in op.inputs)

    full = dict(max(plain, key=lambda c: largest(c.dims)).dims)
    while largest(full) < GROWN_ELEMENTS:
        full = {d: 2 * n for d, n in full.items()}
    tensors = [t.shape for t in op.inputs + op.outputs]

    def moved(s: Sizes, itemsize: int) -> float:
        return float(itemsize) * sum(math.prod(s.get(d, 1) for d in shape) for shape in tensors)

    label = f"{op.name} [{tree}] " + "x".join(f"{{{d}}}" for d in op.dims)
    dtype = "f32" if "f32" in op.dtypes else op.dtypes[0]
    quick = min(plain, key=lambda c: largest(c.dims))
    return Case(op.name, full, dict(quick.dims), moved, "GB/s", label, dtype, dict(quick.attrs))


def run_cases(reg: Registry, quick: bool, ops: Collection[str] | None = None) -> list[Case]:
    """The cases of a run: the shipped ops' (:func:`selected`) and one per extension op, of
    `ops` only if given; an op without a case is a usage error."""
    extension = [c.at(quick) for c in extension_cases(reg)]
    known = sorted({c.op for c in CASES} | {c.op for c in extension})
    unknown = sorted(set(ops or ()) - set(known))
    if unknown:
        raise UsageError(f"no bench case for {', '.join(unknown)} (cases: {', '.join(known)})")
    return selected(quick, ops) + [c for c in extension if ops is None or c.op in ops]
