"""Test policies loaded through ``--policy fixture_policies:<factory>`` (tests/ is on sys.path)."""

from __future__ import annotations

import numpy as np

from lerobench.policies.base import ObservationNeeds


class _Base:
    observation_needs = ObservationNeeds()

    def __init__(self, context):
        self.context = context

    def reset(self):
        pass


class WrongShape(_Base):
    def select_action(self, observation, task_descriptions):
        return np.zeros((len(observation["state"]), self.context.action_dim + 1))


class NaNAfter(_Base):
    """Valid actions on the first task, NaN on the second: results of the first must survive."""

    def select_action(self, observation, task_descriptions):
        actions = np.zeros((len(observation["state"]), self.context.action_dim))
        if observation["task"][0] != self.context.tasks[0].name:
            actions[:] = np.nan
        return actions


class Raises(_Base):
    def select_action(self, observation, task_descriptions):
        raise RuntimeError("boom")


class CameraConsumer(_Base):
    """Consumes the suite's first camera and remembers the image shapes it saw."""

    seen_shapes: list = []

    def __init__(self, context):
        super().__init__(context)
        self.observation_needs = ObservationNeeds(cameras=context.cameras[:1])

    def select_action(self, observation, task_descriptions):
        img = observation["images"][self.context.cameras[0]]
        assert img.dtype == np.uint8 and img.ndim == 4
        return np.zeros((len(observation["state"]), self.context.action_dim))


def make_wrong_shape(context):
    return WrongShape(context)


def make_nan_after(context):
    return NaNAfter(context)


def make_raises(context):
    return Raises(context)


def make_camera(context):
    return CameraConsumer(context)
