"""The designed sequential test on progress: ``--versus --until decided --metric progress --effect D`` (issue 62).

Why: the anytime-valid progress rule (``paired_progress``) starts with a zero bet and learns how hard to bet from
the pairs; a user who states the smallest mean progress difference worth acting on (``--effect``, on the progress
scale: mean of max_progress(B) - max_progress(A) per pair) can bet from the first pair and stop for futility, as
the designed test on success does (``design.py``). Validity never rests on the design: every exit is an e-process
crossing (Ville's inequality), so type-I error is bounded whatever the distribution of the differences; only the
pairs and the power depend on the planning model.

The rule, with y = s d (s the effect's sign, so the planned direction is "up") and e = |effect|:

- **Better** (the effect's direction, at alpha/2): K_t = prod (1 + lam_i y_i), lam_i = mean_i / second_i clipped to
  [0, cap], cap 3/4 or 0.9 (the growth-optimal bet to second order) from the pairs before i plus ``prior_weight``
  pseudo-pairs at the design's mean e and second moment v0 + e^2: the first pair is already bet on at the design's
  Kelly fraction.
  Under any distribution with E[y] <= 0 each factor has mean <= 1, so K is a nonnegative supermartingale and
  reaches 2/alpha with probability <= alpha/2 (Ville).
- **Worse** (the other direction, at alpha/2): the anytime-valid rule's aGRAPA e-process (``paired_progress``).
- **Not better by e** (futility, at ``futility``): F_t = prod (1 + mu_i (e - y_i)) with mu_i >= 0 predictable (the
  same running estimates, bet towards e - mean) and at most (3/4) / (1 - e): a supermartingale whenever E[y] >= e,
  so a policy truly better by e is called "not better by e" with probability <= ``futility``.
- **Undecided** at ``max_pairs``.

Planning model (the analogue of the binary design's independence model, planned on run A before B runs): B's
progress is run A's lifted by the effect, b = a + (1 - a) e / (1 - mean(a)) (a negative effect scales towards 0),
and the two are independent given the episode: d = b_j - a_i with i, j drawn independently from run A's values.
Under no difference d = a_j - a_i. Power and expected pairs are simulated under it (``SIMULATIONS`` streams);
``prior_weight``, ``futility`` and ``cap`` are chosen on a grid for the fewest expected pairs (at the effect plus
with no difference), and ``max_pairs`` is the fewest pairs at which the simulated power reaches the target plus two
standard errors of the simulation; the figures reported are from fresh streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CAP = 0.75
"""The other direction's and the futility bets' cap: a factor never falls below 1/4 (``betting.TRUNCATION``)."""

CAPS = (0.75, 0.9)
"""Caps of the designed direction's bets tried: a pair at most +d multiplies the capital by 1 + cap d, so the cap
bounds how fast a consistent difference decides (+0.25 a pair: 22 pairs at 3/4, 19 at 0.9); a pair at -1 keeps
1 - cap of it."""

PRIOR_WEIGHTS = (2.0, 8.0, 32.0)
"""Pseudo-pairs at the design's mean and variance tried: few adapt fast, many hold the design's bet."""

FUTILITY_SHARES = (0.5, 1.0)
"""Futility levels tried, as shares of 1 - power (a design without one was never the cheapest: measured)."""

SIMULATIONS = 1000
"""Streams simulated per candidate design under the planning model (at the effect and with no difference); the
chosen design's figures come from twice as many fresh streams."""

GRID = 2001
"""Candidate mean differences on [-1, 1] for the interval (then each end refined by bisection)."""

HORIZON = 8192
"""The most pairs a design may plan for (``lerobench plan``; a run is capped by its run A first)."""

METHOD = ("designed: a betting e-process on each pair's max_progress difference with bets planned for the effect "
          "(stats/progress_design.py), one-sided at alpha/2 in the effect's direction; the other direction by the "
          "anytime-valid aGRAPA e-process at alpha/2; futility by an e-process against the effect; the interval "
          "is every mean difference neither direction's e-process rejected")


@dataclass(frozen=True)
class ProgressDesign:
    """A designed progress test: its bets' prior, its futility level and its pair cap."""

    effect: float
    """The planned mean difference of max_progress(B) - max_progress(A) (its sign is the designed direction)."""
    prior_weight: float
    variance: float
    """v0: the variance of the difference at the effect under the planning model (the bets' prior)."""
    futility: float
    """Level of the "not better by the effect" exit (0: none)."""
    max_pairs: int
    alpha: float = 0.05
    cap: float = CAP
    """The designed direction's largest bet (``CAPS``)."""

    @property
    def sign(self) -> int:
        """+1 when the design decides "B better", -1 for "A better"."""
        return 1 if self.effect > 0 else -1


def lift(values: Any, effect: float) -> Any:
    """B's progress under the planning model: run A's values moved by ``effect`` in mean, staying in [0, 1]."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    mean = float(a.mean())
    if effect > 0:
        if mean + effect > 1 + 1e-12:
            raise ValueError(f"a mean progress difference of {effect:+g} over run A's mean {mean:.3f} exceeds 1")
        return a + (1 - a) * effect / (1 - mean)
    if mean + effect < -1e-12:
        raise ValueError(f"a mean progress difference of {effect:+g} over run A's mean {mean:.3f} is below 0")
    return a * (1 + effect / mean)


def planning_differences(values: Any, effect: float, streams: int, steps: int, seed: int) -> Any:
    """Simulated differences d (streams x steps): B lifted by ``effect`` against A, independent draws of run A."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    b = lift(a, effect) if effect != 0 else a
    rng = np.random.default_rng(seed)
    return b[rng.integers(0, len(a), (streams, steps))] - a[rng.integers(0, len(a), (streams, steps))]


def log_processes(d: Any, design: ProgressDesign) -> tuple[Any, Any, Any, Any]:
    """Log of the better, worse and futility e-processes after each pair, and the bets: arrays like ``d``.

    Vectorised over leading axes. ``d`` is max_progress(B) - max_progress(A); the bets use only pairs before each.
    """
    import numpy as np

    from lerobench.stats.betting import log_capitals, to_unit

    y = design.sign * np.asarray(d, dtype=float)
    e, w = abs(design.effect), design.prior_weight
    n = np.arange(y.shape[-1])
    zero = np.zeros(y.shape[:-1] + (1,))
    s1 = np.concatenate([zero, np.cumsum(y, axis=-1)[..., :-1]], axis=-1)
    s2 = np.concatenate([zero, np.cumsum(y * y, axis=-1)[..., :-1]], axis=-1)
    mean = (w * e + s1) / (w + n)
    second = (w * (design.variance + e * e) + s2) / (w + n)
    lam = np.clip(mean / np.maximum(second, 1e-12), 0, design.cap)
    better = np.cumsum(np.log1p(lam * y), axis=-1)
    _, worse = log_capitals(to_unit(y), 0.5)
    around = np.maximum(second - 2 * e * mean + e * e, 1e-12)  # running E[(y - e)^2]
    mu = np.clip((e - mean) / around, 0, CAP / (1 - e)) if design.futility > 0 else np.zeros_like(y)
    futile = np.cumsum(np.log1p(mu * (e - y)), axis=-1)
    return better, worse, futile, lam


def stops(d: Any, design: ProgressDesign) -> tuple[Any, Any]:
    """Per stream: pairs to the exit (max_pairs when undecided) and the exit: 1 better, -1 worse, 0 futile, 2 none.

    Checked after every pair in the order worse, better, futility (the binary design's order).
    """
    import numpy as np

    d = np.asarray(d, dtype=float)[..., : design.max_pairs]
    better, worse, futile, _ = log_processes(d, design)
    level = math.log(2 / design.alpha)
    hits = [worse >= level, better >= level]
    codes = [-1, 1]
    if design.futility > 0:
        hits.append(futile >= math.log(1 / design.futility))
        codes.append(0)
    steps = d.shape[-1]
    firsts = [np.where(h.any(axis=-1), h.argmax(axis=-1), steps) for h in hits]
    first = np.minimum.reduce(firsts)
    exit_code = np.full(first.shape, 2)
    for code, f in reversed(list(zip(codes, firsts, strict=True))):  # the earliest; ties to the first checked
        exit_code = np.where((f == first) & (first < steps), code, exit_code)
    return np.minimum(first + 1, design.max_pairs), exit_code


def decide(differences: Any, design: ProgressDesign) -> str | None:
    """The designed rule after the pairs so far: a decision, ``"undecided"`` at the cap, or None (continue)."""
    if len(differences) == 0:
        return None
    pairs, code = stops([list(differences)], design)
    better, worse = ("B better", "A better") if design.sign > 0 else ("A better", "B better")
    if int(code[0]) == 1:
        return better
    if int(code[0]) == -1:
        return worse
    if int(code[0]) == 0:
        return f"{better[0]} not better by {abs(design.effect):g}"
    return "undecided" if len(differences) >= design.max_pairs else None


def _figures(d: Any, design: ProgressDesign) -> dict[str, float]:
    import numpy as np

    pairs, code = stops(d, design)
    return {"better": float(np.mean(code == 1)), "worse": float(np.mean(code == -1)),
            "futile": float(np.mean(code == 0)), "expected_pairs": float(np.mean(pairs))}


def design_progress_test(a_values: Any, effect: float, alpha: float = 0.05, power: float = 0.8,
                         cap: int | None = None, seed: int = 0, sims: int = SIMULATIONS) -> tuple[Any, dict[str, Any]]:
    """The designed progress test for ``effect`` over run A's per-pair progress ``a_values``, and its figures.

    Returns (design or None, summary); the summary's ``reason`` says why there is none (no candidate reaches the
    power within ``cap`` pairs, or within ``HORIZON``). Figures are simulated under the planning model (module
    docstring), the type-I bound alpha/2 is Ville's (any distribution).
    """
    import numpy as np

    if effect == 0 or not -1 < effect < 1:
        raise ValueError(f"--effect on progress must be a non-zero mean difference in (-1, 1), got {effect:g}")
    a = np.asarray(a_values, dtype=float)
    lift(a, effect)  # refuses an impossible effect
    limit = min(HORIZON, cap) if cap is not None else HORIZON
    summary: dict[str, Any] = {
        "metric": "progress", "effect": effect, "alpha": alpha, "power_target": power,
        "decides": "B better" if effect > 0 else "A better", "base_mean": float(a.mean()),
        "planning_model": "B = run A's progress lifted by the effect, independent of A given the episode",
        "simulations": 2 * sims, "type_i_bound": alpha / 2}
    horizon = min(limit, 256)
    target = power + 2 * math.sqrt(power * (1 - power) / sims)  # two standard errors above: fresh streams reach it
    while True:
        d1 = planning_differences(a, effect, sims, horizon, seed)
        d0 = planning_differences(a, 0.0, sims, horizon, seed + 1)
        variance = float(np.var(d1))
        best, best_cost = None, math.inf
        for w, share, cap_ in ((w, s, c) for w in PRIOR_WEIGHTS for s in FUTILITY_SHARES for c in CAPS):
            trial = ProgressDesign(effect, w, variance, share * (1 - power), horizon, alpha, cap_)
            pairs, code = stops(d1, trial)
            at = np.where(code == 1, pairs, horizon + 1)
            n = int(np.sort(at)[min(sims, math.ceil(target * sims)) - 1])  # fewest pairs with the power
            if n > horizon:
                continue
            candidate = ProgressDesign(effect, w, variance, share * (1 - power), n, alpha, cap_)
            cost = _figures(d1, candidate)["expected_pairs"] + _figures(d0, candidate)["expected_pairs"]
            if cost < best_cost:
                best, best_cost = candidate, cost
        if best is not None or horizon >= limit:
            break
        horizon = min(limit, horizon * 4)
    if best is None:
        return None, {**summary, "max_pairs": limit,
                      "reason": f"no design reaches {100 * power:g}% power within {limit} pairs"}
    check1 = planning_differences(a, effect, 2 * sims, best.max_pairs, seed + 2)  # fresh streams for the figures
    check0 = planning_differences(a, 0.0, 2 * sims, best.max_pairs, seed + 3)
    at_effect, at_zero = _figures(check1, best), _figures(check0, best)
    summary.update(max_pairs=best.max_pairs, prior_weight=best.prior_weight, variance=round(best.variance, 6),
                   cap=best.cap,
                   futility=round(best.futility, 6), power=at_effect["better"],
                   expected_pairs_effect=at_effect["expected_pairs"], expected_pairs_h0=at_zero["expected_pairs"],
                   type_i_simulated=at_zero["better"], expected_pairs_2effect=None,
                   first_bet=round(float(log_processes(np.zeros((1, 1)), best)[3][0, 0]), 6))
    try:
        twice = planning_differences(a, 2 * effect, 2 * sims, best.max_pairs, seed + 4)
        summary["expected_pairs_2effect"] = _figures(twice, best)["expected_pairs"]
    except ValueError:  # twice the effect is not possible over run A's mean
        pass
    return best, summary


def beta_values(mean: float, concentration: float = 2.0, size: int = 4000, seed: int = 0) -> Any:
    """Run A's progress for ``lerobench plan`` (no run A yet): Beta(k mean, k (1 - mean)) draws, k = 2 by default.

    k = 2 spreads progress over [0, 1] with variance mean (1 - mean) / 3, a third of the 0-or-1 extreme's.
    """
    import numpy as np

    if mean <= 0 or mean >= 1:
        return np.full(size, float(mean))
    return np.random.default_rng(seed).beta(concentration * mean, concentration * (1 - mean), size)


def decision_interval(differences: Any, design: ProgressDesign) -> dict[str, Any]:
    """The designed rule's own interval for the mean difference, its p-value and e-values (results.json).

    Every delta at which neither the designed direction's bets (the run's own bets, now against delta: each at
    most cap / (1 + |delta|) so the factors stay positive) nor the other direction's aGRAPA e-process (against
    delta) ever reached 2/alpha: level 1 - alpha at any stop. At delta = 0 these are the decision's e-processes,
    so it excludes 0 exactly when a direction was decided. Computed on a grid (the kept set's hull, a superset:
    still valid), each end refined by bisection between grid points, rounded outward to 1e-9.
    """
    import numpy as np

    from lerobench.stats.betting import kept_interval, log_capitals, to_unit

    d = np.asarray(differences, dtype=float)
    alpha, s = design.alpha, design.sign
    level = math.log(2 / alpha)
    if len(d) == 0:
        return {"mean_difference": [-1.0, 1.0], "level": 1 - alpha, "p_value": 1.0, "method": METHOD}
    better, worse, _, lam = log_processes(d[None, :], design)
    y = s * d
    unit = to_unit(y)[None, :]

    def kept(delta: Any) -> Any:
        delta = np.asarray(delta, dtype=float).reshape(-1, 1)
        bet = np.minimum(lam, design.cap / (1 + np.abs(delta)))  # the run's bets; capped where |delta| needs it
        with np.errstate(divide="ignore"):
            near = np.cumsum(np.log1p(bet * (y[None, :] - delta)), axis=1).max(axis=1)
        _, far = log_capitals(unit, (delta + 1) / 2)
        return (near < level) & (far.max(axis=1) < level)

    hull = kept_interval(kept, -1.0, 1.0, GRID)
    # never at the true mean (probability <= alpha): the mean alone
    low, high = (float(y.mean()), float(y.mean())) if hull is None else hull
    lo_d, hi_d = (low, high) if s > 0 else (-high, -low)
    best = max(math.exp(float(better.max())), math.exp(float(worse.max())))
    return {"mean_difference": [max(-1.0, math.floor(lo_d * 1e9) / 1e9), min(1.0, math.ceil(hi_d * 1e9) / 1e9)],
            "level": 1 - alpha, "p_value": round(min(1.0, 2 / best), 6),
            "e_value_designed": round(math.exp(float(better.max())), 6),
            "e_value_other": round(math.exp(float(worse.max())), 6), "method": METHOD}
