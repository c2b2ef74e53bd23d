"""Statistics for comparing success rates: the one place p-values and intervals are computed.

Why these methods (docs/compare.md, ``/shared/reference.md``): two outcomes of the *same* episode (two
trials of it, or two policies run on the same seed) are paired, and the exact McNemar test on the
discordant pairs is the standard exact paired test; over a whole suite the pooled pairs get an exact
unconditional test and interval (``paired_difference_exact``). Runs on different episodes are compared with Boschloo's
exact unconditional test. The p-values come from scipy, cross-checked in tests/test_stats.py against
statsmodels or published worked examples; the pooled paired one is checked by exact enumeration.

Heavy imports (scipy, numpy) stay inside the functions so ``lerobench --help`` stays instant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


# -- unpaired runs (different seeds or episodes) -------------------------------------------------------

EXACT_UNCONDITIONAL_MAX_N = 400
"""Largest ``n_a + n_b`` for Boschloo's test: it costs ~1 s at 400 and ~8 s at 1,000 episodes (scipy 1.17,
one core). Above it Fisher's exact test is used: also exact (valid at any size), slightly conservative, and at
such sizes the two agree closely."""


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for one rate, unrounded (``results.wilson_interval`` rounds for files)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def wilson_interval(successes: int, n: int) -> list[float]:
    """95% Wilson interval, rounded for files: only LeRobot's ``pc_success_ci95`` (lerobench's own are exact)."""
    return file_interval(successes / n if n > 0 else None, *wilson(successes, n))


def clopper_pearson(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Clopper-Pearson exact interval for one rate: the beta quantiles (Clopper & Pearson 1934).

    It inverts two one-sided exact binomial tests, so its coverage never falls below 1 - alpha at any rate;
    Wilson's falls to ~0.91 at n = 50 where LIBERO policies live (p = 0.99, docs/statistics.md).
    Why ``scipy.special.betaincinv`` and not ``scipy.stats``: the same numbers as ``beta.ppf`` (bit for bit) and
    as ``binomtest(...).proportion_ci("exact")`` (which finds them by root search, to 1e-12; tests/test_stats.py
    checks both), without importing ``scipy.stats`` (1 s) into every short run.
    """
    return beta_interval(float(successes), float(n), alpha)


def beta_interval(x: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """The Clopper-Pearson bounds at ``x`` successes of ``n`` (both may be fractional: an effective size)."""
    if n <= 0:
        return 0.0, 1.0
    from scipy.special import betaincinv

    low = 0.0 if x <= 0 else float(betaincinv(x, n - x + 1, alpha / 2))
    high = 1.0 if x >= n else float(betaincinv(x + 1, n - x, 1 - alpha / 2))
    return low, high


def stratified_exact(strata: Sequence[tuple[int, int]], alpha: float = 0.05) -> tuple[float, float]:
    """Interval for the pooled rate of several tasks (strata) given each one's ``(successes, n)``.

    Korn & Graubard (1998): a Clopper-Pearson interval at the effective sample size
    ``n_eff = p (1 - p) / Var`` where Var is the stratified variance ``sum w_t^2 p_t (1 - p_t) / n_t``
    (w_t = n_t / N), truncated at N. Tasks with different rates make the stratified variance *smaller* than
    a single binomial's, so with the truncation the interval is never narrower than the pooled binomial one.
    At 0% or 100% the variance is 0 and it is the exact interval on the N pooled episodes.
    """
    total = sum(n for _, n in strata)
    if total <= 0:
        return 0.0, 1.0
    p = sum(s for s, _ in strata) / total
    var = sum((n / total) ** 2 * (s / n) * (1 - s / n) / n for s, n in strata if n > 0)
    n_eff = total if var <= 0 else min(total, p * (1 - p) / var)
    return beta_interval(p * n_eff, n_eff, alpha)


CI_METHOD = "clopper-pearson"
"""``ci95_method`` of a task's interval (and of any block of one task)."""

STRATIFIED_CI_METHOD = "korn-graubard stratified clopper-pearson (tasks as strata)"
"""``ci95_method`` of a group's or the suite's interval."""


def file_interval(p: float | None, low: float, high: float) -> list[float]:
    """An interval as result files store it: rounded to 6 digits and never beside the rate ``p``."""
    if p is None:
        return [0.0, 1.0]
    return [round(max(0.0, min(p, low)), 6), round(min(1.0, max(p, high)), 6)]


def exact_interval(successes: int, n: int) -> list[float]:
    """95% Clopper-Pearson interval, rounded for files: never covers below 95% (docs/statistics.md)."""
    low, high = clopper_pearson(successes, n)
    return file_interval(successes / n if n > 0 else None, low, high)


def rate_block(successes: int, n: int, key: str = "success_rate") -> dict[str, Any]:
    """``n``, ``successes``, the rate (None without episodes) and its exact 95% interval.

    The one shape a rate takes in results.json's per-trial rows and robustness.json's arms (``key`` names the
    rate there: ``success_rate`` or ``rate``).
    """
    return {"n": n, "successes": successes, key: successes / n if n else None, "ci95": exact_interval(successes, n)}


def unpaired_exact(successes_a: int, n_a: int, successes_b: int, n_b: int) -> tuple[float, str]:
    """Two-sided exact p-value for ``rate(A) == rate(B)`` from two independent samples, and the test's name.

    Boschloo's exact unconditional test (scipy) is uniformly more powerful than Fisher's exact test, which
    it uses as its statistic; above ``EXACT_UNCONDITIONAL_MAX_N`` episodes Fisher's test itself is used.
    Tables where every episode succeeded (or every one failed) carry no evidence: p = 1.
    """
    for s, n in ((successes_a, n_a), (successes_b, n_b)):
        if n < 0 or not 0 <= s <= n:
            raise ValueError(f"need 0 <= successes <= n, got {s} of {n}")
    total = successes_a + successes_b
    if n_a == 0 or n_b == 0 or total == 0 or total == n_a + n_b:
        return 1.0, "none"
    table = [[successes_b, n_b - successes_b], [successes_a, n_a - successes_a]]
    from scipy.stats import boschloo_exact, fisher_exact

    if n_a + n_b <= EXACT_UNCONDITIONAL_MAX_N:
        return float(min(1.0, boschloo_exact(table, alternative="two-sided").pvalue)), "boschloo"
    return float(min(1.0, fisher_exact(table, alternative="two-sided").pvalue)), "fisher"


def unpaired_difference_ci(successes_a: int, n_a: int, successes_b: int, n_b: int,
                           z: float = Z95) -> list[float]:
    """95% CI for ``rate(B) - rate(A)`` from independent samples: Newcombe's hybrid score interval.

    Newcombe (1998) method 10 combines the two Wilson intervals; unlike the Wald interval it stays inside
    [-1, 1] and keeps its coverage at 0% and 100%, where robot evaluations often sit.
    """
    if n_a <= 0 or n_b <= 0:
        return [-1.0, 1.0]
    p_a, p_b = successes_a / n_a, successes_b / n_b
    lo_a, hi_a = wilson(successes_a, n_a, z)
    lo_b, hi_b = wilson(successes_b, n_b, z)
    diff = p_b - p_a
    low = diff - math.sqrt((p_b - lo_b) ** 2 + (hi_a - p_a) ** 2)
    high = diff + math.sqrt((hi_b - p_b) ** 2 + (p_a - lo_a) ** 2)
    return [round(max(-1.0, low), 6), round(min(1.0, high), 6)]


# -- many tests, many tasks ------------------------------------------------------------------------------

def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control across tasks), in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def stratified_bootstrap_ci(strata: Sequence[tuple[Sequence[bool], Sequence[bool]]], paired: bool,
                            seed: int = 0, resamples: int = 10_000) -> list[float]:
    """Percentile 95% CI of the pooled ``rate(B) - rate(A)``, resampling episodes within each task.

    Stratifying keeps every task's episode count fixed, so the interval reflects episode noise, not a random
    mix of easy and hard tasks (rliable's approach). ``paired`` resamples the pairs of a task together;
    otherwise A's and B's episodes are resampled independently. Seeded: the same input gives the same CI.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    total_a = np.zeros(resamples)
    total_b = np.zeros(resamples)
    n_a = n_b = 0
    for a, b in strata:
        a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if paired:
            if len(a_arr) != len(b_arr):
                raise ValueError(f"paired strata need equal lengths, got {len(a_arr)} and {len(b_arr)}")
            if len(a_arr):
                idx = rng.integers(0, len(a_arr), size=(resamples, len(a_arr)))
                total_a += a_arr[idx].sum(axis=1)
                total_b += b_arr[idx].sum(axis=1)
        else:
            for arr, total in ((a_arr, total_a), (b_arr, total_b)):
                if len(arr):
                    total += arr[rng.integers(0, len(arr), size=(resamples, len(arr)))].sum(axis=1)
        n_a, n_b = n_a + len(a_arr), n_b + len(b_arr)
    if n_a == 0 or n_b == 0:
        return [-1.0, 1.0]
    diffs = total_b / n_b - total_a / n_a
    low, high = np.percentile(diffs, [2.5, 97.5])
    return [round(float(low), 6), round(float(high), 6)]


# -- planning: how many episodes ---------------------------------------------------------------------------

def mcnemar_power(n: int, p_gain: float, p_lost: float, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact McNemar test with ``n`` pairs.

    ``p_gain`` / ``p_lost`` are the chances that a pair is B-only / A-only success. The number of discordant
    pairs D is Binomial(n, p_gain + p_lost) and, given D, the gains are Binomial(D, p_gain / (p_gain + p_lost)),
    so the power is an exact finite sum over the test's rejection region.
    """
    import numpy as np
    from scipy.stats import binom

    p_disc = p_gain + p_lost
    if p_disc <= 0 or n < 1:
        return 0.0
    share = p_gain / p_disc
    d = np.arange(1, n + 1)
    # The null is symmetric, so the two-sided exact p-value is twice the smaller tail (as mcnemar_exact): a
    # table with d discordant pairs is rejected iff min(gains, d - gains) <= c_d, the largest k with
    # 2 * P(Bin(d, 1/2) <= k) <= alpha (-1: no table with d pairs can be rejected). Vectorised over d.
    k = binom.ppf(alpha / 2, d, 0.5)
    c = np.where(2 * binom.cdf(k, d, 0.5) <= alpha * (1 + 1e-12), k, k - 1)
    reject = np.where(c >= 0, binom.cdf(c, d, share) + binom.sf(d - c - 1, d, share), 0.0)
    return float(np.sum(binom.pmf(d, n, p_disc) * reject))


# -- the pooled paired difference: exact unconditional ---------------------------------------------------------

_NUISANCE_GRID = 64
_EXACT_BISECTIONS = 30


def _z_tails(gained: int, lost: int, n: int, delta: Any, discordance: Any) -> tuple[Any, Any]:
    """P(Z >= z_obs) and P(Z <= z_obs) when rate(B) - rate(A) = ``delta`` at each discordance (vector).

    Z = (G - L) / sqrt(G + L) (0 with no discordant pair), the McNemar score, orders the (G, L) tables; the
    discordant count D is Binomial(n, discordance) and G | D Binomial(D, theta), theta = (1 + delta /
    discordance) / 2, so each tail is one sum over D of binomial tails (exact, O(n) per parameter).
    """
    import numpy as np
    from scipy.special import betainc, gammaln

    d = np.arange(n + 1, dtype=float)
    r = np.asarray(discordance, dtype=float)[:, None]
    theta = np.clip((1 + delta / np.maximum(r, 1e-300)) / 2, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = (gammaln(n + 1) - gammaln(d + 1) - gammaln(n - d + 1)
                   + np.where(d > 0, d * np.log(r), 0.0) + np.where(n - d > 0, (n - d) * np.log1p(-r), 0.0))
    pmf = np.nan_to_num(np.exp(log_pmf))
    total = gained + lost
    z_obs = (gained - lost) / math.sqrt(total) if total else 0.0
    root = np.sqrt(d)
    # G >= ceil((D + z_obs sqrt(D)) / 2) gives Z >= z_obs; G <= floor(...) gives Z <= z_obs (D = 0: Z = 0).
    at_least = np.ceil((d + z_obs * root) / 2 - 1e-9)
    at_most = np.floor((d + z_obs * root) / 2 + 1e-9)

    def sf(k: Any) -> Any:  # P(Bin(D, theta) >= k)
        kk = np.broadcast_to(k, (r.shape[0], n + 1))
        inner = betainc(np.clip(kk, 1, None), np.maximum(d - kk + 1, 1e-12), theta)
        return np.where(kk <= 0, 1.0, np.where(kk > d, 0.0, inner))

    zero = d == 0
    upper = np.where(zero, float(z_obs <= 0), sf(at_least))
    lower = np.where(zero, float(z_obs >= 0), 1 - sf(at_most + 1))
    return (pmf * upper).sum(axis=1), (pmf * lower).sum(axis=1)


BERGER_BOOS_GAMMA = 1e-4
"""The nuisance (discordance) is maximised over its exact 1 - gamma interval only, and gamma added to each tail
(Berger & Boos 1994): still exact, and not as wide as a maximum over discordances the data rule out. The price:
this test's p-value never falls below 2 gamma (2e-4); ``paired_difference_exact`` refines a p-value there."""

SMALL_P_GAMMA = 1e-12
"""Gamma of the refining test below ``REFINE_BELOW``: floor 2e-12. Not used for the interval: gamma 1e-12 widens
its far end (10 B-only, 3 A-only of 200 pairs: +10.3 points at 1e-4, +13.6 at 1e-12)."""

REFINE_BELOW = 1e-3
"""Where the pooled p-value is the refining test's: below this (and below alpha) the gamma = 1e-4 test says only
"about 2e-4" (30 B-only of 30 pairs: 2.0e-4, where McNemar's exact p is 1.9e-9)."""


def _sup_tails(gained: int, lost: int, n: int, delta: float, plausible: tuple[float, float],
               gamma: float = BERGER_BOOS_GAMMA) -> tuple[float, float]:
    """The tails at rate(B) - rate(A) = ``delta``, maximised over the ``plausible`` discordances, + ``gamma``."""
    import numpy as np

    d_low, d_high = plausible
    low, high = max(abs(delta), d_low), d_high
    if low > high or high <= 0:
        return gamma, gamma  # no plausible discordance allows this difference
    grid = np.unique(np.concatenate([np.linspace(low, high, _NUISANCE_GRID), [(gained + lost) / n]]))
    grid = grid[(grid >= low) & (grid <= high) & (grid > 0)]
    if len(grid) == 0:
        grid = np.array([max(low, 1e-12)])
    ge, le = _z_tails(gained, lost, n, delta, grid)
    return min(1.0, float(ge.max()) + gamma), min(1.0, float(le.max()) + gamma)


def _p_at_zero(gained: int, lost: int, n: int, gamma: float) -> float:
    """The two-sided p-value of the test at rate(B) - rate(A) = 0 with Berger-Boos ``gamma``."""
    ge, le = _sup_tails(gained, lost, n, 0.0, clopper_pearson(gained + lost, n, gamma), gamma)
    return min(1.0, 2 * min(ge, le))


PAIRED_P_FLOOR = 2 * SMALL_P_GAMMA
"""The smallest p-value ``paired_difference_exact`` gives (a table more extreme than this still prints it)."""


def paired_difference_p(gained: int, lost: int, n: int, alpha: float = 0.05) -> float:
    """``paired_difference_exact``'s p-value alone (why it is refined below ``REFINE_BELOW``: there)."""
    if n <= 0:
        return 1.0
    p_value, refine_below = _p_at_zero(gained, lost, n, BERGER_BOOS_GAMMA), min(alpha, REFINE_BELOW)
    if p_value <= refine_below:
        p_value = min(refine_below, _p_at_zero(gained, lost, n, SMALL_P_GAMMA))
    return p_value


def paired_difference_exact(gained: int, lost: int, n: int, alpha: float = 0.05) -> tuple[list[float], float]:
    """Exact unconditional interval and p-value for rate(B) - rate(A) over ``n`` pairs (pooled over tasks).

    Inverts the test that orders tables by the McNemar score and takes the largest tail over the discordance
    (Suissa & Shuster 1991), restricted to the discordances the data allow (Berger & Boos 1994,
    ``BERGER_BOOS_GAMMA``): every rate difference whose tails both exceed alpha/2 for *some* plausible
    discordance is kept, so the interval covers whatever the discordance (coverage checked by exact
    enumeration in tests/test_stats.py). The p-value is the same test's at a difference of 0, so it is <= alpha
    exactly when the interval leaves 0 out. Unlike a bootstrap it cannot collapse when every pair of a task went
    the same way.

    Below ``T = min(alpha, REFINE_BELOW)`` that test cannot go under its floor 2 gamma (2e-4), so there the p-value
    is ``min(T, p')``, p' the same test at gamma ``SMALL_P_GAMMA``. Still exact: for a level a < T, p <= a needs
    p' <= a; for a >= T, p <= a exactly when the first test's p <= a. And still one test with the interval at
    ``alpha``, since either way p <= alpha exactly when the first test's is.
    """
    if n <= 0:
        return [-1.0, 1.0], 1.0
    observed = (gained - lost) / n
    plausible = clopper_pearson(gained + lost, n, BERGER_BOOS_GAMMA)

    def inside(delta: float) -> tuple[bool, bool]:
        ge, le = _sup_tails(gained, lost, n, delta, plausible)
        return ge > alpha / 2, le > alpha / 2

    def end(lower: bool) -> float:
        edge = -1.0 if lower else 1.0
        if inside(edge)[0 if lower else 1]:
            return edge
        keep, out = observed, edge
        for _ in range(_EXACT_BISECTIONS):
            mid = (keep + out) / 2
            if inside(mid)[0 if lower else 1]:
                keep = mid
            else:
                out = mid
        return out

    p_value = paired_difference_p(gained, lost, n, alpha)
    low, high = end(True), end(False)
    return [round(math.floor(low * 1e6) / 1e6, 6), round(math.ceil(high * 1e6) / 1e6, 6)], p_value
