"""clforge's ops as PyTorch operators: :func:`register` defines `torch.ops.clforge.<op>` for
every op (`torch.library`), so that code that lives in PyTorch calls them as its own, and
`torch.compile` traces through them.

Each operator's schema is the eager function's signature (`clforge.ops.<op>`): the inputs as
`Tensor` (`Tensor?` where optional, `Tensor[]` for concat's arrays), then the calling
convention's options and the attributes with their defaults, as PyTorch types them (an int or an
(h, w) pair is `int[2]`, an axis or a tuple of axes `int[1]?`, a named attribute such as gelu's
`approximate` a `str`). The CPU kernel is the eager call (tensors in, tensors out, on the default
OpenCL device; see :mod:`clforge.interop.intake`). The fake (meta) kernel, which gives
`torch.compile` and other tracers each result's shape and dtype, is derived from the op's spec:
the calling convention and the binding run on probe arrays of the fake tensors' sizes
(:func:`clforge.call.results.result_types`); no op has a shape function of its own. Sizes that
a tracer keeps symbolic are specialized to the ones it traces with.

Needs PyTorch (`pip install clforge[torch]`); `import torch` here is PyTorch itself.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from clforge.call.results import probe_array, result_types
from clforge.conventions import CONVENTIONS
from clforge.errors import CallError, ClforgeError
from clforge.registry import loader as registry_mod
from clforge.registry.records import OpSig

__all__ = ["NAMESPACE", "register", "schema"]

NAMESPACE = "clforge"

# the eager functions' annotations (as generated into ops.py) as PyTorch schema types
_SCHEMA_TYPES = {
    "bool": "bool",
    "int": "int",
    "float": "float",
    "str": "str",
    "int | None": "int?",
    "float | None": "float?",
    "int | tuple[int, int]": "int[2]",
    "int | tuple[int, int] | None": "int[2]?",
    "int | tuple[int, int] | str": "int[2]",  # conv2d's padding: 'same'/'valid' eagerly only
    "int | tuple[int, ...] | None": "int[1]?",
    "tuple[int, ...] | None": "int[]?",
    "int | str": "str",  # an attribute with named values (gelu's approximate)
}
_SKIPPED = ("queue", "out")  # the eager function's own: not an operator argument

_LIBRARY: list[torch.library.Library] = []  # the one fragment of the namespace, made once
_DONE: set[str] = set()
_LOCK = threading.Lock()


def _annotation(p: inspect.Parameter) -> str:
    a = p.annotation
    return a if isinstance(a, str) else inspect.formatannotation(a)


def _default(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def schema(op: str, fn: Callable[..., Any], sig: OpSig) -> str:
    """The `torch.library` schema of `op` from its eager function `fn` (without the name)."""
    parts = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in _SKIPPED:
            continue
        if p.name == "arrays" and CONVENTIONS[sig.call].variadic:
            parts.append("Tensor[] arrays")
            continue
        if any(t.name == p.name for t in sig.inputs):
            parts.append(f"Tensor? {p.name}=None" if p.default is None else f"Tensor {p.name}")
            continue
        kind = _SCHEMA_TYPES.get(_annotation(p))
        if kind is None:
            raise ClforgeError(
                f"clforge.torch: {op}: parameter {p.name} ({_annotation(p)}) has no PyTorch "
                "schema type"
            )
        if p.default is inspect.Parameter.empty:
            parts.append(f"{kind} {p.name}")
        else:
            parts.append(f"{kind} {p.name}={_default(p.default)}")
    outs = ", ".join("Tensor" for _ in sig.outputs)
    ret = outs if len(sig.outputs) == 1 else f"({outs})"
    return f"({', '.join(parts)}) -> {ret}"


def _arguments(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[list[Any], dict[str, Any]]:
    """The operator's positional arguments (in schema order) as the eager function's: the
    inputs by position, the rest by keyword; PyTorch's lists as tuples."""
    names = [p for p in inspect.signature(fn).parameters.values() if p.name not in _SKIPPED]
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for p, given in zip(names, args, strict=False):
        value = tuple(given) if isinstance(given, list) and p.name != "arrays" else given
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            keywords[p.name] = value
        else:
            positional.append(value)
    return positional, keywords


_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
}
_TORCH_DTYPES: dict[np.dtype, torch.dtype] = {v: k for k, v in _DTYPES.items()}


def _np_dtype(op: str, dt: torch.dtype) -> np.dtype:
    if dt not in _DTYPES:
        raise CallError(f"{op}: a tensor of dtype {dt}, which clforge does not take")
    return _DTYPES[dt]


def _kernels(
    op: str, fn: Callable[..., Any], sig: OpSig
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def run(*args: Any) -> Any:
        positional, keywords = _arguments(fn, args)
        result = fn(*positional, **keywords)
        results = result if isinstance(result, tuple) else (result,)
        given = [a for a in args if isinstance(a, torch.Tensor)]
        given += [t for a in args if isinstance(a, list) for t in a if isinstance(t, torch.Tensor)]
        owned = {t.untyped_storage().data_ptr() for t in given if t.numel()}
        # an operator's results never alias its inputs (a call that only views its input)
        fresh = tuple(
            r.clone() if r.numel() and r.untyped_storage().data_ptr() in owned else r
            for r in results
        )
        return fresh if isinstance(result, tuple) else fresh[0]

    def fake(*args: Any) -> Any:
        def probe(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                return probe_array(tuple(int(n) for n in a.shape), _np_dtype(op, a.dtype))
            if isinstance(a, list) and all(isinstance(t, torch.Tensor) for t in a):
                return [probe(t) for t in a]
            return a

        positional, keywords = _arguments(fn, tuple(probe(a) for a in args))
        variadic = CONVENTIONS[sig.call].variadic
        inputs = list(positional[0]) if variadic else positional[: len(sig.inputs)]
        after = positional[1:] if variadic else positional[len(sig.inputs) :]
        options = dict(zip(_option_names(fn, sig), after, strict=False))
        options.update(keywords)
        attr_names = {a.name for a in sig.attrs}
        attrs = {k: v for k, v in options.items() if k in attr_names}
        options = {k: v for k, v in options.items() if k not in attr_names}
        like = next(a for a in args if isinstance(a, torch.Tensor | list))
        device = like[0].device if isinstance(like, list) else like.device
        made = [
            torch.empty(shape, dtype=_TORCH_DTYPES[dt], device=device)
            for shape, dt in result_types(sig, inputs, attrs, options)
        ]
        return made[0] if len(made) == 1 else tuple(made)

    return run, fake


def _option_names(fn: Callable[..., Any], sig: OpSig) -> list[str]:
    """The names of the eager function's positional parameters after its inputs."""
    inputs = {t.name for t in sig.inputs} | {"arrays"}
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is not inspect.Parameter.KEYWORD_ONLY and p.name not in inputs
    ]


def register(module: types.ModuleType | str | None = None) -> list[str]:
    """Define `torch.ops.clforge.<op>` for every eager function of `module` (default
    `clforge.ops`; an extension passes its own generated ops module) not defined yet; returns
    the names defined now. Calling it again defines nothing twice."""
    if module is None or isinstance(module, str):
        module = importlib.import_module(module or "clforge.generated.ops")
    reg = registry_mod.default()
    defined = []
    with _LOCK:
        if not _LIBRARY:
            _LIBRARY.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
        lib = _LIBRARY[0]
        for op in getattr(module, "__all__", ()):
            if op in _DONE or op not in reg.ops:
                continue
            fn = getattr(module, op)
            sig = reg.op(op)
            qualname = f"{NAMESPACE}::{op}"
            torch.library.define(qualname, schema(op, fn, sig), lib=lib)
            run, fake = _kernels(op, fn, sig)
            torch.library.impl(qualname, "CPU", run, lib=lib)
            torch.library.register_fake(qualname, fake, lib=lib)
            _DONE.add(op)
            defined.append(op)
    return defined
