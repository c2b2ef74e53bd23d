"""Simulations and exact enumerations that show the sequential methods are valid (tests and benchmarks).

Each function returns the figure a claim in docs/statistics.md rests on; tests/test_sequential.py runs
them at the issue's sizes (vectorised: a few seconds) and ``benchmarks/sequential.py`` prints the tables.
"""

from __future__ import annotations

import heapq
from typing import Any

from lerobench.stats.sequential import beta_binomial_cs, paired_evalues


def cs_table(max_n: int, alpha: float = 0.05) -> tuple[Any, Any]:
    """Bounds of the beta-binomial confidence sequence for every (n, successes), n <= max_n: ``low[n, s]``."""
    import numpy as np

    n, s = np.tril_indices(max_n + 1)  # successes <= n only: the rest is never indexed
    low = np.zeros((max_n + 1, max_n + 1))
    high = np.ones((max_n + 1, max_n + 1))
    low[n, s], high[n, s] = beta_binomial_cs(s, n, alpha)
    return low, high


def cs_coverage(p: float, streams: int = 2000, max_n: int = 500, alpha: float = 0.05, seed: int = 0,
                table: tuple[Any, Any] | None = None) -> float:
    """Share of simulated Bernoulli(p) streams whose confidence sequence covers p at *every* n <= max_n."""
    import numpy as np

    low, high = table if table is not None else cs_table(max_n, alpha)
    rng = np.random.default_rng(seed)
    sums = np.cumsum(rng.random((streams, max_n)) < p, axis=1)
    n = np.arange(1, max_n + 1)
    covered = (low[n, sums] <= p) & (p <= high[n, sums])
    return float(covered.all(axis=1).mean())


def h0_rejection_rate(discordance: float, streams: int = 2000, max_pairs: int = 1000, alpha: float = 0.05,
                      seed: int = 0) -> float:
    """Share of streams under H0 (discordant pairs are fair coins) where the paired test ever decides.

    The test is consulted after every one of ``max_pairs`` pairs, of which a share ``discordance`` is discordant.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    discordant = rng.random((streams, max_pairs)) < discordance
    b_wins = discordant & (rng.random((streams, max_pairs)) < 0.5)
    wins = np.cumsum(b_wins, axis=1)
    losses: np.ndarray = np.cumsum(discordant, axis=1) - wins
    # The e-values depend only on (wins, losses): tabulate them once, then look every stream up.
    grid = np.arange(max_pairs + 1)
    e_b, e_a = paired_evalues(grid[:, None], grid[None, :])
    decided = (e_b >= 2 / alpha) | (e_a >= 2 / alpha)
    return float(decided[wins, losses].any(axis=1).mean())


def completion_order(durations: list[float], workers: int) -> list[int]:
    """The order in which episodes 0..n-1 finish when ``workers`` take them in index order as they free up."""
    free = [(0.0, w) for w in range(workers)]
    finished = []
    for episode, duration in enumerate(durations):
        start, worker = heapq.heappop(free)
        finished.append((start + duration, episode))
        heapq.heappush(free, (start + duration, worker))
    return [episode for _, episode in sorted(finished)]


def order_coverage(workers: int, streams: int = 2000, max_n: int = 200, p: float = 0.5, alpha: float = 0.05,
                   seed: int = 0, table: tuple[Any, Any] | None = None) -> dict[str, float]:
    """Coverage at every n of the rate's confidence sequence updated in completion vs episode-index order.

    Successes end early (60-120 steps), failures run to the limit (500 steps): in completion order the
    first outcomes seen are mostly successes, and the sequence is biased even though each outcome is fair.
    """
    import numpy as np

    low, high = table if table is not None else cs_table(max_n, alpha)
    rng = np.random.default_rng(seed)
    outcomes = rng.random((streams, max_n)) < p
    durations = np.where(outcomes, rng.uniform(60, 120, (streams, max_n)), 500.0)
    completion = np.array([outcomes[i, completion_order(list(durations[i]), workers)] for i in range(streams)])
    n = np.arange(1, max_n + 1)
    result = {}
    for name, seq in (("completion", completion), ("index", outcomes)):
        sums = np.cumsum(seq, axis=1)
        result[name] = float(((low[n, sums] <= p) & (p <= high[n, sums])).all(axis=1).mean())
    return result


def exact_coverage(method: str, n: int, p: float, alpha: float = 0.05) -> float:
    """Exact coverage of a fixed-n interval (``clopper-pearson`` or ``wilson``) at rate p, by enumerating k."""
    from scipy.stats import binom

    from lerobench.stats.binomial import clopper_pearson, wilson

    total = 0.0
    for k in range(n + 1):
        low, high = clopper_pearson(k, n, alpha) if method == "clopper-pearson" else wilson(k, n)
        if low <= p <= high:
            total += float(binom.pmf(k, n, p))
    return total


def fixed_n_for_power(p_gain: float, p_lost: float, power: float = 0.8, alpha: float = 0.05,
                      max_n: int = 20_000) -> int | None:
    """Smallest pair count (found by bisection) at which the exact McNemar test reaches ``power``.

    The exact test's power saw-tooths in n, so this is the first n of the bisection bracket, not a guarantee
    that every larger n has the power.
    """
    from lerobench.stats.binomial import mcnemar_power

    if p_gain + p_lost <= 0 or p_gain == p_lost:
        return None
    if mcnemar_power(max_n, p_gain, p_lost, alpha) < power:
        return None
    low, high = 1, max_n
    while low < high:
        mid = (low + high) // 2
        if mcnemar_power(mid, p_gain, p_lost, alpha) >= power:
            high = mid
        else:
            low = mid + 1
    return low


def paired_rates(base: float, diff: float, discordance: float | None = None) -> tuple[float, float]:
    """(p_gain, p_lost) for rate(A) = base and rate(B) = base + diff.

    Without ``discordance`` A and B are taken as independent given the episode (p_gain = (1 - a) b, p_lost =
    a (1 - b)): the most discordant case for positively correlated policies, so the counts are conservative.
    With it, p_gain + p_lost = discordance and p_gain - p_lost = diff.
    """
    a, b = base, base + diff
    if not (0 <= a <= 1 and 0 <= b <= 1):
        raise ValueError(f"rates must lie in [0, 1]: base {a}, base + diff {b}")
    if discordance is None:
        return (1 - a) * b, a * (1 - b)
    if discordance < abs(diff) or discordance > 1:
        raise ValueError(f"discordance must lie in [|diff|, 1] = [{abs(diff)}, 1], got {discordance}")
    return (discordance + diff) / 2, (discordance - diff) / 2

