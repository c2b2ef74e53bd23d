"""Optional rollout recording (``--record none|success|all``): per-episode arrays for the HDF5 writer.

A trajectory holds only what the policy consumed (state, consumed cameras) plus actions, rewards and
per-step success, copied out of the env buffers, and lives only until its episode ends; then it is
handed to the background writer (or dropped, for failures under ``--record success``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from lerobench.plan.options import check_record_mode


class Trajectory:
    """One episode's observations (T+1), actions, rewards and successes (T)."""

    def __init__(self) -> None:
        self.states: list[np.ndarray] = []
        self.images: dict[str, list[np.ndarray]] = {}
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []
        self.successes: list[bool] = []

    def observe(self, obs: dict[str, Any], i: int) -> None:
        """Copy env ``i``'s observation (the vector env reuses its buffers)."""
        self.states.append(np.array(obs["state"][i], copy=True))
        for cam, batch in obs.get("images", {}).items():
            self.images.setdefault(cam, []).append(np.array(batch[i], copy=True))

    def act(self, action: np.ndarray, reward: float, success: bool) -> None:
        """Record the action taken from the last observation and what it led to."""
        self.actions.append(np.array(action, copy=True))
        self.rewards.append(float(reward))
        self.successes.append(bool(success))

    def arrays(self) -> dict[str, np.ndarray]:
        """Stack into arrays (HDF5 dataset name -> array)."""
        data = {
            "observations/state": np.stack(self.states).astype(np.float32),
            "actions": np.stack(self.actions).astype(np.float32) if self.actions else np.zeros((0, 0), np.float32),
            "rewards": np.asarray(self.rewards, dtype=np.float32),
            "success": np.asarray(self.successes, dtype=bool),
        }
        for cam, frames in self.images.items():
            data[f"observations/images/{cam}"] = np.stack(frames)
        return data




class Trajectories(Protocol):
    """What the rollout needs of a trajectory recorder (``TrajectoryFilter``, or ``output.rerun``'s wrapper)."""

    @property
    def enabled(self) -> bool:
        """Whether the rollout buffers steps at all."""
        ...

    def start(self, episode: int | None = None) -> Trajectory | None:
        """A buffer for a new episode, or None when this one is not kept."""
        ...

    def finish(self, task: str, record: Any, trajectory: Trajectory | None) -> None:
        """Hand a finished episode over."""
        ...


class TrajectoryFilter:
    """Decides which episodes' trajectories reach ``sink(task, episode, attrs, arrays)``."""

    def __init__(self, mode: str, sink: Callable[[str, int, dict[str, Any], dict[str, np.ndarray]], None]):
        self.mode = check_record_mode(mode)
        self._sink = sink

    @property
    def enabled(self) -> bool:
        """False for ``--record none``: the rollout then buffers nothing."""
        return self.mode != "none"

    def start(self, episode: int | None = None) -> Trajectory | None:
        """A buffer for a new episode (``episode``: its index, for recorders that keep some), or None when off."""
        return Trajectory() if self.enabled else None

    def finish(self, task: str, record: Any, trajectory: Trajectory | None) -> None:
        """Hand the finished episode over (``success`` mode keeps successes only)."""
        if trajectory is None or record.error is not None:
            return
        if self.mode == "all" or (self.mode == "success" and record.success):
            attrs = {"trial": record.trial, "success": record.success, "success_at_end": record.success_at_end,
                     "seed": record.seed, "init_state": record.init_state, "steps": record.steps}
            self._sink(task, record.episode, attrs, trajectory.arrays())


NULL_TRAJECTORIES = TrajectoryFilter("none", lambda *args: None)
