"""A designed sequential paired test: fewer pairs than fixed-n McNemar at the same alpha and power.

Why: the anytime-valid rule (``sequential.paired_evalues``) needs no planned effect, and pays for it: against a
fixed-n test sized for the true effect it needs about as many pairs (docs/statistics.md). A user who knows the
smallest effect worth acting on (``--effect``) can have Wald's savings instead. The design works on the
discordant pairs only (concordant pairs carry no information): after m discordant pairs of which b are B wins,
a table says *continue*, *B better*, *A better* or *no difference of the planned size* (accept).

How the table is built: the Bayes-optimal truncated test for three simple hypotheses on theta = P(B wins |
discordant) -- H0 theta = 1/2, H+ theta = theta1, H- theta = 1 - theta1 -- by backward induction over (m, b)
(the Kiefer-Weiss / Lorden construction; Jennison & Turnbull ch. 5). The sampling cost is expected *pairs*
(m / discordance), so the test is cheap under H0 and at the effect alike; the Lagrange weights on the two
errors are searched so that type-I <= alpha and power >= the target hold *exactly*.

Exact operating characteristics: a forward recursion over the discordant counts gives, for any theta, where
the walk stops and with which decision (O(M^2)); the pairs' count is the m-th discordant pair's index, so
expected pairs and the chance of running into the pair cap follow from binomial sums at a discordance rate.
Type-I error depends on the discordant walk only: under H0 every discordant pair is a fair coin whatever the
discordance, and reaching the pair cap undecided never rejects, so the stated type-I is a bound for *every*
discordance rate. Power and expected pairs are exact at the assumed discordance (the independence model of
``validity.paired_rates`` unless given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CONTINUE, B_BETTER, ACCEPT = 0, 1, 3
"""Actions of the design's table at (m discordant, b B-wins)."""

DECISIONS = {B_BETTER: "better", ACCEPT: "not better by the effect"}

MAX_OVER_FIXED = 1.5
"""The pair cap as a multiple of the fixed-n test's pairs (issue 36: at most 1.5x)."""

_SEARCH_STEPS = 9

_CAP_REACHED = 0.02

_WEIGHTS = (1.0, 0.3)
"""Relative cost of a pair under H0 tried (1 under H1): cells with few discordant pairs gain from 0.3."""


@dataclass(frozen=True)
class Design:
    """A truncated sequential test on the discordant pairs, and what it was designed for."""

    theta1: float
    """P(B wins | discordant) at the planned effect (> 1/2; the test is symmetric, so 1 - theta1 is H-)."""
    max_pairs: int
    """The pair cap: the run stops here undecided if the table has not decided (never exceeded)."""
    max_discordant: int
    """Truncation of the discordant walk: the table decides at the latest at this many discordant pairs."""
    actions: Any
    """int8 array (max_discordant + 1) x (max_discordant + 1): the action at (m, b), b <= m."""

    def decide(self, b_wins: int, a_wins: int) -> str | None:
        """The decision after ``b_wins`` + ``a_wins`` discordant pairs, or None (continue)."""
        m = min(b_wins + a_wins, self.max_discordant)
        action = int(self.actions[m, min(b_wins, m)])
        return DECISIONS.get(action)


def build_table(theta1: float, max_discordant: int, cost0: float, cost1: float, lam: float, mu: float) -> Any:
    """Backward induction: the action (continue, B better, accept) at every (m, b) minimising the Bayes risk.

    Risk, each path weighted by its H0 likelihood (values are ratios to H0's): sampling costs ``cost0`` per
    discordant pair under H0 and ``cost1`` under H1 (theta1), ``lam`` per unit of type-I error and ``mu`` per
    unit of missed decision under H1. With R(m, b) = (2 theta1)^b (2 (1-theta1))^(m-b) the likelihood ratio,
    stopping costs min(lam, mu R) and continuing at least cost0 + cost1 R, so only the b with
    cost0 / mu < R < lam / cost1 can continue: the recursion runs over that band alone (O(M x band)).
    """
    import numpy as np

    M = max_discordant
    actions = np.zeros((M + 1, M + 1), dtype=np.int8)
    up, down = math.log(2 * theta1), math.log(2 * (1 - theta1))
    step = up - down

    def stop(m: int, b: Any) -> Any:
        return np.minimum(lam, mu * np.exp(np.minimum(b * step + m * down, 700.0)))

    nxt_lo, nxt_val = 0, np.zeros(0)
    for m in range(M, -1, -1):
        # B better where lam <= mu R, i.e. at b >= b_star; accept below.
        b_star = math.ceil((math.log(lam / mu) - m * down) / step - 1e-12)
        row = actions[m, : m + 1]
        row[:] = ACCEPT
        row[max(0, min(m + 1, b_star)):] = B_BETTER
        lo = max(0, math.floor((math.log(cost0 / mu) - m * down) / step))
        hi = min(m, math.ceil((math.log(lam / cost1) - m * down) / step))
        if m == M or lo > hi:
            nxt_lo, nxt_val = lo, np.zeros(0)
            continue
        b = np.arange(lo, hi + 2)  # the next row's b and b + 1 for b in [lo, hi]
        ahead = stop(m + 1, b)
        inside = (b >= nxt_lo) & (b < nxt_lo + len(nxt_val))
        ahead[inside] = nxt_val[b[inside] - nxt_lo]
        ratio = np.exp(np.minimum(b[:-1] * step + m * down, 700.0))
        go = cost0 + cost1 * ratio + (ahead[1:] + ahead[:-1]) / 2
        here = stop(m, b[:-1])
        cont = go < here
        row[lo: hi + 1] = np.where(cont, CONTINUE, row[lo: hi + 1])
        nxt_lo, nxt_val = lo, np.where(cont, go, here)
    return actions


def walk(actions: Any, theta: float) -> dict[str, Any]:
    """Exact stopping distribution of the discordant walk at P(B wins | discordant) = ``theta``.

    Returns per m the probability of stopping there with each decision (``b_better``, ``accept``) and
    ``survive[m]``: the chance the walk has not stopped after m discordant pairs. Only the continuing states
    carry mass, so the recursion keeps their span alone.
    """
    import numpy as np

    M = actions.shape[0] - 1
    out = {k: np.zeros(M + 1) for k in ("b_better", "accept")}
    survive = np.zeros(M + 1)
    lo, p = 0, np.ones(1)
    for m in range(M + 1):
        act = actions[m, lo: lo + len(p)]
        out["b_better"][m] = p[act == B_BETTER].sum()
        out["accept"][m] = p[act == ACCEPT].sum()
        p = np.where(act == CONTINUE, p, 0.0)
        survive[m] = p.sum()
        alive = np.flatnonzero(p)
        if m == M or len(alive) == 0:
            break
        lo, p = lo + alive[0], p[alive[0]: alive[-1] + 1]
        nxt = np.zeros(len(p) + 1)
        nxt[:-1] += p * (1 - theta)
        nxt[1:] += p * theta
        p = nxt
    return {**out, "survive": survive}


def pair_figures(stops: dict[str, Any], discordance: float, max_pairs: int) -> dict[str, float]:
    """Decision chances and expected pairs with the pair cap, at a discordance rate (exact binomial sums).

    The walk's m-th step is the m-th discordant pair; it arrives within ``max_pairs`` pairs with chance
    P(Binomial(max_pairs, r) >= m). Expected pairs = sum over n < max_pairs of P(not stopped after n pairs),
    with the discordant count after n pairs Binomial(n, r) (a recursion over n).
    """
    import numpy as np
    from scipy.stats import binom

    M = len(stops["survive"]) - 1
    arrives = binom.sf(np.arange(M + 1) - 1, max_pairs, discordance)  # 1 at m = 0
    survive = stops["survive"]
    q = np.zeros(M + 1)
    q[0] = 1.0
    expected = 0.0
    for _ in range(max_pairs):
        expected += float(q @ survive)
        q[1:] = q[1:] * (1 - discordance) + q[:-1] * discordance
        q[0] *= 1 - discordance
    return {"b_better": float(stops["b_better"] @ arrives), "accept": float(stops["accept"] @ arrives),
            "undecided_at_cap": float(q @ survive), "expected_pairs": expected}


def operating(design: Design, theta: float, discordance: float) -> dict[str, float]:
    """Exact operating characteristics of ``design`` at ``theta`` and a discordance rate."""
    return pair_figures(walk(design.actions, theta), discordance, design.max_pairs)


def _bisect(lo: float, hi: float, ok: Any) -> tuple[float, Any] | None:
    """Smallest x in [lo, hi] (log10 scale, ``_SEARCH_STEPS`` halvings) with ``ok(10**x)`` not None, and that value."""
    best = ok(10 ** hi)
    if best is None:
        return None
    for _ in range(_SEARCH_STEPS):
        mid = (lo + hi) / 2
        got = ok(10 ** mid)
        if got is not None:
            hi, best = mid, got
        else:
            lo = mid
    return hi, best


def _search(theta1: float, M: int, cost0: float, cost1: float, alpha: float, power_ok: Any) -> Any:
    """The cheapest table found with type-I <= ``alpha`` and ``power_ok``: bisection on the two error weights.

    For each type-I weight ``lam`` the miss weight ``mu`` (a multiple of ``lam``) is the smallest giving the
    power; ``lam`` is then
    the smallest with type-I <= alpha. Larger weights mean a longer test, so the cheapest feasible design sits
    where both constraints bind. None if no weight reaches the power.
    """
    def for_lam(lam: float) -> Any:
        # mu as a multiple of lam: what shapes the table is their ratio (and their size against the costs).
        found = _bisect(-4.0, 3.0, lambda ratio: (lambda t: t if power_ok(t) else None)(
            build_table(theta1, M, cost0, cost1, lam, lam * ratio)))
        if found is None:
            return None
        table = found[1]
        return table if float(walk(table, 0.5)["b_better"].sum()) <= alpha else None

    found = _bisect(0.0, 8.0, for_lam)
    return None if found is None else found[1]


def design_test(theta1: float, discordance0: float, discordance1: float, max_pairs: int, alpha: float = 0.025,
                power: float = 0.8) -> Design | None:
    """The design with type-I <= ``alpha`` (one-sided: "B better" when theta = 1/2) and power >= ``power``.

    ``theta1`` is P(B wins | discordant) at the effect; ``discordance0`` / ``discordance1`` the share of
    discordant pairs with no difference and at the effect (they turn discordant pairs into pairs). Power
    counts the pair cap: the walk must decide "B better" before ``max_pairs`` pairs. Among cost weightings
    of the two hypotheses (``_WEIGHTS``) the design with the fewest expected pairs (H0 plus effect) is kept.
    None when no table within ``max_pairs`` reaches the power.
    """
    import numpy as np
    from scipy.stats import binom

    if not 0.5 < theta1 <= 1:
        raise ValueError(f"theta1 = P(B wins | discordant) at the effect must lie in (1/2, 1], got {theta1}")
    if theta1 == 1:
        return _every_discordant_pair_for_b(max_pairs, discordance1, alpha, power)
    # Truncate the walk at a discordant count the pair cap reaches in 98% of runs at the effect's discordance:
    # the table then decides (nearly always) before the cap, where an undecided stop would cost power.
    M = max(1, int(binom.ppf(_CAP_REACHED, max_pairs, discordance1)))
    arrives = binom.sf(np.arange(M + 1) - 1, max_pairs, discordance1)

    def power_ok(table: Any) -> bool:
        return float(walk(table, theta1)["b_better"] @ arrives) >= power

    best, best_cost = None, math.inf
    for weight in _WEIGHTS:
        table = _search(theta1, M, weight / discordance0, 1 / discordance1, alpha, power_ok)
        if table is None:
            continue
        cost = walk(table, 0.5)["survive"].sum() / discordance0 + walk(table, theta1)["survive"].sum() / discordance1
        if cost < best_cost:
            best, best_cost = table, cost
    if best is None:
        return None
    return Design(theta1=theta1, max_pairs=max_pairs, max_discordant=M, actions=best)


def _every_discordant_pair_for_b(max_pairs: int, discordance: float, alpha: float, power: float) -> Design | None:
    """The design when the effect leaves every discordant pair to B (theta1 = 1: A at 0% and B better, or 100%).

    Run A at 0% is the normal first A/B on a hard suite.

    The likelihood ratio of H+ to H0 after m discordant pairs is 2^m while all went B's way, and 0 after any
    pair went A's way. So the most powerful test of any length is: "B better" after the first k discordant pairs
    all went B's way, with k the smallest count at which that is rare under H0 (2^-k <= alpha: type-I exactly
    2^-k); any pair going A's way rules the effect out ("not better by the effect", H0's side). Power at the
    effect is the chance that k discordant pairs arrive within the pair cap (each one is B's there); None when
    that chance misses ``power``.
    """
    import numpy as np
    from scipy.stats import binom

    k = max(1, math.ceil(math.log2(1 / alpha) - 1e-12))
    if max_pairs < k or float(binom.sf(k - 1, max_pairs, discordance)) < power:
        return None
    actions = np.full((k + 1, k + 1), ACCEPT, dtype=np.int8)
    for m in range(k):
        actions[m, m] = CONTINUE
    actions[k, k] = B_BETTER
    return Design(theta1=1.0, max_pairs=max_pairs, max_discordant=k, actions=actions)
