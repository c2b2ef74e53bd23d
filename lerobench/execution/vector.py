"""The vector executor: one shared policy in this process, N simulator workers per task (gymnasium).

Right for big (GPU) models: one forward pass serves a whole batch of envs. With ``--parallel-tasks``
K task threads each run their own vector env with a shallow copy of the policy (shared weights).
A worker that dies or hangs costs only its in-flight episodes (error records) and the env is rebuilt.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from lerobench.core.records import EpisodeRecord
from lerobench.errors import RunError
from lerobench.execution.base import MAX_WORKER_REBUILDS, RunIO
from lerobench.plan.planner import RunPlan, WorkUnit
from lerobench.policies.base import close_policy, observation_needs
from lerobench.rollout.loop import Cancelled, WorkerFailure, run_episodes

if TYPE_CHECKING:
    from lerobench.execution.base import ExecutionChoice
    from lerobench.policies.base import Policy


class VectorExecutor:
    """Runs each unit (one task's todo episodes) on a vector env of ``batch_size`` envs, ``parallel`` tasks at once."""

    name = "vector"

    def __init__(self, policy: Policy, batch_size: int, parallel: int = 1, in_process: bool | None = None,
                 render_threads: int | None = None):
        self.policy = policy
        self.render_threads = render_threads
        self.batch_size = batch_size
        self.parallel = parallel
        self.in_process = in_process if in_process is not None else batch_size == 1
        self._stop = threading.Event()

    @classmethod
    def create(cls, plan: RunPlan, choice: ExecutionChoice, policy: Policy) -> VectorExecutor:
        """Registry factory (``core/executors.py``): ``choice.batch_size`` envs per task."""
        return cls(policy, choice.batch_size, choice.parallel_tasks,
                   render_threads=choice.compute.render_threads if choice.compute is not None else None)

    def run(self, plan: RunPlan, units: list[WorkUnit], io: RunIO) -> None:
        """Run units one task at a time (or ``parallel`` task threads); stop every thread on failure."""
        self._stop.clear()
        if self.parallel == 1:
            self.policy.reset()
            try:
                for unit in units:
                    self._run_unit(plan, unit, self.policy, io)
            except BaseException:
                self._stop.set()
                raise
            return
        self._run_parallel(plan, units, io)

    def _run_parallel(self, plan: RunPlan, units: list[WorkUnit], io: RunIO) -> None:
        """K task threads, each with a shallow copy of the policy (shared weights, own state).

        On Ctrl-C or a failing task the stop event makes every other thread stop at its next step
        (closing its workers) instead of finishing its task first.
        """
        local = threading.local()
        copies: list[Any] = []
        lock = threading.Lock()

        def work(unit: WorkUnit) -> None:
            if self._stop.is_set():
                return
            if not hasattr(local, "policy"):
                local.policy = copy.copy(self.policy)
                local.policy.reset()
                with lock:
                    copies.append(local.policy)
            self._run_unit(plan, unit, local.policy, io)

        pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="lerobench-task")
        futures = [pool.submit(work, u) for u in units]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:  # also on Ctrl-C in the main thread: stop the others, close their workers
            if not all(f.done() and f.exception() is None for f in futures):
                self._stop.set()
                for f in futures:
                    f.cancel()
            pool.shutdown(wait=True)
            for p in copies:
                close_policy(p)
        errors = [e for f in futures if not f.cancelled() and (e := f.exception()) is not None]
        real = [e for e in errors if not isinstance(e, Cancelled)]
        if real or errors:
            raise (real or errors)[0]

    def _run_unit(self, plan: RunPlan, unit: WorkUnit, policy: Policy, io: RunIO) -> None:
        from lerobench.envs.vector import InProcessVectorEnv, make_vector_env

        task = unit.task
        io.task_started(task)
        recorder = io.media.recorder(task)
        spec = plan.env_spec(task, observation_needs(policy), recorder.camera)
        run = plan.task_run(task, observation_needs(policy), stop=self._stop,
                            wants=lambda episode: io.wants(task.name, episode))
        trajectories = io.media.trajectories()
        finished: set[int] = set()

        def on_episode(record: EpisodeRecord) -> None:
            finished.add(record.episode)
            io.episode(task, record)

        todo = [e for e in unit.episodes if io.wants(task.name, e)]  # --until may have decided the task
        rebuilds = 0
        while todo:
            venv = make_vector_env(spec, min(self.batch_size, len(todo)), in_process=self.in_process,
                                   share_task=plan.settings.share_task, render_threads=self.render_threads)
            failed = True
            try:
                if isinstance(venv, InProcessVectorEnv):  # built here: start-up, not the first episodes' time
                    venv.call("prepare")
                run_episodes(venv, policy, run, todo, on_episode, lambda n: io.steps(task, n), recorder,
                             trajectories, stats=io.calls)
                todo, failed = [], False
            except WorkerFailure as failure:
                rebuilds += 1
                todo = [e for e in todo if e not in finished and io.wants(task.name, e)]
                if rebuilds > MAX_WORKER_REBUILDS:
                    raise RunError(f"suite {plan.suite.name!r}, task {task.name!r}: workers failed "
                                   f"{rebuilds} times (last: {failure}); stopping") from failure
                io.reporter.message(f"task {task.name!r}: {failure}; episodes {failure.in_flight} recorded "
                                      f"as errors, restarting workers")
            finally:
                _close(venv, terminate=failed)


def _close(venv: Any, terminate: bool) -> None:
    """Close a vector env; after a failure, terminate its workers instead of asking dead ones to close."""
    venv.close_after_failure() if terminate else venv.close()
