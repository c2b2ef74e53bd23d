"""``pusht-expert-chunks``: the PushT expert planning a chunk of actions ahead, for inference-delay curves.

Why: a delay (``--delay-steps d``) only matters to a policy that returns action chunks, and the delay curve needs one
that succeeds at d = 0 without weights. Holding one target for a whole chunk (what ``metaworld-expert-chunks`` does
with Meta-World's delta actions) would park PushT's agent on one point; instead each chunk is the expert's own
closed-loop plan rolled forward on its physics copy: step k's target is the expert's answer for the state its
first k targets lead to. Executed open loop and blind to the delay, its success falls as d grows.
"""

from __future__ import annotations

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyTraits
from lerobench.policies.batch import PolicyBatch

CHUNK = 16
"""Targets per chunk: room for d = 8 with an execute horizon of 8 (RTC's d + s <= chunk length)."""
EXECUTED = 8
"""Targets executed of each chunk before the next call (LeRobot's diffusion ``n_action_steps`` on PushT)."""


class PushTExpertChunks:
    """Each row's next ``CHUNK`` expert targets, planned on its own copy of the physics; stateless."""

    observation_needs = ObservationNeeds(privileged=True, chunk_length=CHUNK, replan_steps=EXECUTED)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)

    def reset(self) -> None:
        """Stateless: a chunk depends on its row's privileged state only."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """(B, CHUNK, 2) target positions in gym-pusht's workspace."""
        from lerobench.policies.experts.pusht import unpack

        rows = np.asarray(observation["privileged"], dtype=np.float64)
        chunks = np.zeros((len(rows), CHUNK, 2), dtype=np.float32)
        for i, row in enumerate(rows):
            chunks[i] = plan_chunk(unpack(row))
        return chunks


def plan_chunk(state: dict[str, object]) -> np.ndarray:
    """The expert's targets for ``CHUNK`` steps from ``state``, each planned from the state the previous ones reach."""
    from lerobench.policies.experts.pusht_plan import PhysicsCopy, plan_action

    physics = PhysicsCopy()
    targets = np.zeros((CHUNK, 2))
    for k in range(CHUNK):
        targets[k] = np.clip(plan_action(state), 0.0, 512.0)
        physics.rollout(state, [targets[k]])
        state = {**state, "agent": np.array(physics.agent.position), "agent_velocity": np.array(physics.agent.velocity),
                 "block": np.array(physics.block.position), "angle": float(physics.block.angle),
                 "block_velocity": np.array(physics.block.velocity),
                 "angular_velocity": float(physics.block.angular_velocity)}
    return targets


def make_pusht_expert_chunks(context: object) -> PushTExpertChunks:
    """Factory for ``--policy pusht-expert-chunks``."""
    return PushTExpertChunks()
