"""Optional rollout recording (``--record none|success|all``): per-episode arrays for the HDF5 writer.

A trajectory holds what the policy consumed (state, consumed cameras) plus actions, rewards and per-step
success, copied out of the env buffers, and lives only until its episode ends; then it is handed to the
background writer (or dropped, for failures under ``--record success``). On a backend with a dataset layout of
its own (LIBERO) it also holds the env's dataset rows (``EnvSpec.dataset_size``), and the episode is written as a
demo of that layout instead (``demo_arrays``; docs/results.md).
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
        self.progress: list[float] = []
        """The task's progress after each step, where the backend defines it (PushT: coverage); else empty."""
        self.rows: list[dict[str, np.ndarray]] = []
        """The env's dataset rows (one per observation), when its backend has a dataset layout."""

    def observe(self, obs: dict[str, Any], i: int, row: dict[str, Any] | None = None) -> None:
        """Copy env ``i``'s observation (the vector env reuses its buffers) and its dataset ``row``, if any."""
        self.states.append(np.array(obs["state"][i], copy=True))
        for cam, batch in obs.get("images", {}).items():
            self.images.setdefault(cam, []).append(np.array(batch[i], copy=True))
        if row is not None:
            self.rows.append({key: np.array(value, copy=True) for key, value in row.items()})

    def act(self, action: np.ndarray, reward: float, success: bool, progress: float | None = None) -> None:
        """Record the action taken from the last observation and what it led to (and the progress it made)."""
        self.actions.append(np.array(action, copy=True))
        self.rewards.append(float(reward))
        self.successes.append(bool(success))
        if progress is not None:
            self.progress.append(float(progress))

    def arrays(self) -> dict[str, np.ndarray]:
        """Stack into arrays (HDF5 dataset name -> array)."""
        data = {
            "observations/state": np.stack(self.states).astype(np.float32),
            "actions": np.stack(self.actions).astype(np.float32) if self.actions else np.zeros((0, 0), np.float32),
            "rewards": np.asarray(self.rewards, dtype=np.float32),
            "success": np.asarray(self.successes, dtype=bool),
        }
        if self.progress and len(self.progress) == len(self.rewards):
            data["progress"] = np.asarray(self.progress, dtype=np.float64)
        for cam, frames in self.images.items():
            data[f"observations/images/{cam}"] = np.stack(frames)
        return data

    def demo_arrays(self) -> dict[str, np.ndarray]:
        """The episode as one demo of the backend's layout (LIBERO's): T rows, each the observation before its action.

        ``rewards`` are the env's (LIBERO's: 1 at success) and ``dones`` 1 at the last step, as uint8.
        """
        steps = len(self.actions)
        if len(self.rows) < steps + 1:
            raise ValueError(f"{len(self.rows)} dataset rows for {steps} steps: a row per observation is missing")
        data = {key: np.stack([row[key] for row in self.rows[:steps]]) for key in self.rows[0]}
        data["actions"] = np.stack(self.actions).astype(np.float64)
        rewards = np.asarray(self.rewards, dtype=np.float64)
        data["rewards"] = rewards.astype(np.uint8) if np.all((rewards == 0) | (rewards == 1)) else rewards
        data["dones"] = (np.arange(steps) == steps - 1).astype(np.uint8)
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


TrajectorySink = Callable[[str, int, dict[str, Any], dict[str, np.ndarray], "dict[str, str] | None"], None]
"""``(task, episode, attrs, arrays, file_attrs)``: the writer of one saved episode (its trial in ``attrs``);
``file_attrs`` None: lerobench's layout, else a demo of the backend's layout with its file's attributes (the
writer numbers the demos: ``core.results.write_demo``)."""


class TrajectoryFilter:
    """Decides which episodes' trajectories reach the writer (``TrajectorySink``), in which layout."""

    def __init__(self, mode: str, sink: TrajectorySink, file_attrs: Callable[[str], dict[str, str]] | None = None):
        """``file_attrs(task)``: the backend's dataset file attributes (None: lerobench's layout)."""
        self.mode = check_record_mode(mode)
        self._sink = sink
        self._file_attrs = file_attrs

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
            if self._file_attrs is None:
                self._sink(task, record.episode, attrs, trajectory.arrays(), None)
                return
            arrays = trajectory.demo_arrays()  # its rows are missing only if the env made none: an error, said
            attrs = {"episode": record.episode, **attrs, "init_state_index": attrs.pop("init_state"),
                     "num_samples": len(arrays["actions"]), "init_state": arrays["states"][0]}
            self._sink(task, record.episode, attrs, arrays, self._file_attrs(task))


NULL_TRAJECTORIES = TrajectoryFilter("none", lambda *args: None)
