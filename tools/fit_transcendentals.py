"""Refit the coefficients of templates/_common/transcendentals.cl.j2 and print them as float
literals (an offline aid for whoever changes an approximation; needs mpmath, which clforge
does not depend on: `pip install mpmath`).

Each fit is a near-minimax one for the relative error, by Lawson's iteration (iteratively
reweighted least squares) on a dense grid in a Chebyshev basis, against mpmath at 30 digits;
the rational one (tanh) linearizes P - f Q = 0 and reweights by the previous Q
(Sanathanan-Koerner). The printed maximum is the fit's own error, before float rounding: the
errors of the kernels themselves are measured on the device by
tests/test_transcendental_accuracy.py.

    python tools/fit_transcendentals.py
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np

mp.mp.dps = 30


def lawson(
    a: np.ndarray, g: np.ndarray, w: np.ndarray, iters: int = 300
) -> tuple[float, np.ndarray]:
    """Coefficients c minimizing max |w (a c - g)| (approximately), and that maximum."""
    lam = np.ones(len(g)) / len(g)
    best = (math.inf, np.zeros(a.shape[1]))
    for _ in range(iters):
        s = np.sqrt(lam) * w
        c, *_ = np.linalg.lstsq(a * s[:, None], g * s, rcond=None)
        e = np.abs(a @ c - g) * w
        if e.max() < best[0]:
            best = (float(e.max()), c)
        lam = lam * e
        lam /= lam.sum()
    return best


def monomials(cheb: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Chebyshev coefficients on [lo, hi] as monomial coefficients, lowest first."""
    poly = np.polynomial.Chebyshev(cheb, domain=[lo, hi]).convert(kind=np.polynomial.Polynomial)
    return np.asarray(poly.coef)


def show(name: str, coeffs: np.ndarray, err: float) -> None:
    text = ", ".join(f"{np.float32(c):.9g}f" for c in coeffs)
    print(f"{name} (lowest first; fit error {err:.3g}):\n  {text}")


def fit_exp() -> None:
    """e^r = 1 + r + r^2 (c2 + c3 r + ... + c6 r^4) on |r| <= ln2 / 2."""
    r = np.linspace(-math.log(2) / 2, math.log(2) / 2, 20001)
    exact = np.array([float(mp.exp(mp.mpf(float(v)))) for v in r])
    g = np.array(
        [
            float((mp.exp(mp.mpf(float(v))) - 1 - mp.mpf(float(v))) / mp.mpf(float(v)) ** 2)
            if v
            else 0.5
            for v in r
        ]
    )
    a = np.stack([r**k for k in range(5)], 1)
    err, c = lawson(a, g, r**2 / exact, iters=200)
    show("exp: c2 .. c6", c, err)


def fit_tanh(x_max: float = 9.0, m: int = 4, n: int = 4) -> None:
    """tanh(x) / x = P(x^2) / Q(x^2), Q(0) = 1, on 0 < x <= x_max."""
    s_max = x_max * x_max
    x = np.sqrt(np.linspace(0, s_max, 40001))[1:]
    x = np.unique(np.concatenate([x, np.linspace(1e-3, 1.0, 2000)]))
    f = np.array([float(mp.tanh(mp.mpf(v)) / mp.mpf(v)) for v in x])
    u = 2 * x * x / s_max - 1
    tp = np.polynomial.chebyshev.chebvander(u, m)
    tq = np.polynomial.chebyshev.chebvander(u, n)
    q_prev = np.ones_like(x)
    lam = np.ones_like(x) / len(x)
    best = (math.inf, np.zeros(m + 1), np.zeros(n + 1))
    for _ in range(2000):
        a = np.concatenate([tp, -(f[:, None] * tq[:, 1:])], 1)
        w = np.sqrt(lam) / (np.abs(q_prev) * f)
        c, *_ = np.linalg.lstsq(a * w[:, None], f * tq[:, 0] * w, rcond=None)
        pc, qc = c[: m + 1], np.concatenate([[1.0], c[m + 1 :]])
        p, q = tp @ pc, tq @ qc
        e = np.abs(p / q - f) / f
        if ((q > 0).all() or (q < 0).all()) and e.max() < best[0]:
            best = (float(e.max()), pc, qc)
        q_prev = q
        lam = lam * (e + 1e-30)
        lam /= lam.sum()
    err, pc, qc = best
    p_mono, q_mono = monomials(pc, 0, s_max), monomials(qc, 0, s_max)
    show("tanh: P", p_mono / q_mono[0], err)
    show("tanh: Q", q_mono / q_mono[0], err)


def fit_erfc(z_max: float = 10.6, p: float = 0.5, deg: int = 9) -> None:
    """erfc(z) = t Q(t) e^-z^2, t = 1 / (1 + p z), on 0 <= z <= z_max (printed: Q / 2)."""
    z = np.linspace(0, z_max, 8001)
    erfcx = np.array([float(mp.erfc(mp.mpf(v)) * mp.exp(mp.mpf(v) ** 2)) for v in z])
    t = 1 / (1 + p * z)
    g = erfcx / t
    lo = float(t.min())
    a = np.polynomial.chebyshev.chebvander((2 * t - lo - 1) / (1 - lo), deg)
    err, c = lawson(a, g, 1 / g, iters=400)
    show(f"gelu erf: Q / 2 in t = 1 / (1 + {p} z)", monomials(c, lo, 1.0) / 2, err)


if __name__ == "__main__":
    fit_exp()
    fit_tanh()
    fit_erfc()
