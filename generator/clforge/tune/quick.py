"""`clforge tune --quick`: a few minutes of tuning for a machine nobody tuned. The core ops
(matmul, gemm, conv2d, attention, softmax, the reductions, the norms, the common elementwise
ops), f32, in their first layouts, at a few representative shapes each; per job the default (the
parameters computed for this device), the spec defaults, the tuned set the chain gives the shape
now (:func:`~clforge.tune.tuner.incumbent`) and the NEAREST candidates closest to the
default; the best FINALISTS race the default, and a tuned set is written only where it beats it
(:data:`clforge.tune.tuner.MARGIN`). docs/tuning.md shows :func:`plan_rows` and
:func:`settings_line`, which a test compares with this plan."""

from __future__ import annotations

from clforge.references.base import Case

_M = 2**20
_TRAILING = (Case({"B": 4096, "R": 1024}),)
_LAST_AXIS = (Case({"B": 4096, "R": 4096, "I": 1}),)

#: op -> (what the shapes are, in words; the cases)
PLAN: dict[str, tuple[str, tuple[Case, ...]]] = {
    "matmul": (
        "64³, 256³, 1024³",
        tuple(
            Case({"BATCH": 1, "M": n, "N": n, "K": n, "BA": 1, "BB": 1}) for n in (64, 256, 1024)
        ),
    ),
    "gemm": ("1024³", (Case({"M": 1024, "N": 1024, "K": 1024}, {"bias": (1, 1)}),)),
    "conv2d": (
        "3×3 64→64 and 1×1 256→64 on 56², batch 1",
        (
            Case({"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "CG": 64, "R": 3, "S": 3}),
            Case({"N": 1, "C": 256, "H": 56, "W": 56, "K": 64, "CG": 256, "R": 1, "S": 1}),
        ),
    ),
    "attention": (
        "8 heads of 512 × 512, d 64, no mask",
        (
            Case(
                {"B": 1, "H": 8, "HK": 8, "SQ": 512, "SK": 512, "D": 64, "DV": 64},
                {"mask": (1, 1, 1, 1)},
            ),
        ),
    ),
    "softmax": ("4096 × 1024, last axis", (Case({"B": 4096, "R": 1024, "I": 1}),)),
    **dict.fromkeys(("sum", "mean", "max", "argmax"), ("4096 × 4096, last axis", _LAST_AXIS)),
    **dict.fromkeys(("layer_norm", "rms_norm"), ("4096 × 1024", _TRAILING)),
    "add": ("16M elements", (Case({"D0": 1, "D1": 1, "D2": 1, "D3": 16 * _M}),)),
    **{op: ("16M elements", (Case({"N": 16 * _M}),)) for op in ("relu", "exp", "silu")},
    "gelu": ("4M elements", (Case({"N": 4 * _M}),)),
}

DTYPES = ("f32",)
NEAREST = 2  # candidates nearest the default, besides it and the spec defaults
FINALISTS = 2  # the best of a job's candidates that race the default
REPEATS = 3  # timed repeats per candidate (a race runs 3x as many rounds)
BUDGET_S = 90.0  # seconds for the candidates; the races follow (the whole run: about 3 min)


def cases(ops: list[str]) -> dict[str, tuple[Case, ...]]:
    """The quick plan's shapes of `ops` (an op it does not list: none, so its default shapes)."""
    return {op: PLAN[op][1] for op in ops if op in PLAN}


def plan_rows() -> list[str]:
    """The plan as the rows of a Markdown table (op, shapes), for docs/tuning.md."""
    return [f"| {op} | {words} |" for op, (words, _) in PLAN.items()]


def settings_line() -> str:
    """The quick tune's budget and search, in one line of docs/tuning.md."""
    return (
        f"dtypes {', '.join(DTYPES)}; per job the default, the spec defaults, the tuned set "
        f"the chain gives the shape now (if any) and the {NEAREST} candidates nearest the "
        f"default; the best {FINALISTS} race the default; {REPEATS} repeats; "
        f"{BUDGET_S:.0f} s for the candidates"
    )
