"""A peer's process: `python -m clforge.tools.bench.worker PEER` reads {"requests": [...],
"timing": {...}} as JSON on stdin and prints the peer's answer as one JSON line on stdout.

Each peer runs in a process of its own: PoCL's worker threads, once started, compete with
OpenBLAS's and ORT's for the cores and would make them look several times slower than they are.
"""

from __future__ import annotations

import importlib
import json
import sys

MODULES = {
    "numpy": "clforge.tools.bench.peer_numpy",
    "onnxruntime": "clforge.tools.bench.peer_ort",
    "clblast": "clforge.tools.bench.peer_clblast",
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MODULES:
        print(f"usage: python -m clforge.tools.bench.worker {{{','.join(MODULES)}}}")
        return 2
    job = json.load(sys.stdin)
    peer = importlib.import_module(MODULES[argv[0]])
    answer = peer.answer(job["requests"], job["timing"])
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
