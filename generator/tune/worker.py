"""The tuner's measuring process: candidates run here, out of the tuner's process, so a
candidate that crashes the driver or hangs costs a restart, not the run.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout.
Request: {"instance", "params": {..}, "dims": {..}, "shapes": {..}, "attrs": {..},
"repeats"}. Reply: {"ok": true, "us": median microseconds} or {"ok": false, "problem": why}.
Each (instance, params) is verified once against the NumPy reference on the op's cases
(canary-padded) before it is ever timed; a wrong candidate is reported, never timed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from generator.call.binding import int_attrs
from generator.core.tree import Tree
from generator.errors import ClforgeError
from generator.params.space import Params, as_params
from generator.registry import loader as registry_mod
from generator.registry.loader import guard_holds
from generator.runtime.launch import Runtime
from generator.tune.measure import device_inputs, time_plan
from generator.tune.verify import verify

NO_CASE = "its guard holds on none of the op's cases with these params, so nothing checked it"


class Worker:
    def __init__(self) -> None:
        root = os.environ.get("CLFORGE_TREE")
        reg = registry_mod.for_tree(Tree.at(Path(root))) if root else None
        self.rt = Runtime(reg=reg)
        self.verdicts: dict[tuple[str, Params], str | None] = {}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        reg = self.rt.registry
        inst = reg.instance(req["instance"])
        params = as_params(req["params"])
        key = (inst.name, params)
        if key not in self.verdicts:
            verdict = verify(self.rt, inst, params)
            wrong = f"wrong: {verdict.problem}" if verdict.problem else NO_CASE
            self.verdicts[key] = None if verdict.ok else wrong
        problem = self.verdicts[key]
        if problem is not None:
            return {"ok": False, "problem": problem[:2000]}
        op = reg.op(inst.op)
        # a parameter set the variant's guard refuses at this shape is never timed (it would
        # compute something else, fast): the dispatcher could not run it there either
        env = {**req["dims"], **int_attrs(op, req["attrs"])}
        if not guard_holds(reg, inst, env, dict(params)):
            return {"ok": False, "problem": f"its guard {inst.guard!r} does not hold at this shape"}
        shapes = {k: tuple(v) for k, v in req["shapes"].items()}
        plan = self.rt.plan(inst, req["dims"], req["attrs"], shapes, params)
        inputs = device_inputs(self.rt, op, inst.dtype, shapes, req["dims"])
        seconds = time_plan(self.rt, plan, inputs, repeats=int(req.get("repeats", 7)))
        return {"ok": True, "us": seconds * 1e6}


def main() -> int:
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
