"""A call's arrays as the user holds them, turned into what the eager layer takes, and its result
turned back (:func:`intake`, called once per eager call).

- **PyTorch tensors and DLPack producers** (anything with `__dlpack__` and `__dlpack_device__`)
  are viewed as NumPy arrays over their own memory (`torch.Tensor.numpy()`, `np.from_dlpack`).
  On a CPU OpenCL device, where device buffers are host memory, a C-contiguous floating-point
  view aligned as the device requires (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`) enters as a device array
  over that same memory (a `USE_HOST_PTR` buffer): no copy. Others are copied as NumPy inputs
  are. The result comes back as the caller's type: a PyTorch tensor (on the first tensor's
  device), or through the producer's array namespace (`__array_namespace__().from_dlpack`), or
  NumPy. A PyTorch tensor on another device (CUDA) is copied to the host first; another
  producer's memory must be host memory.
- **Device arrays carry their queue**, as PyOpenCL's do: a call without `queue=` on device
  arrays of another context than the default device's runs on that context and the first
  array's queue. Device arrays of two contexts in one call are refused, naming both inputs.
- **`out=`** (NumPy's): a PyTorch or DLPack `out` on the host is written through its NumPy view.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.conventions import CONVENTIONS
from clforge.core.dtypes import dtype_of_numpy
from clforge.errors import CallError
from clforge.interop.queues import queue_of
from clforge.registry.loader import Registry
from clforge.registry.records import OpSig
from clforge.runtime.launch import Runtime
from clforge.runtime.transfer import to_host

_DLPACK_HOST = (1, 3)  # kDLCPU, kDLCUDAHost: memory the CPU reads directly
_NO_COPY_DTYPES = ("f32", "f64", "f16")  # integer inputs keep NumPy's host-side checks


@dataclass(frozen=True)
class Intake:
    """A call's inputs as the eager layer takes them, the queue to run on (None: the call's
    own), its `out` as an array the eager layer writes, and how to give its result back."""

    inputs: tuple[Any, ...]
    queue: cl.CommandQueue | None
    out: Any
    back: Callable[[Any], Any]


_OWN = (np.ndarray, np.generic, cla.Array, float, int)


def is_foreign(a: Any) -> bool:
    """A DLPack producer (a PyTorch tensor, ...) that is neither NumPy nor pyopencl."""
    return not isinstance(a, _OWN) and hasattr(a, "__dlpack__")


def _torch_of(a: Any) -> Any:
    """The torch module when `a` is a PyTorch tensor (torch is never imported here)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(a, torch.Tensor) else None


def host_view(op: str, name: str, a: Any) -> np.ndarray:
    """A NumPy array over the memory of DLPack producer `a` (no copy), or, for a PyTorch tensor
    on another device, over a host copy of it."""
    torch = _torch_of(a)
    if torch is not None:
        t = a.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.resolve_conj().resolve_neg()
        try:
            return np.asarray(t.numpy())
        except (TypeError, RuntimeError) as exc:
            raise CallError(
                f"{op}: {name} is a torch tensor of dtype {t.dtype} (shape {tuple(t.shape)}), "
                f"which clforge cannot read ({exc}); convert it, e.g. to torch.float32"
            ) from None
    try:
        device_type, _ = a.__dlpack_device__()
    except (AttributeError, TypeError) as exc:
        raise CallError(
            f"{op}: {name} ({type(a).__name__}) has __dlpack__ but no usable __dlpack_device__ "
            f"({exc})"
        ) from None
    if int(device_type) not in _DLPACK_HOST:
        raise CallError(
            f"{op}: {name} ({type(a).__name__}) lives in DLPack device type {int(device_type)}, "
            "not host memory; copy it to the CPU first"
        )
    try:
        return np.from_dlpack(a)
    except (TypeError, BufferError, RuntimeError, ValueError) as exc:
        raise CallError(
            f"{op}: {name} ({type(a).__name__}) cannot be read by DLPack: {exc}"
        ) from None


@cache
def _host_alignment(device: cl.Device) -> int | None:
    """The byte alignment a host-pointer buffer needs on `device` to be used in place, or None
    when the device's buffers are not host memory (a GPU)."""
    if not device.type & cl.device_type.CPU:
        return None
    return max(int(device.mem_base_addr_align) // 8, 1)


def in_place(queue: cl.CommandQueue, host: np.ndarray) -> cla.Array | None:
    """`host` as a device array over its own memory (a `USE_HOST_PTR` buffer) when `queue`'s
    device is a CPU and `host` is not empty, C-contiguous, of a floating clforge dtype and
    aligned as the device requires; else None (the call copies it)."""
    align = _host_alignment(queue.device)
    dt = dtype_of_numpy(host.dtype)
    if (
        align is None
        or dt is None
        or dt.name not in _NO_COPY_DTYPES
        or host.size == 0
        or not host.flags.c_contiguous
        or host.ctypes.data % align
    ):
        return None
    flags = cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR
    buf = cl.Buffer(queue.context, flags, hostbuf=host)
    return cla.Array(queue, host.shape, host.dtype, data=buf)


def _maker(first: Any) -> Callable[[np.ndarray], Any]:
    """How a NumPy result becomes the type of the call's first foreign input."""
    torch = _torch_of(first)
    if torch is not None:
        device = first.device
        if device.type == "cpu":
            return torch.from_numpy  # type: ignore[no-any-return]
        return lambda h: torch.from_numpy(h).to(device)
    namespace = getattr(first, "__array_namespace__", None)
    if namespace is not None:
        return namespace().from_dlpack  # type: ignore[no-any-return]
    return lambda h: h


def _names(sig: OpSig, n: int) -> list[str]:
    if CONVENTIONS[sig.call].variadic:
        return [f"arrays[{i}]" for i in range(n)]
    return [f"input {t.name!r}" for t in sig.inputs][:n] + ["input"] * max(0, n - len(sig.inputs))


def _arrays_queue(sig: OpSig, inputs: Sequence[Any], context: cl.Context) -> cl.CommandQueue | None:
    """The queue of the call's device arrays when they are of another context than `context`
    (None when they are of it); arrays of two contexts are refused."""
    on_device = [(i, a) for i, a in enumerate(inputs) if isinstance(a, cla.Array)]
    i0, first = on_device[0]
    names = _names(sig, len(inputs))
    for i, a in on_device[1:]:
        if a.context != first.context:
            raise CallError(
                f"{sig.name}: {names[i]} (shape {a.shape}) lives in another OpenCL context than "
                f"{names[i0]} (shape {first.shape}); copy one to the other's context first"
            )
    if first.context == context:
        return None
    return first.queue if first.queue is not None else queue_of(first.context)  # type: ignore[arg-type]


def intake(
    reg: Registry,
    op: str,
    inputs: Sequence[Any],
    rt: Runtime,
    free: bool,
    out: Any = None,
) -> Intake | None:
    """What an eager call of `op` on `inputs` (run on `rt`'s queue unless `free`, the call
    having no `queue=`, lets the device arrays' own queue decide) takes in their place; None
    when the inputs are NumPy, pyopencl arrays of `rt`'s context and numbers (the common case,
    checked first, in one pass over the inputs), and `out` is not a tensor."""
    foreign = out is not None and is_foreign(out)
    other = False
    for a in inputs:
        if isinstance(a, cla.Array):
            other = other or (free and a.context != rt.context)
        elif a is not None and is_foreign(a):
            foreign = True
    if not foreign and not other:
        return None
    sig = reg.op(op)
    own = _arrays_queue(sig, inputs, rt.context) if other else None
    run_on = own or rt.queue
    if not foreign:
        return Intake(tuple(inputs), own, out, lambda result: result)
    taken, first = _taken(sig.name, _names(sig, len(inputs)), inputs, run_on)
    out_view = out
    if is_foreign(out):
        if _torch_of(out) is not None and out.device.type != "cpu":
            raise CallError(
                f"{sig.name}: out is a torch tensor on {out.device}; clforge writes host memory: "
                "pass a CPU tensor"
            )
        out_view = host_view(sig.name, "out", out)
    back = _back(first)
    return Intake(tuple(taken), own, out_view, back if out is None else lambda _: out)


def _taken(
    op: str, names: Sequence[str], values: Sequence[Any], queue: cl.CommandQueue
) -> tuple[list[Any], Any]:
    """`values` with each foreign one replaced (a device array over its memory where
    :func:`in_place` can make one, else its NumPy view), and the first foreign one."""
    taken = []
    first = None
    for name, a in zip(names, values, strict=True):
        if not is_foreign(a):
            taken.append(a)
            continue
        first = a if first is None else first
        host = host_view(op, name, a)
        device = in_place(queue, host)
        taken.append(host if device is None else device)
    return taken, first


def _back(first: Any) -> Callable[[Any], Any]:
    """How a call's result (one array or a tuple) becomes the type of `first`, the call's first
    foreign input (NumPy when None)."""
    make = _maker(first) if first is not None else (lambda h: h)

    def back(result: Any) -> Any:
        if isinstance(result, tuple):
            return tuple(make(_host(r)) for r in result)
        return make(_host(result))

    return back


def intake_args(
    where: str, args: Sequence[Any], kwargs: Mapping[str, Any], rt: Runtime
) -> tuple[tuple[Any, ...], dict[str, Any], Callable[[Any], Any]] | None:
    """A compiled call's arguments (a graph's `Model.__call__`, a compiled op's; `where` names
    it) with its foreign inputs taken as :func:`intake` takes an eager call's, and how to give
    its results back; None when it has none."""
    if not any(is_foreign(a) for a in (*args, *kwargs.values())):
        return None
    names = [f"input {i}" for i in range(len(args))] + [f"input {k!r}" for k in kwargs]
    taken, first = _taken(where, names, (*args, *kwargs.values()), rt.queue)
    return (
        tuple(taken[: len(args)]),
        dict(zip(kwargs, taken[len(args) :], strict=True)),
        _back(first),
    )


def _host(r: Any) -> np.ndarray:
    return to_host(r) if isinstance(r, cla.Array) else np.asarray(r)
