"""Built-in baselines that run on every suite: random and zero actions."""

from __future__ import annotations

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits, row_generators
from lerobench.policies.batch import PolicyBatch


class RandomPolicy:
    """Uniform actions in the action space ([-1, 1]; PushT [0, 512]) from each row's own stream (``row_generators``).

    A row's stream is keyed on (run seed, task, episode, trial, call index), so an episode's actions
    never depend on batch size, finish order or which rows share a call; no state at all.
    """

    observation_needs = ObservationNeeds()
    traits = PolicyTraits(replicable=True, batchable=True, stochastic=True, batch_invariant=True)
    """Stateless and keyed per row: cheap to build per worker, stackable by ``lerobench serve --max-batch``."""

    def __init__(self, action_dim: int, bounds: tuple[float, float] = (-1.0, 1.0)):
        self.action_dim = action_dim
        self.bounds = bounds

    def reset(self) -> None:
        """Stateless: the random streams are keyed per row and call."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Draw one action per row from that row's random stream."""
        actions = np.zeros((len(observation["state"]), self.action_dim), dtype=np.float32)
        for i, rng in enumerate(row_generators(observation)):
            actions[i] = rng.uniform(self.bounds[0], self.bounds[1], self.action_dim)
        return actions


class ZeroPolicy:
    """All-zero actions: the cheapest possible baseline (and a no-render smoke policy)."""

    observation_needs = ObservationNeeds()
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)
    """Cheap to build once per worker process (docs/scaling.md): no weights, no state."""

    def __init__(self, action_dim: int):
        self.action_dim = action_dim

    def reset(self) -> None:
        """Stateless."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Return zeros of shape (B, action_dim)."""
        return np.zeros((len(observation["state"]), self.action_dim), dtype=np.float32)


def make_random(context: PolicyContext) -> RandomPolicy:
    """Factory for ``--policy random``."""
    return RandomPolicy(context.action_dim, context.action_bounds)


def make_zero(context: PolicyContext) -> ZeroPolicy:
    """Factory for ``--policy zero``."""
    return ZeroPolicy(context.action_dim)


BUILTIN = {
    "random": make_random,
    "zero": make_zero,
}
"""The baselines, which run on every suite. A benchmark's own policies (its scripted experts) are its backend's
``experts`` (``lerobench/policies/experts/``), found by ``loading.expert_factory``."""
