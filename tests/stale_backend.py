"""A Meta-World backend whose reset does not forward the kinematics: Meta-World's own reset, stale on purpose.

Before issue 33 lerobench reset Meta-World this way, and push-v3's first image showed the puck where the
previous episode (or the constructor) had left it. Tests use it to prove the reset check and the observation
digests see such a fault and name it.
"""

from __future__ import annotations

import numpy as np

from lerobench.envs.metaworld import MetaWorldBackend, MetaWorldSimulator


class StaleSimulator(MetaWorldSimulator):
    """``reset_to`` exactly as Meta-World's ``reset``: object positions written to ``qpos``, no ``mj_forward``."""

    def reset_to(self, episode: int, seed: int) -> None:
        self._env.set_task(self._variants[episode % len(self._variants)])
        obs, _ = self._env.reset(seed=seed % (2**31))
        self._obs = np.asarray(obs, dtype=np.float32)


class StaleBackend(MetaWorldBackend):
    name = "stale-metaworld"

    def make_simulator(self, spec):
        return StaleSimulator(spec)


BACKEND = StaleBackend()
