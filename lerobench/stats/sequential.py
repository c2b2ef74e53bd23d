"""Anytime-valid statistics: confidence sequences and e-processes that stay valid at a data-dependent stop.

A fixed-n interval is only valid if ``n`` was fixed before looking; "run 20, look, add 20 more" breaks it.
The tools here are built on nonnegative (super)martingales, so by Ville's inequality the chance that they
*ever* exclude the truth (or reject a true null) over an unbounded stream is at most alpha: a run may stop
the moment the answer is known (docs/statistics.md).

- ``beta_binomial_cs``: Robbins' beta-binomial mixture confidence sequence for one Bernoulli rate (a task's
  success rate), Jeffreys prior Beta(1/2, 1/2) by default: mass near 0 and 1, where robot policies live.
- ``subgaussian_cs``: Robbins' normal-mixture confidence sequence for the running mean of independent
  [0, 1] outcomes whose rates may differ (a suite's tasks): valid for the *average* rate of what was run.
- ``paired_evalues``: one-sided mixture likelihood-ratio e-processes for H0: P(B wins | discordant) = 1/2 on
  the discordant pairs of a paired comparison; "B better" when ``e_b`` reaches 2/alpha, "A better" when ``e_a``
  does (two-sided level alpha).
- ``paired_difference_cs``: a confidence sequence for rate(B) - rate(A) from the gain and loss rates.

Every function is vectorised over numpy arrays (the validity tests simulate thousands of streams at once).
Updates must arrive in a fixed order (episode index), never in the order episodes finish (see stopping.py).
"""

from __future__ import annotations

import math
from typing import Any

JEFFREYS = 0.5
"""Beta prior parameter of the rate's mixture: Beta(1/2, 1/2) favours rates near 0 and 1."""

PAIRED_PRIOR = 1.0
"""Beta prior parameter of the paired test's mixture over P(B wins | discordant): uniform."""

_BISECTIONS = 45


def _log_mixture(successes: Any, n: Any, p: Any, prior: float) -> Any:
    """Log of the beta-binomial mixture martingale at rate ``p`` (convex in p, minimal at successes / n)."""
    from scipy.special import betaln, xlog1py, xlogy

    return (betaln(prior + successes, prior + n - successes) - betaln(prior, prior)
            - xlogy(successes, p) - xlog1py(n - successes, -p))


def beta_binomial_cs(successes: Any, n: Any, alpha: float = 0.05, prior: float = JEFFREYS) -> tuple[Any, Any]:
    """Anytime-valid (1 - alpha) confidence sequence for a Bernoulli rate after ``successes`` of ``n``.

    The set of rates p whose mixture martingale  B(a+S, a+n-S) / B(a, a) / (p^S (1-p)^(n-S))  is below 1/alpha
    (Robbins 1970). The martingale is a likelihood ratio of the mixture against p, so under the true p it has
    mean 1 at every n and by Ville's inequality it ever reaches 1/alpha with probability at most alpha. The set
    is an interval (the log is convex in p); its ends are found by bisection, rounded outward. Arrays broadcast.
    """
    import numpy as np

    s = np.asarray(successes, dtype=float)
    n = np.asarray(n, dtype=float)
    s, n = np.broadcast_arrays(s, n)
    threshold = math.log(1 / alpha)
    phat = np.where(n > 0, s / np.maximum(n, 1), 0.5)
    bounds = []
    for inside, outside in ((phat, np.zeros_like(phat)), (phat, np.ones_like(phat))):
        inner, outer = inside.copy(), outside.copy()
        for _ in range(_BISECTIONS):
            mid = (inner + outer) / 2
            out = _log_mixture(s, n, mid, prior) >= threshold
            outer = np.where(out, mid, outer)
            inner = np.where(out, inner, mid)
        # Keep the outer point when it is itself inside (the interval reaches 0 or 1).
        edge_inside = _log_mixture(s, n, outside, prior) < threshold
        bounds.append(np.where(edge_inside, outside, outer))
    low, high = bounds
    low = np.where(n > 0, low, 0.0)
    high = np.where(n > 0, high, 1.0)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def optimal_rho(n_opt: float, alpha: float, variance: float = 0.25) -> float:
    """Prior precision of the normal mixture that makes the boundary tightest near ``n_opt`` observations.

    Howard et al. (2021), eq. (3.11): rho = V / (2 log(1/alpha) + log(1 + 2 log(1/alpha))) with V = variance * n.
    """
    log_term = 2 * math.log(1 / alpha)
    return variance * max(1.0, n_opt) / (log_term + math.log(1 + log_term))


def subgaussian_cs(total: Any, n: Any, alpha: float = 0.05, rho: float | None = None,
                   variance: float = 0.25) -> tuple[Any, Any]:
    """Anytime-valid confidence sequence for the average rate of ``n`` independent [0, 1] outcomes summing to ``total``.

    Each outcome is sub-Gaussian with variance proxy 1/4 whatever its own rate, so
    ``exp(lambda * (S_n - sum of rates) - lambda^2 n / 8)`` is a supermartingale for every lambda; mixing
    lambda over a normal prior of precision ``rho`` gives the two-sided boundary
    ``|S_n - sum of rates| < sqrt((V + rho) log((V + rho) / (rho alpha^2)))``, V = n / 4 (Robbins' normal
    mixture; Howard et al. 2021). It needs no common rate, so it covers a suite whose tasks differ, as long as
    episodes come in a fixed order (tasks interleaved round by round: then the average is the suite mean).
    """
    import numpy as np

    total = np.asarray(total, dtype=float)
    n = np.asarray(n, dtype=float)
    rho = rho if rho is not None else optimal_rho(100, alpha, variance)
    v = variance * n
    radius = np.sqrt((v + rho) * np.log((v + rho) / (rho * alpha * alpha)))
    safe = np.maximum(n, 1)
    low = np.where(n > 0, np.clip((total - radius) / safe, 0, 1), 0.0)
    high = np.where(n > 0, np.clip((total + radius) / safe, 0, 1), 1.0)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def paired_evalues(b_wins: Any, a_wins: Any, prior: float = PAIRED_PRIOR) -> tuple[Any, Any]:
    """E-values for "B better" and "A better" after ``b_wins`` + ``a_wins`` discordant pairs.

    Under H0 every discordant pair is a fair coin. ``e_b`` is the likelihood ratio of a Beta(prior, prior)
    mixture over win chances above 1/2 (the prior's half, renormalised) against 1/2:
    ``e_b = 2 * 2^D * B(a+W, a+L) / B(a, a) * P(theta > 1/2 | Beta(a+W, a+L))``. It is a martingale under H0 and
    a supermartingale whenever B's true win chance is at most 1/2, so "B better" is wrongly claimed with
    probability <= alpha/2 when ``e_b >= 2/alpha`` decides; ``e_a`` mirrors it. ``(e_b + e_a) / 2`` is the full
    two-sided mixture. Concordant pairs carry no information and leave both unchanged.
    """
    import numpy as np
    from scipy.special import betainc, betaln

    w = np.asarray(b_wins, dtype=float)
    lost = np.asarray(a_wins, dtype=float)
    log_common = math.log(2) + (w + lost) * math.log(2) + betaln(prior + w, prior + lost) - betaln(prior, prior)
    with np.errstate(divide="ignore", over="ignore"):  # inf: overwhelming evidence, still >= any threshold
        e_b = np.exp(log_common + np.log(betainc(prior + lost, prior + w, 0.5)))
        e_a = np.exp(log_common + np.log(betainc(prior + w, prior + lost, 0.5)))
    return (float(e_b), float(e_a)) if e_b.ndim == 0 else (e_b, e_a)


def paired_decision(b_wins: int, a_wins: int, alpha: float = 0.05) -> str | None:
    """``"B better"``, ``"A better"`` or None (keep going), from the paired e-values at level ``alpha``."""
    e_b, e_a = paired_evalues(b_wins, a_wins)
    if e_b >= 2 / alpha:
        return "B better"
    if e_a >= 2 / alpha:
        return "A better"
    return None


def paired_difference_cs(gained: Any, lost: Any, n: Any, alpha: float = 0.05) -> tuple[Any, Any]:
    """Anytime-valid confidence sequence for rate(B) - rate(A) after ``n`` pairs (``gained`` B-only, ``lost`` A-only).

    rate(B) - rate(A) = P(gain) - P(loss); each of the two rates gets a beta-binomial confidence sequence at
    alpha/2 (a union bound), and the difference's interval is [low_gain - high_loss, high_gain - low_loss].
    With no discordant pair at all it still narrows like 1/n, which is what lets a rerun of the same policy be
    called equivalent. It treats pairs as exchangeable draws (tasks interleaved round by round); the decision
    test (``paired_evalues``) needs no such assumption.
    """
    lo_g, hi_g = beta_binomial_cs(gained, n, alpha / 2)
    lo_l, hi_l = beta_binomial_cs(lost, n, alpha / 2)
    return lo_g - hi_l, hi_g - lo_l


def first_crossing(crossed: Any) -> Any:
    """Per row of a boolean (streams x steps) array, the index of the first True (steps if none)."""
    import numpy as np

    crossed = np.asarray(crossed, dtype=bool)
    return np.where(crossed.any(axis=1), crossed.argmax(axis=1), crossed.shape[1])


def simulate_paired_stops(p_gain: float, p_lost: float, alpha: float = 0.05, streams: int = 2000,
                          max_discordant: int = 4000, seed: int = 0, power: float = 0.8) -> dict[str, Any]:
    """Pairs the sequential paired test needs to decide, by simulation (``lerobench plan``, benchmarks).

    The e-values move only on discordant pairs, so the test is simulated on a stream of discordant pairs
    (B wins with chance p_gain / (p_gain + p_lost)); the number of pairs that took is the D-th discordant pair,
    i.e. D plus a negative-binomial count of concordant pairs. Returns, per simulated run, ``pairs`` (inf if
    still undecided after ``max_discordant`` discordant pairs) and ``b_better`` (the decision was "B better"),
    and the summary figures ``mean``/``p90`` (over decided runs), ``undecided``, and at equal power:
    ``cap_at_power`` is the cap by which a share ``power`` of runs has decided "B better", ``mean_capped`` the
    expected pairs of the test truncated there (the same power as a fixed-n test with that power).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    p_disc = p_gain + p_lost
    empty = {"pairs": np.full(streams, np.inf), "b_better": np.zeros(streams, bool), "mean": None, "p90": None,
             "undecided": 1.0, "cap_at_power": None, "mean_capped": None}
    if p_disc <= 0:
        return empty
    wins = np.cumsum(rng.random((streams, max_discordant)) < p_gain / p_disc, axis=1)
    steps = np.arange(1, max_discordant + 1)
    e_b, e_a = paired_evalues(wins, steps - wins)
    need = first_crossing((e_b >= 2 / alpha) | (e_a >= 2 / alpha))
    decided = need < max_discordant
    if not decided.any():
        return empty
    rows = np.flatnonzero(decided)
    b_better = np.zeros(streams, bool)
    b_better[rows] = e_b[rows, need[rows]] >= 2 / alpha
    pairs = np.full(streams, np.inf)
    discordant = need[rows] + 1
    pairs[rows] = discordant + rng.negative_binomial(discordant, p_disc)
    out = {"pairs": pairs, "b_better": b_better, "mean": float(pairs[rows].mean()),
           "p90": float(np.percentile(pairs[rows], 90)), "undecided": float(1 - decided.mean()),
           "cap_at_power": None, "mean_capped": None}
    wins_at = np.sort(pairs[b_better])
    if len(wins_at) >= power * streams:
        cap = float(wins_at[max(0, int(np.ceil(power * streams)) - 1)])
        out["cap_at_power"] = cap
        out["mean_capped"] = float(np.minimum(pairs, cap).mean())
    return out


def _log_one_sided(b_wins: Any, a_wins: Any, theta0: Any, prior: float, upper: bool) -> Any:
    """Log of the one-sided mixture likelihood ratio against P(B wins | discordant) = ``theta0``.

    The prior Beta(prior, prior) restricted to theta > theta0 (``upper``) or below, renormalised; at theta0 = 1/2
    it is ``paired_evalues``. Under any theta on the other side of theta0 (or at it) each pair multiplies it by
    at most 1 in expectation, so it is a nonnegative supermartingale there (Ville's inequality applies).
    """
    import numpy as np
    from scipy.special import betainc, betaincc, betaln, xlog1py, xlogy

    w, lost = np.asarray(b_wins, dtype=float), np.asarray(a_wins, dtype=float)
    part = betaincc if upper else betainc
    with np.errstate(divide="ignore"):
        return (betaln(prior + w, prior + lost) + np.log(part(prior + w, prior + lost, theta0))
                - betaln(prior, prior) - np.log(part(prior, prior, theta0))
                - xlogy(w, theta0) - xlog1py(lost, -theta0))


def paired_theta_cs(b_wins: int, a_wins: int, alpha: float = 0.05, prior: float = PAIRED_PRIOR) -> tuple[float, float]:
    """Anytime-valid (1 - alpha) confidence sequence for P(B wins | discordant), from the decision's e-processes.

    The theta0 at which neither one-sided e-process (``_log_one_sided``) reaches 2/alpha. At theta0 = 1/2 these
    are the e-values ``paired_decision`` uses, so the sequence excludes 1/2 exactly when the run decided, in the
    decided direction (the interval of the e-process's own decision, issue 44). Ends by bisection, rounded out.
    """
    threshold = math.log(2 / alpha)

    def end(upper: bool) -> float:
        # upper=True: the e-process for "B better than theta0" rejects theta0 below the lower end.
        inner, outer = b_wins / (b_wins + a_wins) if b_wins + a_wins else 0.5, 0.0 if upper else 1.0
        if float(_log_one_sided(b_wins, a_wins, outer, prior, upper)) < threshold:
            return outer
        for _ in range(_BISECTIONS):
            mid = (inner + outer) / 2
            if float(_log_one_sided(b_wins, a_wins, mid, prior, upper)) >= threshold:
                outer = mid
            else:
                inner = mid
        return outer

    low, high = end(True), end(False)
    return math.floor(low * 1e6) / 1e6, math.ceil(high * 1e6) / 1e6


EPROCESS_INTERVAL_METHOD = ("anytime-valid: theta = P(B wins | discordant) where neither one-sided mixture e-process "
                            "(the decision's, at every theta0) reaches 2/alpha")


def paired_decision_interval(gained: int, lost: int, pairs: int, alpha: float = 0.05) -> dict[str, Any]:
    """The e-process rule's own interval and p-value at a stop (results.json ``decision_interval``, no design).

    The interval is ``paired_theta_cs``; the p-value the anytime-valid one, min(1, 2 / max e-value), which is
    <= alpha exactly when a direction was decided. The mapping to rate(B) - rate(A) is at the observed
    discordance, labelled so.
    """
    low, high = paired_theta_cs(gained, lost, alpha)
    e_b, e_a = paired_evalues(gained, lost)
    return {**theta_reading([low, high], gained, lost, pairs), "level": 1 - alpha,
            "p_value": round(min(1.0, 2 / max(float(e_b), float(e_a))), 6), "method": EPROCESS_INTERVAL_METHOD}


def theta_reading(theta_b: list[float], gained: int, lost: int, pairs: int) -> dict[str, Any]:
    """An interval for P(B wins | discordant) and its reading as rate(B) - rate(A) at the observed discordance."""
    discordance = (gained + lost) / pairs if pairs else 0.0
    return {"theta_b": theta_b,
            "difference_at_observed_discordance": [round(discordance * (2 * t - 1), 6) for t in theta_b],
            "observed_discordance": round(discordance, 6),
            "mapping": "rate(B) - rate(A) = discordance x (2 theta_b - 1), at the observed discordance"}
