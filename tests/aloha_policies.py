"""ALOHA test policies, loaded by file (``tests/aloha_policies.py:make_looking_hold``) so worker processes find it."""

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyTraits


class LookingHold:
    """Reads the ``top`` camera and holds both arms where they are (each row's ``agent_pos`` as its target)."""

    observation_needs = ObservationNeeds(cameras=("top",))
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        assert observation["images"]["top"].shape[1:] == (480, 640, 3)  # height x width, as gym-aloha renders it
        return np.asarray(observation["state"], dtype=np.float32).copy()


def make_looking_hold(context):
    return LookingHold()


class LateExpert:
    """``aloha-expert`` that starts ``LATE`` steps late (holding the arms until then): a degraded expert, stateless
    like the expert, whose episodes end ``LATE`` steps later, so at a step limit near the expert's own lengths it
    fails where the expert succeeds."""

    LATE = 40
    observation_needs = ObservationNeeds(privileged=True)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        from lerobench.policies.experts.aloha import plan_action

        return np.stack([state if call < self.LATE else plan_action(int(call) - self.LATE, row, task)
                         for state, call, row, task in zip(observation["state"], observation["call"],
                                                           observation["privileged"], observation["task"],
                                                           strict=True)]).astype(np.float32)


def make_late_expert(context):
    return LateExpert()
