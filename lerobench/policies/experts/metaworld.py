"""Meta-World's scripted experts (``metaworld.policies``), one per task, as one lerobench policy; its chunked forms."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.experts.metaworld_chunks import ExpertBlend, ExpertChunks


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


def make_metaworld_expert(context: PolicyContext) -> MetaWorldExpertPolicy:
    """Factory for ``--policy metaworld-expert``; only valid on Meta-World suites."""
    if context.backend != "metaworld":
        raise ConfigError(
            f"policy 'metaworld-expert' only runs on Meta-World suites; suite {context.suite!r} uses "
            f"backend {context.backend!r}"
        )
    return MetaWorldExpertPolicy([t.name for t in context.tasks])


def make_metaworld_expert_chunks(context: PolicyContext) -> ExpertChunks:
    """Factory for ``--policy metaworld-expert-chunks``: the expert as 16-step chunks (``metaworld_chunks.py``)."""
    return ExpertChunks(make_metaworld_expert(context))


def make_metaworld_expert_blend(context: PolicyContext) -> ExpertBlend:
    """Factory for ``--policy metaworld-expert-blend``: the chunking expert told the delay (docs/latency.md)."""
    return ExpertBlend(make_metaworld_expert(context))
