"""`lerobench eval`: live progress while a run goes, then the summary table."""

from __future__ import annotations

import io
import sys
import threading
import time
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from lerobench.cli.common import (
    EXIT_TOO_MANY_ERRORS,
    app,
    console,
    elide_middle,
    err_console,
    fail,
    headline_rates,
    interrupts_keep_results,
    plural,
    rate_text,
    task_names,
)
from lerobench.errors import LerobenchError
from lerobench.plan.options import cli_option, given
from lerobench.trackers import check_trackers, parse_log_to


class RichReporter:
    """Live progress: the running task(s) and the whole suite (finished before a resume included), ETA, env-steps/s.

    Every row stays one line in an 80-column terminal: task names are elided in the middle to what the
    other columns leave, and the counts column is cut rather than wrapped.
    """

    def __init__(self, total_episodes: int, suite: str, trials: int = 1, display: Any = None):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.table import Column

        narrow = console.width < 120  # then: no elapsed-time column, a short bar, the counts cut to fit
        counts = len(f"{total_episodes}/{total_episodes}")
        info = 20 if narrow else 36
        times: list[Any] = [TimeRemainingColumn()] if narrow else [TimeElapsedColumn(), TextColumn("ETA"),
                                                                    TimeRemainingColumn()]
        fixed = (10 if narrow else 30) + counts + (7 if narrow else 19) + info + len(times) + 3  # + separators
        self._name_width = max(16, console.width - fixed - 1)
        self.progress = Progress(
            TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=10 if narrow else 30), MofNCompleteColumn(), *times,
            TextColumn("{task.fields[info]}", table_column=Column(no_wrap=True, overflow="ellipsis", max_width=info)),
            console=display or console, transient=False,
        )
        self.suite_bar = self.progress.add_task(escape(elide_middle(suite, self._name_width)), total=total_episodes,
                                                info="")
        self.trials = trials
        self._credited: dict[str, int] = {}
        self._bars: dict[str, Any] = {}
        self._successes: dict[str, int] = {}
        self._within: dict[str, set[int]] = {}
        """Per task, the episodes solved at any trial so far (``--trials`` > 1)."""
        self._steps = 0
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._all_successes = 0
        if self.names_waiting_calls:
            threading.Thread(target=self._name_waiting_calls, name="lerobench-waiting-calls", daemon=True).start()

    names_waiting_calls = True
    """Print a line naming a policy call that is late (``lerobench.rollout.deadline``) every ``WAITING_EVERY_S``."""

    def _name_waiting_calls(self) -> None:
        from lerobench.rollout.deadline import WAITING

        last = 0.0
        while True:
            time.sleep(1.0)
            notice = WAITING.notice() if self.progress.live.is_started else None
            if notice and time.perf_counter() - last >= WAITING_EVERY_S:
                last = time.perf_counter()
                self.message(notice)

    def _count(self, record: Any) -> bool:
        """Count one trial's record (under the lock); True for trial 0, which moves the bars."""
        if record.success:
            self._within.setdefault(record.task, set()).add(record.episode)
        if record.trial != 0:
            return False
        self._successes[record.task] = self._successes.get(record.task, 0) + int(record.success)
        self._all_successes += int(record.success)
        return True

    def _solved(self, task: str | None = None) -> str:
        """``3 solved``; with trials, both counts, short for the bars' info column: ``t0 0 solved, ≤3: 2``."""
        if task is None:
            first, within = self._all_successes, sum(len(v) for v in self._within.values())
        else:
            first, within = self._successes.get(task, 0), len(self._within.get(task, ()))
        return f"{first} solved" if self.trials <= 1 else f"t0 {first} solved, ≤{self.trials}: {within}"

    def resumed(self, records: Any) -> None:
        """Count the episodes a ``--resume`` keeps, so the suite bar and the solved counts cover the whole run."""
        with self._lock:
            for r in records:
                if self._count(r):
                    self._credited[r.task] = self._credited.get(r.task, 0) + 1
            self.progress.update(self.suite_bar, advance=sum(self._credited.values()), info=self._solved())

    def message(self, text: str) -> None:  # noqa: D102
        console.print(f"[dim]{escape(text)}[/]", highlight=False, soft_wrap=True)  # one line in logs

    def task_started(self, task: Any, total: int, done: int) -> None:  # noqa: D102
        with self._lock:
            self._successes.setdefault(task.name, 0)
            label = escape(elide_middle(task.name, self._name_width - 2))
            self._bars[task.name] = self.progress.add_task(f"  {label}", total=total, completed=done,
                                                           info=self._solved(task.name) if done else "")
            self.progress.update(self.suite_bar, advance=max(0, done - self._credited.get(task.name, 0)))
            self._credited[task.name] = max(done, self._credited.get(task.name, 0))

    def steps(self, task: Any, n: int) -> None:  # noqa: D102
        with self._lock:
            self._steps += n

    def episode(self, task: Any, record: Any) -> None:
        """A trial ended (every trial is reported, trial 0 first): trial 0 moves the bars, any trial may solve."""
        with self._lock:
            advance = int(self._count(record))
            rate = self._steps / max(1e-9, time.perf_counter() - self._t0)
            bar = self._bars[task.name]
            self.progress.update(bar, advance=advance, info=self._solved(task.name))
            self.progress.update(self.suite_bar, advance=advance, info=f"{self._solved()}, {rate:,.0f} env-steps/s")

    def task_finished(self, task: Any, summary: dict[str, Any]) -> None:  # noqa: D102
        with self._lock:
            errors = summary.get("n_errors", 0)
            extra = f", {errors} errors" if errors else ""
            rate = rate_text(summary.get("success_rate"))
            within = summary.get("success_within_k") or []
            if self.trials > 1 and within:  # both, short enough for the info column (the log says them in words)
                rate = f"{rate} t0, {rate_text(within[-1]['success_rate'])} ≤{self.trials}"
            self.progress.update(self._bars[task.name], info=f"{rate}{extra}")


WAITING_EVERY_S = 10.0
"""Seconds between two lines naming a late policy call in a terminal."""

PROGRESS_INTERVAL_S = 30.0
"""Default seconds between plain progress lines when stdout is not a terminal (``--progress-interval``)."""


class _Discard(io.StringIO):
    """A text file that keeps nothing: where a log's live display draws."""

    def write(self, text: str) -> int:  # noqa: D102
        return len(text)


class LogReporter(RichReporter):
    """Progress for a log file, a pipe or CI: plain, self-contained lines every ``interval`` s and at each task's end.

    Why: rich draws nothing live when stdout is not a terminal (nohup, SLURM, CI), so a log of a multi-hour run
    showed two header lines until the end. Each line stands alone (time, done/total, successes, env-steps/s,
    elapsed, ETA), for ``tail -f`` and ``grep``. Lines are written only while the progress display is running
    (``with reporter.progress``); the ETA uses the pace since the first episode ended, not start-up.
    """

    names_waiting_calls = False  # each progress line names them

    def __init__(self, total_episodes: int, suite: str, interval: float = PROGRESS_INTERVAL_S, trials: int = 1):
        from rich.console import Console

        # The live display draws into a console that discards it: rich prints a live display's last frame when it
        # stops, and on a file that was the bars cut at the terminal width ("73 env-st…"). Lines go to `console`.
        super().__init__(total_episodes, suite, trials, display=Console(file=_Discard(), width=200))
        self.interval = interval
        self._suite = suite
        self._done_now = 0
        self._first_end: float | None = None
        self._ticker = threading.Thread(target=self._tick, name="lerobench-progress-log", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        live, started = self.progress.live, False
        while True:
            time.sleep(min(self.interval, 0.2) if not started else self.interval)
            if live.is_started:
                if started:
                    self._log(self.line())
                else:  # the run began: count from here, first line after one interval
                    started, self._t0 = True, time.perf_counter()
            elif started:
                return  # the run ended: the summary follows

    def _log(self, text: str) -> None:
        if self.progress.live.is_started:
            console.print(f"{datetime.now():%H:%M:%S} {text}", highlight=False, markup=False, soft_wrap=True)

    def line(self) -> str:
        """The whole run's progress now, in one line."""
        with self._lock:
            suite = next(t for t in self.progress.tasks if t.id == self.suite_bar)
            done, total = int(suite.completed), int(suite.total or 0)
            elapsed = time.perf_counter() - self._t0
            rate = self._steps / max(1e-9, elapsed)
            pace = ((time.perf_counter() - self._first_end) / (self._done_now - 1)
                    if self._first_end is not None and self._done_now > 1 else None)
            solved = self._all_successes
            within = sum(len(v) for v in self._within.values())
        eta = "-" if pace is None or pace <= 0 else _clock(pace * max(0, total - done))

        def share(n: int) -> str:
            return f" ({100 * n / done:.1f}%)" if done else ""

        solved_text = (f"{solved} solved{share(solved)}" if self.trials <= 1 else
                       f"trial 0: {solved} solved{share(solved)}, within {self.trials} trials: {within}{share(within)}")
        from lerobench.rollout.deadline import WAITING

        notice = WAITING.notice()
        return (f"progress {self._suite}: {done}/{total} episodes ({100 * done / max(1, total):.0f}%), "
                f"{solved_text}, {rate:,.0f} env-steps/s, elapsed {_clock(elapsed)}, ETA {eta}"
                + (f"; {notice}" if notice else ""))

    def episode(self, task: Any, record: Any) -> None:  # noqa: D102
        super().episode(task, record)
        if record.trial != 0:
            return
        with self._lock:
            self._done_now += 1
            if self._first_end is None:
                self._first_end = time.perf_counter()

    def task_finished(self, task: Any, summary: dict[str, Any]) -> None:  # noqa: D102
        super().task_finished(task, summary)
        errors = summary.get("n_errors", 0)
        trials = f" x {self.trials} trials" if self.trials > 1 else ""
        self._log(f"task {task.name} finished: {plural(summary.get('n_episodes', 0), 'episode')}{trials}, "
                  f"{headline_rates(summary, self.trials)}" + (f", {errors} errors" if errors else ""))
        self._log(self.line())


def _clock(seconds: float) -> str:
    """``h:mm:ss``."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def reporter_for(total_episodes: int, suite: str, interval: float = PROGRESS_INTERVAL_S,
                 trials: int = 1) -> RichReporter:
    """Live bars in a terminal; plain lines every ``interval`` s where stdout is a file or a pipe."""
    if console.is_terminal:
        return RichReporter(total_episodes, suite, trials)
    return LogReporter(total_episodes, suite, interval, trials)


def _log(results: dict[str, Any], out: Path, trackers: tuple[str, ...], step: int, project: str) -> None:
    """Log the finished run to ``--log-to``'s trackers, one line each saying where it went."""
    from lerobench.trackers import log_run

    started = time.perf_counter()
    try:
        written = log_run(results, out, trackers, step=step, project=project)
    except LerobenchError as exc:
        fail(exc)
    for name, where in written.items():
        console.print(f"logged to {name}: {where}", highlight=False, soft_wrap=True)
    console.print(f"[dim]logging took {time.perf_counter() - started:.1f} s[/]", highlight=False)


def _until_line(evaluation: Any) -> str:
    """What the stopping rule will do, in one line (the cap is --episodes, or run A's episodes)."""
    s, until = evaluation.s, evaluation.plan.until
    cap = f"cap {s.episodes_per_task} episodes per task"
    if until.kind == "decided":
        recorded = evaluation.recorded
        head = (f"until decided: B = {s.policy} vs A = {recorded.policy} ({s.versus}), paired on the same episodes "
                f"round by round, alpha {s.alpha:g}")
        if evaluation.design_summary is not None and s.metric == "progress":
            from lerobench.cli.plan import progress_designed_line

            return (f"{head}; deciding on mean progress, not success; "
                    f"{progress_designed_line(evaluation.design_summary)}")
        if evaluation.design_summary is not None:
            from lerobench.cli.plan import designed_line

            return f"{head}; {designed_line(evaluation.design_summary)}"
        if s.metric == "progress":
            return (f"{head}; deciding on mean progress (each pair's max_progress(B) - max_progress(A), betting "
                    f"e-processes), not success; {cap}")
        return f"{head}, equivalence margin ±{s.margin:g}, {cap}"
    where = "each task" if until.kind == "halfwidth" else "the suite mean (tasks round by round)"
    return (f"until {until}: {where} stops once its {100 * (1 - s.alpha):g}% confidence sequence has half-width "
            f"<= {until.target:g}, updated in episode-index order; {cap}")


@app.command("eval", short_help="Evaluate a policy on a suite: per-episode and per-task results.")
def evaluate(
    suite: str = typer.Option(..., "--suite", "-s", help="Suite name (see `lerobench list`) or a TOML path."),
    policy: str | None = typer.Option(
        None, "--policy", "-p",
        help="random | zero | a benchmark's own (metaworld-expert, metaworld-expert-chunks, metaworld-expert-blend, "
             "metaworld-adaptive-reach, libero-expert, libero-expert-chunks, libero-expert-blend, pusht-expert, "
             "pusht-expert-noisy, pusht-expert-chunks, aloha-expert, aloha-expert-chunks; `lerobench show SUITE` "
             "lists a suite's) | "
             "module.path:factory | ws://host:port | lerobot:<dir>. Default: the suite's default policy."),
    episodes: int | None = cli_option("episodes"),
    tasks: str | None = typer.Option(
        None, "--tasks", help="Tasks to run: names, suite-local indices or ranges, comma-separated "
                              "(reach-v3,push-v3 or 0-4,7)."),
    batch_size: int = cli_option("batch_size"),
    seed: int = cli_option("seed"),
    output: Path | None = typer.Option(None, "--output", "-o",
                                          help="Output directory (default outputs/<suite>/<timestamp>)."),
    protocol: str = cli_option("protocol"),
    max_steps: int | None = cli_option("max_steps"),
    stop_on_success: bool = cli_option("stop_on_success"),
    videos: int = cli_option("videos"),
    video_fps: float = cli_option("video_fps"),
    video_size: int | None = cli_option("video_size"),
    render_quality: str | None = cli_option("render_quality"),
    resume: bool = cli_option("resume"),
    episode_timeout: float | None = cli_option("episode_timeout"),
    policy_timeout: float | None = cli_option("policy_timeout"),
    replan_steps: int = cli_option("replan_steps"),
    delay_steps: str = cli_option("delay_steps"),
    parallel_tasks: int = cli_option("parallel_tasks"),
    trials: int | None = cli_option("trials"),
    formats: list[str] = cli_option("formats"),
    record: str = cli_option("record"),
    record_size: int = cli_option("record_size"),
    device: str = cli_option("device"),
    call_width: int | None = cli_option("call_width"),
    share_task: bool = cli_option("share_task"),
    shard: str | None = cli_option("shard"),
    max_errors: int | None = cli_option("max_errors"),
    executor: str = cli_option("executor"),
    workers: int = cli_option("workers"),
    ray_address: str | None = cli_option("ray_address"),
    ray_gpus_per_worker: float = cli_option("ray_gpus_per_worker"),
    allow_sim_drift: bool = cli_option("allow_sim_drift"),
    perturb: list[str] = cli_option("perturb"),
    until: str | None = cli_option("until"),
    versus: Path | None = cli_option("versus"),
    alpha: float = cli_option("alpha"),
    debug: bool = typer.Option(False, "--debug", help="On an error, also print its traceback (a policy's is "
                                                     "saved in the run directory as traceback.txt anyway)."),
    margin: float = cli_option("margin"),
    effect: float | None = cli_option("effect"),
    power: float = cli_option("power"),
    metric: str = cli_option("metric"),
    progress_interval: float = typer.Option(
        PROGRESS_INTERVAL_S, "--progress-interval", min=0.1,
        help="Seconds between plain progress lines when stdout is not a terminal (log files, CI)."),
    rerun: bool = cli_option("rerun"),
    log_to: list[str] = cli_option("log_to"),
    log_step: int = cli_option("log_step"),
    log_project: str = cli_option("log_project"),
) -> None:
    """Evaluate a policy on every task of a suite and write per-episode and per-task results."""
    _evaluate(given(locals()), locals())  # the settings declared once in plan/options.py, and the command's own


def _evaluate(declared: dict[str, Any], flags: dict[str, Any]) -> None:
    """``lerobench eval`` with its flags parsed: plan, run with live progress, print the summary, log, check errors."""
    suite, policy, tasks, output, resume = (flags[k] for k in ("suite", "policy", "tasks", "output", "resume"))
    debug, log_to, max_errors = flags["debug"], flags["log_to"], flags["max_errors"]
    from lerobench.suite.registry import load_suite

    with interrupts_keep_results("continue with --resume"):
        try:
            trackers = parse_log_to(log_to)
            check_trackers(trackers)  # a typo or a missing library, said before hours of simulation
            s = load_suite(suite).select_tasks(task_names(tasks))
            if resume and output is None:
                raise LerobenchError("--resume needs --output DIR (the directory of the run to continue)")
            out = output or Path("outputs") / s.name / datetime.now().strftime("%Y%m%d-%H%M%S")
            from lerobench.core.shards import parse_shard, shard_units
            from lerobench.envs.perturb import parse_perturbations
            from lerobench.execution.runner import Evaluation, RunSettings
            from lerobench.policies.loading import absolute_spec

            settings = RunSettings(**{
                **declared, "suite": s, "policy": absolute_spec(s.chosen_policy(policy)), "output": out,
                "unique_output": output is None, "formats": tuple(flags["formats"]), "command": tuple(sys.argv),
                "shard": parse_shard(flags["shard"]), "perturb": parse_perturbations(flags["perturb"])})
            evaluation = Evaluation(settings)
            settings = evaluation.s  # as planned (--versus sets the episode count)
            out = settings.output  # a default name taken in the same second: the next free one
            units = shard_units([t.name for t in s.tasks], settings.episodes_per_task, settings.shard)
            reporter = evaluation.reporter = reporter_for(len(units), s.name, flags["progress_interval"],
                                                          settings.trials_per_episode)
            _announce(evaluation, len(units))
            reporter.resumed(evaluation.previous)
            with reporter.progress:
                results = evaluation.run()
        except LerobenchError as exc:
            if debug:  # the whole chain: what the policy raised, then where lerobench stopped
                text = getattr(exc, "traceback_text", None) or "".join(traceback.format_exception(exc))
                err_console.print(text.rstrip(), highlight=False, markup=False, soft_wrap=True)
            fail(exc)
    from lerobench.cli.summary import print_summary  # not at import: `lerobench list` needs none of it

    print_summary(results, out)
    if trackers:
        _log(results, out, trackers, flags["log_step"], flags["log_project"])
    _check_errors(evaluation.episodes_errored_at_any_trial, max_errors, out)


def _announce(evaluation: Any, units: int) -> None:
    """What is about to run, before the progress display: drift, the run in one line, the stopping rule, a resume."""
    settings, suite = evaluation.s, evaluation.s.suite
    out = settings.output
    golden = (evaluation.plan.simulator or {}).get("golden") or {}
    if golden.get("status") == "drifted":
        err_console.print(f"[yellow]warning: simulator drift ({escape(str(golden.get('reason')))}); running "
                          f"anyway (--allow-sim-drift): this run is marked drifted[/]", highlight=False,
                          soft_wrap=True)
    trials = settings.trials_per_episode
    console.print(f"Evaluating [bold]{settings.policy}[/] on [bold]{suite.name}[/] "
                  f"({plural(len(suite.tasks), 'task')} x {plural(settings.episodes_per_task, 'episode')}"
                  f"{f' x {trials} trials' if trials > 1 else ''}, protocol {evaluation.plan.protocol_label()}"
                  + _treatment(settings)
                  + (f", shard {settings.shard}: {units} episodes" if settings.shard else "")
                  + f") -> {out}", highlight=False, soft_wrap=True)  # one line, the path whole
    if evaluation.plan.until is not None:
        console.print(_until_line(evaluation), highlight=False, soft_wrap=True)
    if evaluation.fresh_resume:  # a requeued job that always passes --resume: its first start
        console.print(f"nothing to resume: {out / 'results.json'} does not exist (killed before the first "
                      f"results were written?): starting the run", highlight=False, soft_wrap=True)
    elif settings.resume:
        kept = len({(r.task, r.episode) for r in evaluation.previous})
        console.print(f"resuming: {plural(kept, 'finished episode')} kept from {out / 'episodes.jsonl'}",
                      highlight=False, soft_wrap=True)


def _treatment(settings: Any) -> str:
    """The run's delay and replan steps in the header, where they are not the defaults (``, delay 3 steps ...``)."""
    parts = []
    if settings.delay_steps not in (0, "0"):
        from lerobench.core.delay import MEASURED

        measured = settings.delay_steps == MEASURED
        parts.append("delay measured from each call's latency (not reproducible: the numbers depend on this "
                     "machine's speed)" if measured else f"delay {settings.delay_steps} steps")
    if settings.replan_steps != 1:
        parts.append(f"replan every {settings.replan_steps} steps")
    return "".join(f", {p}" for p in parts)


def _check_errors(n_errors: int, max_errors: int | None, out: Path) -> None:
    """Say how many episodes ended in an error; exit non-zero past ``--max-errors``.

    ``n_errors`` is the evaluation's count at any trial, not results' ``n_errors`` (with --trials: trial 0 only).
    """
    if n_errors:
        err_console.print(f"[yellow]{plural(n_errors, 'episode')} ended with an error "
                          f"(counted as failure{'s' * (n_errors != 1)}); see episodes.jsonl[/]")
    if max_errors is not None and n_errors > max_errors:
        err_console.print(f"[bold red]error:[/] {plural(n_errors, 'episode')} ended with an error, more than "
                          f"--max-errors {max_errors}; results are in {out}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_TOO_MANY_ERRORS)
