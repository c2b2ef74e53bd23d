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
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lerobench.errors import LerobenchError

# The click exceptions typer raises: click's own in older typer, a vendored copy (typer._click) in newer ones.
click_exceptions = sys.modules[typer.BadParameter.__module__]


class OneLineErrorsGroup(typer.core.TyperGroup):
    """Usage errors of every command (bad value, unknown or missing option) as one ``error:`` line + exit 2.

    Typer would print a boxed, multi-line usage block; scripts and CI logs want one line. Done once here, for
    every command, rather than per command. A bare ``lerobench`` prints the help and exits 0.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """Run the command line; in standalone mode (the console script, CliRunner) exit with its code."""
        args = list(sys.argv[1:] if args is None else args) or ["--help"]
        prog_name = prog_name or "lerobench"  # also under `python -m lerobench`
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_exceptions.ClickException as exc:
            usage = isinstance(exc, click_exceptions.UsageError) and exc.ctx is not None
            hint = f" (see {exc.ctx.command_path} --help)" if usage else ""
            message = escape(" ".join(exc.format_message().split()) + hint)
            err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err_console.print("[bold red]error:[/] aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrorsGroup,
    add_completion=False,
    help="Evaluate robot policies on real simulator benchmarks (LIBERO, Meta-World).",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: the boxed one cuts option names ("--stop-on-succ…") in 80 columns or a pipe
)
console = Console()
err_console = Console(stderr=True)

EXIT_TOO_MANY_ERRORS = 3
EXIT_INCOMPLETE_MERGE = 4
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives, so cleanup runs as for Ctrl-C."""


def _fail(exc: LerobenchError) -> None:
    # escaped: messages hold brackets ("pip install 'lerobench[ray]'") that rich would take for markup and drop
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def _suite_summary(s: Any) -> dict[str, Any]:
    return {"name": s.name, "backend": s.backend, "tasks": len(s.tasks), "episodes_per_task": s.episodes_per_task,
            "max_steps": s.protocol().max_steps, "description": s.description}


JSON_OPTION = typer.Option(False, "--json", help="Print JSON (for scripts) instead of a table.")


def _print_names_table(table: Table, slack: int = 10) -> None:
    """Print a table whose ``no_wrap`` name columns must stay whole: widen past the terminal if they need it.

    Rich would otherwise cut long names ("pick_up_the_black_bowl_…") in an 80-column terminal or a pipe, and
    ``grep`` for a name would miss it; the description column folds into the remaining space instead.
    """
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(10_000), table).minimum + slack
    width = console.width
    console.width = max(width, needed)  # print(width=...) is capped at the console's width
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


@app.command("list")
def list_suites(as_json: bool = JSON_OPTION) -> None:
    """List the shipped suites."""
    from lerobench.registry import list_suites as load_all

    try:
        suites = load_all()
    except LerobenchError as exc:
        _fail(exc)
    if as_json:
        _print_json([_suite_summary(s) for s in suites])
        return
    table = Table(title="lerobench suites", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("suite", "backend", "tasks", "eps/task", "steps"):  # names are never wrapped or cut
        table.add_column(col, no_wrap=True)
    table.add_column("description", overflow="fold")  # the description wraps instead, even in 80 columns
    for s in suites:
        p = s.protocol()
        table.add_row(s.name, s.backend, str(len(s.tasks)), str(s.episodes_per_task), str(p.max_steps),
                      s.description)
    _print_names_table(table)


@app.command(short_help="A suite's tasks, language descriptions and protocols.")
def show(suite: str = typer.Argument(..., metavar="SUITE", help="Suite name or path to a suite TOML file."),
         as_json: bool = JSON_OPTION) -> None:
    """Show a suite's tasks (with their language descriptions) and protocols."""
    from dataclasses import asdict

    from lerobench.registry import load_suite

    try:
        s = load_suite(suite)
    except LerobenchError as exc:
        _fail(exc)
    if as_json:
        _print_json({**_suite_summary(s), "control_fps": s.control_fps, "worker_memory_mb": s.worker_memory_mb,
                     "source": str(s.source), "notes": s.notes,
                     "protocols": {name: asdict(p) for name, p in s.protocols.items()},
                     "task_list": [{"index": t.index, "name": t.name, "group": t.group,
                                    "description": t.description} for t in s.tasks]})
        return
    console.print(f"[bold]{s.name}[/] ({s.backend}): {s.description}")
    console.print(f"episodes/task {s.episodes_per_task}, control {s.control_fps:g} Hz, "
                  f"{s.worker_memory_mb} MB per worker, source {s.source}", soft_wrap=True)  # path kept whole
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
    _print_names_table(table)


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
        self.progress.console.print(f"[dim]{escape(text)}[/]", highlight=False, soft_wrap=True)  # one line in logs

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
            self.progress.update(bar, advance=1, info=f"{self._successes[task.name]} solved")
            self.progress.update(self.suite_bar, advance=1,
                                 info=f"{self._all_successes} solved, {rate:,.0f} env-steps/s")

    def task_finished(self, task: Any, summary: dict[str, Any]) -> None:  # noqa: D102
        with self._lock:
            errors = summary.get("n_errors", 0)
            extra = f", {errors} errors" if errors else ""
            self.progress.update(self._bars[task.name], info=f"{_rate(summary.get('success_rate'))}{extra}")


def _trial_cells(block: dict[str, Any], trials: int) -> list[str]:
    """Per-trial rates, then each trial's adaptation delta with its exact McNemar p (``--trials`` > 1)."""
    if trials <= 1:
        return []
    rates = [_rate(row["success_rate"]) for row in block["per_trial"]]
    deltas = [f"{100 * a['delta']:+.1f} (p={a['p_value']:.2g})" if a["delta"] is not None else "-"
              for a in block["adaptation"]]
    return rates + deltas


def _print_summary(results: dict[str, Any], output: Path, merged_from: int = 0) -> None:
    """The results table and a timing line; ``merged_from`` > 0: a merge, whose eval_s is the shards' sum."""
    trials = results.get("config", {}).get("trials", 1)
    table = Table(title=f"{results['suite']} — {results['policy']}")
    extra = [f"trial {k}" for k in range(trials)] + [f"Δ{k} pp" for k in range(1, trials)] if trials > 1 else []
    table.add_column("task", no_wrap=True)  # whole names, as in `list` and `show`
    for col in ("episodes", "success", "95% CI", "errors", "mean steps", *extra):
        table.add_column(col, justify="right", overflow="fold")
    for t in results["tasks"]:
        lo, hi = t["ci95"]
        steps = "-" if t["mean_steps"] is None else f"{t['mean_steps']:.0f}"
        table.add_row(t["task"], str(t["n_episodes"]), _rate(t["success_rate"]),
                      f"{100 * lo:.0f}–{100 * hi:.0f}%", str(t["n_errors"]), steps, *_trial_cells(t, trials))
    for name, g in results.get("groups", {}).items():
        lo, hi = g["ci95"]
        table.add_row(f"[italic]group {name}[/]", str(g["n_episodes"]), _rate(g["success_rate"]),
                      f"{100 * lo:.0f}–{100 * hi:.0f}%", str(g["n_errors"]), "", *_trial_cells(g, trials))
    o = results["overall"]
    lo, hi = o["ci95"]
    table.add_row("[bold]overall[/]", str(o["n_episodes"]), f"[bold]{_rate(o['success_rate'])}[/]",
                  f"{100 * lo:.0f}–{100 * hi:.0f}%", str(o["n_errors"]), "", *_trial_cells(o, trials))
    _print_names_table(table)
    if trials > 1:
        console.print("success/CI/errors: trial 0 (comparable with 1-trial runs); Δk = rate(trial k) − rate(trial 0) "
                      "in percentage points, paired exact McNemar p", highlight=False)
    timing = (f"merged {_plural(merged_from, 'run')}: {o['eval_s']:.1f} s of evaluation summed over them"
              if merged_from else f"{o['eval_s']:.1f} s")
    console.print(f"{timing}, {o['env_steps_per_s'] or 0:,.0f} env-steps/s. Results: [bold]{output}[/]",
                  highlight=False, soft_wrap=True)  # the path whole, for copy and paste


@app.command("eval", short_help="Evaluate a policy on a suite: per-episode and per-task results.")
def evaluate(
    suite: str = typer.Option(..., "--suite", "-s", help="Suite name (see `lerobench list`) or a TOML path."),
    policy: str | None = typer.Option(
        None, "--policy", "-p",
        help="random | zero | metaworld-expert | metaworld-adaptive-reach | module.path:factory | ws://host:port | "
             "lerobot:<dir>. Default: the suite's default policy."),
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
    trials: int | None = typer.Option(
        None, "--trials", help="Attempts per episode at the same start, policy memory kept (default: suite's)."),
    formats: list[str] = typer.Option([], "--format", help="Also write another format: lerobot (eval_info.json)."),
    record: str = typer.Option("none", "--record", help="Save rollouts to recordings/<task>.h5: none|success|all."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | auto (for torch policies)."),
    shard: str | None = typer.Option(None, "--shard", help="Run only shard I of N (I/N, from 0) of the "
                                     "(task, episode) units; combine shards with `lerobench merge`."),
    max_errors: int | None = typer.Option(
        None, "--max-errors", min=0,
        help=f"Exit {EXIT_TOO_MANY_ERRORS} if more than N episodes end in an error (CI: 0). Default: no limit."),
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
        from lerobench.shards import parse_shard, shard_units

        settings = RunSettings(
            suite=s, policy=policy or s.default_policy, output=out, protocol=protocol, episodes=episodes,
            batch_size=batch_size, seed=seed, max_steps=max_steps, stop_on_success=stop_on_success,
            resume=resume, videos=videos, episode_timeout=episode_timeout, replan_steps=replan_steps,
            parallel_tasks=parallel_tasks, trials=trials, device=device, record=record, formats=tuple(formats),
            executor=executor, workers=workers, ray_address=ray_address, ray_gpus_per_worker=ray_gpus_per_worker,
            command=tuple(sys.argv), shard=parse_shard(shard),
        )
        units = shard_units([t.name for t in s.tasks], settings.episodes_per_task, settings.shard)
        reporter = RichReporter(len(units), s.name)
        evaluation = Evaluation(settings, reporter)
        console.print(f"Evaluating [bold]{settings.policy}[/] on [bold]{s.name}[/] "
                      f"({_plural(len(s.tasks), 'task')} x {_plural(settings.episodes_per_task, 'episode')}"
                      f"{f' x {settings.trials_per_episode} trials' if settings.trials_per_episode > 1 else ''}, "
                      f"protocol {protocol}"
                      + (f", shard {settings.shard}: {len(units)} episodes" if settings.shard else "")
                      + f") -> {out}", highlight=False, soft_wrap=True)  # one line, the path whole
        if resume:
            kept = len({(r.task, r.episode) for r in evaluation.previous})
            console.print(f"resuming: {_plural(kept, 'finished episode')} kept from {out / 'episodes.jsonl'}",
                          highlight=False, soft_wrap=True)
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
    n_errors = evaluation.errored_episodes  # not results' n_errors: with --trials that counts trial 0 only
    if n_errors:
        err_console.print(f"[yellow]{_plural(n_errors, 'episode')} ended with an error "
                          f"(counted as failure{'s' * (n_errors != 1)}); see episodes.jsonl[/]")
    if max_errors is not None and n_errors > max_errors:
        err_console.print(f"[bold red]error:[/] {_plural(n_errors, 'episode')} ended with an error, more than "
                          f"--max-errors {max_errors}; results are in {out}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_TOO_MANY_ERRORS)


@app.command("merge", short_help="Merge the outputs of `eval --shard I/N` runs into one run.")
def merge_shards(
    shard_dirs: list[Path] = typer.Argument(..., metavar="SHARD_DIR",
                                          help="Output directories of `eval --shard I/N` runs."),
    output: Path = typer.Option(..., "--output", "-o", help="New directory for the merged run."),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete",
        help=f"Exit 0 when episodes are missing (default: exit {EXIT_INCOMPLETE_MERGE}, results still written)."),
) -> None:
    """Merge shard outputs into one run (episodes.jsonl, results.json, videos); see docs/sharding.md."""
    from lerobench.merge import merge

    try:
        results = merge(output, shard_dirs, command=tuple(sys.argv))
    except LerobenchError as exc:
        _fail(exc)
    for note in results["merge_notes"]:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    _print_summary(results, output, merged_from=len(results["shards"]))
    if not results["complete"]:
        shown = ", ".join(f"{m['task']}#{m['episode']}" for m in results["missing"][:10])
        more = f" and {len(results['missing']) - 10} more" if len(results["missing"]) > 10 else ""
        err_console.print(f"[yellow]incomplete: {len(results['missing'])} episodes missing ({shown}{more}); "
                          f"results.json lists them under 'missing'[/]", highlight=False, soft_wrap=True)
        if not allow_incomplete:  # a job that merges shards must not pass with a shard lost
            raise typer.Exit(EXIT_INCOMPLETE_MERGE)


@app.command("serve", short_help="Serve a policy over openpi's websocket protocol.")
def serve_policy(
    policy: str = typer.Option(..., "--policy", "-p", help="Policy to serve: any --policy of `lerobench eval`."),
    suite: str = typer.Option(..., "--suite", "-s", help="Suite whose shapes and cameras the policy is built for."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port)."),
    protocol: str = typer.Option("standard", "--protocol", help="Named protocol of the suite (image size)."),
    seed: int = typer.Option(0, "--seed", help="Run seed given to the policy factory."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | auto (for torch policies)."),
    max_batch: int = typer.Option(1, "--max-batch", help="Stack up to N rows of concurrent requests into one "
                                  "policy call (1: no batching; the policy must declare batchable = True)."),
    max_wait_ms: float = typer.Option(5.0, "--max-wait-ms", help="With --max-batch: wait at most T ms after a "
                                      "batch's first request for more."),
) -> None:
    """Serve a policy over openpi's websocket protocol (for `eval --policy ws://...` or openpi clients)."""
    try:
        from lerobench.policies.serve import PolicyServer, suite_context

        context = suite_context(suite, protocol, seed=seed, device=device)
        server = PolicyServer(policy, context, host, port,
                              on_event=lambda text: err_console.print(f"[dim]{text}[/]", highlight=False),
                              max_batch=max_batch, max_wait_ms=max_wait_ms)
    except LerobenchError as exc:
        _fail(exc)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"[yellow]listening on {host}: anyone who reaches this port can run the policy "
                          f"(no authentication, no encryption)[/]", highlight=False)
    console.print(f"Serving [bold]{policy}[/] for suite [bold]{context.suite}[/] on [bold]{server.url}[/]"
                  + (f", batching up to {max_batch} rows within {max_wait_ms:g} ms" if max_batch > 1 else "")
                  + " (Ctrl-C to stop)", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        server.shutdown()


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _print_comparison(c: dict[str, Any]) -> None:
    a, b = c["a"], c["b"]
    kind = f"paired on {c['matched_episodes']} episodes" if c["paired"] else "UNPAIRED: no episode matches"
    console.print(f"A = {a['policy']} ({a['path']})\nB = {b['policy']} ({b['path']})", highlight=False)
    table = Table(title=f"B − A, {kind}")
    for col in ("task", "n", "A", "B", "B − A", "95% CI", "p", "Holm p", ""):
        table.add_column(col, justify="left" if col == "task" else "right", no_wrap=col != "task")

    def row(label: str, block: dict[str, Any], holm: str) -> list[str]:
        lo, hi = block["ci95"]
        n = str(block["n_a"]) if block["n_a"] == block["n_b"] else f"{block['n_a']}/{block['n_b']}"
        mark = ("[green]better[/]" if block["difference"] > 0 else "[red]worse[/]") if block["significant"] else ""
        return [label, n, _rate(block["rate_a"]), _rate(block["rate_b"]), _signed(block["difference"]),
                f"{100 * lo:+.0f}…{100 * hi:+.0f}", _p(block["p_value"]), holm, mark]

    for t in c["tasks"]:
        table.add_row(*row(t["task"], t, _p(t["p_holm"])))
    for name, g in c["groups"].items():
        table.add_row(*row(f"[italic]{name}[/]", g, ""))
    table.add_row(*row("[bold]overall[/]", c["overall"], ""))
    console.print(table)
    for trial in c.get("per_trial", [])[1:]:
        o = trial["overall"]
        lo, hi = o["ci95"]
        console.print(f"trial {trial['trial']}: A {_rate(o['rate_a'])}, B {_rate(o['rate_b'])}, "
                      f"B − A {_signed(o['difference'])} points (95% CI {100 * lo:+.0f} to {100 * hi:+.0f}), "
                      f"p {_p(o['p_value'])}", highlight=False)
    for note in c["differences"]:
        err_console.print(f"[yellow]differs:[/] {note}", highlight=False)
    for note in c["notes"]:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(f"[bold]{c['verdict']}[/] (alpha {c['alpha']}; tasks: {c['tasks'][0]['test']}, Holm-adjusted; "
                  f"overall: {c['overall']['test']})", highlight=False)


@app.command("compare", short_help="Is run B better than run A? Exact paired tests (same seed).")
def compare(
    run_a: Path = typer.Argument(..., metavar="RUN_A", help="Baseline run directory (A)."),
    run_b: Path = typer.Argument(..., metavar="RUN_B", help="Candidate run directory (B); differences are B − A."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of a table."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level (tasks: after Holm adjustment)."),
    fail_if_worse: bool = typer.Option(False, "--fail-if-worse",
                                       help="Exit 1 when B is significantly worse than A (overall or any task)."),
    allow_different: bool = typer.Option(False, "--allow-different",
                                         help="Compare runs of different suites/protocols/step limits anyway."),
) -> None:
    """Is B better than A, or is it noise? Exact paired tests on matching episodes (same seed)."""
    from lerobench.compare import compare_runs, load_run

    try:
        comparison = compare_runs(load_run(run_a), load_run(run_b), alpha=alpha, allow_different=allow_different)
    except LerobenchError as exc:
        _fail(exc)
    if as_json:
        _print_json(comparison)
    else:
        _print_comparison(comparison)
    if fail_if_worse and comparison["b_worse"]:
        raise typer.Exit(1)


@app.command("report", short_help="One self-contained HTML report: charts, tables, videos.")
def report(
    runs: list[Path] = typer.Argument(..., metavar="RUN",
                                    help="Run directories (the first is the baseline for significance)."),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="HTML file to write."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level for the marks on the chart."),
) -> None:
    """Write one self-contained HTML report (charts, tables, errors, video thumbnails) for runs."""
    from lerobench.report import write_report

    try:
        path = write_report(runs, output, alpha=alpha)
    except LerobenchError as exc:
        _fail(exc)
    console.print(f"Report: [bold]{path}[/]", highlight=False)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def main() -> None:
    """Console-script entry point."""
    app()  # usage errors and the bare command: OneLineErrorsGroup


if __name__ == "__main__":
    main()
