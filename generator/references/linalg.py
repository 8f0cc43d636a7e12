"""References for matmul and its relatives."""

from __future__ import annotations

from .base import Reference

REFERENCES: dict[str, Reference] = {
    "matmul": Reference(lambda a, _: {"c": a["a"] @ a["b"]}, reduce="K"),
}
