"""`lerobench robustness`: perturbed runs and their matched control arms, then each family's drop."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from lerobench.cli.common import (
    app,
    console,
    err_console,
    fail,
    interrupts_keep_results,
    print_json,
    rate_text,
    task_names,
)
from lerobench.cli.evaluate import reporter_for
from lerobench.errors import LerobenchError


def _points(value: float | None) -> str:
    return "-" if value is None else f"{100 * value + 0.0:+.1f}"  # + 0.0: no "-0.0"


def _print_whole(table: Table) -> None:
    """Print ``table`` with every cell on one line, wider than the terminal if need be.

    Its cells hold spaces, so ``print_names_table``'s minimum width (one word per line) would cut them.
    """
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(10_000), table).maximum
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def _print_robustness(data: dict[str, Any], path: Path) -> None:
    from lerobench.stats.intervals import points_interval

    table = Table(title=f"{data['policy']} on {data['base']}: success drop per family (control − perturbed)")
    for col in ("family", "n", "control", "perturbed", "drop", "95% CI", "p", "Holm p", "pairing"):
        table.add_column(col, justify="left" if col in ("family", "pairing") else "right", no_wrap=True)
    for f in data["families"]:
        ci = f["drop_ci95"]
        if not f["paired"]:
            pairing = "UNPAIRED"
        elif f["start_digests_equal"] == f["n_pairs"]:
            pairing = "same starts"
        else:  # a distractor's joints dropped: the same placements, not the same state vector
            pairing = f"projected starts ({f['start_digests_equal']}/{f['n_pairs']} identical)"
        table.add_row(f["family"], str(f["perturbed"]["n"]), rate_text(f["control"]["rate"]),
                      rate_text(f["perturbed"]["rate"]), _points(f["drop"]),
                      "-" if ci is None else points_interval(ci),
                      "-" if f["p_value"] is None else f"{f['p_value']:.3g}",
                      "-" if f.get("p_holm") is None else f"{f['p_holm']:.3g}", pairing)
    _print_whole(table)
    for f in data["families"]:
        if f["unpaired_reason"]:
            err_console.print(f"[yellow]note:[/] {f['family']}: {f['unpaired_reason']}", highlight=False)
    console.print("drop: control − perturbed success, points; where the starts match, paired: exact unconditional "
                  "95% CI, exact McNemar p; Holm across families", highlight=False, soft_wrap=True)
    if data.get("delay_curve"):
        _print_delay_curve(data)
    console.print(f"Per-task drops and the arms' run directories: [bold]{path}[/]", highlight=False, soft_wrap=True)


def _print_delay_curve(data: dict[str, Any]) -> None:
    """Success against inference delay (docs/latency.md): each arm's paired drop against d = 0."""
    from lerobench.stats.intervals import points_interval

    table = Table(title=f"{data['policy']} on {data['base']}: success vs inference delay (same episodes)")
    for col in ("delay (steps)", "n", "success", "drop vs d=0", "95% CI", "Holm p"):
        table.add_column(col, justify="right", no_wrap=True)
    for point in data["delay_curve"]:
        ci = point["drop_ci95"]
        table.add_row(str(point["delay_steps"]), str(point["n"]), rate_text(point["rate"]),
                      _points(point["drop"]) if point["delay_steps"] else "control",
                      "-" if ci is None else points_interval(ci),
                      "-" if point.get("p_holm") is None else f"{point['p_holm']:.3g}")
    _print_whole(table)


@app.command("robustness", short_help="Success drop under perturbations, against matched control arms.")
def robustness(
    base: str = typer.Option(..., "--base", help="The unperturbed suite (e.g. libero_spatial, metaworld_mt10) or a"
                                " TOML file (its families' <name>_<family>.toml beside it come first)."),
    families: str = typer.Option(
        ..., "--families",
        help="Comma-separated: LIBERO-PRO families (lan, object, swap, task, with_mug, ...: suite <base>_<family>) "
             "and/or perturbations NAME=VALUE (obs_noise, action_noise, action_delay, camera_shift, light), and/or "
             "inference delays delay_steps=K (a success-vs-delay curve against d=0; docs/latency.md)."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Policy (default: the base suite's)."),
    output: Path = typer.Option(..., "--output", "-o",
                                help="Directory of the arms' runs and robustness.json (rerun to resume)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated task names of the base suite."),
    episodes: int | None = typer.Option(None, "--episodes", "-n", help="Episodes per task (default: suite's)."),
    seed: int = typer.Option(0, "--seed", help="Run seed, the same for every arm."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the step limit (smoke runs)."),
    replan_steps: int = typer.Option(1, "--replan-steps", help="Actions executed per returned chunk, every arm."),
    batch_size: int = typer.Option(0, "--batch-size", "-b", help="Envs per task; 0 = auto."),
    executor: str = typer.Option("auto", "--executor", help="auto | inline | vector | processes | ray."),
    videos: int = typer.Option(0, "--videos", help="Record the first N episodes of each task of every arm."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level after Holm adjustment across families."),
    as_json: bool = typer.Option(False, "--json", help="Print robustness.json instead of a table."),
) -> None:
    """Run (or resume) each family's perturbed and control arms and report every family's success drop."""
    from lerobench.analysis.robustness import ROBUSTNESS_FILE, analyze, plan_families, unique_arms
    from lerobench.core.files import write_json_atomic
    from lerobench.core.results import RESULTS_FILE
    from lerobench.core.shards import shard_units
    from lerobench.execution.runner import Evaluation, RunSettings
    from lerobench.suite.registry import load_suite, suite_loader_beside

    with interrupts_keep_results("run the same command to resume"):
        try:
            full = load_suite(base)
            narrowed = full.select_tasks(task_names(tasks))
            planned = plan_families(narrowed, full, [f for f in families.split(",") if f.strip()], output,
                                    suite_loader_beside(base))
            from lerobench.policies.loading import absolute_spec

            chosen = absolute_spec(full.chosen_policy(policy))
            arms = unique_arms(planned)
            for i, arm in enumerate(arms, start=1):
                settings = RunSettings(
                    suite=arm.suite, policy=chosen, output=arm.output, episodes=episodes, batch_size=batch_size,
                    seed=seed, max_steps=max_steps, videos=videos, executor=executor, perturb=arm.perturb,
                    replan_steps=replan_steps, delay_steps=arm.delay_steps,
                    resume=(arm.output / RESULTS_FILE).exists(), command=tuple(sys.argv))
                console.print(f"[{i}/{len(arms)}] {arm.suite.name}"
                              + (f" --perturb {','.join(f'{k}={v:g}' for k, v in arm.perturb)}" if arm.perturb else "")
                              + (f" --delay-steps {arm.delay_steps}" if arm.delay_steps else "")
                              + f" -> {arm.output}" + (" (resuming)" if settings.resume else ""),
                              highlight=False, soft_wrap=True)
                units = shard_units([t.name for t in arm.suite.tasks], settings.episodes_per_task, None)
                reporter = reporter_for(len(units), arm.suite.name)
                evaluation = Evaluation(settings, reporter)
                with reporter.progress:
                    evaluation.run()
            data = analyze(planned, narrowed, chosen, alpha=alpha)
            output.mkdir(parents=True, exist_ok=True)
            write_json_atomic(output / ROBUSTNESS_FILE, data)
        except LerobenchError as exc:
            fail(exc)
    if as_json:
        print_json(data)
    else:
        _print_robustness(data, output / ROBUSTNESS_FILE)
