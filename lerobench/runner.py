"""Runs a suite: tasks one at a time (or K in threads), each on its own vector env, nothing lost.

Lifecycle rules: a task's workers are closed in ``finally`` (also on Ctrl-C and errors) before the
next task's start; a worker that dies or hangs costs only its in-flight episodes (recorded as
errors) and the env is rebuilt; every finished episode is handed to the writer at once.
"""

from __future__ import annotations

import copy
import re
import sys
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lerobench.config import Suite, TaskSpec
from lerobench.envs.base import EnvSpec
from lerobench.errors import ConfigError, MissingDependencyError, ResumeError, RunError, unknown
from lerobench.policies.base import PolicyContext
from lerobench.policies.loading import load_policy, observation_needs
from lerobench.provenance import provenance
from lerobench.reporting import Reporter, SilentReporter
from lerobench.results import (
    EPISODES_FILE,
    RESULTS_FILE,
    EpisodeRecord,
    ResultsWriter,
    check_output_dir,
    lerobot_eval_info,
    read_episodes,
    rewrite_episodes,
    summarize,
)
from lerobench.rollout import Cancelled, TaskRun, WorkerFailure, run_episodes
from lerobench.system import BatchChoice, auto_batch_size
from lerobench.trajectories import TrajectoryRecorder, check_record_mode
from lerobench.trials import whole_episodes
from lerobench.videos import NullVideoEncoder, VideoEncoder

FORMATS = ("lerobot",)
"""Result formats written besides lerobench's own files."""

IPC_STEP_MS = 1.0
"""Measured cost of one vector step through worker processes on a 2-core box (pipes + shared memory)."""

MAX_WORKER_REBUILDS = 3
"""Rebuilds of a task's vector env after worker failures before the run is stopped."""

RESULT_DEFINING = ("suite", "policy", "protocol", "protocol_settings", "seed", "episodes_per_task",
                   "stop_on_success", "tasks", "replan_steps", "trials")
"""Config keys that change results: ``--resume`` refuses a directory where any of them differ."""


@dataclass(frozen=True)
class RunSettings:
    """Every effective setting of one evaluation (the ``config`` block of results.json)."""

    suite: Suite
    """The suite, already narrowed to ``--tasks``."""
    policy: str
    """Policy spec: built-in name or ``module.path:factory``."""
    output: Path
    protocol: str = "standard"
    episodes: int | None = None
    """Episodes per task; None = the suite's default."""
    batch_size: int = 0
    """Envs per task; 0 = auto from usable cores and memory."""
    seed: int = 0
    max_steps: int | None = None
    """Override of the protocol's step limit (for smoke runs)."""
    stop_on_success: bool = True
    resume: bool = False
    videos: int = 0
    """Record the first N episodes of each task."""
    episode_timeout: float | None = None
    """Seconds one vector step may take before its worker is declared hung."""
    replan_steps: int = 1
    """Actions executed from each returned action chunk before asking the policy again."""
    record: str = "none"
    """Rollout recording to HDF5: none, success or all."""
    formats: tuple[str, ...] = ()
    """Extra result formats: ``lerobot`` also writes LeRobot's ``eval_info.json``."""
    parallel_tasks: int = 1
    trials: int | None = None
    """Trials (attempts at the same start) per episode; None = the suite's default."""
    device: str = "cpu"
    command: tuple[str, ...] = field(default_factory=lambda: tuple(sys.argv))

    @property
    def episodes_per_task(self) -> int:
        """Effective number of episodes per task."""
        return self.episodes or self.suite.episodes_per_task

    @property
    def trials_per_episode(self) -> int:
        """Effective number of trials per episode."""
        return self.trials or self.suite.trials


class Evaluation:
    """One evaluation run; ``run()`` returns the final results dict (also written to disk)."""

    def __init__(self, settings: RunSettings, reporter: Reporter | None = None):
        self.s = settings
        self.reporter = reporter or SilentReporter()
        from lerobench.registry import get_backend

        self.backend = get_backend(settings.suite.backend)
        self.backend.check_installed()
        protocol = settings.suite.protocol(settings.protocol)
        if settings.max_steps is not None:
            if settings.max_steps < 1:
                raise ConfigError(f"--max-steps must be >= 1, got {settings.max_steps}")
            protocol = replace(protocol, max_steps=settings.max_steps)
        limit = getattr(self.backend, "max_episode_steps", None)
        if limit is not None and protocol.max_steps > limit:
            raise ConfigError(f"suite {settings.suite.name!r}: {settings.suite.backend} episodes are limited to "
                              f"{limit} steps, but max_steps is {protocol.max_steps}")
        self.protocol = protocol
        for fmt in settings.formats:
            if fmt not in FORMATS:
                raise unknown("--format", fmt, FORMATS)
        if check_record_mode(settings.record) != "none":
            import importlib.util

            if importlib.util.find_spec("h5py") is None:
                raise MissingDependencyError("--record needs h5py: pip install h5py")
        for name, value, least in (("--episodes", settings.episodes, 1), ("--replan-steps", settings.replan_steps, 1),
                                   ("--trials", settings.trials, 1),
                                   ("--parallel-tasks", settings.parallel_tasks, 1),
                                   ("--batch-size", settings.batch_size, 0), ("--videos", settings.videos, 0)):
            if value is not None and value < least:
                raise ConfigError(f"{name} must be >= {least}, got {value}")
        if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", settings.device):
            raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {settings.device!r}")
        if settings.episode_timeout is not None and settings.episode_timeout <= 0:
            raise ConfigError(f"--episode-timeout must be > 0 seconds, got {settings.episode_timeout}")
        self.context = PolicyContext(
            suite=settings.suite.name, backend=settings.suite.backend, tasks=settings.suite.tasks,
            action_dim=self.backend.action_dim, state_dim=self.backend.state_dim,
            cameras=protocol.cameras, image_size=protocol.image_size, seed=settings.seed,
            device=settings.device,
        )
        self._lock = threading.Lock()
        self._started = datetime.now(timezone.utc)
        self._env_steps = 0
        self._stop = threading.Event()
        self.batch_used: int | None = None
        self.parallel_used: int | None = None
        # Everything that can refuse the run happens here, before progress is drawn or any env starts.
        check_output_dir(settings.output)
        self.records: list[EpisodeRecord] = self._load_previous()
        self.policy = load_policy(settings.policy, self.context)

    # -- config & provenance -----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Every effective setting, JSON-ready."""
        s = self.s
        return {
            "suite": s.suite.name, "suite_file": str(s.suite.source) if s.suite.source else None,
            "policy": s.policy, "protocol": s.protocol, "protocol_settings": asdict(self.protocol),
            "tasks": [t.name for t in s.suite.tasks], "episodes_per_task": s.episodes_per_task,
            "seed": s.seed, "stop_on_success": s.stop_on_success, "replan_steps": s.replan_steps,
            "trials": s.trials_per_episode, "record": s.record, "formats": list(s.formats), "batch_size": s.batch_size,
            "batch_size_used": self.batch_used, "parallel_tasks_used": self.parallel_used,
            "parallel_tasks": s.parallel_tasks, "videos": s.videos,
            "episode_timeout": s.episode_timeout, "device": s.device, "output": str(s.output),
        }

    def provenance(self, ended: datetime | None) -> dict[str, Any]:
        """Versions and machine facts needed to reproduce or question a number."""
        return provenance(self.s.command, self._started, ended)

    def results(self, ended: datetime | None = None) -> dict[str, Any]:
        """The full ``results.json`` document for the episodes recorded so far."""
        with self._lock:
            records = list(self.records)
        summary = summarize(self.s.suite, records, self.s.trials_per_episode)
        elapsed = ((ended or datetime.now(timezone.utc)) - self._started).total_seconds()
        overall = summary["overall"]
        overall["eval_s"] = round(elapsed, 3)
        overall["episodes_per_s"] = round(len(records) / elapsed, 4) if elapsed > 0 else None
        overall["env_steps_per_s"] = round(self._env_steps / elapsed, 2) if elapsed > 0 else None
        return {"suite": self.s.suite.name, "policy": self.s.policy, "complete": ended is not None,
                "config": self.config(), "provenance": self.provenance(ended), **summary}

    # -- resume --------------------------------------------------------------------------------------
    def _load_previous(self) -> list[EpisodeRecord]:
        out = self.s.output
        if not self.s.resume:
            if (out / EPISODES_FILE).exists() and (out / EPISODES_FILE).stat().st_size > 0:
                raise ResumeError(f"{out / EPISODES_FILE} already holds episodes: pass --resume to continue "
                                  f"that run, or choose another --output")
            return []
        import json

        results_path = out / RESULTS_FILE
        if not results_path.exists():
            raise ResumeError(f"cannot resume: {results_path} does not exist")
        previous = json.loads(results_path.read_text(encoding="utf-8")).get("config", {})
        current = json.loads(json.dumps(self.config()))  # tuples -> lists, as they were stored
        if "trials" not in previous and previous.get("trial") == 0:  # written before --trials: one trial each
            previous["trials"] = 1
        for key in RESULT_DEFINING:
            if previous.get(key) != current.get(key):
                raise ResumeError(f"cannot resume {out}: {key} differs (previous {previous.get(key)!r}, "
                                  f"now {current.get(key)!r})")
        wanted = {t.name for t in self.s.suite.tasks}
        stored = read_episodes(out / EPISODES_FILE)
        whole = whole_episodes(stored, self.s.trials_per_episode)
        if len(whole) != len(stored):  # half an episode (killed between trials) or a duplicate: rerun it whole
            rewrite_episodes(out / EPISODES_FILE, whole)
        return [r for r in whole if r.task in wanted and r.episode < self.s.episodes_per_task]

    # -- running -------------------------------------------------------------------------------------
    def _batch(self, cameras: tuple[str, ...]) -> tuple[int, str]:
        """The batch size and a sentence saying why (printed, so users see what limited it)."""
        n = self.s.episodes_per_task
        if self.s.batch_size > 0:
            return min(self.s.batch_size, n), f"batch size {min(self.s.batch_size, n)} (--batch-size)"
        choice: BatchChoice = auto_batch_size(n, self.s.suite.worker_memory_mb)
        step_ms = getattr(self.backend, "unrendered_step_ms", None)
        renders = bool(cameras) or (self.s.videos > 0 and self.s.suite.video_camera is not None)
        if not renders and step_ms is not None and step_ms < IPC_STEP_MS:
            return 1, (f"batch size 1: a state-only {self.s.suite.backend} step ({step_ms} ms) costs less than "
                       f"handing it to a worker process (~{IPC_STEP_MS} ms), so envs run in-process "
                       f"(pass --batch-size {max(2, choice.batch_size)} for worker processes)")
        return choice.batch_size, choice.explain()

    def run(self) -> dict[str, Any]:
        """Evaluate every task; write results as they come; return the final results."""
        policy = self.policy
        cameras = observation_needs(policy).cameras
        batch_size, how = self._batch(cameras)
        parallel = min(self.s.parallel_tasks, len(self.s.suite.tasks))
        if parallel > 1 and getattr(policy, "copy_safe", True) is False:
            self.reporter.message(f"policy {self.s.policy!r} declares copy_safe = False: running tasks one at a time")
            parallel = 1
        per_task = max(1, batch_size // parallel)
        self.batch_used = per_task
        self.parallel_used = parallel
        self.reporter.message(how + (f", {parallel} tasks in parallel x {per_task} envs" if parallel > 1 else ""))
        if self.s.episode_timeout is not None and per_task == 1:
            self.reporter.message("note: --episode-timeout needs worker processes (at least 2 envs per task); "
                                  "with 1 env per task the simulator runs in-process and cannot be timed out")
        writer = ResultsWriter(self.s.output)
        encoder = self._video_encoder()
        copies: list[Any] = [policy]
        try:
            self._publish(writer)
            if parallel == 1:
                policy.reset()
                for task in self.s.suite.tasks:
                    self._run_task(task, policy, cameras, per_task, writer, encoder)
            else:
                self._run_parallel(policy, cameras, per_task, parallel, writer, encoder, copies)
            encoder.close()
            final = self._publish(writer, ended=datetime.now(timezone.utc))
            writer.close()
            return final
        except BaseException:
            self._stop.set()
            encoder.close(abort=True)
            try:
                self._publish(writer)
            finally:
                writer.close()
            raise
        finally:
            for p in copies:
                close = getattr(p, "close", None)
                if callable(close):
                    close()

    def _publish(self, writer: ResultsWriter, ended: datetime | None = None) -> dict[str, Any]:
        """Queue results.json (and the extra formats) for an atomic rewrite; return the results."""
        results = self.results(ended)
        writer.put_results(results)
        if "lerobot" in self.s.formats:
            with self._lock:
                records = list(self.records)
            writer.put_json("eval_info.json", lerobot_eval_info(self.s.suite, records, results["overall"]["eval_s"]))
        return results

    def _video_encoder(self) -> VideoEncoder | NullVideoEncoder:
        if self.s.videos <= 0 or not self.s.suite.video_camera:
            return NullVideoEncoder()
        return VideoEncoder()

    def _run_parallel(self, policy: Any, cameras: tuple[str, ...], per_task: int, parallel: int,
                      writer: ResultsWriter, encoder: Any, copies: list[Any]) -> None:
        """K task threads, each with a shallow copy of the policy (shared weights, own state).

        On Ctrl-C or a failing task the stop event makes every other thread stop at its next step
        (closing its workers) instead of finishing its task first.
        """
        local = threading.local()

        def work(task: TaskSpec) -> None:
            if self._stop.is_set():
                return
            if not hasattr(local, "policy"):
                local.policy = copy.copy(policy)
                local.policy.reset()
                with self._lock:
                    copies.append(local.policy)
            self._run_task(task, local.policy, cameras, per_task, writer, encoder)

        pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="lerobench-task")
        futures = [pool.submit(work, t) for t in self.s.suite.tasks]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:  # also on Ctrl-C in the main thread: stop the others, close their workers
            if not all(f.done() and f.exception() is None for f in futures):
                self._stop.set()
                for f in futures:
                    f.cancel()
            pool.shutdown(wait=True)
        errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
        real = [e for e in errors if not isinstance(e, Cancelled)]
        if real or errors:
            raise (real or errors)[0]

    def _run_task(self, task: TaskSpec, policy: Any, cameras: tuple[str, ...], batch: int,
                  writer: ResultsWriter, encoder: Any) -> None:
        from lerobench.envs.vector import make_vector_env
        from lerobench.recorder import TaskRecorder

        with self._lock:
            done = {r.episode for r in self.records if r.task == task.name}
        todo = [e for e in range(self.s.episodes_per_task) if e not in done]
        self.reporter.task_started(task, self.s.episodes_per_task, len(done))
        recorder = TaskRecorder(encoder, self.s.output, self.s.videos, self.s.suite.video_camera,
                                self.s.suite.control_fps, task.name)
        spec = EnvSpec(
            suite=self.s.suite.name, backend=self.s.suite.backend, task=task, protocol=self.protocol,
            seed=self.s.seed, state_dim=self.backend.state_dim, action_dim=self.backend.action_dim,
            cameras=cameras, record_camera=recorder.camera, stop_on_success=self.s.stop_on_success,
            backend_options=dict(self.s.suite.backend_options),
        )
        run = TaskRun(suite=self.s.suite.name, task=task, seed=self.s.seed, action_dim=self.backend.action_dim,
                      replan_steps=self.s.replan_steps, trials=self.s.trials_per_episode,
                      n_init_states=getattr(self.backend, "n_init_states", 50),
                      step_timeout_s=self.s.episode_timeout, stop=self._stop)

        def on_episode(record: EpisodeRecord) -> None:
            with self._lock:
                self.records.append(record)
            writer.put_episode(record)
            if record.trial == 0:  # progress counts episodes; their trials arrive together
                self.reporter.episode(task, record)

        trajectories = TrajectoryRecorder(self.s.record, writer.put_trajectory)

        def on_steps(n: int) -> None:
            with self._lock:
                self._env_steps += n
            self.reporter.steps(task, n)

        rebuilds = 0
        while todo:
            venv = make_vector_env(spec, min(batch, len(todo)), in_process=batch == 1)
            failed = True
            try:
                run_episodes(venv, policy, run, todo, on_episode, on_steps, recorder, trajectories)
                todo, failed = [], False
            except WorkerFailure as failure:
                rebuilds += 1
                with self._lock:
                    done = {r.episode for r in self.records if r.task == task.name}
                todo = [e for e in todo if e not in done]
                if rebuilds > MAX_WORKER_REBUILDS:
                    raise RunError(f"suite {self.s.suite.name!r}, task {task.name!r}: workers failed "
                                   f"{rebuilds} times (last: {failure}); stopping") from failure
                self.reporter.message(f"task {task.name!r}: {failure}; episodes {failure.in_flight} recorded "
                                      f"as errors, restarting workers")
            finally:
                _close(venv, terminate=failed)
        with self._lock:
            mine = [r for r in self.records if r.task == task.name]
        summary = summarize(replace(self.s.suite, tasks=(task,)), mine, self.s.trials_per_episode)["tasks"]
        self.reporter.task_finished(task, summary[0] if summary else {})
        self._publish(writer)


def _close(venv: Any, terminate: bool) -> None:
    """Close a vector env; after a failure, terminate workers instead of asking dead ones to close."""
    try:
        venv.close(terminate=True) if terminate and hasattr(venv, "step_wait") else venv.close()
    except Exception:  # noqa: BLE001 - closing after a failure: the workers are killed below anyway
        for proc in getattr(venv, "processes", []):
            if proc.is_alive():
                proc.kill()
        for proc in getattr(venv, "processes", []):
            proc.join(timeout=5)
