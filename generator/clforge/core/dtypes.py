"""The one table of element types: OpenCL spelling, NumPy dtype, size, extension, tolerance."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str  # spec spelling: f32
    cl: str  # OpenCL storage type: float
    compute: str  # OpenCL arithmetic type: half is computed in float without cl_khr_fp16
    numpy: str  # NumPy dtype name
    size: int  # bytes
    is_float: bool
    extension: str | None  # extension that the storage type itself needs
    rtol: float  # test tolerance against a float64 NumPy reference
    atol: float
    min_value: str  # OpenCL literal for the lowest value (max-reductions start here)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.numpy)

    @property
    def pragma(self) -> str | None:
        if self.extension is None:
            return None
        return f"#pragma OPENCL EXTENSION {self.extension} : enable"


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        # f16 is stored as half and computed in float via vload_half/vstore_half (core OpenCL),
        # so it needs no extension; native half arithmetic is a variant that requires cl_khr_fp16.
        DType("f16", "half", "float", "float16", 2, True, None, 2e-3, 2e-3, "-HUGE_VALF"),
        DType("f32", "float", "float", "float32", 4, True, None, 2e-5, 2e-5, "-HUGE_VALF"),
        DType(
            "f64", "double", "double", "float64", 8, True, "cl_khr_fp64", 1e-12, 1e-12, "-HUGE_VAL"
        ),
        DType("i32", "int", "int", "int32", 4, False, None, 0.0, 0.0, "INT_MIN"),
    )
}

DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)


def dtype_of_numpy(dt: np.dtype) -> DType | None:
    """The clforge dtype of a NumPy dtype, or None if clforge has none."""
    for d in DTYPES.values():
        if d.np_dtype == dt:
            return d
    return None
