"""``RolloutEnv``: what the rollout needs of a vector env, declared once.

Why a Protocol rather than ``gym.vector.VectorEnv``: the rollout uses four methods gymnasium does not have
(``reset_one``/``reset_landed`` for background resets, ``step_within`` for partial steps with a timeout,
``failed_slots`` after a worker failure) and one declared fact (``concurrent_steps``). ``InProcessVectorEnv`` and
``WorkerVectorEnv`` (``envs/vector.py``) implement it, and so does the tests' deterministic fake
(``tests/fake_env.py``), which lets the rollout's state machine be tested without a simulator.

Observations are the env's live buffers (``copy=False``): a row changes only when its env is stepped or
reset, so the rollout copies the rows it hands on.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np


class RolloutEnv(Protocol):
    """A vector env the rollout can drive: whole and single resets, partial steps, failure diagnosis."""

    num_envs: int

    @property
    def concurrent_steps(self) -> int:
        """Rows a step runs at once (worker processes: usable cores; in this process: 1)."""

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every slot (``seed``: one per slot), blocking; (batched obs, infos). Gymnasium's signature."""

    def reset_one(self, i: int, seed: int, options: dict[str, Any]) -> Future:
        """Start resetting slot ``i`` in the background; slot ``i`` must not be stepped until the future is done."""

    def reset_landed(self, i: int, result: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Take slot ``i``'s finished reset (the future's result): (batched obs with row ``i`` its first, infos)."""

    def step_within(self, actions: dict[str, Any], timeout: float | None
                    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the slots not held (``env_action``); raise ``multiprocessing.TimeoutError`` after ``timeout`` s."""

    def failed_slots(self, active: list[int], hung: bool) -> list[int]:
        """After a worker failure: which of the ``active`` slots were lost (all of them when unclear)."""

    def close(self) -> None:
        """Close the envs (idempotent)."""
