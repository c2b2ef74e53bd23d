"""The ``lerobench`` command: the only module that prints. Errors become one red line + exit code."""

from __future__ import annotations

import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from lerobench.errors import LerobenchError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate robot policies on real simulator benchmarks (LIBERO, Meta-World).",
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives, so cleanup runs as for Ctrl-C."""


def _fail(exc: LerobenchError) -> None:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


@app.command("list")
def list_suites() -> None:
    """List the shipped suites."""
    from lerobench.registry import list_suites as load_all

    try:
        suites = load_all()
    except LerobenchError as exc:
        _fail(exc)
    table = Table(title="lerobench suites")
    for col in ("suite", "backend", "tasks", "episodes/task", "max steps", "description"):
        table.add_column(col, overflow="fold")
    for s in suites:
        p = s.protocol()
        table.add_row(s.name, s.backend, str(len(s.tasks)), str(s.episodes_per_task), str(p.max_steps),
                      s.description)
    console.print(table)


@app.command()
def show(suite: str = typer.Argument(..., help="Suite name or path to a suite TOML file.")) -> None:
    """Show a suite's tasks (with their language descriptions) and protocols."""
    from dataclasses import asdict

    from lerobench.registry import load_suite

    try:
        s = load_suite(suite)
    except LerobenchError as exc:
        _fail(exc)
    console.print(f"[bold]{s.name}[/] ({s.backend}): {s.description}")
    console.print(f"episodes/task {s.episodes_per_task}, control {s.control_fps:g} Hz, "
                  f"{s.worker_memory_mb} MB per worker, source {s.source}")
    if s.notes:
        console.print(s.notes.strip(), highlight=False, markup=False)
    for name, proto in s.protocols.items():
        console.print(f"protocol [cyan]{name}[/]: {asdict(proto)}", highlight=False)
    table = Table()
    for col in ("#", "task", "group", "description"):
        table.add_column(col, overflow="fold")
    for t in s.tasks:
        table.add_row(str(t.index), t.name, t.group or "", t.description)
    console.print(table)


class RichReporter:
    """Live progress: the running task(s) and the whole suite with ETA and env-steps/s."""

    def __init__(self, total_episodes: int, suite: str):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=False,
        )
        self.suite_bar = self.progress.add_task(suite, total=total_episodes, info="")
        self._bars: dict[str, Any] = {}
        self._successes: dict[str, int] = {}
        self._steps = 0
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._all_successes = 0

    def message(self, text: str) -> None:  # noqa: D102
        self.progress.console.print(f"[dim]{text}[/]", highlight=False)

    def task_started(self, task: Any, total: int, done: int) -> None:  # noqa: D102
        with self._lock:
            self._successes[task.name] = 0
            self._bars[task.name] = self.progress.add_task(f"  {task.name}", total=total, completed=done,
                                                           info="")
            self.progress.update(self.suite_bar, advance=done)

    def steps(self, task: Any, n: int) -> None:  # noqa: D102
        with self._lock:
            self._steps += n

    def episode(self, task: Any, record: Any) -> None:  # noqa: D102
        with self._lock:
            self._successes[task.name] += int(record.success)
            self._all_successes += int(record.success)
            rate = self._steps / max(1e-9, time.perf_counter() - self._t0)
            bar = self._bars[task.name]
            self.progress.update(bar, advance=1, info=f"{self._successes[task.name]} ok")
            self.progress.update(self.suite_bar, advance=1,
                                 info=f"{self._all_successes} ok, {rate:,.0f} env-steps/s")

    def task_finished(self, task: Any, summary: dict[str, Any]) -> None:  # noqa: D102
        with self._lock:
            errors = summary.get("n_errors", 0)
            extra = f", {errors} errors" if errors else ""
            self.progress.update(self._bars[task.name], info=f"{_rate(summary.get('success_rate'))}{extra}")


def _print_summary(results: dict[str, Any], output: Path) -> None:
    table = Table(title=f"{results['suite']} — {results['policy']}")
    for col in ("task", "episodes", "success", "95% CI", "errors", "mean steps"):
        table.add_column(col, justify="left" if col == "task" else "right", overflow="fold")
    for t in results["tasks"]:
        lo, hi = t["ci95"]
        steps = "-" if t["mean_steps"] is None else f"{t['mean_steps']:.0f}"
        table.add_row(t["task"], str(t["n_episodes"]), _rate(t["success_rate"]),
                      f"{100 * lo:.0f}–{100 * hi:.0f}%", str(t["n_errors"]), steps)
    for name, g in results.get("groups", {}).items():
        lo, hi = g["ci95"]
        table.add_row(f"[italic]group {name}[/]", str(g["n_episodes"]), _rate(g["success_rate"]),
                      f"{100 * lo:.0f}–{100 * hi:.0f}%", str(g["n_errors"]), "")
    o = results["overall"]
    lo, hi = o["ci95"]
    table.add_row("[bold]overall[/]", str(o["n_episodes"]), f"[bold]{_rate(o['success_rate'])}[/]",
                  f"{100 * lo:.0f}–{100 * hi:.0f}%", str(o["n_errors"]), "")
    console.print(table)
    console.print(f"{o['eval_s']:.1f} s, {o['env_steps_per_s'] or 0:,.0f} env-steps/s. "
                  f"Results: [bold]{output}[/]", highlight=False)


@app.command("eval")
def evaluate(
    suite: str = typer.Option(..., "--suite", "-s", help="Suite name (see `lerobench list`) or a TOML path."),
    policy: str | None = typer.Option(
        None, "--policy", "-p",
        help="random | zero | metaworld-expert | module.path:factory | ws://host:port (a policy server). "
             "Default: the suite's default policy."),
    episodes: int | None = typer.Option(None, "--episodes", "-n", help="Episodes per task (default: suite's)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated task names to run."),
    batch_size: int = typer.Option(0, "--batch-size", "-b", help="Envs per task; 0 = auto (cores, memory)."),
    seed: int = typer.Option(0, "--seed", help="Run seed: episode i of a task is fixed by (seed, task, i)."),
    output: Path | None = typer.Option(None, "--output", "-o",
                                          help="Output directory (default outputs/<suite>/<timestamp>)."),
    protocol: str = typer.Option("standard", "--protocol", help="Named protocol of the suite (e.g. lerobot)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the step limit (smoke runs)."),
    stop_on_success: bool = typer.Option(True, "--stop-on-success/--no-stop-on-success",
                                         help="End an episode at its first success."),
    videos: int = typer.Option(2, "--videos", help="Record the first N episodes of each task (0: none)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --output, skipping finished episodes."),
    episode_timeout: float | None = typer.Option(
        None, "--episode-timeout", help="Seconds one env step may take before its worker counts as hung."),
    replan_steps: int = typer.Option(1, "--replan-steps", help="Actions executed per returned action chunk."),
    parallel_tasks: int = typer.Option(1, "--parallel-tasks", help="Tasks evaluated at once (threads)."),
    formats: list[str] = typer.Option([], "--format", help="Also write another format: lerobot (eval_info.json)."),
    record: str = typer.Option("none", "--record", help="Save rollouts to recordings/<task>.h5: none|success|all."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | auto (for torch policies)."),
    executor: str = typer.Option("auto", "--executor",
                                 help="auto | inline | vector | processes | ray (docs/scaling.md)."),
    workers: int = typer.Option(0, "--workers", help="Episode worker processes or concurrent Ray tasks; 0 = auto."),
    ray_address: str | None = typer.Option(None, "--ray-address",
                                           help="Ray cluster to join (auto, ray://host:10001); default: local Ray."),
    ray_gpus_per_worker: float = typer.Option(0.0, "--ray-gpus-per-worker", help="GPUs reserved per Ray task."),
) -> None:
    """Evaluate a policy on every task of a suite and write per-episode and per-task results."""
    from lerobench.registry import load_suite

    try:
        s = load_suite(suite).select_tasks([t.strip() for t in tasks.split(",") if t.strip()] if tasks else None)
        if resume and output is None:
            raise LerobenchError("--resume needs --output DIR (the directory of the run to continue)")
        out = output or Path("outputs") / s.name / datetime.now().strftime("%Y%m%d-%H%M%S")
        from lerobench.runner import Evaluation, RunSettings

        settings = RunSettings(
            suite=s, policy=policy or s.default_policy, output=out, protocol=protocol, episodes=episodes,
            batch_size=batch_size, seed=seed, max_steps=max_steps, stop_on_success=stop_on_success,
            resume=resume, videos=videos, episode_timeout=episode_timeout, replan_steps=replan_steps,
            parallel_tasks=parallel_tasks, device=device, record=record, formats=tuple(formats),
            executor=executor, workers=workers, ray_address=ray_address, ray_gpus_per_worker=ray_gpus_per_worker,
            command=tuple(sys.argv),
        )
        reporter = RichReporter(len(s.tasks) * settings.episodes_per_task, s.name)
        evaluation = Evaluation(settings, reporter)
        console.print(f"Evaluating [bold]{settings.policy}[/] on [bold]{s.name}[/] "
                      f"({len(s.tasks)} tasks x {settings.episodes_per_task} episodes, protocol {protocol}) "
                      f"-> {out}", highlight=False)
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            with reporter.progress:
                results = evaluation.run()
        finally:
            signal.signal(signal.SIGTERM, previous)
    except LerobenchError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted:[/] finished episodes are saved; continue with --resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Terminated:
        err_console.print("[bold red]terminated:[/] finished episodes are saved; continue with --resume")
        raise typer.Exit(EXIT_TERMINATED) from None
    _print_summary(results, out)
    if results["overall"]["n_errors"]:
        err_console.print(f"[yellow]{results['overall']['n_errors']} episodes ended with an error "
                          f"(counted as failures); see episodes.jsonl[/]")


@app.command("serve")
def serve_policy(
    policy: str = typer.Option(..., "--policy", "-p", help="Policy to serve: any --policy of `lerobench eval`."),
    suite: str = typer.Option(..., "--suite", "-s", help="Suite whose shapes and cameras the policy is built for."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port)."),
    protocol: str = typer.Option("standard", "--protocol", help="Named protocol of the suite (image size)."),
    seed: int = typer.Option(0, "--seed", help="Run seed given to the policy factory."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | auto (for torch policies)."),
) -> None:
    """Serve a policy over openpi's websocket protocol (for `eval --policy ws://...` or openpi clients)."""
    try:
        from lerobench.policies.serve import PolicyServer, suite_context

        context = suite_context(suite, protocol, seed=seed, device=device)
        server = PolicyServer(policy, context, host, port,
                              on_event=lambda text: err_console.print(f"[dim]{text}[/]", highlight=False))
    except LerobenchError as exc:
        _fail(exc)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"[yellow]listening on {host}: anyone who reaches this port can run the policy "
                          f"(no authentication, no encryption)[/]", highlight=False)
    console.print(f"Serving [bold]{policy}[/] for suite [bold]{context.suite}[/] on [bold]{server.url}[/] "
                  f"(Ctrl-C to stop)", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        server.shutdown()


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
