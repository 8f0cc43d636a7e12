"""The GPU check kit's explain step: the dispatcher's choice for every op and dtype on one device.

Run by `tools/gpu-check run`; it uses nothing of clforge but its command line (`python -m
clforge explain ... --json`, with the interpreter given, which imports clforge from wherever it is
installed) and the spec files' documented top-level keys in the checkout (`--root`: `op`, `dims`,
`dtypes`, `call`; an op of a family takes the ones it does not write from
`specs/families/<family>.yaml`), so it keeps working while clforge's modules move. The calls run
in the current folder, which the kit keeps outside the checkout: clforge's command line takes the
tree whose clforge.yaml is in the working folder or above it for the one to act on, and refuses
the checkout's as a second tree named clforge when clforge is installed from its wheel.
Each call gets representative sizes chosen by the op's calling convention (the sizes of the
benchmarks' cases, docs/benchmarks.md); an op of a convention this file does not know is
explained with symbolic dims.

Writes one JSON file (every call: its command, exit status and `explain --json` output) and one
text file (a line per call: op, dtype, dims, the chosen instance and why). Exit status 0 when
every call chose an instance, 1 when any call failed or chose none, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

# Representative sizes by calling convention (`call:` in a spec); dims an op lacks are dropped.
SIZES: dict[str, dict[str, int]] = {
    "flat": {"N": 16_777_216},
    "broadcast": {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096},
    "axis": {"B": 4096, "R": 1024, "I": 1},
    "trailing": {"B": 4096, "R": 1024},
    "matmul": {"BATCH": 1, "M": 1024, "N": 1024, "K": 1024, "BA": 1, "BB": 1},
    "gemm": {"M": 1024, "N": 1024, "K": 1024},
    "permute": {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096, "E0": 1, "E1": 1, "E2": 4096, "E3": 4096},
    "conv2d": {
        "N": 1,
        "C": 64,
        "H": 56,
        "W": 56,
        "K": 64,
        "CG": 64,
        "R": 3,
        "S": 3,
        "OH": 54,
        "OW": 54,
    },
    "attention": {"B": 1, "H": 8, "HK": 8, "SQ": 512, "SK": 512, "D": 64, "DV": 64},
    "channels": {"N": 32, "C": 64, "S": 3136},
    "pool2d": {"N": 32, "C": 64, "H": 56, "W": 56, "OH": 28, "OW": 28},
    "along_axis": {"B": 4096, "R": 1024, "I": 1, "J": 16},
    "embedding": {"M": 4096, "V": 32000, "D": 1024},
    "concat": {"B": 1, "RA": 2048, "RB": 2048, "I": 4096},
}


def load_ops(specs: Path, only: set[str] | None) -> list[dict[str, Any]]:
    """Each spec's op, dims, dtypes and convention, sorted by op name."""
    ops = []
    for path in sorted(specs.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "op" not in data:
            continue
        family = data.get("family")
        if isinstance(family, str):  # an op of a family: the family's keys, then its own
            base = yaml.safe_load((specs / "families" / f"{family}.yaml").read_text("utf-8"))
            data = {**(base if isinstance(base, dict) else {}), **data}
        if only is not None and data["op"] not in only:
            continue
        ops.append(
            {
                "op": str(data["op"]),
                "dims": [str(d) for d in data.get("dims") or []],
                "dtypes": [str(t) for t in data.get("dtypes") or []],
                "call": str(data.get("call") or ""),
            }
        )
    return sorted(ops, key=lambda o: o["op"])


def calls_for(op: dict[str, Any]) -> list[tuple[str, str, dict[str, int]]]:
    sizes = SIZES.get(op["call"], {})
    dims = {d: sizes[d] for d in op["dims"] if d in sizes}
    return [(op["op"], dtype, dims) for dtype in op["dtypes"] or [""]]


def explain(
    python: str, device: str, op: str, dtype: str, dims: dict[str, int], timeout: float
) -> dict[str, Any]:
    cmd = [python, "-m", "clforge", "explain", op, "--device", device, "--json"]
    if dtype:
        cmd += ["--dtype", dtype]
    if dims:
        cmd += ["--dims", ",".join(f"{k}={v}" for k, v in dims.items())]
    entry: dict[str, Any] = {"op": op, "dtype": dtype, "dims": dims, "command": cmd[1:]}
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        entry.update(exit=None, error=f"timed out after {timeout:.0f} s")
        return entry
    entry["seconds"] = round(time.monotonic() - start, 2)
    entry["exit"] = done.returncode
    try:
        entry["selection"] = json.loads(done.stdout)
    except json.JSONDecodeError:
        entry["error"] = (done.stderr.strip() or done.stdout.strip() or "no output")[-2000:]
    return entry


def line(entry: dict[str, Any]) -> str:
    dims = ",".join(f"{k}={v}" for k, v in entry["dims"].items()) or "-"
    sel = entry.get("selection")
    if not sel:
        return f"{entry['op']:12} {entry['dtype']:4} {dims:44} ERROR {entry.get('error', '')}"
    chosen = sel.get("chosen") or "NONE"
    reason = next(
        (c.get("reason", "") for c in sel.get("candidates", []) if c.get("verdict") == "chosen"),
        "",
    )
    return f"{entry['op']:12} {entry['dtype']:4} {dims:44} {chosen}  ({reason})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs clforge")
    p.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose specs/ name the ops (default: this file's)",
    )
    p.add_argument("--device", default="auto", help="explain's --device (default: auto)")
    p.add_argument("--ops", default="", help="comma-separated ops (default: every spec's op)")
    p.add_argument("--jobs", type=int, default=4, help="calls at a time")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    p.add_argument("--json-out", type=Path, required=True)
    p.add_argument("--text-out", type=Path, required=True)
    args = p.parse_args(argv)

    only = {o.strip() for o in args.ops.split(",") if o.strip()} or None
    ops = load_ops(args.root / "specs", only)
    if only is not None and (missing := only - {o["op"] for o in ops}):
        print(f"gpu_check_explain: no spec for {', '.join(sorted(missing))}", file=sys.stderr)
        return 2
    calls = [c for op in ops for c in calls_for(op)]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        entries = list(
            pool.map(
                lambda c: explain(args.python, args.device, c[0], c[1], c[2], args.timeout),
                calls,
            )
        )
    device = next((e["selection"]["device"] for e in entries if e.get("selection")), None)
    bad = [e for e in entries if not (e.get("selection") or {}).get("chosen")]
    args.json_out.write_text(
        json.dumps({"device": device, "calls": entries, "without_choice": len(bad)}, indent=1)
        + "\n",
        encoding="utf-8",
    )
    text = [
        f"explain on {device or 'an unknown device'}: {len(entries)} calls, "
        f"{len(bad)} without a choice",
        "",
    ]
    text += [line(e) for e in entries]
    args.text_out.write_text("\n".join(text) + "\n", encoding="utf-8")
    print(f"{len(entries)} calls, {len(bad)} without a choice")
    return 1 if bad or not entries else 0


if __name__ == "__main__":
    sys.exit(main())
