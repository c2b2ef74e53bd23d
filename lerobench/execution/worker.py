"""One worker's side of the processes and Ray executors: its own policy, its own simulator, whole episodes.

A worker builds the policy from the plan's spec once, keeps the env of the task it last ran, and
runs each unit with ``run_episodes`` on a vector env of size 1 in its own process, so no step ever
crosses a process boundary. Videos are encoded by the worker into the output directory (shared with
the driver on one machine or a shared filesystem); each unit's videos are complete when it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lerobench.core.records import EpisodeRecord
from lerobench.plan.planner import RunPlan, WorkUnit
from lerobench.policies.base import close_policy
from lerobench.policies.loading import load_policy, observation_needs

if TYPE_CHECKING:
    from lerobench.execution.compute import ComputeBudget


class UnitRunner:
    """Runs work units of one plan in the current process; ``close`` releases env and policy."""

    def __init__(self, plan: RunPlan):
        self.plan = plan
        self.policy = load_policy(plan.settings.policy, plan.context())
        self.policy.reset()
        self.needs = observation_needs(self.policy)
        self._task: str | None = None
        self._venv: Any = None

    def _env(self, unit: WorkUnit, record_camera: str | None) -> Any:
        from lerobench.envs.vector import make_vector_env

        if self._task != unit.task.name:
            self._close_env()
            self._venv = make_vector_env(self.plan.env_spec(unit.task, self.needs, record_camera), 1,
                                         in_process=True)
            self._venv.call("prepare")  # the simulator is start-up, not part of the first episode's elapsed_s
            self._task = unit.task.name
        return self._venv

    def run(self, unit: WorkUnit, emit: Callable[[EpisodeRecord], None]) -> None:
        """Run ``unit``'s episodes, handing each record to ``emit`` as it ends; videos are on disk at return."""
        from lerobench.output.video_recorder import TaskVideos
        from lerobench.output.videos import NullVideoEncoder, VideoEncoder
        from lerobench.rollout.loop import run_episodes

        s = self.plan.settings
        recording = s.videos > 0 and s.suite.video_camera is not None and min(unit.episodes) < s.videos
        encoder = VideoEncoder(workers=1) if recording else NullVideoEncoder()
        recorder = TaskVideos(encoder, s.output, s.videos, s.suite.video_camera, self.plan.video_fps,
                                unit.task.name, self.plan.video_every)
        ok = False
        try:
            run = self.plan.task_run(unit.task, observation_needs(self.policy))
            run_episodes(self._env(unit, recorder.camera), self.policy, run, unit.episodes, emit, recorder=recorder)
            ok = True
        finally:
            encoder.close(abort=not ok)

    def _close_env(self) -> None:
        if self._venv is not None:
            venv, self._venv, self._task = self._venv, None, None
            venv.close()

    def close(self) -> None:
        """Close the env and the policy (idempotent)."""
        self._close_env()
        if self.policy is not None:
            close_policy(self.policy)
            self.policy = None


_RAY_RUNNER: tuple[str, UnitRunner] | None = None


def run_unit_in_ray(plan: RunPlan, unit: WorkUnit, key: str, budget: ComputeBudget) -> list[EpisodeRecord]:
    """Body of a Ray task: reuse this Ray worker's runner for the same plan (``key``), run one unit."""
    global _RAY_RUNNER

    budget.enter_worker()  # each Ray task holds one CPU (``num_cpus=1``): one call core
    if _RAY_RUNNER is None or _RAY_RUNNER[0] != key:
        if _RAY_RUNNER is not None:
            _RAY_RUNNER[1].close()
        _RAY_RUNNER = (key, UnitRunner(plan))
    records: list[EpisodeRecord] = []
    _RAY_RUNNER[1].run(unit, records.append)
    return records
