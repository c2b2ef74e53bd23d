"""Built-in policies: baselines (random, zero) and Meta-World's scripted experts."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.adaptive import make_adaptive_reach
from lerobench.policies.base import ObservationNeeds, PolicyContext, row_ids


class RandomPolicy:
    """Uniform actions in [-1, 1] from a per-episode RNG.

    The RNG of each env is re-seeded from ``episode_seed`` at every episode start, so an episode's
    actions depend only on (run seed, task, episode) — never on batch size or finish order.
    """

    observation_needs = ObservationNeeds()
    batchable = True
    """RNGs are keyed by ``row_ids``, so ``lerobench serve --max-batch`` may stack clients' rows."""
    replicable = True
    """Cheap to build once per worker process (docs/scaling.md): no weights, no shared state."""

    def __init__(self, action_dim: int):
        self.action_dim = action_dim
        self._rngs: dict[int, np.random.Generator] = {}

    def reset(self) -> None:
        """Drop every per-env RNG."""
        self._rngs = {}

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Draw one action per env from that env's episode RNG."""
        batch = len(observation["state"])
        actions = np.zeros((batch, self.action_dim), dtype=np.float32)
        for i, key in enumerate(row_ids(observation).tolist()):
            if observation["episode_start"][i] or key not in self._rngs:
                self._rngs[key] = np.random.default_rng(int(observation["episode_seed"][i]))
            actions[i] = self._rngs[key].uniform(-1.0, 1.0, self.action_dim)
        return actions


class ZeroPolicy:
    """All-zero actions: the cheapest possible baseline (and a no-render smoke policy)."""

    observation_needs = ObservationNeeds()
    batchable = True
    replicable = True
    """Cheap to build once per worker process (docs/scaling.md): no weights, no shared state."""

    def __init__(self, action_dim: int):
        self.action_dim = action_dim

    def reset(self) -> None:
        """Stateless."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Return zeros of shape (B, action_dim)."""
        return np.zeros((len(observation["state"]), self.action_dim), dtype=np.float32)


class MetaWorldExpertPolicy:
    """Meta-World's scripted expert for each task (``metaworld.policies.ENV_POLICY_MAP``), state only."""

    observation_needs = ObservationNeeds()
    batchable = True
    """Stateless: each row's action depends on its own observation only."""
    replicable = True
    """Cheap to build once per worker process (docs/scaling.md): no weights, no shared state."""

    def __init__(self, task_names: list[str]):
        from metaworld.policies import ENV_POLICY_MAP

        missing = [t for t in task_names if t not in ENV_POLICY_MAP]
        if missing:
            raise ConfigError(f"policy 'metaworld-expert' has no scripted expert for tasks {missing}")
        self._experts = {t: ENV_POLICY_MAP[t]() for t in task_names}

    def reset(self) -> None:
        """Experts are stateless functions of the observation."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Ask each env's task expert for its action."""
        states = observation["state"]
        with warnings.catch_warnings():  # experts' gains exceed 1 on purpose; the env clips to [-1, 1]
            warnings.filterwarnings("ignore", message="Constant", category=UserWarning)
            return np.stack(
                [self._experts[task].get_action(states[i]) for i, task in enumerate(observation["task"])]
            ).astype(np.float32)


def make_random(context: PolicyContext) -> RandomPolicy:
    """Factory for ``--policy random``."""
    return RandomPolicy(context.action_dim)


def make_zero(context: PolicyContext) -> ZeroPolicy:
    """Factory for ``--policy zero``."""
    return ZeroPolicy(context.action_dim)


def make_metaworld_expert(context: PolicyContext) -> MetaWorldExpertPolicy:
    """Factory for ``--policy metaworld-expert``; only valid on Meta-World suites."""
    if context.backend != "metaworld":
        raise ConfigError(
            f"policy 'metaworld-expert' only runs on Meta-World suites; suite {context.suite!r} uses "
            f"backend {context.backend!r}"
        )
    return MetaWorldExpertPolicy([t.name for t in context.tasks])


BUILTIN = {
    "random": make_random,
    "zero": make_zero,
    "metaworld-expert": make_metaworld_expert,
    "metaworld-adaptive-reach": make_adaptive_reach,
}
