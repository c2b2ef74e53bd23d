"""The policy boundary: two methods, plus a declaration of which observations the policy consumes.

Observation batch passed to ``select_action`` (B = number of envs in the vector env):

- ``state``: float32 (B, state_dim) — always present, never costs a render.
- ``images``: {camera: uint8 (B, H, W, 3)} — only the cameras in ``observation_needs.cameras``.
- ``task``: list[str] of task names; ``episode``: int64 (B,) episode index (-1 for an idle slot);
  ``episode_seed``: int64 (B,); ``episode_start``: bool (B,) True on an episode's first observation
  (reset per-env state there); ``active``: bool (B,) False for finished/idle slots (their action is
  ignored).
- ``trial``: int64 (B,) index of the current attempt at the episode (``--trials``; always 0 with one
  trial); ``trial_start``: bool (B,) True on each trial's first observation, where the env is back at
  the episode's start. Keep per-episode memory across trials (that is what is measured); drop only
  what belongs to the old attempt (e.g. queued actions). See docs/trials.md.
- ``reward``: float32 (B,) and ``success``: bool (B,) of the step that produced this observation
  (0.0 and False on a trial's first observation): what a policy that adapts within an episode learns
  from. Returning to the same start is the policy's only other signal.

- ``slot``: int64 (B,) — only from ``lerobench serve --max-batch``: a stable id per (client, env) row,
  since a served batch stacks rows of several clients. Key per-env state by ``row_ids(observation)``
  (the slot, or the row index in a local run) and declare ``batchable = True`` to be batched.

``select_action`` returns float actions (B, action_dim), or an action chunk (B, T, action_dim) of
which lerobench executes ``replan_steps`` before asking again (``--replan-steps``, or the policy's own
``ObservationNeeds.replan_steps``). Each env keeps its own queue; the policy is asked (for the whole
batch) when one runs dry and reads only those envs' observations, so the cameras of an env are rendered
only at the steps where its queue runs dry: once per chunk. ``ObservationNeeds.every_frame`` renders
them at every step instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lerobench.config import TaskSpec
from lerobench.errors import ConfigError


@dataclass(frozen=True)
class ObservationNeeds:
    """What a policy consumes and when; envs render only these cameras, only when they are read."""

    cameras: tuple[str, ...] = ()
    """Cameras the policy reads (none for a state-only policy)."""
    replan_steps: int | None = None
    """Actions of each returned chunk executed before the policy is asked again, when the policy fixes it
    (LeRobot's ``n_action_steps``); None leaves it to ``--replan-steps``."""
    every_frame: bool = False
    """Render the cameras at every step, also at steps whose observation the policy is not asked about.
    A policy that keeps an observation history must be asked at every step anyway: it returns single
    actions (B, A), and then every observation is read and rendered without this flag."""

    def executed_steps(self, requested: int) -> int:
        """Actions executed per chunk given ``--replan-steps requested`` (1 = the CLI default)."""
        if self.replan_steps is None:
            return requested
        if requested not in (1, self.replan_steps):
            raise ConfigError(f"--replan-steps {requested} conflicts with the policy, which executes "
                              f"{self.replan_steps} actions of each chunk (drop --replan-steps)")
        return self.replan_steps


@dataclass(frozen=True)
class PolicyContext:
    """What a policy factory is told about the suite it will be evaluated on."""

    suite: str
    backend: str
    tasks: tuple[TaskSpec, ...]
    action_dim: int
    state_dim: int
    cameras: tuple[str, ...]
    """Cameras the suite offers (a policy may consume any subset)."""
    image_size: tuple[int, int]
    seed: int = 0
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict)


def row_ids(observation: dict[str, Any]) -> np.ndarray:
    """The key of each row's per-env state: its serving slot if batched by ``lerobench serve``, else its index."""
    slots = observation.get("slot")
    return np.asarray(slots) if slots is not None else np.arange(len(observation["state"]))


@runtime_checkable
class Policy(Protocol):
    """A policy evaluated by lerobench."""

    observation_needs: ObservationNeeds

    def reset(self) -> None:
        """Forget all state; called once before the first episode of a run (and on each thread's copy).

        Per-episode state must be reset where ``observation['episode_start']`` is True (not at
        ``trial_start``: memory across an episode's trials is what ``--trials`` measures). With
        ``--parallel-tasks`` this runs on a shallow copy: rebind state attributes, never mutate shared ones.
        """

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Return actions (B, A) or an action chunk (B, T, A) for the batch of observations."""
