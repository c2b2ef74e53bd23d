"""PushT's privileged scripted expert (gym-pusht 0.1.8): a reference for what the benchmark's ceiling looks like.

The expert reads the simulator's state (agent, T and goal poses) from ``observation['privileged']`` and returns the
agent's next target position in gym-pusht's raw coordinates ([0, 512]). It is stateless: each row's action is a
pure function of that row's state (planning runs on a physics copy built afresh per row), so it is batch
invariant to the bit. The planning itself lives in ``pusht_plan``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits, row_generators
from lerobench.policies.batch import PolicyBatch

NOISE_STD = 45.0
"""Action noise (workspace px) of the degraded expert: 55% success on seeds 0-99 (the expert 100%); σ 30 gave 90%."""


def unpack(row: np.ndarray) -> dict[str, Any]:
    """One ``privileged`` row (laid out as ``lerobench.envs.pusht.PRIVILEGED_FIELDS``) as the planner's named arrays."""
    row = np.asarray(row, dtype=np.float64)
    return {
        "agent": row[0:2].copy(),
        "agent_velocity": row[2:4].copy(),
        "block": row[4:6].copy(),
        "angle": float(row[6]),
        "block_velocity": row[7:9].copy(),
        "angular_velocity": float(row[9]),
        "goal": row[10:13].copy(),
    }


class PushTExpertPolicy:
    """Pushes the T onto its goal pose: picks a contact by a first-order push model, refines the push by simulation.

    ``noise_std`` > 0 adds Gaussian noise to every action from the row's own random stream: a degraded expert.
    """

    observation_needs = ObservationNeeds(privileged=True)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)
    """Stateless (a row's action depends on its own privileged state only) and cheap to build per worker."""

    def __init__(self, noise_std: float = 0.0):
        self.noise_std = noise_std

    def reset(self) -> None:
        """Stateless: nothing to forget (the physics copy is rebuilt per row)."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """One target position per row, float32 (B, 2), in gym-pusht's raw coordinates."""
        from lerobench.policies.experts.pusht_plan import plan_action

        rows = np.asarray(observation["privileged"], dtype=np.float64)
        actions = np.stack([plan_action(unpack(row)) for row in rows]) if len(rows) else np.zeros((0, 2))
        if self.noise_std > 0 and len(rows):
            actions = actions + np.stack([rng.normal(0.0, self.noise_std, 2) for rng in row_generators(observation)])
        return np.clip(actions, 0.0, 512.0).astype(np.float32)


class NoisyPushTExpertPolicy(PushTExpertPolicy):
    """The expert with Gaussian action noise: a degraded variant for A/B tests."""

    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True, stochastic=True)
    """Still batch invariant: the noise comes from each row's own stream (``row_generators``)."""


def make_pusht_expert(context: PolicyContext) -> PushTExpertPolicy:
    """Factory for the PushT expert."""
    return PushTExpertPolicy()


def make_pusht_expert_noisy(context: PolicyContext) -> NoisyPushTExpertPolicy:
    """Factory for the degraded PushT expert (action noise std ``NOISE_STD``)."""
    return NoisyPushTExpertPolicy(noise_std=NOISE_STD)
