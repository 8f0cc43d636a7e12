"""The guard and launch-size language: parsing, evaluation, and refusals with positions."""

from __future__ import annotations

import pytest

from clforge.core import expressions as guards
from clforge.errors import GuardError


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        ("N % 16 == 0", {"N": 32}, True),
        ("N % 16 == 0", {"N": 33}, False),
        ("M >= 4 and not (K < 8 or N == 3)", {"M": 4, "K": 8, "N": 2}, True),
        ("is_pow2(WG) and WG <= 1024", {"WG": 256}, True),
        ("is_pow2(WG)", {"WG": 0}, False),
        ("is_pow2(WG)", {"WG": 96}, False),
        ("min(M, N, 7) == 7", {"M": 9, "N": 8}, True),
        ("max(M, N) > 100", {"M": 1, "N": 2}, False),
        ("cdiv(N, 8) * 8 >= N", {"N": 13}, True),
        ("true", {}, True),
        ("-N + 2 * 3 == 1", {"N": 5}, True),
        ("N / 4 == 3", {"N": 15}, True),  # floor division
    ],
)
def test_conditions(text: str, env: dict[str, int], value: bool) -> None:
    assert guards.parse(text).holds(env) is value


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        ("cdiv(N, CHUNK)", {"N": 8195, "CHUNK": 4096}, 3),
        ("N", {"N": 7}, 7),
        ("16", {}, 16),
        ("cdiv(0, 8)", {}, 0),
        ("M * WG", {"M": 3, "WG": 64}, 192),
        ("pick(P, A, B, C)", {"P": 1, "A": 5, "B": 6, "C": 7}, 6),
        ("pick(P, A, B, C)", {"P": 9, "A": 5, "B": 6, "C": 7}, 7),  # clamped
        ("pick(P, A, B, C)", {"P": -1, "A": 5, "B": 6, "C": 7}, 5),
    ],
)
def test_sizes(text: str, env: dict[str, int], value: int) -> None:
    assert guards.parse(text, "int").evaluate(env) == value


def test_names_are_collected() -> None:
    assert guards.parse("M % TM == 0 and is_pow2(K)").names == {"M", "TM", "K"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("N %% 8", "expected a number, name or '(', found '%' at column 4 of 'N %% 8'"),
        ("__import__('os')", 'unexpected character "\'" at column 12 of "__import__(\'os\')"'),
        ("N.__class__", "unexpected character '.' at column 2 of 'N.__class__'"),
        (
            "open(N)",
            "unknown function 'open'; available: cdiv, is_pow2, max, min, pick at column 1 of "
            "'open(N)'",
        ),
        ("N < M < K", "comparisons do not chain; join them with 'and' at column 7 of 'N < M < K'"),
        ("N + 1", "expression must be a condition (true/false) at column 1 of 'N + 1'"),
        ("N and M", "'and' needs a condition at column 1 of 'N and M'"),
        ("min()", "expected a number, name or '(', found ')' at column 5 of 'min()'"),
        ("cdiv(N)", "cdiv() takes 2 arguments, got 1 at column 1 of 'cdiv(N)'"),
        ("", "empty expression at column 1 of ''"),
        ("(N == 1", "expected ')', found end of expression at column 8 of '(N == 1'"),
    ],
)
def test_refusals(text: str, message: str) -> None:
    with pytest.raises(GuardError) as err:
        guards.parse(text)
    assert str(err.value) == message


def test_int_expression_must_not_be_a_condition() -> None:
    with pytest.raises(GuardError, match="must be an integer"):
        guards.parse("N > 1", "int")


def test_unbound_name_and_division_by_zero_are_guard_errors() -> None:
    with pytest.raises(GuardError, match="'N' is not bound"):
        guards.parse("N > 1").holds({})
    with pytest.raises(GuardError, match="division by zero"):
        guards.parse("N % M == 0").holds({"N": 1, "M": 0})
