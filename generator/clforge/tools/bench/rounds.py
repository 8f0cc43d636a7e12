"""The bench's rounds: every part of the throughput bench (clforge's side, each same-size copy,
each peer's process) runs once per round, one after another, and each figure is the median of
its rounds. On a shared machine a burst of load then slows one round of every side, not all of
one side's figures, so that ratios taken in one run keep their meaning."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from clforge.tools.bench.bandwidth import Bandwidth
from clforge.tools.bench.clforge_side import Figures
from clforge.tools.bench.peers import PeerRun
from clforge.tools.bench.protocol import Outcome


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def figures(rounds: Sequence[Figures]) -> Figures:
    """A case's clforge figures over its rounds: the chosen instance's median seconds; the
    generic's as measured (the first round only times it: it changes no ratio to a peer)."""
    seconds = _median([f.seconds for f in rounds])
    assert seconds is not None
    return dataclasses.replace(rounds[0], seconds=seconds)


def copy(rounds: Sequence[Bandwidth | None]) -> Bandwidth | None:
    """A case's same-size copy over its rounds: the median of each kind of store."""
    known = [b for b in rounds if b is not None]
    if not known:
        return None
    plain = _median([b.plain_gbps for b in known])
    streaming = _median([b.streaming_gbps for b in known])
    assert plain is not None and streaming is not None
    return dataclasses.replace(known[0], plain_gbps=plain, streaming_gbps=streaming)


def peer_run(rounds: Sequence[PeerRun]) -> PeerRun:
    """A peer's figures over its rounds: per case, the median of the rounds that gave one (the
    first round's note where none did); a peer missing in its first round is missing."""
    first = rounds[0]
    if not first.available:
        return first
    runs = [r for r in rounds if r.available]
    outcomes: list[Outcome] = []
    for i, out in enumerate(first.outcomes):
        seconds = _median([r.outcomes[i]["seconds"] for r in runs])
        merged: Outcome = {"seconds": seconds}
        note = next((r.outcomes[i]["note"] for r in runs if "note" in r.outcomes[i]), None)
        if note is not None:
            merged["note"] = note
        outcomes.append(merged if seconds is not None else out)
    return dataclasses.replace(first, outcomes=tuple(outcomes))
