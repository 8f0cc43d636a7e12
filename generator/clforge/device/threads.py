"""Where PoCL's CPU worker threads run: pinned one per core, so that every process runs at one
speed.

PoCL's pthread device starts a worker thread per core and, by default, leaves their placement
to the OS scheduler. Measured on a 2-core Xeon (PyPI PoCL 3.0), the same eager calls then ran
at one of two speeds depending on the process: softmax 4096 x 1024 took 1.06 to 1.93 ms and a
last-axis sum of 4096^2 1.54 to 3.26 ms over six fresh processes (median of 15 calls each),
the slow processes running two workers, or a worker and the calling thread, on one core.
With `POCL_AFFINITY=1` (PoCL pins worker i to CPU i) six fresh processes ran softmax in 0.97
to 1.04 ms and the sum in 1.48 to 1.66 ms.

So before PoCL starts its devices (the first platform query of the process) clforge sets
`POCL_AFFINITY=1`, unless the environment already says otherwise (`POCL_AFFINITY=0` keeps
the OS's placement) or the process may not run on CPUs 0 to n - 1 (a cpuset or `taskset`
elsewhere: PoCL's pinning, worker i on CPU i, would name CPUs the process cannot use). A
process that created PoCL's devices before clforge looked (pyopencl used first) keeps
whatever it started with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

AFFINITY_ENV = "POCL_AFFINITY"


@dataclass(frozen=True)
class Placement:
    """What clforge did about PoCL's worker threads, and why."""

    pinned: bool  # POCL_AFFINITY is on for this process
    reason: str

    def describe(self) -> str:
        return ("pinned one per core: " if self.pinned else "not pinned: ") + self.reason


def _allowed_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def placement(env: dict[str, str] | None = None, allowed: set[int] | None = None) -> Placement:
    """The decision for a process with environment `env` allowed on CPUs `allowed` (default:
    this process's), without changing anything."""
    env = dict(os.environ) if env is None else env
    given = env.get(AFFINITY_ENV)
    if given is not None:
        on = given.strip() not in ("", "0")
        return Placement(on, f"${AFFINITY_ENV}={given} set in the environment")
    cpus = _allowed_cpus() if allowed is None else allowed
    if cpus is None:
        return Placement(False, "CPU affinity is not available on this system")
    if cpus != set(range(len(cpus))):
        shown = ",".join(map(str, sorted(cpus)))
        return Placement(
            False,
            f"this process may run on CPUs {shown} only, and PoCL's pinning puts worker i on "
            f"CPU i; set ${AFFINITY_ENV}=1 to pin anyway",
        )
    return Placement(
        True, f"${AFFINITY_ENV}=1 set by clforge (workers on CPUs 0 to {len(cpus) - 1})"
    )


@cache
def pin_pocl_workers() -> Placement:
    """Set POCL_AFFINITY=1 for this process where :func:`placement` says so (call it before
    the process's first OpenCL platform query); what was decided, the first time (later
    calls return the same decision, which `clforge devices` shows)."""
    decided = placement()
    if decided.pinned and AFFINITY_ENV not in os.environ:
        os.environ[AFFINITY_ENV] = "1"
    return decided


__all__ = ["AFFINITY_ENV", "Placement", "pin_pocl_workers", "placement"]
