"""The tuner's measuring process: candidates run here, out of the tuner's process, so a
candidate that crashes the driver or hangs costs a restart, not the run.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout.
Request: {"instance", "params": {..}, "dims": {..}, "shapes": {..}, "attrs": {..},
"repeats"}. Reply: {"ok": true, "us": median microseconds} or {"ok": false, "problem": why}.
A race: {"race": [{"instance", "params"}, ...], "dims", "shapes", "attrs", "repeats"}, the
candidates (instances of one op and dtype) timed interleaved, on the same inputs
(:func:`~clforge.tune.measure.race_times`). Reply: {"ok": true, "us": [microseconds or null],
"problems": [null or why]}, in the request's order.
A request whose dims hold HOIST (`clforge tune --hoisted`) times the routine as a compiled
graph runs it: the steps that read only weights once, before timing (measure.hoisted_call).
Each (instance, params) is verified once against the NumPy reference on the op's cases
(canary-padded) before it is ever timed; a wrong candidate is reported, never timed.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyopencl.array as cla

from clforge.call.binding import int_attrs
from clforge.core.tree import Tree
from clforge.errors import ClforgeError
from clforge.params.database import HOIST
from clforge.params.space import Params, as_params
from clforge.registry import loader as registry_mod
from clforge.registry.loader import guard_holds
from clforge.registry.records import Instance
from clforge.runtime.launch import LaunchPlan, Runtime
from clforge.tune.measure import calibrated_time, device_inputs, hoisted_call, race_times
from clforge.tune.verify import verify

NO_CASE = "its guard holds on none of the op's cases with these params, so nothing checked it"


class Worker:
    def __init__(self) -> None:
        root = os.environ.get("CLFORGE_TREE")
        reg = registry_mod.for_tree(Tree.at(Path(root))) if root else None
        self.rt = Runtime(reg=reg)
        self.verdicts: dict[tuple[str, Params], str | None] = {}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        if "race" in req:
            return self.race(req)
        plan = self._plan(req["instance"], req)
        if isinstance(plan, str):
            return {"ok": False, "problem": plan[:2000]}
        call = self._call(plan, self._inputs(plan.inst, req), HOIST in req["dims"])
        seconds = calibrated_time(call, self.rt.queue.finish, int(req.get("repeats", 7)))
        return {"ok": True, "us": seconds * 1e6}

    def race(self, req: dict[str, Any]) -> dict[str, Any]:
        plans = [self._plan(c["instance"], {**req, "params": c["params"]}) for c in req["race"]]
        ready = [p for p in plans if not isinstance(p, str)]
        inputs = self._inputs(ready[0].inst, req) if ready else {}
        calls = [self._call(p, inputs, HOIST in req["dims"]) for p in ready]
        rounds = 3 * int(req.get("repeats", 7))  # the deciding measurement: more than a job's
        times = iter(race_times(calls, self.rt.queue.finish, rounds=rounds))
        return {
            "ok": True,
            "us": [None if isinstance(p, str) else next(times) * 1e6 for p in plans],
            "problems": [p[:2000] if isinstance(p, str) else None for p in plans],
        }

    def _call(
        self, plan: LaunchPlan, inputs: dict[str, cla.Array], hoisted: bool
    ) -> Callable[[], object]:
        """One call of `plan` as it is timed: as an eager call makes it (outputs from the
        pool), or `hoisted`, as a compiled graph does (weights packed once, before timing)."""
        if hoisted:
            return hoisted_call(self.rt, plan, inputs)
        return functools.partial(self.rt.enqueue, plan, inputs)

    def _plan(self, name: str, req: dict[str, Any]) -> LaunchPlan | str:
        """The launch plan of instance `name` with the request's params at its shape, or why
        it must not be timed (wrong somewhere, or its guard refuses the shape)."""
        reg = self.rt.registry
        inst = reg.instance(name)
        params = as_params(req["params"])
        key = (inst.name, params)
        if key not in self.verdicts:
            verdict = verify(self.rt, inst, params)
            wrong = f"wrong: {verdict.problem}" if verdict.problem else NO_CASE
            self.verdicts[key] = None if verdict.ok else wrong
        problem = self.verdicts[key]
        if problem is not None:
            return problem
        op = reg.op(inst.op)
        # a parameter set the variant's guard refuses at this shape is never timed (it would
        # compute something else, fast): the dispatcher could not run it there either
        env = {**req["dims"], **int_attrs(op, req["attrs"])}
        if not guard_holds(reg, inst, env, dict(params)):
            return f"its guard {inst.guard!r} does not hold at this shape"
        shapes = {k: tuple(v) for k, v in req["shapes"].items()}
        dims = {k: v for k, v in req["dims"].items() if k != HOIST}
        return self.rt.plan(inst, dims, req["attrs"], shapes, params)

    def _inputs(self, inst: Instance, req: dict[str, Any]) -> dict[str, cla.Array]:
        shapes = {k: tuple(v) for k, v in req["shapes"].items()}
        op = self.rt.registry.op(inst.op)
        return device_inputs(self.rt, op, inst.dtype, shapes, req["dims"])


def exit_with_parent(parent: int, poll_s: float = 0.5) -> threading.Thread:
    """A daemon thread that ends this process once its parent is gone: a killed tuner must not
    leave its measuring process timing a long race on a machine that others then measure."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(0)

    t = threading.Thread(target=watch, name="clforge-parent-watch", daemon=True)
    t.start()
    return t


def main() -> int:
    # the tuner names itself: a tuner killed while this process starts up has already handed
    # it to another parent, which os.getppid() would return here
    exit_with_parent(int(os.environ.get("CLFORGE_TUNER_PID") or os.getppid()))
    worker = Worker()
    print(json.dumps({"ready": True, "device": worker.rt.device.name}), flush=True)
    for line in sys.stdin:
        try:
            reply = worker.handle(json.loads(line))
        except ClforgeError as exc:  # a build failure, a bad parameter set: the candidate's
            reply = {"ok": False, "problem": f"{type(exc).__name__}: {exc}"[:2000]}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
