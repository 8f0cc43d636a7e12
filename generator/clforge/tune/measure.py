"""Timing a launch: a warm-up, then the median over repeats of the mean of back-to-back calls,
with enough calls per repeat that a repeat lasts long enough to time (these machines are shared
and noisy: medians, not means). The tuner's final word between candidates is a race
(:func:`race_times`): their repeats interleaved, so that a slow spell of the machine hits them
all alike instead of whichever was timed during it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl.array as cla

from clforge import references
from clforge.core.dtypes import DTYPES
from clforge.params.database import weights
from clforge.registry.records import OpSig
from clforge.runtime.launch import (
    LaunchPlan,
    Ready,
    ReadyLaunch,
    Runtime,
    constant_steps,
    ready,
    run_ready,
)


def median_time(
    fn: Callable[[], object], sync: Callable[[], object], repeats: int, inner: int
) -> float:
    """Median over `repeats` of the mean time of `inner` back-to-back calls, in seconds."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def race_times(
    fns: Sequence[Callable[[], object]],
    sync: Callable[[], object],
    rounds: int = 15,
    target_s: float = 0.01,
    max_inner: int = 1000,
) -> list[float]:
    """Seconds per call of each of `fns`, timed in `rounds` rounds; a round times every one of
    them once (the mean of back-to-back calls lasting about `target_s`), starting from a
    different one each round; each result is the median of its rounds."""
    inners = []
    for fn in fns:
        fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        once = max(time.perf_counter() - t0, 1e-6)
        inners.append(max(1, min(max_inner, int(target_s / once))))
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            t0 = time.perf_counter()
            for _ in range(inners[i]):
                fns[i]()
            sync()
            times[i].append((time.perf_counter() - t0) / inners[i])
    return [statistics.median(t) for t in times]


def device_inputs(
    rt: Runtime,
    op: OpSig,
    dtype: str,
    shapes: Mapping[str, tuple[int, ...]],
    dims: Mapping[str, int],
    seed: int = 0,
) -> dict[str, cla.Array]:
    """Random inputs of the op's reference domains for sizes `dims`, on the device, in
    row-major layout."""
    rng = np.random.default_rng(seed)
    ref = references.reference_of(op, rt.registry.roots())
    return {
        t.name: cla.to_device(
            rt.queue,
            references.make_input(
                rng,
                tuple(shapes[t.name]),
                DTYPES[t.dtype or dtype].np_dtype,
                references.domain_of(ref, t.name, dims),
            ),
        )
        for t in op.inputs
    }


@dataclass(frozen=True, eq=False)
class HoistedCall:
    """A call of a routine as a compiled graph makes it (:func:`hoisted_call`): the launches it
    enqueues, the ready plan whose scratch they write, the outputs they write and the inputs
    they read (all held here: the kernels keep only the buffers' handles, so an input the
    caller let go would be released under them, and the pool would hand a scratch or output
    buffer out again while they use it; a worker that passed its inputs as a temporary
    crashed or hung on every hoisted candidate)."""

    queue: Any
    launches: tuple[ReadyLaunch, ...]
    made: Ready
    outputs: Mapping[str, cla.Array]
    inputs: Mapping[str, cla.Array]

    def __call__(self) -> None:
        run_ready(self.queue, self.launches, ())


def hoisted_call(rt: Runtime, plan: LaunchPlan, inputs: Mapping[str, cla.Array]) -> HoistedCall:
    """A call of routine `plan` as a compiled graph makes it where every input but the op's
    first is a constant (a weight): the steps that read only those (`constant_steps`: gemm's
    pack_b) run once, here, into scratch of their own, and each call enqueues the others on
    the same buffers (`clforge tune --hoisted`)."""
    once, _ = constant_steps(plan, weights(rt.registry.op(plan.inst.op)))
    outs = {spec[0]: rt.empty(spec) for spec in plan.outputs}
    bound = {
        name: arr.base_data if arr.size else rt.dummy
        for name, arr in (*inputs.items(), *outs.items())
    }
    made = ready(rt, plan, bound, {})
    run_ready(rt.queue, made.launches, ())
    kept = tuple(x for i, x in enumerate(made.launches) if i not in once)
    return HoistedCall(rt.queue, kept, made, outs, dict(inputs))


def calibrated_time(
    fn: Callable[[], object],
    sync: Callable[[], object],
    repeats: int = 7,
    target_s: float = 0.02,
    max_inner: int = 1000,
) -> float:
    """:func:`median_time` with as many calls per repeat as make a repeat last about
    `target_s`, judged from one timed call (at least 1, at most `max_inner`)."""
    t0 = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - t0, 1e-6)
    inner = max(1, min(max_inner, int(target_s / once)))
    return median_time(fn, sync, repeats, inner)
