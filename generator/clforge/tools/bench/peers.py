"""The peers a user would pick instead of clforge, each timed in a process of its own (see
:mod:`clforge.tools.bench.worker`), and what to say when one is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import clforge
from clforge.tools.bench.protocol import Answer, Outcome, Request, Timing, skipped

WORKER = "clforge.tools.bench.worker"


@dataclass(frozen=True)
class Peer:
    key: str  # the worker's name for it, and its key in the JSON
    title: str  # its column in the table
    install: str  # how to get it, for the line that says it is missing
    ops: frozenset[str] | None = None  # the ops it is asked about (None: every op)

    def applies(self, op: str) -> bool:
        return self.ops is None or op in self.ops


PEERS: tuple[Peer, ...] = (
    Peer("numpy", "NumPy", "a dependency of clforge"),
    Peer("onnxruntime", "ORT", "pip install onnxruntime onnx"),
    Peer(
        "clblast",
        "CLBlast",
        "pip install pyclblast; needs libclblast-dev",
        frozenset({"matmul", "gemm"}),
    ),
)

NOT_ASKED = "n/a"  # the note of a case a peer is not asked about (CLBlast: matmul and gemm only)


@dataclass(frozen=True)
class PeerRun:
    """A peer's figures: one outcome per case (all None where the peer is missing)."""

    peer: Peer
    available: bool
    version: str | None
    reason: str | None  # why it is missing
    outcomes: tuple[Outcome, ...]

    def status(self) -> str:
        """One line: the peer's version, or why it is missing and how to get it."""
        if self.available:
            return f"{self.peer.title}: {self.version or 'not asked (no case it applies to)'}"
        hint = f" ({self.peer.install})" if self.reason == "not installed" else ""
        return f"{self.peer.title}: {self.reason}{hint}"


def _env() -> dict[str, str]:
    """The worker imports this generator package, wherever the bench was started."""
    root = str(Path(clforge.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _ask(peer: Peer, requests: list[Request], timing: Timing, timeout_s: float) -> Answer:
    job = json.dumps({"requests": requests, "timing": timing})
    try:
        proc = subprocess.run(
            [sys.executable, "-m", WORKER, peer.key],
            input=job,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_env(),
        )
    except subprocess.TimeoutExpired:
        return {"available": False, "reason": f"timed out after {timeout_s:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        err = proc.stderr.strip().splitlines()
        last = err[-1][:200] if err else f"exit status {proc.returncode}"
        return {"available": False, "reason": f"its process failed: {last}"}
    answer: Answer = json.loads(lines[-1])
    return answer


def run_peer(peer: Peer, requests: list[Request], timing: Timing, timeout_s: float) -> PeerRun:
    """The peer's outcome for every request: those it is not asked about are n/a, and all
    that it is asked about are "missing" when the peer is."""
    asked = [i for i, r in enumerate(requests) if peer.applies(r["op"])]
    answer = _ask(peer, [requests[i] for i in asked], timing, timeout_s) if asked else None
    available = answer is None or answer["available"]
    got = dict(zip(asked, answer.get("outcomes", []), strict=True)) if answer and available else {}
    return PeerRun(
        peer,
        available,
        answer.get("version") if answer else None,
        None if available or answer is None else answer.get("reason"),
        tuple(
            got.get(i, skipped("missing" if i in asked else NOT_ASKED))
            for i in range(len(requests))
        ),
    )
