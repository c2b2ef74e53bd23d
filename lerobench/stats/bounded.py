"""Intervals for the mean of values in [0, 1] (an episode's task progress) that never cover below nominal.

Why not a t-interval: progress piles up at 0 and 1 (a LIBERO goal's fraction of conditions, a policy that always
or never finishes), and a normal-theory interval under-covers there exactly as Wald does for a rate (ten episodes
all at 1.0 give the point [1, 1]). Two intervals with guaranteed coverage at every n, each checked by simulation
in ``tests/test_bounded.py``:

- **One task: the betting interval** (Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
  betting", JRSS-B 2024, the hedged capital process with the predictable plug-in bets of their fixed-n
  interval). For each candidate mean m two gamblers bet, one that the mean is above m, one below; m is
  rejected once either's capital (each holding half) reaches 1/α. Under the true mean both capitals are
  nonnegative martingales, so by Ville's inequality the chance that either ever gets there is at most α: the
  interval (the m never rejected, at any prefix of the episodes) covers with probability ≥ 1 − α whatever the
  distribution on [0, 1]. It adapts to the variance, which makes it up to half as wide as Hoeffding–Bentkus
  on spread values (on values all at 1.0 it is the wider: n = 10 gives [0.53, 1], HB [0.69, 1]).
  The bets depend on the order of the values, so the caller passes them in episode order (never finish order).
- **Several tasks: Hoeffding–Bentkus** (Bates, Angelopoulos, Lei, Malik, Jordan, "Distribution-free,
  risk-controlling prediction sets", JACM 2021, §3.1): the smaller of Hoeffding's (1963, Theorem 1) and
  Bentkus's (2004) tail bounds for a sum of *independent* variables in [0, 1], each side at α/2. Neither bound
  needs the variables to share a distribution, only their average mean, so it covers the mean over tasks
  whose episodes differ by task (the betting martingale needs a common mean at every step). The binomial tail
  is scipy's.

Heavy imports (numpy, scipy) stay inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BETTING_METHOD = "betting (Waudby-Smith & Ramdas 2024, hedged capital)"
"""``ci95_method`` of a one-task progress interval."""
HB_METHOD = "hoeffding-bentkus (independent episodes of several tasks)"
"""``ci95_method`` of an interval over several tasks' episodes."""

_TRUNCATION = 0.5
"""The bets' cap c (each bet at most c/m or c/(1 - m)), the paper's recommended 1/2."""


def betting_interval(values: Sequence[float], alpha: float = 0.05) -> tuple[float, float]:
    """The (1 - alpha) betting interval for the mean of ``values`` (each in [0, 1], in episode order).

    The paper's hedged-capital interval with its predictable plug-in bets for a fixed n:
    λ_t = sqrt(2 log(2/α) / (n σ̂²_{t-1})), σ̂² the running variance around the running mean (both with one
    pseudo-observation, 1/4 and 1/2), capped at c/m (the bet above m) and c/(1 - m) (below); the capital
    process of each side starts at 1/2 (hedged, θ = 1/2), and m is rejected where either reaches 1/α at any
    prefix (Ville's inequality covers the whole sequence). Every factor 1 + λ(x - m) of the upward capital
    falls as m grows (and the downward one's rises), so the rejected candidates are the m below one point and
    above another: each end is found by bisection to 1e-9 and rounded outward.
    """
    import numpy as np

    x = _checked(values)
    n = len(x)
    if n == 0:
        return (0.0, 1.0)
    t = np.arange(1, n + 1)
    mean = (0.5 + np.cumsum(x)) / (t + 1)  # μ̂_t
    var = (0.25 + np.cumsum((x - mean) ** 2)) / (t + 1)  # σ̂²_t
    before = np.concatenate([[0.25], var[:-1]])  # σ̂²_{t-1}: predictable
    bet = np.sqrt(2 * math.log(2 / alpha) / (n * before))
    threshold = math.log(2 / alpha)  # half the capital on each side: 1/2 · K ≥ 1/α

    def rejected_from_above(m: float) -> bool:  # the gambler betting "mean > m" got rich: m is too low
        lam = bet if m == 0.0 else np.minimum(bet, _TRUNCATION / m)
        return bool(np.cumsum(np.log1p(lam * (x - m))).max() >= threshold)

    def rejected_from_below(m: float) -> bool:
        lam = bet if m == 1.0 else np.minimum(bet, _TRUNCATION / (1 - m))
        return bool(np.cumsum(np.log1p(-lam * (x - m))).max() >= threshold)

    low = _edge(rejected_from_above, rising=False)
    high = _edge(rejected_from_below, rising=True)
    if low > high:  # every candidate rejected (never at the true mean): the sample mean alone
        low = high = float(x.mean())
    return (max(0.0, low - 1e-9), min(1.0, high + 1e-9))


def _edge(rejected, rising: bool) -> float:  # type: ignore[no-untyped-def]
    """Where a monotone rejection ends: the lowest kept m (``rising`` False) or the highest (True).

    One bisection for both sides: ``kept_end`` is the end of [0, 1] that is kept unless everything is rejected,
    and the answer is the rejected side of the boundary, to 1e-9.
    """
    kept_end, rejected_end = (0.0, 1.0) if rising else (1.0, 0.0)
    if not rejected(rejected_end):
        return rejected_end
    if rejected(kept_end):
        return kept_end
    kept, gone = kept_end, rejected_end
    while abs(gone - kept) > 1e-9:
        mid = (kept + gone) / 2
        kept, gone = (kept, mid) if rejected(mid) else (mid, gone)
    return gone


def hoeffding_bentkus_interval(values: Sequence[float], alpha: float = 0.05) -> tuple[float, float]:
    """The (1 - alpha) Hoeffding–Bentkus interval for the average mean of independent ``values`` in [0, 1].

    Upper end: the largest m whose p-value min(exp(-n·kl(x̄ ∧ m, m)), e·P(Binomial(n, m) ≤ ⌈n x̄⌉)) is above
    α/2 (by bisection to 1e-9, then rounded up); the lower end is the upper end of 1 - values, mirrored.
    """
    x = _checked(values)
    n = len(x)
    if n == 0:
        return (0.0, 1.0)
    total = float(sum(x))
    high = _hb_upper(total / n, n, alpha / 2)
    low = 1.0 - _hb_upper(1.0 - total / n, n, alpha / 2)
    return (max(0.0, low), min(1.0, high))


def _hb_upper(mean: float, n: int, delta: float) -> float:
    """Largest m with the Hoeffding–Bentkus p-value of "true mean ≥ m" above ``delta``, given the sample mean."""
    if mean >= 1.0:
        return 1.0
    from scipy.stats import binom

    k = math.ceil(n * mean - 1e-9)

    def p_value(m: float) -> float:
        hoeffding = math.exp(-n * _kl(min(mean, m), m))
        bentkus = math.e * float(binom.cdf(k, n, m))
        return min(hoeffding, bentkus)

    lo, hi = mean, 1.0
    if p_value(hi - 1e-12) > delta:
        return 1.0
    while hi - lo > 1e-9:  # p_value decreases in m above the sample mean
        mid = (lo + hi) / 2
        if p_value(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def _kl(a: float, b: float) -> float:
    """Bernoulli Kullback–Leibler divergence kl(a || b), the exponent of Hoeffding's Theorem 1."""
    out = 0.0
    if a > 0:
        out += a * math.log(a / b)
    if a < 1:
        out += (1 - a) * math.log((1 - a) / (1 - b))
    return out


def _checked(values: Sequence[float]):  # type: ignore[no-untyped-def]
    import numpy as np

    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size and (not np.all(np.isfinite(x)) or x.min() < 0.0 or x.max() > 1.0):
        raise ValueError(f"values must lie in [0, 1], got min {x.min()} and max {x.max()}")
    return x
