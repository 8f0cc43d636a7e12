"""Which names may reach OpenCL source: checked C identifiers that are not reserved words."""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_LEN = 48

# C99 keywords, OpenCL C qualifiers and types, and the builtins our templates call.
# Template-local names all end in '_' (i_, acc_, T_), which user names may not: no clash.
RESERVED = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Bool _Complex _Imaginary bool half size_t ptrdiff_t
    intptr_t uintptr_t uchar ushort uint ulong kernel __kernel global __global local __local
    constant __constant private __private read_only write_only read_write __read_only
    __write_only __read_write image2d_t image3d_t sampler_t event_t true false NULL
    abs clamp cos dot erf exp fabs fma fmax fmin get_global_id get_group_id get_local_id
    get_local_size get_global_size barrier log mad max min pow rsqrt select sin sqrt tanh
    vload_half vstore_half
    """.split()  # noqa: SIM905
)


def identifier_problem(name: object, *, reserved: bool = True) -> str | None:
    """Why `name` cannot be used as a name in OpenCL source, or None if it can.

    With reserved=False (op names, which only appear inside instance names), reserved words
    are allowed.
    """
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    if not _IDENT.match(name):
        return (
            f"{name!r} is not a C identifier (letters, digits and '_', not starting with a digit)"
        )
    if "__" in name:
        return f"{name!r} contains '__', which clforge reserves to join instance names"
    if name.startswith("_") or name.endswith("_"):
        return f"{name!r} starts or ends with '_'; names must not"
    if len(name) > MAX_LEN:
        return f"{name!r} is longer than {MAX_LEN} characters"
    if reserved and name in RESERVED:
        return f"{name!r} is a reserved word in OpenCL C or in clforge's templates"
    return None
