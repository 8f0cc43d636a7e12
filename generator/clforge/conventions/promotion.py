"""NumPy's dtype promotion for the elementwise ops, over the dtypes clforge has.

The inputs of an op that take the instance's dtype are promoted to their `numpy.result_type`
(NumPy 2's rules: f16 with f32 is f32, any float with f64 is f64, i32 with any float is f64) and
Python numbers among them are NumPy's "weak" scalars (NEP 50): they take the arrays' dtype, but
a float with i32 arrays makes f64; numbers alone (where(cond, 1.0, 0.0)) make f64, or i32 for
ints (NumPy's int64). The result is a set of casts for the eager layer to make (the
host converts NumPy arrays, device arrays go through the `cast_<dtype>` ops); a promotion to a
dtype the op lacks is refused, naming it. Inputs of a fixed dtype (a mask) are never promoted;
a NumPy bool array given for a fixed i32 input is converted (True is 1).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from clforge.core.dtypes import DTYPES, dtype_of_numpy
from clforge.errors import CallError
from clforge.registry.records import OpSig


def is_number(value: Any) -> bool:
    """A Python int or float (not a bool): NumPy's weak scalar. A NumPy scalar (np.float64(2),
    a subclass of float) has a dtype of its own and counts as an array, as in NEP 50."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.generic)


def promoted(op: OpSig, values: Mapping[str, Any]) -> str | None:
    """The clforge dtype that the inputs of the instance's dtype promote to, or None when none
    of them is an array of a clforge dtype (the call's own checks then say what is wrong)."""
    free = [t.name for t in op.inputs if t.dtype is None and values.get(t.name) is not None]
    arrays = [values[k] for k in free if not is_number(values[k])]
    kinds = [np.dtype(a.dtype) for a in arrays]
    numbers_ = [values[k] for k in free if is_number(values[k])]
    if any(dtype_of_numpy(k) is None for k in kinds) or not (kinds or numbers_):
        return None
    scalars = [float(v) if isinstance(v, float) else int(v) for v in numbers_]
    result = np.result_type(*kinds, *scalars)
    if not kinds and np.issubdtype(result, np.integer):
        result = np.dtype(np.int32)  # numbers alone: NumPy's default int64, clforge's i32
    d = dtype_of_numpy(result)
    if d is None or d.name not in op.dtypes:
        shown = ", ".join(f"{k} ({_kind(values[k])})" for k in free)
        name = d.name if d is not None else str(result)
        raise CallError(
            f"{op.name}: inputs {shown} promote to {name} (numpy.result_type), which "
            f"{op.name} does not support (supported: {', '.join(op.dtypes)}); cast them first"
        )
    return d.name


def _kind(value: Any) -> str:
    if is_number(value):
        return f"the number {value!r}"
    d = dtype_of_numpy(np.dtype(value.dtype))
    return d.name if d is not None else str(value.dtype)


def casts(op: OpSig, values: Mapping[str, Any], target: str | None) -> dict[str, str]:
    """The inputs (arrays, not numbers) that must change dtype before the call, and to what:
    those of the instance's dtype to `target` (see :func:`promoted`), a bool array to a fixed
    i32."""
    out: dict[str, str] = {}
    for t in op.inputs:
        v = values.get(t.name)
        if v is None or is_number(v):
            continue
        have = dtype_of_numpy(np.dtype(v.dtype))
        if t.dtype is None and target is not None and have is not None and have.name != target:
            out[t.name] = target
        elif t.dtype == "i32" and np.dtype(v.dtype) == np.bool_:
            if not isinstance(v, np.ndarray | np.generic):  # no clforge kernel reads bools
                raise CallError(
                    f"{op.name}: input {t.name!r} is a device array of dtype bool (shape "
                    f"{tuple(v.shape)}); the call needs it as i32: convert it first"
                )
            out[t.name] = "i32"
    return out


def scalar_array(op: OpSig, name: str, value: Any, dtype: str) -> np.ndarray:
    """A Python number as a one-element array of `dtype` (a weak scalar takes the arrays'
    dtype; one that does not fit it is refused, as NumPy refuses it)."""
    np_dtype = DTYPES[dtype].np_dtype
    if np.issubdtype(np_dtype, np.integer) and not float(value).is_integer():
        raise CallError(f"{op.name}: {name} = {value!r} is not an integer ({dtype} inputs)")
    info = np.iinfo(np_dtype) if np.issubdtype(np_dtype, np.integer) else None
    if info is not None and not info.min <= int(value) <= info.max:
        raise CallError(f"{op.name}: {name} = {value!r} is out of the range of {dtype}")
    with np.errstate(over="ignore"):  # a float beyond f16 or f32 is inf there, as in NumPy
        return np.asarray(value, np_dtype)
