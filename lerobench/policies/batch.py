"""``PolicyBatch``: what ``select_action`` receives, typed (issue 47; docs/policies.md, "The observation batch").

Why typed: the batch mixes what the robot saw (``state``, ``images``) with the rollout's bookkeeping about each
row (``slot``, ``episode_seed``, ``trial``, ``delay_steps``, ...). A policy author learned which keys were data
from the docs only. ``PolicyBatch.observation`` and ``PolicyBatch.rows`` keep the two apart, each a
``TypedDict`` whose keys are documented by their types, so a type checker can help.

Why still a dict: every policy written against the plain dict (``observation["state"]``) keeps working; the
batch *is* that dict, with the two typed views on top (kept through lerobench 1.x: CHANGELOG).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict, cast

if TYPE_CHECKING:  # annotations only: importing the policy seam costs nothing
    import numpy as np


class Observation(TypedDict, total=False):
    """What the robot saw, one row per env that needs an action."""

    state: np.ndarray
    """float32 (B, state_dim): proprioceptive state. Always present; never costs a render."""
    images: dict[str, np.ndarray]
    """{camera: uint8 (B, H, W, 3)}: only the cameras in ``observation_needs.cameras``."""
    privileged: np.ndarray
    """float64 (B, PRIVILEGED_DIM): the simulator's state, only for policies that declare ``privileged``."""
    task: list[str]
    """Task name of each row (the same for every row of a batch)."""


class RowInfo(TypedDict, total=False):
    """What each row is: the rollout's bookkeeping, never something the robot saw."""

    slot: np.ndarray
    """int64 (B,): the row's stable id (its env; -1 on padding rows, negative on probe rows)."""
    episode: np.ndarray
    """int64 (B,): episode index."""
    episode_seed: np.ndarray
    """int64 (B,): the episode's seed (run seed, task, episode)."""
    episode_start: np.ndarray
    """bool (B,): the episode's first observation: reset per-episode state."""
    call: np.ndarray
    """int64 (B,): index of this call within the row's current trial."""
    active: np.ndarray
    """bool (B,): always True (kept for policies written against the whole-batch contract)."""
    trial: np.ndarray
    """int64 (B,): attempt index within the episode (``--trials``)."""
    trial_start: np.ndarray
    """bool (B,): the trial's first observation."""
    reward: np.ndarray
    """float32 (B,): reward of the step that produced this observation."""
    success: np.ndarray
    """bool (B,): success after that step."""
    probe: np.ndarray
    """bool (B,): True on the invariance check's probe rows (``policies/invariance.py``)."""
    padding: np.ndarray
    """bool (B,): True on rows that only fill a call to its width (their outputs are discarded)."""
    delay_steps: np.ndarray
    """int64 (B,): ``--delay-steps``: control steps the returned chunk starts late."""
    committed_actions: np.ndarray
    """float32 (B, d, A): the actions the env executes meanwhile (already sent)."""
    committed_from_previous: np.ndarray
    """bool (B,): whether those actions came from this row's previous chunk."""


OBSERVATION_KEYS = frozenset(Observation.__annotations__)
ROW_KEYS = frozenset(RowInfo.__annotations__)


class PolicyBatch(dict[str, Any]):
    """The rows a policy is asked for: ``observation`` (what was seen) and ``rows`` (what each row is)."""

    @property
    def observation(self) -> Observation:
        """The observation keys only."""
        return cast(Observation, {k: v for k, v in self.items() if k in OBSERVATION_KEYS})

    @property
    def rows(self) -> RowInfo:
        """The per-row metadata keys only."""
        return cast(RowInfo, {k: v for k, v in self.items() if k in ROW_KEYS})

    @property
    def size(self) -> int:
        """Rows in the batch (B)."""
        return len(self["state"])


def as_batch(batch: dict[str, Any]) -> PolicyBatch:
    """``batch`` as a ``PolicyBatch`` (itself if it is one; else a shallow copy: the arrays are shared)."""
    return batch if isinstance(batch, PolicyBatch) else PolicyBatch(batch)
