"""Markdown tables of ``libero-expert``'s success per task from finished runs (docs/suites.md's tables).

Measure (standard protocol, every init state of every task, 2 videos per task to see failures):

    lerobench eval --suite libero_spatial -o runs/libero_spatial --videos 2     # and libero_object, _goal, _10

then print the tables:

    python benchmarks/libero_expert_table.py runs/libero_spatial runs/libero_object runs/libero_goal runs/libero_10

Each row: the task, successes / episodes, the rate and its exact 95% (Clopper-Pearson) interval as results.json
holds them, mean steps; each table ends with the suite's overall rate and the run's wall time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def table(run: Path) -> str:
    """One suite's table from ``run``/results.json."""
    results = json.loads((run / "results.json").read_text())
    config = results["config"]
    lines = [f"**{results['suite']}** — `{results['policy']}` ({config.get('policy_kind', 'policy')}), protocol "
             f"{config['protocol']}, max steps {config['protocol_settings']['max_steps']}, "
             f"{config['episodes_per_task']} episodes per task, seed {config['seed']}"
             + ("" if results.get("complete") else " (**incomplete run**)"), "",
             "| # | task | successes | rate | 95% CI | mean steps |", "|---|---|---|---|---|---|"]
    for i, task in enumerate(results["tasks"]):
        lo, hi = task["ci95"]
        steps = "–" if task["mean_steps"] is None else f"{task['mean_steps']:.0f}"
        lines.append(f"| {i} | {task['task']} | {task['successes']}/{task['n_episodes']} | "
                     f"{100 * task['success_rate']:.1f}% | {100 * lo:.1f}–{100 * hi:.1f}% | {steps} |")
    o = results["overall"]
    lo, hi = o["ci95"]
    lines.append(f"| | **overall** | {o['successes']}/{o['n_episodes']} | **{100 * o['success_rate']:.1f}%** | "
                 f"{100 * lo:.1f}–{100 * hi:.1f}% | |")
    lines += ["", f"Wall time {o['eval_s'] / 60:.1f} min ({o['env_steps_per_s']:.0f} env-steps/s)."]
    return "\n".join(lines)


def main() -> None:
    """Print a table per run directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of libero-expert")
    for run in parser.parse_args().runs:
        print(table(run))
        print()


if __name__ == "__main__":
    main()
