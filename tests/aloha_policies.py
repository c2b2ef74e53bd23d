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
