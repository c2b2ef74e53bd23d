"""The single writer of a run's records: ``episodes.jsonl``, ``results.json``, progress (issue 47: it only writes).

Every executor hands each finished episode to ``EpisodeSink.episode`` (from any thread, through the runner's
``RunIO``); the sink appends it to ``episodes.jsonl`` at once, keeps the progress display current, says when a
task is complete and republishes ``results.json`` atomically. What else goes into results.json is handed to it
(``blocks``: the ``--until`` rule's block, the policy calls' statistics); the stopping rule, the media
(``output/media.py``) and the call statistics belong to the runner and the policy caller. Nothing below the
sink writes result files (videos encoded inside worker processes are the one exception, see docs/scaling.md).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from traceback import format_exception
from typing import Any

from lerobench.core.files import write_json_atomic
from lerobench.core.identity import diff
from lerobench.core.provenance import provenance
from lerobench.core.records import EpisodeRecord
from lerobench.core.results import (
    EPISODES_FILE,
    IDENTITY_FILE,
    RESULTS_FILE,
    SCHEMA_VERSION,
    ResultsWriter,
    lerobot_eval_info,
    rewrite_episodes,
    summarize,
)
from lerobench.core.rundir import RunDir
from lerobench.errors import PolicyError, ResumeError, stops_deferred
from lerobench.output.progress import Reporter, SilentReporter
from lerobench.output.video_recorder import with_videos_on_disk
from lerobench.plan.planner import EXTENT, RunPlan, WorkUnit
from lerobench.policies.invariance import with_checks
from lerobench.suite.config import TaskSpec

TRACEBACK_FILE = "traceback.txt"
"""The traceback of what the policy raised when it stopped the run (``EpisodeSink.fail``)."""


def load_previous(plan: RunPlan) -> tuple[list[EpisodeRecord], tuple[str, ...]]:
    """The episodes a ``--resume`` keeps, refusing a run whose identity or extent differs; and what was repaired.

    The directory is read and validated by ``RunDir`` first: a damaged episode line is refused (one line naming
    the file and line) before anything is changed. A missing or damaged ``results.json`` is rebuilt from the run's
    identity file (``run.json``, written before its first episode) and its episode lines, which are the run's
    record (the notes say so). Only then are an unterminated last line and episodes cut between their trials removed
    from ``episodes.jsonl`` (those episodes run again).
    """
    out = plan.output
    if not plan.settings.resume:
        if (out / EPISODES_FILE).exists() and (out / EPISODES_FILE).stat().st_size > 0:
            raise ResumeError(f"{out / EPISODES_FILE} already holds episodes: pass --resume to continue "
                              f"that run, or choose another --output")
        return [], ()
    if not (out / RESULTS_FILE).exists() and not (out / IDENTITY_FILE).exists():  # killed before any: start it
        if (out / EPISODES_FILE).exists() and (out / EPISODES_FILE).stat().st_size > 0:
            raise ResumeError(f"cannot resume {out}: {EPISODES_FILE} holds episodes but neither {RESULTS_FILE} nor "
                              f"{IDENTITY_FILE}, which say what run they belong to, exists: move "
                              f"{out / EPISODES_FILE} away to start the run over, or choose another --output")
        return [], ()
    run = RunDir.load(out, rebuild=True)
    previous = run.config
    current = json.loads(json.dumps(plan.config()))  # tuples -> lists, as they were stored

    def shown(key: str, value: Any) -> str:
        return "unsharded" if key == "shard" and value is None else repr(value)

    found = diff(previous, current, labels=("previous", "now"))
    found += [f"{key}: previous {shown(key, previous.get(key))}, now {shown(key, current.get(key))}"
              + _extending(key, previous, current)
              for key in EXTENT if previous.get(key) != current.get(key)
              and not (key == "episodes_per_task" and not _extending(key, previous, current))]
    if found:
        raise ResumeError(f"cannot resume {out}: it is another run ({'; '.join(found)})")
    wanted = {t.name for t in plan.suite.tasks}
    whole = with_videos_on_disk(out, run.whole_records())
    if run.cut_tail or len(whole) != len(run.records) or run.notes:
        # half an episode (killed between trials), a duplicate, a line cut mid-write or a lost video: rerun it
        rewrite_episodes(out / EPISODES_FILE, whole)
    notes = run.notes + ((f"{out / EPISODES_FILE}: an unterminated last line (cut mid-write) dropped: that episode "
                          "runs again",) if run.cut_tail else ())
    return [r for r in whole if r.task in wanted and r.episode < plan.episodes_per_task], notes


def write_identity(plan: RunPlan) -> None:
    """Write the run's identity (``run.json``: its config) once, before its first episode, atomically.

    Why apart from ``results.json``: the summary is rewritten through the run and is what a user opens, edits or
    truncates; the identity is written once and says which run the episode lines belong to, so ``--resume`` can
    rebuild the summary from the lines without trusting it.
    """
    path = plan.output / IDENTITY_FILE
    if not path.exists():
        write_json_atomic(path, {"schema_version": SCHEMA_VERSION, "config": plan.config()})


def _extending(key: str, previous: dict[str, Any], current: dict[str, Any]) -> str:
    """Why ``--episodes`` may not change on this ``--resume`` ("" when the run can be extended to it).

    A run is extended, never cut. Episode *i* of a task starts from the same state whatever the total (its seed
    and init state are functions of (seed, task, i) alone), so more episodes continue the same run; a ``--until``
    rule's confidence sequences are anytime-valid, so continuing past the old cap keeps them valid. A shard is
    the exception: which shard owns an episode depends on the total (merge the shards, then extend the merge).
    """
    if key != "episodes_per_task":
        return ""
    was, now = previous.get(key), current.get(key)
    if not (isinstance(was, int) and isinstance(now, int)):
        return " (unknown extent)"
    if now < was:
        return f" (a run is extended, never cut: --episodes must be at least {was})"
    if current.get("shard") is not None:
        return (" (a shard cannot be extended: which shard runs an episode depends on the total; merge the shards "
                "with `lerobench merge`, then --resume the merged directory with more --episodes)")
    return ""


def startup_timing(clock0: float, first_start: float | None, last_end: float, steps: int,
                   lines: int, first_step: float | None = None) -> dict[str, Any]:
    """Start-up apart from steady-state throughput (results.json ``timing``).

    Why: ``eval_s`` and ``env_steps_per_s`` span the whole invocation, so on a short run they measure start-up
    (imports, worker processes, policy loading, simulator builds): a smoke run read "4 env-steps/s". Start-up
    ends when this invocation's first episode began (its arrival minus its ``elapsed_s``); the steady state
    lasts until its latest episode line arrived, and its rates count every step and line of this invocation.
    """
    to_step = None if first_step is None else round(max(0.0, first_step - clock0), 3)
    if first_start is None:
        return {"startup_s": None, "first_step_s": to_step, "steady_s": None, "steady_env_steps_per_s": None,
                "steady_episodes_per_s": None}
    steady = max(1e-3, last_end - first_start)
    return {"startup_s": round(max(0.0, first_start - clock0), 3), "first_step_s": to_step,
            "steady_s": round(steady, 3), "steady_env_steps_per_s": round(steps / steady, 2),
            "steady_episodes_per_s": round(lines / steady, 4)}


@dataclass(frozen=True)
class ResultBlocks:
    """What the runner adds to results.json through the sink: it writes them, others keep them."""

    overall: Callable[[float], dict[str, Any]] = lambda elapsed_s: {}
    """Keys added to ``overall`` (the policy calls' statistics over ``elapsed_s``)."""
    stopping: Callable[[], dict[str, Any] | None] = lambda: None
    """The ``stopping`` block (``--until``), or None."""


class EpisodeSink:
    """Owns the output directory while a run lasts; thread-safe; ``close`` publishes the final results."""

    def __init__(self, plan: RunPlan, reporter: Reporter | None = None,
                 previous: list[EpisodeRecord] | None = None, blocks: ResultBlocks | None = None):
        self.plan = plan
        self.blocks = blocks or ResultBlocks()
        """What others add to results.json (the stopping block, the call statistics)."""
        self.reporter = reporter or SilentReporter()
        self.records: list[EpisodeRecord] = list(previous or [])
        self._previous = len(self.records)
        self.execution: dict[str, Any] = {}
        """What the executor chose (executor, workers, batch size), added to results.json's config."""
        self._lock = threading.Lock()
        self._started = datetime.now(timezone.utc)
        self._clock0 = time.perf_counter()
        self._first_start: float | None = None
        """When this invocation's first episode began (``perf_counter``): the end of start-up (``timing``)."""
        self._last_end = self._clock0
        """When its latest episode line arrived: the end of the steady state (closing workers is not part of it)."""
        self._env_steps = 0
        self._first_step: float | None = None
        """When this process took the invocation's first env step (executors that step here: inline, vector)."""
        self._counts: dict[str, int] = {}
        self._expected: dict[str, int] = {t.name: plan.episodes_per_task for t in plan.suite.tasks}
        self._open_tasks: set[str] = set()
        self._finished_tasks: set[str] = set()
        self._writer: ResultsWriter | None = None
        self._clipping_said = False
        self.failure: dict[str, Any] | None = None
        """What stopped the run (``fail``): results.json's ``failure`` block."""

    # -- lifecycle -----------------------------------------------------------------------------------
    def open(self) -> None:
        """Start the writer and publish an empty results.json."""
        self._writer = ResultsWriter(self.plan.output)
        (self.plan.output / TRACEBACK_FILE).unlink(missing_ok=True)  # an earlier failure's, now resumed past
        for r in self.records:
            if r.trial == 0:
                self._counts[r.task] = self._counts.get(r.task, 0) + 1
        self.publish()

    def close(self, ok: bool) -> dict[str, Any]:
        """Publish the final (``ok``) or partial results, stop the writer; return them (media are closed first)."""
        assert self._writer is not None, "EpisodeSink.close before open"
        try:
            if ok:  # tasks a stopping rule ended before their last episode: report them as finished too
                for task in self.plan.suite.tasks:
                    if task.name in self._open_tasks and task.name not in self._finished_tasks:
                        self.task_finished(task)
            return self.publish(ended=datetime.now(timezone.utc) if ok else None)
        finally:
            self._writer.close()

    def expect(self, units: list[WorkUnit]) -> None:
        """Episodes each task will have when ``units`` are done (a shard runs only part of a task)."""
        done = {t: 0 for t in self._expected}
        for r in self.records:
            if r.trial == 0:
                done[r.task] = done.get(r.task, 0) + 1
        for unit in units:
            done[unit.task.name] = done.get(unit.task.name, 0) + len(unit.episodes)
        self._expected = done

    # -- what executors call -------------------------------------------------------------------------
    def done(self) -> set[tuple[str, int]]:
        """(task, episode) pairs already recorded (whole episodes: resume drops half ones)."""
        with self._lock:
            return {(r.task, r.episode) for r in self.records}

    def task_started(self, task: TaskSpec) -> None:
        """An executor starts work on ``task`` (idempotent: units of one task may start many times)."""
        with self._lock:
            if task.name in self._open_tasks:
                return
            self._open_tasks.add(task.name)
            done = self._counts.get(task.name, 0)
        self.reporter.task_started(task, self._expected.get(task.name, self.plan.episodes_per_task), done)

    def steps(self, task: TaskSpec, n: int, live: bool = True) -> None:
        """``n`` env steps were taken on ``task`` (``live``: just now, in this process)."""
        with self._lock:
            self._env_steps += n
            if live and self._first_step is None:
                self._first_step = time.perf_counter()
        self.reporter.steps(task, n)

    def episode(self, task: TaskSpec, record: EpisodeRecord, count_steps: bool = False) -> None:
        """Write one finished trial now; when it completes its task, report and republish.

        An episode's trials arrive together, in order; the last one (or the one whose error ended the
        episode) completes it. Progress counts episodes: the reporter sees each episode's trial 0.

        ``count_steps`` adds the episode's steps to the env-step rate (executors whose workers do not
        report steps as they go).
        """
        assert self._writer is not None, "EpisodeSink.episode before open"
        if count_steps:
            self.steps(task, record.steps, live=False)
        ends_episode = record.error is not None or record.trial == self.plan.settings.trials_per_episode - 1
        with stops_deferred(), self._lock:  # counted and queued together: a results.json never counts a lost line
            self._last_end = time.perf_counter()
            began = self._last_end - record.elapsed_s  # the episode's own clock excludes the env's build
            self._first_start = began if self._first_start is None else min(self._first_start, began)
            self._writer.put_episode(record)  # queued in the order counted: no snapshot can overtake its line
            self.records.append(record)
            if ends_episode:
                self._counts[task.name] = self._counts.get(task.name, 0) + 1
            complete = ends_episode and self._counts[task.name] == self._expected.get(task.name)
            say_clipping = bool(record.clipped) and not self._clipping_said
            self._clipping_said |= say_clipping  # once per run: the fraction per task is in results.json
        if say_clipping:
            low, high = self.plan.action_bounds
            self.reporter.message(
                f"warning: {100 * (record.clipped or 0):.3g}% of the action values of {task.name} episode "
                f"{record.episode} were outside the action space [{low:g}, {high:g}] and were clipped "
                f"(un-normalised actions?); results.json records clipped_action_fraction per task and overall")
        self.reporter.episode(task, record)  # every trial: the progress shows what the trials did
        if complete:
            self.task_finished(task)

    def task_finished(self, task: TaskSpec) -> None:
        """Report ``task``'s summary and republish results.json."""
        with self._lock:
            self._finished_tasks.add(task.name)
            mine = [r for r in self.records if r.task == task.name]
        trials = self.plan.settings.trials_per_episode
        summary = summarize(replace(self.plan.suite, tasks=(task,)), mine, trials)["tasks"]
        self.reporter.task_finished(task, summary[0] if summary else {})
        self.publish()

    def put_trajectory(self, task: str, index: int, attrs: dict[str, Any], arrays: dict[str, Any],
                       file_attrs: dict[str, str] | None = None) -> None:
        """Queue one ``--record`` rollout for the writer (``output/trajectories.py`` filters which, in what layout)."""
        assert self._writer is not None, "EpisodeSink.put_trajectory before open"
        self._writer.put_trajectory(task, index, attrs, arrays, file_attrs)

    def fail(self, exc: PolicyError) -> None:
        """The policy stopped the run: its traceback to ``traceback.txt``, its reason to results.json.

        Why: the one-line error names the place (task, episode) but a user debugging a policy needs the stack;
        the directory keeps it, with the reason, after the terminal scrolled away (nohup, SLURM, CI).
        """
        path = self.plan.output / TRACEBACK_FILE
        text = exc.traceback_text or "".join(format_exception(exc))
        path.write_text(f"{exc}\n\n{text}", encoding="utf-8")
        exc.traceback_file = str(path)
        self.failure = {"error": type(exc).__name__, **(exc.failure or {"message": str(exc)}),
                        "traceback": TRACEBACK_FILE}

    # -- results -------------------------------------------------------------------------------------
    def results(self, ended: datetime | None = None) -> dict[str, Any]:
        """The full ``results.json`` document for the episodes recorded so far."""
        with self._lock:
            records = list(self.records)
            steps = self._env_steps
            first_start, last_end, new = self._first_start, self._last_end, len(records) - self._previous
            first_step = self._first_step
        summary = summarize(self.plan.suite, records, self.plan.settings.trials_per_episode)
        elapsed = ((ended or datetime.now(timezone.utc)) - self._started).total_seconds()
        timing = startup_timing(self._clock0, first_start, last_end, steps, new, first_step)
        overall = summary["overall"]
        overall["eval_s"] = round(elapsed, 3)
        overall["episodes_per_s"] = round(len(records) / elapsed, 4) if elapsed > 0 else None
        overall["env_steps_per_s"] = round(steps / elapsed, 2) if elapsed > 0 else None
        overall.update(self.blocks.overall(elapsed))
        s = self.plan.settings
        stopping = self.blocks.stopping()
        config = with_checks({**self.plan.config(), **self.execution},  # what the checks found, not a declaration
                             [r.policy_check for r in records if r.policy_check is not None])
        return {"schema_version": SCHEMA_VERSION, "suite": s.suite.name, "policy": s.policy,
                "complete": ended is not None,
                "config": config,
                "provenance": provenance(s.command, self._started, ended), **summary, "timing": timing,
                **({"stopping": stopping} if stopping is not None else {}),
                **({"failure": self.failure} if self.failure is not None else {})}

    def publish(self, ended: datetime | None = None) -> dict[str, Any]:
        """Queue results.json (and the extra formats) for an atomic rewrite; return the results."""
        assert self._writer is not None, "EpisodeSink.publish before open"
        results = self.results(ended)
        self._writer.put_results(results)
        if "lerobot" in self.plan.settings.formats:
            with self._lock:
                records = list(self.records)
            self._writer.put_json("eval_info.json",
                                  lerobot_eval_info(self.plan.suite, records, results["overall"]["eval_s"]))
        return results
