"""`lerobench list` and `lerobench show`: browse the shipped suites."""

from __future__ import annotations

from typing import Any

import typer
from rich import box
from rich.table import Table

from lerobench.cli.common import JSON_OPTION, app, console, fail, print_json, print_names_table
from lerobench.errors import LerobenchError


def _suite_summary(s: Any) -> dict[str, Any]:
    return {"name": s.name, "backend": s.backend, "tasks": len(s.tasks), "episodes_per_task": s.episodes_per_task,
            "max_steps": s.protocol().max_steps, "description": s.description}



@app.command("list")
def list_suites(
    as_json: bool = JSON_OPTION,
    family: str | None = typer.Option(None, "--family", help="List a family of suites instead (libero-pro; all: "
                                      "every suite)."),
) -> None:
    """List the shipped suites (a family's with --family)."""
    from lerobench.suite.registry import suite_summaries

    try:
        suites = suite_summaries(family)
        if not suites:
            raise LerobenchError(f"no shipped suite has family {family!r} (families: libero-pro, all)")
    except LerobenchError as exc:
        fail(exc)
    if as_json:
        print_json(suites)
        return
    table = Table(title="lerobench suites", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("suite", "backend", "tasks", "eps/task", "steps"):  # names are never wrapped or cut
        table.add_column(col, no_wrap=True)
    table.add_column("description", overflow="fold")  # the description wraps instead, even in 80 columns
    for s in suites:
        table.add_row(s["name"], s["backend"], str(s["tasks"]), str(s["episodes_per_task"]), str(s["max_steps"]),
                      s["description"])
    print_names_table(table)
    if family is None:
        console.print("More: lerobench list --family libero-pro (LIBERO-PRO perturbation suites and their control "
                      "arms; see docs/perturbations.md)", highlight=False, style="dim",
                      soft_wrap=not console.is_terminal)  # one line into a pipe


@app.command(short_help="A suite's tasks, language descriptions and protocols.")
def show(suite: str = typer.Argument(..., metavar="SUITE", help="Suite name or path to a suite TOML file."),
         as_json: bool = JSON_OPTION) -> None:
    """Show a suite's tasks (with their language descriptions) and protocols."""
    from dataclasses import asdict

    from lerobench.suite.registry import control_fps, load_suite

    try:
        s = load_suite(suite)
        fps = control_fps(s)
        policies = _policies(s.backend)
    except LerobenchError as exc:
        fail(exc)
    if as_json:
        print_json({**_suite_summary(s), "control_fps": fps, "worker_memory_mb": s.worker_memory_mb,
                    "default_policy": s.default_policy, "policies": policies,
                     "source": str(s.source), "notes": s.notes,
                     "protocols": {name: asdict(p) for name, p in s.protocols.items()},
                     "task_list": [{"index": t.index, "name": t.name, "group": t.group,
                                    "description": t.description} for t in s.tasks]})
        return
    console.print(f"[bold]{s.name}[/] ({s.backend}): {s.description}")
    console.print(f"episodes/task {s.episodes_per_task}, control {'?' if fps is None else f'{fps:g}'} Hz, "
                  f"{s.worker_memory_mb} MB per worker, source {s.source}", soft_wrap=True)  # path kept whole
    console.print(f"default policy {s.default_policy or 'none: pass --policy'}; built-in policies here: "
                  f"{', '.join(policies)}",
                  highlight=False, soft_wrap=True)
    if s.trials > 1:
        console.print(f"trials/episode {s.trials} (--trials): attempts from the same start, policy memory kept; "
                      f"see docs/trials.md", highlight=False)
    if s.notes:
        # soft_wrap: the notes are already broken into lines; wrapping them again at 80 columns leaves ragged halves
        console.print(s.notes.strip(), highlight=False, markup=False, soft_wrap=True)
    for name, proto in s.protocols.items():
        console.print(f"protocol [cyan]{name}[/]: {asdict(proto)}", highlight=False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("#", "task", "group"):  # task names are never wrapped or cut: the description folds instead
        table.add_column(col, no_wrap=True)
    table.add_column("description", overflow="fold")
    for t in s.tasks:
        table.add_row(str(t.index), t.name, t.group or "", t.description)
    print_names_table(table)


def _policies(backend: str) -> list[str]:
    """The built-in ``--policy`` names that run on ``backend``'s suites (the baselines, then its experts)."""
    from lerobench.policies.loading import policy_names

    return policy_names(backend)
