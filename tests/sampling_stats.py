"""Goodness-of-fit helpers for the sampling tests (no scipy in the environment)."""

from __future__ import annotations

import math

import numpy as np


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's chi-square of observed counts against exact cell probabilities.

    Cells expected below `min_expected` are pooled into one; returns (statistic, degrees of
    freedom, p-value). The p-value uses the Wilson-Hilferty normal approximation, accurate
    to a few percent for the dozens of degrees of freedom used here.
    """
    n = counts.sum()
    expected = probs.ravel() * n
    observed = counts.ravel().astype(np.float64)
    big = expected >= min_expected
    e = np.append(expected[big], expected[~big].sum())
    o = np.append(observed[big], observed[~big].sum())
    if e[-1] < min_expected:  # too little mass to pool: fold it into the smallest big cell
        e[np.argmin(e[:-1])] += e[-1]
        o[np.argmin(e[:-1])] += o[-1]
        e, o = e[:-1], o[:-1]
    stat = float(((o - e) ** 2 / e).sum())
    dof = len(e) - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return stat, dof, 0.5 * math.erfc(z / math.sqrt(2))
