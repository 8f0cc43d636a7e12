"""How long a process's first parameter lookup takes with many device tuning files (issue 32,
point 8): a benchmark, not a timed test.

It writes N synthetic device files (default 100), each the size of today's shipped ones (their
entries, under another device block), in a temporary folder: a few for devices the chain can use
on the device profiled (same vendor, type and vector ISA; `--usable`, default 3), the rest for
other devices (GPUs of three vendors, CPUs of other vector ISAs). Then, each in a fresh process
(as a program's first eager call), it times what that call's lookup costs: reading the folder
(load_folders), ranking the files for the device (ParamLookup) and choosing one instance's
parameters. Cold: the cache's index of parsed files is empty (the first process after the
files changed: every file parsed with libyaml); warm: every later process.

    .venv/bin/python tools/bench_tuning_lookup.py [--files 100] [--usable 3] [--runs 5]

Without an OpenCL device it uses the shipped profile profiles/pocl-cpu.yaml.

Measured on a 2-core Xeon (PoCL, AVX-512), median of 5, CPU time, warm index: 3 usable files
24.7 ms, 10 usable 31.7 ms, all 100 usable (no chain ranks that many: same vendor, type and
vector ISA) 297 ms, most of it the lookup's own indexes of every entry. Cold index (the first
process after the files appeared): 3 usable ~0.2 s, 10 usable ~0.7 s (each usable file parsed
whole, ~60 ms with libyaml; the others only read, hashed and their heads parsed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

# the devices the other files are for: (vendor, device_type, arch, float width, ISA fields)
OTHERS = [
    ("NVIDIA Corporation", "gpu", "sm_90", 1, {}),
    ("Advanced Micro Devices, Inc.", "gpu", "gfx90a", 1, {}),
    ("Intel(R) Corporation", "gpu", "", 1, {}),
    ("pocl", "cpu", "znver3", 8, {"vector_isa": "avx2", "vector_bits": 256}),
    ("pocl", "cpu", "cortex-a78", 4, {"vector_isa": "neon", "vector_bits": 128}),
]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
from pathlib import Path
from clforge.params.database import load_folders
from clforge.params.lookup import ParamLookup
from clforge.registry.loader import default
from bench_profile import profile
reg = default()
inst = reg.instance("matmul__cpu_packed__f32__a_row__b_row")
me = profile()  # the device's properties: read once a process, whatever the files
t1 = time.perf_counter(); c1 = time.process_time()
files = load_folders([Path(sys.argv[1])])
lookup = ParamLookup(me, files)
choice = lookup.choose(inst, {"M": 1024, "N": 1024, "K": 1024, "BATCH": 1, "BA": 1, "BB": 1})
t2 = time.perf_counter(); c2 = time.process_time()
print(json.dumps({"wall_ms": 1000 * (t2 - t1), "cpu_ms": 1000 * (c2 - c1),
                  "files": len(files), "usable": len(lookup._ranked), "origin": choice.origin}))
"""

PROFILE = r"""
from pathlib import Path

def profile():
    try:
        from clforge.device.discovery import default_device
        from clforge.device.query import from_device
        return from_device(default_device())
    except Exception:
        from clforge.device.profile_files import load_profile
        return load_profile(Path(%r) / "profiles" / "pocl-cpu.yaml")
"""


def _profile_fingerprint(helpers: Path) -> dict:
    code = (
        "import json; from bench_profile import profile;"
        "from clforge.params.fingerprint import Fingerprint;"
        "print(json.dumps(Fingerprint.of(profile()).as_dict()))"
    )
    env = {**os.environ, "PYTHONPATH": str(helpers)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_files(folder: Path, count: int, usable: int, me: dict) -> None:
    shipped = sorted((ROOT / "tuning").glob("*.yaml"))
    docs = [
        yaml.load(p.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        for p in shipped
    ]
    for i in range(count):
        doc = dict(docs[i % len(docs)])
        if i < usable:  # another machine of this device's vendor, type and ISA
            device = {**me, "name": f"{me['name']} #{i}", "compute_units": 2 + i}
        else:
            vendor, kind, arch, width, isa = OTHERS[i % len(OTHERS)]
            device = {
                "vendor": vendor,
                "device_type": kind,
                "name": f"synthetic device {i}",
                "arch": arch,
                "driver": f"{i}.0",
                "compute_units": 8 + i,
                "vector_widths": {"float": width, "double": max(width // 2, 1), "half": 0},
                **isa,
            }
        doc["device"] = device
        text = yaml.safe_dump(doc, sort_keys=False, width=100)
        (folder / f"synthetic-{i:03d}.yaml").write_text(text, encoding="utf-8")


def run(folder: Path, cache: Path, helpers: Path) -> dict:
    env = {
        **os.environ,
        "CLFORGE_CACHE_DIR": str(cache),
        "PYTHONPATH": str(helpers),
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--usable", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="clforge-bench-lookup-") as tmp:
        base = Path(tmp)
        helpers = base / "helpers"
        helpers.mkdir()
        (helpers / "bench_profile.py").write_text(PROFILE % str(ROOT))
        folder = base / "tuning"
        folder.mkdir()
        write_files(folder, args.files, args.usable, _profile_fingerprint(helpers))
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{args.files} device files, {size / 1e6:.1f} MB, {args.usable} usable here")
        for label, warm in (("cold index", False), ("warm index", True)):
            walls, cpus = [], []
            last: dict = {}
            for r in range(args.runs):
                cache = base / ("cache" if warm else f"cold-{r}")
                if warm and r == 0:
                    run(folder, cache, helpers)  # fill the index
                last = run(folder, cache, helpers)
                walls.append(last["wall_ms"])
                cpus.append(last["cpu_ms"])
            print(
                f"{label}: first lookup {statistics.median(walls):.1f} ms wall "
                f"({min(walls):.1f}-{max(walls):.1f}), {statistics.median(cpus):.1f} ms CPU, "
                f"median of {args.runs}; {last['files']} files read, {last['usable']} ranked; "
                f"matmul 1024 gets: {last['origin']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
