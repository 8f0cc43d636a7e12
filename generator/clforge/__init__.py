"""clforge: YAML op specs → Jinja templates → OpenCL kernels, a registry and a dispatcher.

The public names, imported on first use (so that `import clforge` and `clforge lint` start
without an OpenCL runtime)::

    from clforge import ops, explain, dispatcher, TensorType

- ``ops``: one eager function per op (``ops.matmul(a, b)``), generated from the specs
  (the module ``clforge.generated.ops``);
- ``explain(op, *arrays, **kwargs)``: what that call would run, and why;
- ``dispatcher(queue=None)``: the dispatcher of the default device (or of ``queue``'s), for
  compiled calls (``dispatcher().compile(op, types)``), named instances and parameter overrides;
- ``TensorType``: an input's dtype and shape (ints or dim names) for ``compile``;
- ``register``: add an extension's tree to the registry;
- the errors: ``ClforgeError`` and its subclasses (``CallError``, ``SpecError``, ...).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_LAZY = {
    "ops": ("clforge.generated.ops", None),
    "explain": ("clforge.call.explain", "explain"),
    "Explanation": ("clforge.call.explain", "Explanation"),
    "dispatcher": ("clforge.call.dispatcher", "dispatcher"),
    "TensorType": ("clforge.call.compiled", "TensorType"),
    "register": ("clforge.registry.sources", "register"),
    "Graph": ("clforge.graph", "Graph"),
    "load": ("clforge.graph", "load"),
}
_ERRORS = (
    "BuildError",
    "CacheError",
    "CallError",
    "ClforgeError",
    "ClforgeWarning",
    "DeviceError",
    "DispatchError",
    "ExtensionError",
    "GenerationError",
    "GraphError",
    "SpecError",
)

__all__ = [  # noqa: PLE0604 (the names are strings: _LAZY's keys and _ERRORS)
    "__version__",
    *_LAZY,
    *_ERRORS,
]


def __getattr__(name: str) -> Any:
    if name in _ERRORS:
        return getattr(importlib.import_module("clforge.errors"), name)
    if name not in _LAZY:
        raise AttributeError(f"module 'clforge' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    found = value if attr is None else getattr(value, attr)
    globals()[name] = found
    return found


def __dir__() -> list[str]:
    return sorted(__all__)
