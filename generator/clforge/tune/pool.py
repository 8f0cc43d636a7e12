"""The tuner's link to its measuring process (:mod:`clforge.tune.worker`): one request at a
time, each with a deadline. A worker that dies (a driver crash) or overruns (a hang) is
killed and restarted; the candidate is recorded as failed, and the run goes on.

A measuring process also serves at most :data:`RECYCLE` requests before a fresh one takes over,
and each race gets a fresh one (:meth:`WorkerPool.recycle`): PoCL 3.0 processes that had built
and run a few hundred candidates of the packed matmul routine ran every packed candidate
7-8x slower from then on (the default of matmul 64 at 26 us in a fresh process, 195-250 us
there, in three tuning runs: a 2-core Sapphire Rapids, 2026-12-05), while the blocked variant,
timed in the same process, kept its speed; the cause was not found."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from clforge.errors import ClforgeError

RECYCLE = 100  # requests a measuring process serves before a fresh one takes over


class WorkerPool:
    def __init__(self, root: Path, timeout_s: float = 120.0, recycle: int = RECYCLE) -> None:
        self.root = root
        self.timeout_s = timeout_s
        self.recycle_every = recycle
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.restarts = 0  # processes lost to a crash or a hang
        self.served = 0  # requests the present process has served
        self.started = 0  # processes started

    def _start(self) -> None:
        env = {**os.environ, "CLFORGE_TREE": str(self.root), "CLFORGE_TUNER_PID": str(os.getpid())}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clforge.tune.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines = queue.Queue()
        self.served = 0
        self.started += 1
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        ready = self._next(self.timeout_s)
        if ready is None or not json.loads(ready).get("ready"):
            code = self.proc.poll()
            self.close()
            raise ClforgeError(f"the tuner's measuring process did not start (exit code {code})")

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # EOF: the process ended

    def _next(self, timeout: float) -> str | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def recycle(self) -> None:
        """End the measuring process; the next request starts a fresh one."""
        self.close()

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.served >= self.recycle_every:
            self.recycle()
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.served += 1
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # read below finds the EOF
        line = self._next(self.timeout_s)
        if line is not None:
            return json.loads(line)
        timed_out = self.proc.poll() is None
        code = self.proc.poll()
        self.close()
        self.restarts += 1
        if timed_out:
            return {"ok": False, "problem": f"timed out after {self.timeout_s:.0f} s"}
        return {"ok": False, "problem": f"the measuring process died (exit code {code})"}

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
