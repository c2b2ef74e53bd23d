"""Built-in policies: baselines (random, zero), Meta-World's scripted experts and LIBERO's privileged expert."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.adaptive import make_adaptive_reach
from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits, row_generators
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.chunked import ExpertBlend, ExpertChunks


class RandomPolicy:
    """Uniform actions in [-1, 1] from each row's own random stream (``row_generators``).

    A row's stream is keyed on (run seed, task, episode, trial, call index), so an episode's actions
    never depend on batch size, finish order or which rows share a call; no state at all.
    """

    observation_needs = ObservationNeeds()
    traits = PolicyTraits(replicable=True, batchable=True, stochastic=True, batch_invariant=True)
    """Stateless and keyed per row: cheap to build per worker, stackable by ``lerobench serve --max-batch``."""

    def __init__(self, action_dim: int):
        self.action_dim = action_dim

    def reset(self) -> None:
        """Stateless: the random streams are keyed per row and call."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Draw one action per row from that row's random stream."""
        actions = np.zeros((len(observation["state"]), self.action_dim), dtype=np.float32)
        for i, rng in enumerate(row_generators(observation)):
            actions[i] = rng.uniform(-1.0, 1.0, self.action_dim)
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


class MetaWorldExpertPolicy:
    """Meta-World's scripted expert for each task (``metaworld.policies.ENV_POLICY_MAP``), state only."""

    observation_needs = ObservationNeeds()
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)
    """Stateless (each row's action depends on its own observation only) and cheap to build per worker."""

    def __init__(self, task_names: list[str]):
        from metaworld.policies import ENV_POLICY_MAP

        missing = [t for t in task_names if t not in ENV_POLICY_MAP]
        if missing:
            raise ConfigError(f"policy 'metaworld-expert' has no scripted expert for tasks {missing}")
        experts: dict[str, Any] = ENV_POLICY_MAP  # classes of a concrete subclass each (typed as the abstract base)
        self._experts = {t: experts[t]() for t in task_names}

    def reset(self) -> None:
        """Experts are stateless functions of the observation."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Ask each env's task expert for its action."""
        states = observation["state"]
        with warnings.catch_warnings():  # experts' gains exceed 1 on purpose: clipped here as the env would
            warnings.filterwarnings("ignore", message="Constant", category=UserWarning)
            actions = np.stack([self._experts[task].get_action(states[i])
                                for i, task in enumerate(observation["task"])])
        return np.clip(actions, -1.0, 1.0).astype(np.float32)  # same outcomes; no clipping warning for the expert


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


def make_metaworld_expert_chunks(context: PolicyContext) -> ExpertChunks:
    """Factory for ``--policy metaworld-expert-chunks``: the expert as 16-step chunks (``policies/chunked.py``)."""
    return ExpertChunks(make_metaworld_expert(context))


def make_metaworld_expert_blend(context: PolicyContext) -> ExpertBlend:
    """Factory for ``--policy metaworld-expert-blend``: the chunking expert told the delay (docs/latency.md)."""
    return ExpertBlend(make_metaworld_expert(context))


BUILTIN = {
    "random": make_random,
    "zero": make_zero,
    "metaworld-expert": make_metaworld_expert,
    "metaworld-adaptive-reach": make_adaptive_reach,
    "metaworld-expert-chunks": make_metaworld_expert_chunks,
    "metaworld-expert-blend": make_metaworld_expert_blend,
    "libero-expert": lambda context: _libero("make_libero_expert", context),
    "libero-expert-chunks": lambda context: _libero("make_libero_expert_chunks", context),
    "libero-expert-blend": lambda context: _libero("make_libero_expert_blend", context),
}


def _libero(factory: str, context: PolicyContext) -> Any:
    """LIBERO's privileged expert (``policies/libero_expert.py``), imported only when asked for."""
    from lerobench.policies import libero_expert

    return getattr(libero_expert, factory)(context)
