"""Statistics for comparing success rates: the one place p-values and intervals are computed.

Why these methods (see docs and ``/shared/reference.md``): two outcomes of the *same* episode (two
trials of it, or two policies run on the same seed) are paired, and the exact McNemar test on the
discordant pairs is the standard exact paired test. Its p-value comes from scipy's exact binomial
test, and the tests cross-check it against statsmodels' ``mcnemar(exact=True)``.

Heavy imports (scipy) stay inside the functions so ``lerobench --help`` stays instant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054
"""Two-sided 95% standard-normal quantile."""


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts ``b`` and ``c``.

    Under the null each discordant pair is a fair coin, so the p-value is the two-sided exact binomial
    test of ``min(b, c)`` successes in ``b + c`` trials at 0.5. With no discordant pair it is 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(min(1.0, binomtest(min(b, c), b + c, 0.5).pvalue))


def paired_difference_ci(gained: int, lost: int, n: int, z: float = Z95) -> list[float]:
    """95% CI for ``rate(B) - rate(A)`` over ``n`` pairs: Bonett-Price adjusted Wald interval.

    ``gained`` pairs failed under A and succeeded under B, ``lost`` the reverse. The plain Wald
    interval collapses to a point when there is no discordant pair and under-covers for small n;
    adding one pseudo-pair to each discordant cell (Bonett & Price, 2012) fixes both at no cost.
    """
    if n <= 0:
        return [-1.0, 1.0]
    p_gain = (gained + 1) / (n + 2)
    p_lost = (lost + 1) / (n + 2)
    diff = p_gain - p_lost
    half = z * math.sqrt(max(0.0, (p_gain + p_lost - diff * diff) / (n + 2)))
    observed = (gained - lost) / n
    low = max(-1.0, min(observed, diff - half))
    high = min(1.0, max(observed, diff + half))
    return [round(low, 6), round(high, 6)]


@dataclass(frozen=True)
class PairedComparison:
    """Outcome of comparing paired successes A (e.g. trial 0) with B (e.g. trial k)."""

    n: int
    """Number of pairs."""
    gained: int
    """Pairs where A failed and B succeeded."""
    lost: int
    """Pairs where A succeeded and B failed."""
    delta: float | None
    """``rate(B) - rate(A)``; None without pairs."""
    ci95: list[float]
    p_value: float
    """Exact two-sided McNemar p-value."""


def compare_paired(a: Sequence[bool], b: Sequence[bool]) -> PairedComparison:
    """Compare paired outcomes ``a[i]`` vs ``b[i]`` (same episode): difference, CI, exact McNemar p."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    gained = sum(1 for x, y in zip(a, b, strict=True) if not x and y)
    lost = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    n = len(a)
    return PairedComparison(
        n=n, gained=gained, lost=lost, delta=(gained - lost) / n if n else None,
        ci95=paired_difference_ci(gained, lost, n), p_value=mcnemar_exact(gained, lost),
    )
