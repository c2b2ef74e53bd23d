"""A Meta-World backend whose worker dies (or hangs) at a chosen episode and step: crash injection."""

from __future__ import annotations

import os
import signal
import time

from lerobench.envs.metaworld import MetaWorldBackend, MetaWorldSimulator


class CrashingSimulator(MetaWorldSimulator):
    def __init__(self, spec):
        super().__init__(spec)
        self._options = dict(spec.backend_options)
        self._episode = -1
        self._steps = 0

    def reset_to(self, episode, seed):
        super().reset_to(episode, seed)
        self._episode, self._steps = episode, 0

    def step(self, action):
        self._steps += 1
        if self._episode == self._options["crash_episode"] and self._steps == self._options["crash_step"]:
            mode = self._options["mode"]
            if mode == "exit":
                os._exit(3)
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "hang":
                time.sleep(3600)
            if mode == "raise":
                raise RuntimeError("injected simulator error")
        return super().step(action)


class CrashingBackend(MetaWorldBackend):
    name = "crashing-metaworld"

    def make_simulator(self, spec):
        return CrashingSimulator(spec)


BACKEND = CrashingBackend()
