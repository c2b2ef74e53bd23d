"""``libero-expert-chunks`` and ``libero-expert-blend``: the LIBERO expert planning a chunk of actions ahead.

Why: a delay (``--delay-steps d``) only matters to a policy that returns action chunks, and the delay curve needs one
that succeeds at d = 0 without weights. Each chunk is the expert's own closed-loop plan rolled forward on a predicted
hand (``predict``); the blend variant starts its chunk with the committed actions (docs/latency.md).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from lerobench.envs.libero_state import Scene, read_scene
from lerobench.policies.base import ObservationNeeds, row_ids
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.experts.libero import LiberoExpert, row_starts, suite_goals
from lerobench.policies.experts.libero_control import DT, POS_SCALE, Memory

CHUNK = 16
"""Actions per chunk of ``libero-expert-chunks``: room for d = 8 with an execute horizon of 8."""
EXECUTED = 8
"""Actions of each chunk executed before the next call (declared: the row's memory advances by exactly these)."""
TRACKING = 0.28
"""Fraction of a position action's 5 cm offset the arm covers in one step (measured on LIBERO's OSC, steady
motion): how a chunk predicts where the hand will be."""


def predict(scene: Scene, action: np.ndarray, held: str | None) -> Scene:
    """The scene one step later, as a chunk plans it.

    The hand moves by ``TRACKING`` of its action, a held object with it, the clock by one step; everything else
    stays where it is.
    """
    from dataclasses import replace

    move = np.clip(action[:3], -1.0, 1.0) * POS_SCALE * TRACKING
    entities = dict(scene.entities)
    if held is not None and held in entities:
        e = entities[held]
        entities[held] = replace(e, pos=e.pos + move, lo=e.lo + move, hi=e.hi + move)
    return replace(scene, eef_pos=scene.eef_pos + move, time=scene.time + DT, entities=entities)


class LiberoExpertChunks(LiberoExpert):
    """The expert planning ``CHUNK`` actions ahead from a predicted hand (open loop within a chunk).

    Blind to ``--delay-steps``: the chunk starts where the hand is at the call, so with a delay its first actions
    are late; its success falls as the delay grows (docs/latency.md).
    """

    observation_needs = ObservationNeeds(privileged=True, chunk_length=CHUNK, replan_steps=EXECUTED)
    aware = False

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """(B, CHUNK, 7): each row's planned actions."""
        keys = row_ids(observation).tolist()
        starts = row_starts(observation, len(keys))
        delays = np.asarray(observation.get("delay_steps", np.zeros(len(keys))), dtype=np.int64)
        committed = observation.get("committed_actions")
        known = observation.get("committed_from_previous")
        out = np.zeros((len(keys), CHUNK, 7), dtype=np.float32)
        for i, key in enumerate(keys):
            expert = self.experts[observation["task"][i]]
            scene = read_scene(observation["privileged"][i], expert.goal)
            mem = self._row(int(key), bool(starts[i]))
            d = max(int(delays[i]), 0) if self.aware and committed is not None else 0
            for k in range(d):  # where the committed actions take the hand before this chunk starts
                assert committed is not None
                action = np.asarray(committed[i, k], dtype=np.float64)
                if known is None or bool(known[i, k]):
                    scene = predict(scene, action, _held(mem))
                out[i, k] = action
            plan = mem
            for k in range(d, CHUNK):
                if k == d + EXECUTED:  # the rest is planned on a copy: only these steps run before the next call
                    plan = copy.deepcopy(mem)
                out[i, k] = expert.act(scene, plan)
                scene = predict(scene, out[i, k], _held(plan))
            self._memory[int(key)] = mem
        return out


class LiberoExpertBlend(LiberoExpertChunks):
    """The chunking expert told the delay.

    It plans from where the committed actions take the hand and starts its chunk with them (as real-time
    chunking's inpainting does).
    """

    aware = True


def _held(mem: Memory) -> str | None:
    """The object the hand carries in this phase (it moves with the hand in a prediction)."""
    if mem.working is None or mem.working.predicate not in ("on", "in"):
        return None
    return mem.working.args[0] if mem.phase in ("lift", "carry", "level", "slide", "lower") else None


def make_libero_expert_chunks(context: Any) -> LiberoExpertChunks:
    """Factory for ``--policy libero-expert-chunks``: the expert as 16-step chunks (delay sweeps)."""
    return LiberoExpertChunks(suite_goals(context, "libero-expert-chunks"))


def make_libero_expert_blend(context: Any) -> LiberoExpertBlend:
    """Factory for ``--policy libero-expert-blend``: the chunking expert told the committed actions."""
    return LiberoExpertBlend(suite_goals(context, "libero-expert-blend"))
