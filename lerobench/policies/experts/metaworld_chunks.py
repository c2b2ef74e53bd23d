"""Chunking versions of Meta-World's scripted expert, for inference-delay sweeps (``--delay-steps``, docs/latency.md).

Why: a delay only matters to a policy that returns action chunks, and the sweep needs one that succeeds at
d = 0 without weights. ``metaworld-expert-chunks`` returns the expert's action for the observed state,
held for ``CHUNK`` steps: open loop within a chunk, blind to the delay, so its success falls as d grows.
``metaworld-expert-blend`` is the same expert told the delay: it conditions its new chunk on the actions
committed for the steps the call covers (the hand's position after them, from Meta-World's mocap step of
``action × 1/100``), starts its chunk with those actions (as RTC's inpainting does) and blends from the last
committed action into its own over d steps. The two are the sweep's pair: how much a delay-aware policy
recovers of the drop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobench.policies.base import ObservationNeeds, Policy, PolicyTraits
from lerobench.policies.batch import PolicyBatch, as_batch

CHUNK = 16
"""Actions per chunk: room for d = 8 with an execute horizon of 8 (RTC's d + s <= chunk length)."""

MOCAP_SCALE = 1.0 / 100
"""Meta-World's ``SawyerXYZEnv.action_scale``: the hand's mocap target moves by ``action[:3]`` × this per step."""


class ExpertChunks:
    """The scripted expert's action for each row, held for ``CHUNK`` steps; ignores the delay keys."""

    observation_needs = ObservationNeeds(chunk_length=CHUNK)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)

    def __init__(self, expert: Policy):
        """``expert``: Meta-World's scripted expert (``lerobench.policies.experts.metaworld.MetaWorldExpertPolicy``)."""
        self.expert = expert

    def reset(self) -> None:
        """Stateless."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """(B, CHUNK, 4): each row's expert action repeated."""
        actions = self.expert.select_action(as_batch(self._state(observation)), task_descriptions)
        return np.repeat(actions[:, None, :], CHUNK, axis=1)

    def _state(self, observation: dict[str, Any]) -> dict[str, Any]:
        return observation


class ExpertBlend(ExpertChunks):
    """The expert told the delay: plans from where the committed actions take the hand, blends into them."""

    def _state(self, observation: dict[str, Any]) -> dict[str, Any]:
        committed = observation.get("committed_actions")
        if committed is None:
            return observation
        state = np.array(observation["state"], dtype=np.float32, copy=True)
        known = np.asarray(observation["committed_from_previous"], dtype=np.float32)[..., None]
        state[:, :3] += MOCAP_SCALE * (np.clip(committed[..., :3], -1, 1) * known).sum(axis=1)
        return {**observation, "state": state}

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Chunks that begin with the committed actions and blend from the last of them over d steps."""
        chunk = super().select_action(observation, task_descriptions)
        delays = np.asarray(observation.get("delay_steps", np.zeros(len(chunk))), dtype=np.int64)
        committed = observation.get("committed_actions")
        for i, d in enumerate(delays.tolist()):
            if d <= 0 or committed is None:
                continue
            chunk[i, :d] = committed[i, :d]
            last = committed[i, d - 1]
            for j in range(d, min(CHUNK, 2 * d)):
                w = (j - d + 1) / (d + 1)
                chunk[i, j] = (1 - w) * last + w * chunk[i, j]
        return chunk

