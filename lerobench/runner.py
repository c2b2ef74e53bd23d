"""Runs a suite: validate a plan, pick an executor, stream its episode records into the sink.

``Evaluation`` is the one place these meet: ``plan.py`` validates settings, ``execution/`` runs
episodes (inline, vector, processes, Ray), ``sink.py`` writes everything. Whatever the executor, an
episode's outcome is a pure function of (seed, task, episode), so the numbers never depend on it.
"""

from __future__ import annotations

from typing import Any

from lerobench.analysis.results import EpisodeRecord, check_output_dir
from lerobench.execution.base import ExecutionChoice, Executor
from lerobench.plan import FORMATS, RESULT_DEFINING, RunPlan, RunSettings, make_plan
from lerobench.policies.base import close_policy, policy_traits
from lerobench.policies.loading import load_policy, observation_needs
from lerobench.reporting import Reporter, SilentReporter
from lerobench.sink import RecordSink, load_previous

__all__ = ["FORMATS", "RESULT_DEFINING", "Evaluation", "RunSettings"]


class Evaluation:
    """One evaluation run; ``run()`` returns the final results dict (also written to disk)."""

    def __init__(self, settings: RunSettings, reporter: Reporter | None = None):
        self.s = settings
        self.reporter = reporter or SilentReporter()
        self.plan: RunPlan = make_plan(settings)
        # Everything that can refuse the run happens here, before progress is drawn or any env starts.
        check_output_dir(settings.output)
        self.previous: list[EpisodeRecord] = load_previous(self.plan)
        self.policy = load_policy(settings.policy, self.plan.context())
        observation_needs(self.policy).executed_steps(settings.replan_steps)  # a conflict fails before any work
        self.choice: ExecutionChoice | None = None
        self.errored_episodes = 0
        """Episodes (at any trial) that ended in an error, set by ``run``; results' ``n_errors`` counts trial 0 only."""

    def run(self) -> dict[str, Any]:
        """Evaluate every task; write results as they come; return the final results."""
        from lerobench.execution.auto import choose

        plan, policy = self.plan, self.policy
        sink = RecordSink(plan, self.reporter, self.previous)
        done = sink.done()
        todo = sum(len(u.episodes) for u in plan.work_units(done))
        try:
            choice = choose(plan, policy, observation_needs(policy).cameras, todo)
            if choice.parallel_tasks > 1 and not policy_traits(policy).copy_safe:
                self.reporter.message(f"policy {self.s.policy!r} declares copy_safe = False: running tasks "
                                      f"one at a time")
                choice = ExecutionChoice(choice.executor, choice.workers * choice.parallel_tasks, choice.reason)
            self.choice = choice
            self.reporter.message(choice.reason)
            if self.s.episode_timeout is not None and not (choice.executor == "vector" and choice.workers > 1):
                self.reporter.message("note: --episode-timeout needs vector-env worker processes (at least 2 envs "
                                      "per task); here the simulator runs in the process that steps it and cannot "
                                      "be timed out")
            executor = self._executor(choice)
            if choice.executor in ("processes", "ray"):
                self._close_policy()  # every worker builds its own copy; the driver's is not used
            sink.execution = {"executor_used": choice.executor, "workers_used": choice.workers,
                              "batch_size_used": choice.workers if choice.executor in ("inline", "vector") else 1,
                              "parallel_tasks_used": choice.parallel_tasks,
                              **policy_config(policy, self.s.replan_steps)}
            units = plan.work_units(done, size=1 if choice.executor == "processes" else None)
            sink.expect(units)
            sink.open()
            ok = False
            try:
                pending = {u.task.name for u in units}
                for task in plan.suite.tasks:  # finished before a --resume: shown as complete at once
                    if task.name not in pending and any(r.task == task.name for r in self.previous):
                        sink.task_started(task)
                        sink.task_finished(task)
                executor.run(plan, units, sink)
                ok = True
            finally:
                results = sink.close(ok)
                self.errored_episodes = sum(r.error is not None for r in sink.records)  # one error line per episode
            return results
        finally:
            self._close_policy()

    def _executor(self, choice: ExecutionChoice) -> Executor:
        s = self.s
        if choice.executor == "inline":
            from lerobench.execution.inline import InlineExecutor

            return InlineExecutor(self.policy)
        if choice.executor == "vector":
            from lerobench.execution.vector import VectorExecutor

            return VectorExecutor(self.policy, choice.workers, choice.parallel_tasks)
        if choice.executor == "processes":
            from lerobench.execution.processes import ProcessExecutor
            from lerobench.system import usable_cores

            return ProcessExecutor(choice.workers, usable_cores())
        from lerobench.execution.ray_cluster import RayExecutor

        return RayExecutor(s.ray_address, s.ray_gpus_per_worker, choice.workers)

    def _close_policy(self) -> None:
        policy, self.policy = self.policy, None
        close_policy(policy)


def policy_config(policy: Any, replan_steps: int) -> dict[str, Any]:
    """What the policy makes of the run, for ``results.json`` ``config``: the executed chunk length and its traits.

    ``replan_steps_executed`` is what runs (a policy's own chunking wins over the CLI default of 1);
    ``batch_invariant`` says whether per-episode outcomes are independent of batch size and schedule
    (None: the policy does not declare it).
    """
    needs, traits = observation_needs(policy), policy_traits(policy)
    return {"replan_steps_executed": needs.executed_steps(replan_steps), "every_frame": needs.every_frame,
            "batch_invariant": traits.batch_invariant, "stochastic_policy": traits.stochastic}
