"""`lerobench check-policy`: a policy conformance check before a long evaluation; exit 1 on a failed invariant."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from lerobench.cli.common import app, console, err_console, fail, print_json
from lerobench.errors import LerobenchError

STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "info": "", "unchecked": "yellow"}


@app.command("check-policy", short_help="Check a policy before a long run: deterministic, batch-invariant, ...")
def check_policy(
    policy: str = typer.Option(..., "--policy", "-p", help="Policy spec, as for `lerobench eval`."),
    suite: str = typer.Option(..., "--suite", "-s", help="Suite whose real first steps feed the checks."),
    task: str | None = typer.Option(None, "--task", help="Task name or index (default: the suite's first)."),
    episodes: int = typer.Option(4, "--episodes", min=2, help="Episodes whose first steps are the rows checked."),
    steps: int = typer.Option(3, "--steps", min=1, help="Steps of each episode observed (the reset check)."),
    protocol: str = typer.Option("standard", "--protocol", help="Named protocol of the suite."),
    seed: int = typer.Option(0, "--seed", help="Run seed (fixes the episodes' starts)."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | auto (for torch policies)."),
    call_width: int | None = typer.Option(None, "--call-width", min=0, help="As for eval (default: 1 cpu, 16 cuda)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    """Check a policy on a suite's real first observations; exit 1 when an invariant fails.

    Rows must be deterministic, batch-invariant, isolated from their neighbours, keyed per episode, reset
    cleanly and valid; calls are timed at 1..2W rows.

    Exit 1 when an invariant fails: an evaluation of this policy would give numbers that depend on the batch
    size, executor or timing (docs/policies.md#check-policy).
    """
    from lerobench.plan.planner import RunSettings, make_plan
    from lerobench.policies.base import close_policy
    from lerobench.policies.conformance import run_checks
    from lerobench.policies.loading import load_policy
    from lerobench.suite.registry import load_suite

    try:
        s = load_suite(suite).select_tasks([task] if task else None, flag="--task")
        settings = RunSettings(suite=s, policy=policy, output=Path("."), protocol=protocol, seed=seed,
                               device=device, call_width=call_width, max_steps=max(steps + 1, 2), videos=0)
        plan = make_plan(settings)
        loaded = load_policy(policy, plan.context())

        def at_width(width: int) -> Any:  # the same policy at another call shape, on the CPU
            return load_policy(policy, make_plan(replace(settings, call_width=width, device="cpu")).context())

        try:
            report = run_checks(policy, plan, loaded, s.tasks[0], episodes=episodes, steps=steps, at_width=at_width)
        finally:
            close_policy(loaded)
    except LerobenchError as exc:
        fail(exc)
    if as_json:
        print_json(report.to_json())
    else:
        table = Table(title=f"check-policy {escape(policy)} on {s.name} / {escape(report.task)}")
        for col in ("check", "status", "detail"):
            table.add_column(col, overflow="fold")
        for c in report.checks:
            style = STYLE.get(c.status, "")
            table.add_row(c.name, f"[{style}]{c.status}[/]" if style else c.status, escape(c.detail))
        console.print(table)
        timing = Table(title="latency per call")
        keys = ["rows", "latency_ms", "rows_per_s", "peak_rss_growth_mb"]
        keys += ["cuda_peak_mb"] if any(r.get("cuda_peak_mb") is not None for r in report.latency) else []
        names = {"rows": "rows", "latency_ms": "latency ms", "rows_per_s": "rows/s",
                 "peak_rss_growth_mb": "peak RSS growth MB", "cuda_peak_mb": "CUDA peak MB"}
        for key in keys:
            timing.add_column(names[key], justify="right")
        for row in report.latency:
            timing.add_row(*(str(row[k]) for k in keys))
        console.print(timing)
        console.print(f"suggestion: {escape(report.suggestion)}", highlight=False, soft_wrap=True)
    if not report.ok:
        failed = [c for c in report.checks if c.status == "fail"]
        err_console.print(f"[bold red]error:[/] {escape(failed[0].name)}: {escape(failed[0].detail)}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(1)
