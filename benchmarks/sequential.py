"""Validity and cost of lerobench's sequential statistics: the tables of docs/statistics.md.

(a) coverage of the rate's confidence sequence at every n <= 500, (b) the paired test's rejection rate under H0
with continuous monitoring, (c) completion-order vs episode-index-order updating, (d) exact coverage of
Clopper-Pearson vs Wilson, (e) pairs the sequential paired test needs against a fixed-n exact McNemar test at
equal power, (f) episodes ``--until halfwidth=H`` needs against a fixed-n Clopper-Pearson interval.

Usage: python benchmarks/sequential.py   (about a minute on one core)
"""

import time

import numpy as np

from lerobench.stats.binomial import clopper_pearson
from lerobench.stats.sequential import beta_binomial_cs, simulate_paired_stops
from lerobench.stats.validity import (
    cs_coverage,
    cs_table,
    exact_coverage,
    fixed_n_for_power,
    h0_rejection_rate,
    order_coverage,
    paired_rates,
)

STREAMS = 2000


def coverage() -> None:
    table = cs_table(500)
    print("(a) beta-binomial confidence sequence (Jeffreys mixture, 95%): share of 2,000 streams covered at "
          "every n <= 500")
    print("| p | covered at every n |\n|---|---|")
    for p in (0.02, 0.1, 0.5, 0.8, 0.95, 0.99):
        print(f"| {p} | {cs_coverage(p, STREAMS, 500, table=table):.3f} |")


def h0() -> None:
    print("\n(b) paired test under H0, consulted after every pair up to 1,000 pairs: share of 2,000 streams that "
          "ever decide (alpha 0.05)")
    print("| discordant share | rejected |\n|---|---|")
    for d in (0.05, 0.1, 0.2, 0.3, 0.5):
        print(f"| {d} | {h0_rejection_rate(d, STREAMS, 1000):.4f} |")


def order() -> None:
    table = cs_table(200)
    print("\n(c) p = 0.5, successes take 60-120 steps, failures 500; confidence sequence checked after every "
          "episode up to 200: share of 2,000 streams covered at every n")
    print("| workers | completion order | episode-index order |\n|---|---|---|")
    for w in (1, 2, 4, 8, 16):
        r = order_coverage(w, STREAMS, 200, table=table)
        print(f"| {w} | {r['completion']:.3f} | {r['index']:.3f} |")


def exact() -> None:
    grid = np.round(np.arange(0.01, 1.0, 0.01), 2)
    print("\n(d) exact coverage of nominal 95% intervals (enumerating every outcome); minimum over p = 0.01..0.99")
    print("| n | Clopper-Pearson min | Wilson min | CP at 0.92 / 0.98 / 0.99 | Wilson at 0.92 / 0.98 / 0.99 |")
    print("|---|---|---|---|---|")
    for n in (10, 20, 50):
        cp = [exact_coverage("clopper-pearson", n, p) for p in grid]
        wi = [exact_coverage("wilson", n, p) for p in grid]
        at = (0.92, 0.98, 0.99)
        print(f"| {n} | {min(cp):.3f} | {min(wi):.3f} | "
              + " / ".join(f"{exact_coverage('clopper-pearson', n, p):.3f}" for p in at) + " | "
              + " / ".join(f"{exact_coverage('wilson', n, p):.3f}" for p in at) + " |")


def stopping(base: float = 0.6) -> None:
    print(f"\n(e) pairs to detect rate(B) - rate(A) over rate(A) = {base} (A, B independent given the episode), "
          f"alpha 0.05; sequential: 2,000 simulated runs")
    print("| effect | fixed-n McNemar, 80% power | sequential mean | sequential 90th pct | capped for 80% power: cap "
          "| capped: mean | saved vs fixed-n |")
    print("|---|---|---|---|---|---|---|")
    for effect in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3):
        p_gain, p_lost = paired_rates(base, effect)
        fixed = fixed_n_for_power(p_gain, p_lost)
        horizon = int(max(200, 8 * fixed * (p_gain + p_lost)))
        s = simulate_paired_stops(p_gain, p_lost, streams=STREAMS, max_discordant=horizon)
        saved = 1 - s["mean_capped"] / fixed
        print(f"| {effect} | {fixed} | {s['mean']:.0f} | {s['p90']:.0f} | {s['cap_at_power']:.0f} | "
              f"{s['mean_capped']:.0f} | {100 * saved:+.0f}% |")


def halfwidth() -> None:
    print("\n(f) episodes per task until the 95% interval's half-width is <= H (all streams decided; 2,000 runs)")
    print("| p | H | CS stop: mean | CS stop: 90th pct | fixed-n Clopper-Pearson n with half-width <= H at p |")
    print("|---|---|---|---|---|")
    table = cs_table(600)
    rng = np.random.default_rng(0)
    n = np.arange(1, 601)
    for p in (0.5, 0.8, 0.95, 1.0):
        sums = np.cumsum(rng.random((STREAMS, 600)) < p, axis=1)
        width = (table[1][n, sums] - table[0][n, sums]) / 2
        for h in (0.1, 0.05):
            stop = np.where((width <= h).any(axis=1), (width <= h).argmax(axis=1) + 1, 601)
            fixed = next((m for m in range(1, 2000) if _cp_half(round(p * m), m) <= h), None)
            print(f"| {p} | {h} | {stop.mean():.0f} | {np.percentile(stop, 90):.0f} | {fixed} |")


def _cp_half(k: int, n: int) -> float:
    low, high = clopper_pearson(k, n)
    return (high - low) / 2


if __name__ == "__main__":
    start = time.perf_counter()
    for part in (coverage, h0, order, exact, stopping, halfwidth):
        part()
    print(f"\n{time.perf_counter() - start:.0f} s; the checks of tests/test_sequential.py use the same functions")
    assert beta_binomial_cs(0, 0) == (0.0, 1.0)
