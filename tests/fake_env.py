"""A deterministic fake vector env implementing ``RolloutEnv``: the rollout's state machine without MuJoCo.

Scripted per (episode, trial): the episode's length, its success, its observations, a reset delay (the
background reset lands after that many seconds, on a timer thread, as a worker's would) and reset errors;
plus an injectable worker failure (``step_within`` raises ``EOFError`` at a given step, and ``failed_slots``
names the culprits). It records every violation of the contract the rollout must keep: a slot stepped while
its reset runs, a held slot advanced, an idle slot stepped.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobench.envs.base import NO_EPISODE
from lerobench.policies.base import ObservationNeeds, PolicyTraits


def default_observation(episode: int, trial: int, step: int, state_dim: int) -> np.ndarray:
    """A state that tells where it came from: (episode, trial, step, 0, ...)."""
    state = np.zeros(state_dim, np.float32)
    state[:3] = (episode, trial, step)
    return state


@dataclass
class Script:
    """What the fake env does, per (episode, trial)."""

    length: Callable[[int, int], int] = lambda episode, trial: 5 + episode % 3
    success: Callable[[int, int], bool] = lambda episode, trial: episode % 2 == 0
    reset_delay_s: Callable[[int, int], float] = lambda episode, trial: 0.0
    reset_error: Callable[[int, int], bool] = lambda episode, trial: False
    state: Callable[[int, int, int, int], np.ndarray] = default_observation
    images: Callable[[int, int, int], dict[str, np.ndarray]] | None = None
    """(episode, trial, step) -> {camera: (H, W, 3) uint8}; None: state only."""
    state_dim: int = 4
    fail_at_step: int | None = None
    """The ``step_within`` call (counted from 1) at which a worker "dies" (``EOFError``)."""
    culprits: tuple[int, ...] = ()
    """Slots ``failed_slots`` names after the failure (those of them that are active)."""
    hang: bool = False
    """The failure at ``fail_at_step`` is a hung worker (``multiprocessing.TimeoutError``), not a dead one."""


@dataclass
class _Env:
    episode: int = NO_EPISODE
    trial: int = 0
    steps: int = 0
    done: bool = True
    resetting: bool = False
    success: bool = False


@dataclass
class Log:
    """What happened, for the tests' assertions."""

    steps: list[tuple[int, int, int, int, np.ndarray]] = field(default_factory=list)
    """(slot, episode, trial, step after it, action) of every real step."""
    resets: list[tuple[int, int, int]] = field(default_factory=list)
    """(slot, episode, trial) of every reset, in order."""
    violations: list[str] = field(default_factory=list)
    step_calls: int = 0
    failed_slots_hung: bool | None = None
    """What the rollout told ``failed_slots``: a hang (True) or a death (False); None: never asked."""
    steps_beside_resets: int = 0
    """Steps taken while another slot's reset was running (background resets overlap the stepping)."""


class FakeVectorEnv:
    """``RolloutEnv`` of ``n`` scripted envs; observations are live buffers, as with ``copy=False``."""

    def __init__(self, n: int, script: Script | None = None, concurrent_steps: int = 1):
        self.num_envs = n
        self.concurrent_steps = concurrent_steps
        self.script = script or Script()
        self.envs = [_Env() for _ in range(n)]
        self.obs: dict[str, Any] = {"state": np.zeros((n, self.script.state_dim), np.float32)}
        self.log = Log()
        self._lock = threading.Lock()
        self.closed = False

    # -- resets -----------------------------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every slot now (the first reset)."""
        assert options is not None, "the rollout always says which episode each slot starts"
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            info = self._apply_reset(i, options)
            _add_info(infos, info, i, self.num_envs)
        return self.obs, infos

    def reset_one(self, i: int, seed: int, options: dict[str, Any]) -> Future:
        """Reset slot ``i`` after its scripted delay, on a timer thread; done at once without one."""
        env = self.envs[i]
        episode, trial = int(options["episodes"][i]), int(options["trials"][i])
        delay = self.script.reset_delay_s(episode, trial) if episode != NO_EPISODE else 0.0
        future: Future = Future()
        env.resetting = True
        if delay <= 0:
            future.set_result(self._apply_reset(i, options))
        else:
            timer = threading.Timer(delay, lambda: future.set_result(self._apply_reset(i, options)))
            timer.daemon = True
            timer.start()
        return future

    def reset_landed(self, i: int, result: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Slot ``i``'s reset landed: its info (the observation is in the live buffer already)."""
        infos: dict[str, Any] = {}
        _add_info(infos, result, i, self.num_envs)
        return self.obs, infos

    def _apply_reset(self, i: int, options: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            env = self.envs[i]
            env.episode, env.trial = int(options["episodes"][i]), int(options["trials"][i])
            env.steps, env.success, env.resetting = 0, False, False
            self.log.resets.append((i, env.episode, env.trial))
            if env.episode == NO_EPISODE:
                env.done = True
                return {}
            env.done = False
            self._write(i)
            if self.script.reset_error(env.episode, env.trial):
                env.done = True
                return {"episode_end": self._summary(env, error="simulator reset failed: scripted")}
            return {}

    # -- steps ------------------------------------------------------------------------------------
    def step_within(self, actions: dict[str, Any], timeout: float | None):
        """Step the slots not held; record any slot stepped that must not be."""
        self.log.step_calls += 1
        if self.script.fail_at_step is not None and self.log.step_calls >= self.script.fail_at_step:
            if self.script.hang:
                raise multiprocessing.TimeoutError(f"step timed out after {timeout} second(s)")
            raise EOFError("scripted worker death")
        n = self.num_envs
        rewards = np.zeros(n)
        infos: dict[str, Any] = {}
        hold = np.asarray(actions["hold"], dtype=bool)
        if any(env.resetting for env in self.envs):
            self.log.steps_beside_resets += 1
        for i in np.flatnonzero(~hold).tolist():
            env = self.envs[i]
            if env.resetting:
                self.log.violations.append(f"slot {i} stepped while its reset runs")
                continue
            if env.done:
                self.log.violations.append(f"slot {i} stepped after its episode ended (episode {env.episode})")
                continue
            env.steps += 1
            self.log.steps.append((i, env.episode, env.trial, env.steps, np.array(actions["action"][i])))
            env.success = env.steps >= self.script.length(env.episode, env.trial) and \
                self.script.success(env.episode, env.trial)
            rewards[i] = float(env.steps)
            self._write(i)
            info: dict[str, Any] = {"success": env.success}
            if env.steps >= self.script.length(env.episode, env.trial):
                env.done = True
                info["episode_end"] = self._summary(env)
            _add_info(infos, info, i, n)
        return self.obs, rewards, np.zeros(n, bool), np.zeros(n, bool), infos

    def failed_slots(self, active: list[int], hung: bool) -> list[int]:
        """The scripted culprits among ``active``, else all of them (as ``WorkerVectorEnv`` when unclear)."""
        self.log.failed_slots_hung = hung
        return [i for i in active if i in self.script.culprits] or list(active)

    def close(self) -> None:
        """Nothing to free."""
        self.closed = True

    def _write(self, i: int) -> None:
        env, script = self.envs[i], self.script
        self.obs["state"][i] = script.state(env.episode, env.trial, env.steps, script.state_dim)
        if script.images is not None:
            for cam, image in script.images(env.episode, env.trial, env.steps).items():
                images = self.obs.setdefault("images", {})
                if cam not in images:
                    images[cam] = np.zeros((self.num_envs, *image.shape), np.uint8)
                images[cam][i] = image

    def _summary(self, env: _Env, error: str | None = None) -> dict[str, Any]:
        return {"episode": env.episode, "trial": env.trial, "success": env.success and error is None,
                "success_at_end": env.success, "steps": env.steps, "return": float(sum(range(env.steps + 1))),
                "max_reward": float(env.steps) if env.steps else float("-inf"), "renders": 0, "error": error,
                "start_digest": f"{env.episode}", "clipped": None}


def _add_info(infos: dict[str, Any], info: dict[str, Any], i: int, n: int) -> None:
    """Gymnasium's vector info layout: ``infos[key][i]`` with a ``_key`` mask; dicts nested the same way."""
    for key, value in info.items():
        if isinstance(value, dict):
            sub = infos.setdefault(key, {})
            _add_info(sub, value, i, n)
        else:
            infos.setdefault(key, np.empty(n, dtype=object))[i] = value
        infos.setdefault(f"_{key}", np.zeros(n, dtype=bool))[i] = True


class ChunkPolicy:
    """A chunk policy whose actions say who asked: (episode, trial, call, t) per action; logs every call.

    ``latency_s`` makes each call sleep (so calls run beside the stepping); ``concurrent`` lets calls overlap.
    """

    def __init__(self, chunk: int = 3, action_dim: int = 4, latency_s: float = 0.0, concurrent: int = 1,
                 fail_on_call: int | None = None, bad: str | None = None):
        self.observation_needs = ObservationNeeds(replan_steps=chunk)
        self.traits = PolicyTraits(concurrent_calls=concurrent, checkable=False)
        self.chunk, self.action_dim, self.latency_s = chunk, action_dim, latency_s
        self.fail_on_call, self.bad = fail_on_call, bad
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Nothing to forget."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """A chunk per row: action[t] = (episode, trial, call, t)."""
        with self._lock:
            self.calls.append({k: np.array(v, copy=True) for k, v in observation.items() if k != "images"})
            count = len(self.calls)
        if self.latency_s:
            threading.Event().wait(self.latency_s)
        if self.fail_on_call == count:
            raise RuntimeError("scripted policy failure")
        n = len(observation["state"])
        out = np.zeros((n, self.chunk, self.action_dim), np.float32)
        out[:, :, 0] = np.asarray(observation["episode"])[:, None]
        out[:, :, 1] = np.asarray(observation["trial"])[:, None]
        out[:, :, 2] = np.asarray(observation["call"])[:, None]
        out[:, :, 3] = np.arange(self.chunk)[None, :]
        if self.bad == "nan" and count == 2:
            out[-1, 0, 0] = np.nan
        if self.bad == "shape":
            return out[:, :, :2]
        return out
