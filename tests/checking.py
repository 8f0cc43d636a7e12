"""How tests compare kernels with NumPy: the product's own verification (one tolerance rule,
canary-padded launches; see generator/clforge/tune/verify.py), as assertions."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from clforge.registry.records import Instance
from clforge.runtime.launch import Runtime
from clforge.tune.verify import canary_launch, mismatch


def assert_close(
    what: str, dtype: str, got: np.ndarray, want: np.ndarray, reduce_len: int, exact: bool = False
) -> None:
    """Compare with the float64 reference at the output dtype's tolerance (dtypes.py), widened
    by the square root of the length of any reduction (rounding error grows with it); `exact`:
    element for element."""
    problem = mismatch(what, dtype, got, want, reduce_len, exact)
    assert problem is None, problem


def launch_with_canaries(
    rt: Runtime,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    dims: Mapping[str, int],
    attrs: Mapping[str, float | int],
) -> dict[str, np.ndarray]:
    """Launch `inst` with every buffer padded by canary bytes on both sides; fail if the kernel
    wrote outside an output or into an input."""
    shapes = {k: tuple(v.shape) for k, v in inputs.items()}
    return canary_launch(rt, rt.plan(inst, dims, attrs, shapes), inputs, dims)
