"""List every tunable variant and what its defaults are computed from (issue 32, point 2).

    python tools/device_params_report.py            # every tunable variant
    python tools/device_params_report.py --missing  # only those without device_params

A variant without device_params must be one docs/tuning.md ("Computed defaults") says is
device-independent (tests/test_device_params.py checks it).
"""

from __future__ import annotations

import argparse

from clforge.core import expressions
from clforge.registry import loader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="only variants without them")
    args = parser.parse_args()
    seen: dict[str, tuple[str, str]] = {}
    for inst in sorted(loader.default().instances.values(), key=lambda i: i.name):
        key = f"{inst.op}:{inst.variant}"
        if not inst.tunables or key in seen:
            continue
        tunables = ",".join(name for name, _ in inst.tunables)
        reads = sorted(
            set().union(*(expressions.parse(t, "int").names for _, t in inst.device_params))
            - {p for p, _ in inst.device_params}
        )
        computed = ",".join(p for p, _ in inst.device_params)
        seen[key] = (tunables, f"{computed} from {', '.join(reads)}" if computed else "-")
    for key, (tunables, computed) in seen.items():
        if args.missing and computed != "-":
            continue
        print(f"{key:32} tunables {tunables:20} computed {computed}")


if __name__ == "__main__":
    main()
