"""`lerobench check-resets`: does each task's first observation forget what its simulator ran before?

Why a command of its own: a new backend (or a new task of a known one) can keep a trace of the previous
episode in its first image, and then episode *i*'s outcome depends on the batch size and executor. The check
runs through the backend protocol (``lerobench/envs/resets.py``); exit 1 when a task is stale.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from lerobench.cli.common import app, console, err_console, fail, print_json, task_names
from lerobench.errors import LerobenchError


@app.command("check-resets", short_help="Check that every task's reset forgets the episodes run before it.")
def check_resets(
    suite: str = typer.Argument(..., help="Suite name or TOML path."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated task names, indices or ranges."),
    image_size: int = typer.Option(64, "--image-size", min=8, help="Height and width of the compared images."),
    steps: int = typer.Option(10, "--steps", min=1, help="Steps of a moving policy between the resets."),
    episode: int = typer.Option(1, "--episode", min=0, help="Episode whose first observation is compared."),
    processes: int = typer.Option(1, "--processes", min=1, help="Tasks checked in parallel (~2 GB each for LIBERO)."),
    protocol: str = typer.Option("standard", "--protocol", help="Named protocol of the suite (its cameras)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per task instead of lines."),
) -> None:
    """Reset each task to an episode fresh, run another episode with a moving policy, reset again and compare.

    The two first observations (state, every camera of the protocol, the drawn scene's poses where the simulator
    offers them, the start digest) must be bit-identical: docs/suites.md#resets-that-forget.
    Exit 1 when a task's first observation depends on what ran before.
    """
    from lerobench.envs.resets import check_resets as run_checks
    from lerobench.envs.resets import remember, reset_specs
    from lerobench.suite.registry import get_backend, load_suite

    try:
        chosen = load_suite(suite).select_tasks(task_names(tasks))
        get_backend(chosen.backend).check_installed()
        specs = reset_specs(chosen, (image_size, image_size), protocol=protocol)
    except LerobenchError as exc:
        fail(exc)
    results = []
    for check in run_checks(specs, episode=episode, other=0 if episode else 1, steps=steps, processes=processes):
        results.append(check)
        if as_json:
            print_json({"task": check.task, "episode": check.episode, "ok": check.ok,
                        "differences": check.differences, "error": check.error})
        else:
            style = "green" if check.ok else "bold red"
            console.print(f"[{style}]{'ok' if check.ok else 'STALE' if check.error is None else 'ERROR'}[/] "
                          f"{escape(check.describe())}", highlight=False, soft_wrap=True)
    remember(chosen.name, chosen.backend, [c for c in results if c.error is None])
    bad = [c for c in results if not c.ok]
    if bad:
        err_console.print(f"[bold red]error:[/] {len(bad)} of {len(results)} tasks of {escape(chosen.name)} failed "
                          f"the reset check; first: {escape(bad[0].describe())}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
