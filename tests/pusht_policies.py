"""PushT test policies: the privileged expert made to read the camera, so a wrong image changes the episode."""

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyTraits
from lerobench.policies.experts.pusht import PushTExpertPolicy


class LookingExpert(PushTExpertPolicy):
    """The expert, its target nudged by the image's mean brightness: every pixel it reads shapes its episode."""

    observation_needs = ObservationNeeds(cameras=("top",), privileged=True)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)

    def select_action(self, observation, task_descriptions):
        actions = super().select_action(observation, task_descriptions)
        brightness = observation["images"]["top"].reshape(len(actions), -1).mean(axis=1) / 255.0
        return (actions + (brightness - 0.9)[:, None] * 8.0).astype(np.float32)


def make_looking_expert(context):
    return LookingExpert()
