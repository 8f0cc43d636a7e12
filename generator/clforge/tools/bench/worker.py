"""A peer's process: `python -m clforge.tools.bench.worker PEER` prints the peer's
:class:`~clforge.tools.bench.protocol.Hello` as one JSON line, then reads a
:class:`~clforge.tools.bench.protocol.Job` per line on stdin and prints its outcome as one JSON
line, until stdin closes. The process lives for the whole bench, so that the bench can ask it
case by case, between clforge's timings of the same case.

Each peer runs in a process of its own: PoCL's worker threads, once started, compete with
OpenBLAS's and ORT's for the cores and would make them look several times slower than they are.
Whatever a library prints goes to stderr; stdout carries the protocol's lines only.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import TextIO

MODULES = {
    "numpy": "clforge.tools.bench.peer_numpy",
    "onnxruntime": "clforge.tools.bench.peer_ort",
    "clblast": "clforge.tools.bench.peer_clblast",
}


def _protocol_out() -> TextIO:
    """The process's stdout for the protocol alone: file descriptor 1 goes to stderr, so that a
    library's prints (C or Python) cannot corrupt a line."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MODULES:
        print(
            f"usage: python -m clforge.tools.bench.worker {{{','.join(MODULES)}}}", file=sys.stderr
        )
        return 2
    out = _protocol_out()

    def send(message: object) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    hello, answer = importlib.import_module(MODULES[argv[0]]).serve()
    send(hello)
    if answer is None:
        return 0
    for line in sys.stdin:
        job = json.loads(line)
        if "model" in job["request"]:  # a model case (.models): the whole model, one call
            from clforge.tools.bench.model_sides import answer as model_answer

            send(model_answer(argv[0], job["request"], job["timing"]))
        else:
            send(answer(job["request"], job["timing"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
