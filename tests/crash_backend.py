"""A Meta-World backend whose worker dies (or hangs) at a chosen episode and step: crash injection."""

from __future__ import annotations

import os
import signal
import time

from lerobench.envs.metaworld import MetaWorldBackend, MetaWorldSimulator


class CrashingSimulator(MetaWorldSimulator):
    OPTIONS = (*MetaWorldSimulator.OPTIONS, "crash_episode", "crash_step", "crash_trial", "mode")

    def __init__(self, spec):
        super().__init__(spec)
        self._options = dict(spec.backend_options)
        self._episode = -1
        self._trial = 0
        self._steps = 0

    def reset_to(self, episode, seed):
        super().reset_to(episode, seed)
        self._trial = self._trial + 1 if episode == self._episode else 0  # trials reset to the same episode
        self._episode, self._steps = episode, 0

    def step(self, action):
        self._steps += 1
        if (self._episode == self._options["crash_episode"] and self._steps == self._options["crash_step"]
                and self._trial == self._options.get("crash_trial", 0)):
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
