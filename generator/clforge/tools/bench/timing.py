"""Timing shared by clforge's side of the bench and every peer's process: a warm-up (builds,
first allocations), then :func:`clforge.tune.measure.calibrated_time`; and one outcome per
request in a peer, whatever fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clforge.tools.bench.protocol import Outcome, Request, Timing, first_line, skipped
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
    """A peer's prepared call of one case, and a note on how it does it where that matters."""

    fn: Callable[[], object]
    note: str | None = None


def outcomes(
    requests: list[Request],
    prepare: Callable[[Request], Call | Outcome],
    timing: Timing,
    sync: Callable[[], object] = lambda: None,
) -> list[Outcome]:
    """Time each request's prepared call; one whose preparation or call fails gets a note and
    the others go on."""
    out: list[Outcome] = []
    for req in requests:
        try:
            prepared = prepare(req)
            if not isinstance(prepared, Call):
                out.append(prepared)
                continue
            outcome: Outcome = {"seconds": seconds(prepared.fn, sync, timing)}
            if prepared.note:
                outcome["note"] = prepared.note
            out.append(outcome)
        except Exception as exc:  # a peer's failure is a note in the table, not a traceback
            out.append(skipped(f"failed: {first_line(exc)}"))
    return out
