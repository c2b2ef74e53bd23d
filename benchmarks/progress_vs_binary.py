"""Progress test against the binary designed test on real episode pairs (issue 62 item 3; docs/statistics.md).

Real episodes, resampled: ``benchmarks/progress_pools.py`` runs, per benchmark, a pool of N seeded episodes of the
degraded policy (A), of the expert on the same seeds (B, paired by (task, episode)), and of the expert on other
seeds (for the null). Each of ``--reps`` repetitions draws a random ordering of the N distinct pairs and feeds
them, pair by pair, to every test on the same episodes:

- **binary designed**: ``--effect`` on success (``stats/design.py``), planned on A's pool success rate for the
  pools' observed difference of rates, capped at N (run A's pairs); where the design exists for no effect that
  large (its search truncates the discordant walk at the cap's 2% quantile: with few discordant pairs and
  P(B wins | discordant) above ~0.8 no table reaches the power), at the largest effect, in steps of 0.01 below
  the observed one, that has a design (said in the output);
- **binary anytime-valid**: ``--versus --until decided`` without ``--effect`` (``stats/sequential.py``'s mixture
  e-processes; its equivalence exit left out: only "better" decisions are counted);
- **progress designed**: ``--metric progress --effect`` (``stats/progress_design.py``), planned on A's pool
  progress for the pools' observed mean progress difference, capped at N; where the binary design had to step
  down, for the same fraction of the observed difference (both designed for the same share of what is there);
- **progress anytime-valid**: ``--metric progress`` without ``--effect`` (``stats/paired_progress.py``).

The null: the expert against itself on other seeds. Each repetition matches the two expert pools at random and
gives each pair's two episodes to A and B by a coin flip (two episodes of one policy are exchangeable, so the
resampled null is exact: mean difference 0); the designs are the ones above. An error is any "better" decision.

A repetition that reaches the end of the pool undecided counts N pairs and is reported as undecided. Repetitions
resample a finite pool of N real episode pairs: they measure the tests on these episodes' distribution, not new
simulator draws.

    python benchmarks/progress_vs_binary.py [--reps 1000] [--only pusht,metaworld]
    python benchmarks/progress_vs_binary.py --design-table   # the designed progress test's plans (no episodes)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

POOLS = Path(__file__).resolve().parent / "data" / "progress_pools.json"
ALPHA = 0.05


def binary_run(design: Any, summary: dict[str, Any], gained: Any, lost: Any) -> tuple[int, str]:
    """The binary designed rule over one ordering: (pairs to its exit, decision or "undecided")."""
    from lerobench.plan.stopping import designed_decision

    g = b = 0
    for n, (win, loss) in enumerate(zip(gained, lost, strict=True), start=1):
        g += int(win)
        b += int(loss)
        verdict = designed_decision(design, summary, g, b, n, ALPHA)
        if verdict is not None:
            return n, verdict
    return len(gained), "undecided"


def measure(entry: dict[str, Any], reps: int, seed: int) -> dict[str, Any]:
    """Every test on ``reps`` orderings of the pool, with an effect (A vs B) and under the null."""
    from lerobench.stats.paired_progress import simulate_stops
    from lerobench.stats.planning import plan_design
    from lerobench.stats.progress_design import design_progress_test, stops

    a, b, null = entry["a"], entry["b"], entry["null"]
    assert a["keys"] == b["keys"], "A and B pools must pair by (task, episode)"
    sa, sb, sn = (np.asarray(p["success"], bool) for p in (a, b, null))
    pa, pb, pn = (np.asarray(p["progress"], float) for p in (a, b, null))
    n = len(sa)
    rate_a, rate_b = float(sa.mean()), float(sb.mean())
    diff_rate, diff_progress = rate_b - rate_a, float((pb - pa).mean())
    out: dict[str, Any] = {"n": n, "degraded_is": entry["degraded_is"], "rate_a": rate_a, "rate_b": rate_b,
                           "progress_a": float(pa.mean()), "progress_b": float(pb.mean()),
                           # rounded towards 0: an effect that reaches past 1 (B at 100%) is impossible to plan
                           "effect_rate": math.trunc(diff_rate * 100) / 100,
                           "effect_progress": math.trunc(diff_progress * 1000) / 1000,
                           "discordant": float(np.mean(sa != sb))}
    started = time.perf_counter()
    bin_design, bin_summary = None, {"reason": "no difference of rates"}
    effect = out["effect_rate"]
    while abs(effect) >= 0.01 and bin_design is None and 0 <= rate_a + effect <= 1:
        bin_design, bin_summary = plan_design(rate_a, effect, None, ALPHA, 0.8, n)
        effect = round(float(effect - np.sign(effect) * 0.01), 2)
    out["binary_effect_designed"] = float(bin_summary["effect"]) if bin_design is not None else None
    share = (float(bin_summary["effect"]) / out["effect_rate"]) if bin_design is not None else 1.0
    out["effect_progress_designed"] = math.trunc(out["effect_progress"] * share * 1000) / 1000
    prog_design, prog_summary = (design_progress_test(pa, out["effect_progress_designed"], ALPHA, 0.8, n)
                                 if out["effect_progress_designed"] != 0 else (None, {"reason": "no difference"}))
    out["binary_design"] = {k: bin_summary.get(k) for k in ("effect", "max_pairs", "expected_pairs_effect", "power",
                                                            "reason")}
    out["progress_design"] = {k: prog_summary.get(k) for k in ("effect", "max_pairs", "expected_pairs_effect",
                                                                "power", "reason")}
    out["design_s"] = round(time.perf_counter() - started, 1)
    rng = np.random.default_rng(seed)
    orders = np.stack([rng.permutation(n) for _ in range(reps)])
    # the null: the two expert pools matched at random, each pair's sides by a coin flip
    match = np.stack([rng.permutation(n) for _ in range(reps)])
    flip = rng.random((reps, n)) < 0.5
    cases = {
        "effect": (sa[orders], sb[orders], pb[orders] - pa[orders]),
        "null": (np.where(flip, sn[match], sb[orders]), np.where(flip, sb[orders], sn[match]),
                 np.where(flip, pb[orders] - pn[match], pn[match] - pb[orders])),
    }
    for case, (succ_a, succ_b, d) in cases.items():
        res: dict[str, Any] = {}
        if bin_design is not None:
            runs = [binary_run(bin_design, bin_summary, succ_b[r] & ~succ_a[r], succ_a[r] & ~succ_b[r])
                    for r in range(reps)]
            res["binary"] = _summary([p for p, _ in runs], [v for _, v in runs])
        if prog_design is not None:
            pairs, code = stops(d, prog_design)
            names = {1: "B better" if prog_design.sign > 0 else "A better",
                     -1: "A better" if prog_design.sign > 0 else "B better", 0: "not better", 2: "undecided"}
            res["progress"] = _summary(list(pairs), [names[int(c)] for c in code])
        res["binary_anytime"] = _binary_anytime(succ_b & ~succ_a, succ_a & ~succ_b)
        pairs, b_better = simulate_stops(d, ALPHA)
        decided = pairs <= n
        res["progress_anytime"] = _summary(list(np.minimum(pairs, n)),
                                           [("B better" if bb else "A better") if dd else "undecided"
                                            for bb, dd in zip(b_better, decided, strict=True)])
        out[case] = res
    return out


def _binary_anytime(gained: Any, lost: Any) -> dict[str, Any]:
    """The anytime-valid binary rule (mixture e-processes on the discordant pairs) over each ordering."""
    from lerobench.stats.sequential import paired_evalues

    n = gained.shape[1]
    e_b, e_a = paired_evalues(np.cumsum(gained, axis=1), np.cumsum(lost, axis=1))
    hit_b, hit_a = e_b >= 2 / ALPHA, e_a >= 2 / ALPHA
    hit = hit_b | hit_a
    first = np.where(hit.any(axis=1), hit.argmax(axis=1), n)
    verdicts = ["undecided" if f == n else ("B better" if hit_b[r, f] else "A better") for r, f in enumerate(first)]
    return _summary(list(np.minimum(first + 1, n)), verdicts)


def _summary(pairs: list[int], verdicts: list[str]) -> dict[str, Any]:
    v = np.asarray(verdicts)
    return {"mean": float(np.mean(pairs)), "median": float(np.median(pairs)),
            "b_better": float(np.mean(v == "B better")), "a_better": float(np.mean(v == "A better")),
            "undecided": float(np.mean(v == "undecided")),
            "error_if_null": float(np.mean((v == "B better") | (v == "A better")))}


def table(results: dict[str, dict[str, Any]]) -> str:
    """The two markdown tables of docs/statistics.md: pairs with the effect, errors under the null."""
    tests = (("binary", "binary designed"), ("binary_anytime", "binary anytime-valid"),
             ("progress", "progress designed"), ("progress_anytime", "progress anytime-valid"))
    head = "| benchmark (N pairs) | success A → B | progress A → B | designed for (rate / progress) | " + " | ".join(
        f"{label}: mean / median pairs (B better)" for _, label in tests) + " | progress designed / binary designed |"
    lines = [head, "|" + "---|" * (5 + len(tests))]

    def cell(r: dict[str, Any] | None) -> str:
        return "—" if r is None else f"{r['mean']:.1f} / {r['median']:.0f} ({100 * r['b_better']:.0f}%)"

    for name, r in results.items():
        e = r["effect"]
        ratio = (f"{e['progress']['mean'] / e['binary']['mean']:.3f}" if "progress" in e and "binary" in e else "—")
        rate_for, progress_for = r.get("binary_effect_designed"), r["progress_design"].get("effect")
        designed = (f"{'—' if rate_for is None else f'{rate_for:+.2f}'} / "
                    f"{'—' if r['progress_design'].get('reason') else f'{progress_for:+.3f}'}")
        lines.append(f"| {name} ({r['n']}) | {100 * r['rate_a']:.1f}% → {100 * r['rate_b']:.1f}% | "
                     f"{r['progress_a']:.3f} → {r['progress_b']:.3f} | {designed} | "
                     + " | ".join(cell(e.get(key)) for key, _ in tests) + f" | {ratio} |")
    lines += ["", "| benchmark: null (expert vs expert, other seeds) | " + " | ".join(
        f"{label}: errors (mean pairs)" for _, label in tests) + " |", "|" + "---|" * (1 + len(tests))]
    for name, r in results.items():
        z = r["null"]
        lines.append(f"| {name} | " + " | ".join(
            "—" if z.get(key) is None else f"{z[key]['error_if_null']:.3f} ({z[key]['mean']:.0f})"
            for key, _ in tests) + " |")
    return "\n".join(lines)


def design_table() -> str:
    """Designed progress test against the anytime-valid one at equal power, under the planning model (Beta A)."""
    from lerobench.stats.paired_progress import simulate_stops
    from lerobench.stats.progress_design import beta_values, design_progress_test, planning_differences

    lines = ["| A's mean progress | effect | designed: expected at effect | no difference | 2x effect | max | power "
             "| type-I (simulated) | anytime-valid, capped at equal power: expected (cap) |", "|" + "---|" * 9]
    for mean in (0.5, 0.8):
        for effect in (0.05, 0.1, 0.2):
            a = beta_values(mean)
            _, s = design_progress_test(a, effect)
            d = planning_differences(a, effect, 2000, 4 * s["max_pairs"], 7)
            pairs, b_better = simulate_stops(d, ALPHA)
            at = np.sort(np.where(b_better, pairs, 10**9))
            cap = int(at[int(np.ceil(0.8 * 2000)) - 1])
            capped = float(np.mean(np.minimum(pairs, cap))) if cap < 10**9 else float("nan")
            twice = s["expected_pairs_2effect"]
            lines.append(f"| {mean:g} | +{effect:g} | {s['expected_pairs_effect']:.0f} | {s['expected_pairs_h0']:.0f} "
                         f"| {'-' if twice is None else f'{twice:.0f}'} | {s['max_pairs']} | {100 * s['power']:.1f}% | "
                         f"{s['type_i_simulated']:.4f} | {capped:.0f} ({cap}) |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000, help="orderings of each pool (docs: 1,000)")
    parser.add_argument("--only", default=None, help="comma-separated benchmarks of the pools file")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument("--design-table", action="store_true", help="print the design table only")
    args = parser.parse_args()
    if args.design_table:
        design_table()
        return
    pools = json.loads(POOLS.read_text())
    names = args.only.split(",") if args.only else list(pools)
    results = {}
    for name in names:
        started = time.perf_counter()
        results[name] = measure(pools[name], args.reps, seed=0)
        r = results[name]
        print(f"{name}: {time.perf_counter() - started:.0f} s; designs: binary {r['binary_design']}, progress "
              f"{r['progress_design']}; mean d {r['effect_progress']:+.3f}, discordant {r['discordant']:.2f}",
              flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
