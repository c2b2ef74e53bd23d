"""``lerobench plan``: how many episodes a paired comparison needs, fixed-n, designed and anytime-valid.

The fixed-n figure is exact (``stats.mcnemar_power``), and so is the designed test's (``analysis.design``:
``--until decided --effect``); the anytime-valid one is simulated (its stopping time has no closed form).
All are in *pairs*: (task, episode) pairs over the whole comparison.
"""

from __future__ import annotations

import math
from typing import Any

from lerobench.stats.sequential import simulate_paired_stops
from lerobench.stats.validity import fixed_n_for_power, paired_rates


def plan_comparison(base: float, diff: float, discordance: float | None = None, alpha: float = 0.05,
                    power: float = 0.8, sims: int = 2000, seed: int = 0, progress_base: float | None = None,
                    progress_diff: float | None = None) -> dict[str, Any]:
    """Pairs needed to tell rate(B) = base + diff from rate(A) = base, fixed-n and with ``--until decided``.

    With ``progress_base`` and ``progress_diff`` (mean progress of A, and B - A) also the designed progress test's
    pairs (``plan_progress``) under ``"progress"``.
    """
    if diff == 0:
        raise ValueError("--diff must be non-zero: there is no difference to detect")
    p_gain, p_lost = paired_rates(base, diff, discordance)
    fixed = fixed_n_for_power(p_gain, p_lost, power, alpha, max_n=200_000)
    # Simulate far enough that nearly every run decides: ~8x the discordant pairs a fixed-n test expects.
    expected = (fixed or 1000) * (p_gain + p_lost)
    horizon = int(min(20_000, max(200, math.ceil(8 * expected))))
    sim = simulate_paired_stops(p_gain, p_lost, alpha, streams=sims, max_discordant=horizon, seed=seed, power=power)
    return {
        "base": base, "diff": diff, "alpha": alpha, "power": power,
        "assumption": "A and B independent given the episode" if discordance is None else
                      f"discordant pairs {discordance:g} (given)",
        "p_gain": p_gain, "p_lost": p_lost,
        "fixed_n": fixed,
        "sequential": {"mean": sim["mean"], "p90": sim["p90"], "undecided": sim["undecided"],
                       "b_better": float(sim["b_better"].mean()), "cap_at_power": sim["cap_at_power"],
                       "mean_capped": sim["mean_capped"], "simulations": sims, "max_discordant": horizon},
        "designed": plan_design(base, diff, discordance, alpha, power)[1],
        **({"progress": plan_progress(progress_base, progress_diff, alpha, power, sims)}
           if progress_base is not None and progress_diff is not None else {}),
    }


def plan_progress(mean: float, diff: float, alpha: float = 0.05, power: float = 0.8,
                  sims: int = 2000) -> dict[str, Any]:
    """The designed progress test (``--metric progress --effect diff``) over a run A of mean progress ``mean``.

    Run A's progress is not known before it runs: Beta(2 mean, 2 (1 - mean)) stands for it
    (``progress_design.beta_values``), said in the summary's ``run_a_model``.
    """
    from lerobench.stats.progress_design import beta_values, design_progress_test

    if not 0 <= mean <= 1 or not 0 <= mean + diff <= 1:
        raise ValueError(f"a mean progress difference of {diff:g} over mean progress {mean:g} gives B a mean of "
                         f"{mean + diff:g}: impossible (both must lie in [0, 1])")
    _, summary = design_progress_test(beta_values(mean), diff, alpha, power, sims=max(50, sims // 2))
    return {**summary, "run_a_model": f"progress of A ~ Beta({2 * mean:g}, {2 * (1 - mean):g})"}


def plan_design(base: float, diff: float, discordance: float | None = None, alpha: float = 0.05,
                power: float = 0.8, cap: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The designed sequential test for ``--effect diff`` over rate(A) = ``base``, and its exact figures.

    The design decides the effect's direction ("B better" for diff > 0, "A better" below) one-sidedly at
    alpha / 2 -- the share of alpha the two-sided fixed-n McNemar test spends on that side; the other side is
    left to the anytime-valid e-process at alpha / 2 (valid at any stop), so the whole is two-sided level
    alpha. Pairs: one discordance rate r (``validity.paired_rates`` at the effect) converts discordant pairs to
    pairs under no difference and at the effect alike (under no difference the discordance is unknown; r is
    what the fixed-n figure assumes). The cap is 1.5x the fixed-n pairs, lowered to ``cap`` if given.
    Returns (design or None, summary); the summary's ``reason`` says why there is no design.
    """
    from lerobench.stats.design import MAX_OVER_FIXED, design_test, operating, walk

    if diff == 0:
        raise ValueError("--effect must be non-zero: there is no difference to detect")
    p_gain, p_lost = paired_rates(base, diff, discordance)
    r = p_gain + p_lost
    theta1 = max(p_gain, p_lost) / r
    fixed = fixed_n_for_power(p_gain, p_lost, power, alpha, max_n=200_000)
    summary: dict[str, Any] = {"alpha": alpha, "power_target": power, "effect": diff, "base": base,
                               "decides": "B better" if diff > 0 else "A better", "discordance": r,
                               "theta1": theta1, "fixed_n": fixed}
    if fixed is None:
        return None, {**summary, "reason": "no fixed-n test reaches the power within 200,000 pairs"}
    max_pairs = math.floor(MAX_OVER_FIXED * fixed)
    if cap is not None and cap < max_pairs:
        max_pairs = cap
    design = design_test(theta1, r, r, max_pairs, alpha / 2, power)
    if design is None:
        return None, {**summary, "max_pairs": max_pairs,
                      "reason": f"no design reaches {100 * power:g}% power within {max_pairs} pairs"}
    h0, h1 = operating(design, 0.5, r), operating(design, theta1, r)
    # type-I of the discordant walk without the pair cap: the bound for every discordance rate (the cap only
    # turns would-be decisions into "undecided").
    type_i = float(walk(design.actions, 0.5)["b_better"].sum())
    from lerobench.stats.stagewise import rows

    summary.update(max_pairs=max_pairs, max_discordant=design.max_discordant, type_i=type_i, table=rows(design.actions),
                   power=h1["b_better"], expected_pairs_h0=h0["expected_pairs"],
                   expected_pairs_effect=h1["expected_pairs"], expected_pairs_2effect=None)
    try:
        g2, l2 = paired_rates(base, 2 * diff, discordance)
        r2 = g2 + l2
        summary["expected_pairs_2effect"] = operating(design, max(g2, l2) / r2, r2)["expected_pairs"]
    except ValueError:  # base + 2 diff outside [0, 1], or a given discordance below 2 |diff|
        pass
    return design, summary
