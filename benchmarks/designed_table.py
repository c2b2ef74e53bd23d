"""Expected pairs at equal power: designed sequential vs fixed-n exact McNemar vs anytime-valid (docs/statistics.md).

Cells: delta = 0.05, 0.10, 0.20 at base rates 0.5, 0.8, 0.95 (B = base + delta, or base - delta where that
would reach 1), alpha 0.05 two-sided, power 0.8, A and B independent given the episode (the discordance model
of ``lerobench plan``), the same discordance with no difference. Designed and fixed-n figures are exact;
the anytime-valid rule's are simulated (2,000 runs, capped where 80% have decided, as in part e of
benchmarks/sequential.py).

Usage: python benchmarks/designed_table.py
"""

from lerobench.stats.planning import plan_design
from lerobench.stats.sequential import simulate_paired_stops
from lerobench.stats.validity import paired_rates

print("| base | effect | fixed-n McNemar | designed: expected at effect | designed: no difference | designed: "
      "at 2x effect | designed: max | anytime-valid, capped at equal power |")
print("|---|---|---|---|---|---|---|---|")
for base in (0.5, 0.8, 0.95):
    for delta in (0.05, 0.10, 0.20):
        effect = delta if base + delta < 1 else -delta
        _, s = plan_design(base, effect)
        fixed = s["fixed_n"]
        p_gain, p_lost = paired_rates(base, effect)
        sim = simulate_paired_stops(max(p_gain, p_lost), min(p_gain, p_lost), 0.05, streams=2000,
                                    max_discordant=int(8 * fixed * (p_gain + p_lost)) + 200)
        twice = s["expected_pairs_2effect"]
        print(f"| {base:g} | {effect:+g} | {fixed} | {s['expected_pairs_effect']:.0f} "
              f"({100 * s['expected_pairs_effect'] / fixed:.0f}%) | {s['expected_pairs_h0']:.0f} "
              f"({100 * s['expected_pairs_h0'] / fixed:.0f}%) | "
              + (f"{twice:.0f} ({100 * twice / fixed:.0f}%)" if twice is not None else "-")
              + f" | {s['max_pairs']} | {sim['mean_capped']:.0f} ({100 * sim['mean_capped'] / fixed:.0f}%) |",
              flush=True)
