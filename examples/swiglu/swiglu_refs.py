"""NumPy references of this extension's ops: what `clforge verify` checks the kernels against.

Each takes the op's inputs (float64 for float dtypes) and attributes, and returns its outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def swiglu(inputs: dict[str, np.ndarray], attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    a, b = inputs["a"], inputs["b"]
    return {"y": a / (1.0 + np.exp(-a)) * b}
