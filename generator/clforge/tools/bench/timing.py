"""Timing shared by clforge's side of the bench and every peer's process: a warm-up (builds,
first allocations), then :func:`clforge.tune.measure.calibrated_time`; and a peer's outcome
for a request, whatever fails."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clforge.tools.bench.protocol import Hello, Outcome, Request, Timing, first_line, skipped
from clforge.tune.measure import calibrated_time


def seconds(fn: Callable[[], object], sync: Callable[[], object], timing: Timing) -> float:
    """Median seconds of one call: a warm-up, then calibrated repeats."""
    fn()
    sync()
    return calibrated_time(fn, sync, timing["repeats"], timing["target_s"])


def calls_per_timing(timing: Timing) -> int:
    """How many calls :func:`seconds` makes at least: the warm-up, the calibrating call,
    median_time's warm-up, then one per repeat."""
    return 3 + timing["repeats"]


@dataclass(frozen=True)
class Call:
    """A peer's prepared call of one case, and a note on how it does it (which op or graph)."""

    fn: Callable[[], object]
    note: str | None = None


Prepare = Callable[[Request], Sequence[Call] | Outcome]
# a peer's process: whether the peer is here, and how it times a request (None: it is not)
Served = tuple[Hello, Callable[[Request, Timing], Outcome] | None]


def outcome(
    req: Request,
    prepare: Prepare,
    timing: Timing,
    sync: Callable[[], object] = lambda: None,
) -> Outcome:
    """Time the request's prepared call, or each of its ways where a peer has several (the
    fastest counts, its note says which and `ways` has every way's seconds); a preparation or
    a call that fails gives a note, never an exception."""
    try:
        prepared = prepare(req)
        if isinstance(prepared, dict):
            return prepared
        ways: dict[str, float | None] = {}
        errors = []
        for i, call in enumerate(prepared):
            key = call.note or f"way {i + 1}"
            try:
                ways[key] = seconds(call.fn, sync, timing)
            except Exception as exc:  # one way failing leaves the others' figures
                ways[key] = None
                errors.append(f"{key}: {first_line(exc)}")
        timed = {k: v for k, v in ways.items() if v is not None}
        if not timed:
            return skipped("failed: " + "; ".join(errors) if errors else "nothing to time")
        best = min(timed, key=lambda k: timed[k])
        out: Outcome = {"seconds": timed[best]}
        if len(prepared) > 1:
            out["note"] = f"{best} (the fastest of: {', '.join(ways)})"
            out["ways"] = ways
        elif prepared[0].note:
            out["note"] = best
        return out
    except Exception as exc:  # a peer's failure is a note in the table, not a traceback
        return skipped(f"failed: {first_line(exc)}")
