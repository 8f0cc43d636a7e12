"""The peers a user would pick instead of clforge, each timed in a process of its own that lives
for the run (:class:`PeerProcess`, :mod:`clforge.tools.bench.worker`), and what to say when one
is missing."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import clforge
from clforge.tools.bench.protocol import Hello, Job, Outcome, Request, Timing, skipped

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
    """A peer's figures: per case, one outcome per round (all None where the peer is missing)."""

    peer: Peer
    available: bool
    version: str | None
    reason: str | None  # why it is missing
    outcomes: tuple[tuple[Outcome, ...], ...]

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


def _parsed(line: str) -> Any:
    """A protocol line's JSON object, or None if it is none."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class PeerProcess:
    """A peer's process (:mod:`clforge.tools.bench.worker`), started when first asked and kept
    for the run, so that the bench asks it case by case between clforge's timings of the same
    case; a process that dies or times out is started afresh for the next case."""

    def __init__(self, peer: Peer, timeout_s: float) -> None:
        self.peer = peer
        self.timeout_s = timeout_s
        self.hello: Hello | None = None  # None: never asked
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None

    def ask(self, req: Request, timing: Timing) -> Outcome:
        """The peer's outcome for one case: n/a for a case it is not asked about, "missing"
        when the peer is, a note when its process failed on this case."""
        if not self.peer.applies(req["op"]):
            return skipped(NOT_ASKED)
        if self._proc is None and (self.hello is None or self.hello["available"]):
            self._start()
        if self._proc is None or self.hello is None or not self.hello["available"]:
            return skipped("missing")
        job: Job = {"request": req, "timing": timing}
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(job) + "\n")
            self._proc.stdin.flush()
        except OSError:
            return skipped(f"failed: {self._failed('its process ended')}")
        line = self._line()
        if line is None:
            ended = self._proc.poll()
            why = f"no answer in {self.timeout_s:.0f} s" if ended is None else "its process ended"
            return skipped(f"failed: {self._failed(why)}")
        answer: Outcome | None = _parsed(line)
        return answer or skipped(f"failed: {self._failed('it answered ' + repr(line[:80]))}")

    def _start(self) -> None:
        if self._stderr is not None:
            self._stderr.close()  # the previous process's
        # kept for the life of the process, read back when it fails
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [sys.executable, "-m", WORKER, self.peer.key],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=_env(),
        )
        line = self._line()
        hello: Hello | None = None if line is None else _parsed(line)
        if hello is None:
            self.hello = {"available": False, "reason": self._failed("its process failed")}
            return
        self.hello = hello
        if not hello["available"]:
            self.close()

    def _line(self) -> str | None:
        """The process's next line, or None if it ends or says nothing within the timeout."""
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout_s)
        line = self._proc.stdout.readline() if ready else ""
        return line if line.strip() else None

    def _failed(self, what: str) -> str:
        """Ends the process; `what` and the last line it wrote on stderr."""
        err = ""
        self.close(kill=True)
        if self._stderr is not None:
            self._stderr.seek(0)
            lines = self._stderr.read().strip().splitlines()
            err = f": {lines[-1][:200]}" if lines else ""
        return what + err

    def close(self, kill: bool = False) -> None:
        """Ends the process: its stdin closed, which ends its loop (killed if `kill`, or if it
        has not ended 10 s later)."""
        if self._proc is None:
            return
        if kill:
            self._proc.kill()
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass  # the pipe is already broken: the process is gone
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def run(self, outcomes: Sequence[Sequence[Outcome]]) -> PeerRun:
        """The peer's figures: `outcomes` per case, per round, as :meth:`ask` gave them."""
        hello = self.hello or {"available": True}  # never asked: no case it applies to
        available = hello["available"]
        return PeerRun(
            self.peer,
            available,
            hello.get("version"),
            None if available else hello.get("reason"),
            tuple(tuple(rounds) for rounds in outcomes),
        )
