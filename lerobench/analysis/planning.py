"""``lerobench plan``: how many episodes a paired comparison needs, fixed-n and sequential.

The fixed-n figure is exact (``stats.mcnemar_power``); the sequential one is simulated (the test's stopping
time has no closed form). Both are in *pairs*: (task, episode) pairs over the whole comparison.
"""

from __future__ import annotations

import math
from typing import Any

from lerobench.stats.sequential import simulate_paired_stops
from lerobench.stats.validity import fixed_n_for_power, paired_rates


def plan_comparison(base: float, diff: float, discordance: float | None = None, alpha: float = 0.05,
                    power: float = 0.8, sims: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Pairs needed to tell rate(B) = base + diff from rate(A) = base, fixed-n and with ``--until decided``."""
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
    }
