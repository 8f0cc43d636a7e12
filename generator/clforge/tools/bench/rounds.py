"""The bench's rounds: every case is timed once per round by every side (clforge's, then each
peer's process; the next round the peers first, then clforge's: the order alternates), so that
the sides of a case are timed minutes apart at most and a drift of the host within a round
favours no side. Each figure is reported as the median of its rounds with its spread (the
lowest and highest round), each ratio as the median of the per-round ratios, with theirs."""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clforge.tools.bench.bandwidth import Bandwidth
from clforge.tools.bench.clforge_side import Figures
from clforge.tools.bench.protocol import Outcome


def clforge_first(round_index: int) -> bool:
    """Whether clforge's side times a case before the peers in this round (every other one)."""
    return round_index % 2 == 0


def order(rounds: int) -> list[str]:
    """Which side goes first in each round, for the report."""
    return ["clforge first" if clforge_first(k) else "peers first" for k in range(rounds)]


def interleave(
    rounds: int,
    cases: Sequence[str],
    ours: Callable[[int, int], object],
    theirs: Callable[[int, int], object],
    progress: Callable[[str], object] = lambda _: None,
) -> None:
    """Time every case (titled `cases`) in every round, both sides of a case back to back:
    `ours(round, case)` (clforge's side) and `theirs(round, case)` (every peer's process), in
    the order :func:`clforge_first` gives the round."""
    for k, first in enumerate(order(rounds)):
        for i, title in enumerate(cases):
            progress(f"round {k + 1}/{rounds} ({first}), case {i + 1}/{len(cases)}: {title}")
            sides = (ours, theirs) if clforge_first(k) else (theirs, ours)
            for side in sides:
                side(k, i)


@dataclass(frozen=True)
class Spread:
    """A figure over the rounds: its median, lowest and highest."""

    median: float
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float | None]) -> Spread | None:
        """The spread of the known values (None where no round gave one)."""
        known = [v for v in values if v is not None]
        if not known:
            return None
        return Spread(statistics.median(known), min(known), max(known))

    def crosses_one(self) -> bool:
        """For a ratio: whether its rounds put it on both sides of 1.0 (neither side won)."""
        return self.low < 1.0 < self.high


def ratios(ours: Sequence[float], theirs: Sequence[float | None]) -> list[float | None]:
    """Per round, our rate over theirs (None where they gave no figure that round)."""
    return [o / t if t else None for o, t in zip(ours, theirs, strict=True)]


def figures(rounds: Sequence[Figures]) -> Figures:
    """A case's clforge figures over its rounds: the chosen instance's median seconds; the
    generic's as measured (the first round only times it: it changes no ratio to a peer)."""
    seconds = Spread.of([f.seconds for f in rounds])
    assert seconds is not None
    return dataclasses.replace(rounds[0], seconds=seconds.median)


def copy(rounds: Sequence[Bandwidth | None]) -> Bandwidth | None:
    """A case's same-size copy over its rounds: the median of each kind of store."""
    known = [b for b in rounds if b is not None]
    if not known:
        return None
    plain = Spread.of([b.plain_gbps for b in known])
    streaming = Spread.of([b.streaming_gbps for b in known])
    assert plain is not None and streaming is not None
    return dataclasses.replace(known[0], plain_gbps=plain.median, streaming_gbps=streaming.median)


def note(rounds: Sequence[Outcome]) -> str | None:
    """A peer's note on a case over its rounds: the most frequent note of the rounds that gave a
    figure (which way was fastest may change from round to round), else the first round's
    (why there is no figure)."""
    timed = [o["note"] for o in rounds if o["seconds"] is not None and "note" in o]
    if timed:
        return Counter(timed).most_common(1)[0][0]
    return rounds[0].get("note") if rounds else None
