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

``select_action`` returns float actions (B, action_dim), or an action chunk (B, T, action_dim) of
which lerobench executes ``replan_steps`` before asking again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lerobench.config import TaskSpec


@dataclass(frozen=True)
class ObservationNeeds:
    """What a policy consumes; envs render only these cameras (none for a state-only policy)."""

    cameras: tuple[str, ...] = ()


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
