"""The results table printed after `eval` and `merge`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from lerobench.cli.common import console, headline_rates, plural, print_names_table, rate_text
from lerobench.core.progress import PROGRESS_NOTE
from lerobench.plan.stopping import FIXED_N_NOTE, stopping_line
from lerobench.stats.intervals import percent_interval, unit_interval


def _trial_cells(block: dict[str, Any], trials: int) -> list[str]:
    """Per-trial rates, each trial's adaptation delta with its exact McNemar p, pass@k (``--trials`` > 1)."""
    if trials <= 1:
        return []
    rates = [rate_text(row["success_rate"]) for row in block["per_trial"]]
    deltas = [f"{100 * a['delta']:+.1f} (p={a['p_value']:.2g})" if a["delta"] is not None else "-"
              for a in block["adaptation"]]
    passes = [rate_text(row["within_first_k"]) for row in block.get("pass_at_k", [])[1:]]
    return rates + deltas + (passes or ["-"] * (trials - 1))


def _progress_cells(block: dict[str, Any], shown: bool) -> list[str]:
    """Mean task progress (highest per episode) and its 95% interval, where the run's backend defines progress."""
    if not shown:
        return []
    progress = block.get("progress")
    if not progress or progress.get("mean") is None:
        return ["-", "-"]
    return [f"{progress['mean']:.2f}", unit_interval(progress["ci95"])]


PRIVILEGED_NOTE = ("privileged expert: a scripted policy that reads the simulator's state (object poses, joints; "
                   "what each backend offers: `lerobench show SUITE`), not a learned policy;"
                   " its rate measures the tasks' solvability, not a model")


def print_summary(results: dict[str, Any], output: Path, merged_from: int = 0) -> None:
    """The results table and a timing line; ``merged_from`` > 0: a merge, whose eval_s is the shards' sum."""
    trials = results.get("config", {}).get("trials", 1)
    table = Table(title=f"{results['suite']} — {results['policy']}")
    extra = ([f"trial {k}" for k in range(trials)] + [f"Δ{k} pp" for k in range(1, trials)]
             + [f"pass@{k}" for k in range(2, trials + 1)]) if trials > 1 else []
    o = results["overall"]
    progress = bool(o.get("progress"))  # only where the backend defines progress
    table.add_column("task", no_wrap=True)  # whole names, as in `list` and `show`
    for col in ("episodes", "success", "95% CI", *(("progress", "progress 95% CI") if progress else ()),
                "errors", "mean steps", *extra):
        table.add_column(col, justify="right", overflow="fold")
    for t in results["tasks"]:
        lo, hi = t["ci95"]
        steps = "-" if t["mean_steps"] is None else f"{t['mean_steps']:.0f}"
        table.add_row(t["task"], str(t["n_episodes"]), rate_text(t["success_rate"]), percent_interval((lo, hi)),
                      *_progress_cells(t, progress), str(t["n_errors"]), steps, *_trial_cells(t, trials))
    for name, g in results.get("groups", {}).items():
        lo, hi = g["ci95"]
        table.add_row(f"[italic]group {name}[/]", str(g["n_episodes"]), rate_text(g["success_rate"]),
                      percent_interval((lo, hi)), *_progress_cells(g, progress), str(g["n_errors"]), "",
                      *_trial_cells(g, trials))
    lo, hi = o["ci95"]
    table.add_row("[bold]overall[/]", str(o["n_episodes"]), f"[bold]{rate_text(o['success_rate'])}[/]",
                  percent_interval((lo, hi)), *_progress_cells(o, progress), str(o["n_errors"]), "",
                  *_trial_cells(o, trials))
    print_names_table(table)
    if progress:
        console.print(PROGRESS_NOTE, highlight=False, markup=False, soft_wrap=True)
    if results.get("config", {}).get("privileged_state"):
        console.print(f"{results['policy']} is a {PRIVILEGED_NOTE}", highlight=False, soft_wrap=True)
    if trials > 1:
        console.print(f"overall: {headline_rates(o, trials)}", highlight=False, soft_wrap=True)
        console.print("success/CI/errors: trial 0 (comparable with 1-trial runs); Δk = rate(trial k) − rate(trial 0) "
                      "in percentage points, paired exact McNemar p; pass@k = success within the first k trials, k "
                      "counted from 1 (pass@k = success_within_k[k-1], whose trial counts from 0; results.json also "
                      "has the unbiased estimator over all trials)", highlight=False, markup=False, soft_wrap=True)
    stopping = results.get("stopping")
    if stopping:
        console.print(stopping_line(stopping), highlight=False, soft_wrap=True)
        console.print(f"95% CI above: {FIXED_N_NOTE}", highlight=False, soft_wrap=True)
    steady = results.get("timing") or {}
    if merged_from:
        timing = (f"merged {plural(merged_from, 'run')}: {o['eval_s']:.1f} s of evaluation summed over them, "
                  f"{o['env_steps_per_s'] or 0:,.0f} env-steps/s")
    elif steady.get("startup_s") is not None:  # start-up apart: on a short run it is most of the wall time
        timing = (f"{o['eval_s']:.1f} s: start-up {steady['startup_s']:.1f} s, then "
                  f"{steady['steady_env_steps_per_s'] or 0:,.0f} env-steps/s for {steady['steady_s']:.1f} s "
                  f"({o['env_steps_per_s'] or 0:,.0f} env-steps/s over the whole run)")
    else:
        timing = f"{o['eval_s']:.1f} s, {o['env_steps_per_s'] or 0:,.0f} env-steps/s"
    console.print(f"{timing}. Results: [bold]{output}[/]", highlight=False, soft_wrap=True)  # the path whole
    config = results.get("config", {})
    price = call_shape_line(o.get("call_shape"), config.get("batch_invariant"),
                            (config.get("batch_invariance") or {}).get("threads"))
    if price:
        console.print(price, highlight=False, soft_wrap=True)


def call_shape_line(shape: dict[str, Any] | None, check: str | None,
                    threads: dict[str, Any] | None = None) -> str | None:
    """What the fixed call shape cost this run, in one line (None for policies without a call width)."""
    if not shape:
        return None
    width, calls = shape["call_width"], shape["model_calls_per_request"]
    head = f"batch invariance ({check or 'unchecked'}): "
    if width == 0:
        return head + "unpadded calls: a row's bits may depend on the rows beside it"
    cores = ""
    if threads:
        counts = threads.get("counts") or [1]
        cores = (f"; up to {max(counts)} intra-op threads per call (checked equal to one thread's bits)"
                 if max(counts) > 1 else "; one intra-op thread per call" + (
                     f" ({', '.join(threads['rejected'])} threads changed a row)" if threads.get("rejected") else ""))
    if width == 1:
        return (head + f"one row per model call, {calls:.2f} model calls per request (run side by side on the "
                f"CPU's call threads); no padding{cores}")
    return (head + f"calls of {width} rows, {calls:.2f} per request; padding {shape['padding_share']:.0%} of "
            f"computed rows (~{shape['padding_s_estimate']:.1f} s of policy time); --call-width 1: no padding")
