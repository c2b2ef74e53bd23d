"""Meta-World backends whose reset does not forget: stale on purpose, to prove the checks see it.

- ``METAWORLD_RESET``: Meta-World's own reset, as lerobench used it before issue 33 (no ``mj_forward``): the goal
  site of push-v3 and push-back-v3 is drawn where the previous episode (or the constructor) left it. The reset
  sweep must name exactly those tasks.
- ``BACKEND``: the first observation is drawn with the previous episode's last poses of every body (the same fault,
  exaggerated so that a run at a small image size shows it in pixels): the observation digests of two runs at
  different batch sizes must differ, and ``compare`` must name the first differing read.
"""

from __future__ import annotations

import numpy as np

from lerobench.envs.metaworld import MetaWorldBackend, MetaWorldSimulator

POSES = ("geom_xpos", "geom_xmat", "site_xpos", "site_xmat", "xpos", "xquat", "xmat")


class MetaWorldResetSimulator(MetaWorldSimulator):
    """``reset_to`` exactly as Meta-World's ``reset``: object and goal positions written, no ``mj_forward``."""

    def reset_to(self, episode: int, seed: int) -> None:
        self._env.set_task(self._variants[episode % len(self._variants)])
        obs, _ = self._env.reset(seed=seed % (2**31))
        self._obs = np.asarray(obs, dtype=np.float32)


class StaleSimulator(MetaWorldSimulator):
    """After the reset, every body is drawn where it was before it (state and start digest are the new episode's)."""

    def reset_to(self, episode: int, seed: int) -> None:
        data = self._env.data
        before = {name: np.array(getattr(data, name)) for name in POSES}
        super().reset_to(episode, seed)
        for name, value in before.items():
            getattr(data, name)[:] = value


class MetaWorldResetBackend(MetaWorldBackend):
    name = "metaworld-own-reset"

    def make_simulator(self, spec):
        return MetaWorldResetSimulator(spec)


class StaleBackend(MetaWorldBackend):
    name = "stale-metaworld"

    def make_simulator(self, spec):
        return StaleSimulator(spec)


METAWORLD_RESET = MetaWorldResetBackend()
BACKEND = StaleBackend()
