"""Episodes needed to detect a 10- or 20-point difference with 80% power at alpha 0.05 (docs/compare.md).

Paired (same seed): exact power of the two-sided exact McNemar test, lerobench.stats.binomial.mcnemar_power.
Unpaired (different seeds): normal-approximation sample size for two independent proportions (statsmodels);
the exact Boschloo test needs about as many.

Usage: python benchmarks/power_table.py
"""

from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import proportion_effectsize

from lerobench.stats.binomial import mcnemar_power

ALPHA, POWER = 0.05, 0.8


def paired_n(p_gain: float, p_lost: float) -> int:
    """Smallest n from which the exact power stays >= POWER (exact power zig-zags with n)."""
    low, high = 4, 8
    while mcnemar_power(high, p_gain, p_lost, ALPHA) < POWER:
        low, high = high, high * 2
    while high - low > 1:  # bisection on the (nearly) monotone power, then walk to a stable point
        mid = (low + high) // 2
        low, high = (low, mid) if mcnemar_power(mid, p_gain, p_lost, ALPHA) >= POWER else (mid, high)
    n = high
    while not all(mcnemar_power(m, p_gain, p_lost, ALPHA) >= POWER for m in range(n, n + 4)):
        n += 1
    return n


def unpaired_n(p_a: float, p_b: float) -> int:
    effect = abs(proportion_effectsize(p_b, p_a))
    return int(-(-NormalIndPower().solve_power(effect, alpha=ALPHA, power=POWER, ratio=1.0) // 1))


print("| A -> B | paired, policies mostly agree (5% of episodes A-only) | paired, outcomes independent | unpaired |")
print("|---|---|---|---|")
for p_a, p_b in ((0.5, 0.6), (0.8, 0.9), (0.5, 0.7), (0.7, 0.9)):
    agree = paired_n(p_b - p_a + 0.05, 0.05)
    independent = paired_n(p_b * (1 - p_a), p_a * (1 - p_b))
    print(f"| {100 * p_a:.0f}% -> {100 * p_b:.0f}% | {agree} | {independent} | {unpaired_n(p_a, p_b)} per run |")
