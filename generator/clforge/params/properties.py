"""What a variant's `device_params` and `constraints` read of the device.

`device_params` are integer expressions over :func:`device_properties` (the names listed in
`clforge.spec.model.DEVICE_PROPERTIES`) and the variant's other device_params (each computed
after those it reads, :func:`computed`); `constraints` may name, beside params, the device's
register file (:func:`register_file`: `vector_registers`, `vector_bits`, and `dtype_bits`, the
width of the instance's element, so that `cdiv(VW * dtype_bits, vector_bits)` counts the
registers one VW-wide vector takes): a register block is bounded by the registers of the device
it runs on, not by one ISA's count. Where no
device is named (a spec's own checks, the linter, a space listed without a device), the register
file is the widest of :data:`clforge.device.isa.ISAS` (32 x 512-bit): a point is then possible
on some device. Nothing here imports pyopencl."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from clforge.core import expressions
from clforge.core.dtypes import DTYPES
from clforge.device.isa import ISAS
from clforge.device.profile import DeviceProfile, isa_of

__all__ = [
    "ANY_DEVICE",
    "computed",
    "device_properties",
    "evaluation_order",
    "register_file",
]


# the register file of no device in particular: the most registers and the widest ones
ANY_DEVICE: dict[str, int] = {
    "vector_registers": max(isa.registers for isa in ISAS.values()),
    "vector_bits": max(isa.bits for isa in ISAS.values()),
}
# a device whose vector ISA is unknown (GPUs too): the fewest registers any current CPU ISA has
UNKNOWN_REGISTERS = 16


def register_file(profile: DeviceProfile | None, dtype: str) -> dict[str, int]:
    """`vector_registers` and `vector_bits` of `profile` (ANY_DEVICE's for None), and
    `dtype_bits` of `dtype`: what a constraint may read beside params (the names
    spec.model.CONSTRAINT_PROPERTIES lists)."""
    elem = {"dtype_bits": 8 * DTYPES[dtype].size}
    if profile is None:
        return {**ANY_DEVICE, **elem}
    isa = isa_of(profile)
    widths = dict(profile.preferred_vector_widths)
    bits = (isa.bits if isa else 0) or 32 * max(widths.get("float", 1), 1)
    return {
        "vector_registers": (isa.registers if isa else 0) or UNKNOWN_REGISTERS,
        "vector_bits": bits,
        **elem,
    }


def device_properties(profile: DeviceProfile, dtype: str) -> dict[str, int]:
    """What device_params expressions may read (spec.model.DEVICE_PROPERTIES), for an instance
    of `dtype`. A device whose vector ISA is unknown (GPUs too) reads 16 vector registers, the
    fewest any current CPU ISA has; unknown sizes read 0."""
    widths = dict(profile.preferred_vector_widths)
    return {
        **register_file(profile, dtype),
        "cores": profile.cores or profile.compute_units,
        "l1d_bytes": profile.l1d_bytes,
        "l2_bytes": profile.l2_bytes,
        "l3_bytes": profile.l3_bytes,
        "sub_group_size": profile.sub_group_size,
        "vector_width": widths.get(DTYPES[dtype].cl, 1),
        "vector_width_float": widths.get("float", 1),
        "vector_width_double": widths.get("double", 1),
        "vector_width_half": widths.get("half", 0),
        "vector_width_int": widths.get("int", 1),
        "compute_units": profile.compute_units,
        "max_work_group_size": profile.max_work_group_size,
        "local_mem_bytes": profile.local_mem_bytes,
    }


def evaluation_order(device_params: Mapping[str, frozenset[str] | set[str]]) -> list[str] | None:
    """An order in which each of `device_params` (param -> the names its expression reads) is
    computed after the params it reads; None where they read each other in a cycle."""
    order: list[str] = []
    pending = dict(device_params)
    while pending:
        ready = sorted(p for p, names in pending.items() if not (set(names) & set(pending)))
        if not ready:
            return None
        order += ready
        for p in ready:
            del pending[p]
    return order


def computed(
    device_params: Mapping[str, str], env: Mapping[str, int]
) -> tuple[dict[str, int], list[str]]:
    """The params `device_params` (param -> integer expression) give on a device whose
    properties are `env` (and the call's dims, where known), each expression reading them and
    the params computed before it; and the names they read, sorted. A param whose expression
    reads a dim `env` lacks (a symbolic size) is left out, and so is any that reads it: the
    spec default stands for those. ValueError for a cycle; the expressions' own errors
    (division by zero) pass through."""
    exprs = {p: _int_expr(text) for p, text in device_params.items()}
    order = evaluation_order({p: e.names for p, e in exprs.items()})
    if order is None:
        raise ValueError(f"device_params read each other in a cycle: {', '.join(sorted(exprs))}")
    values: dict[str, int] = {}
    for p in order:
        if exprs[p].names <= env.keys() | values.keys():
            values[p] = exprs[p].evaluate({**env, **values})
    read = sorted(set().union(*(exprs[p].names for p in values)) - set(exprs))
    return values, read


@cache
def _int_expr(text: str) -> expressions.Expr:
    return expressions.parse(text, "int")
