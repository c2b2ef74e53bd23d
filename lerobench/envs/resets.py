"""The reset check: does an episode's first observation forget what the simulator ran before?

Why it exists: episode *i* must be a pure function of ``(seed, task, i)`` at any batch size and executor, but
a worker's simulator runs other episodes before episode *i*, in an order that depends on the batch size.
Meta-World's own reset moved push-v3's puck in ``qpos`` without forwarding the kinematics, so its first image
showed the puck where the previous episode (or the constructor) had left it, while the state vector and the
start digest were the new episode's (issue 33). A new backend can have the same fault, so the check runs
through the ``Backend`` / ``LazyTaskEnv`` protocol only: no backend is named here.

Per task, one env (so one simulator build): reset it to episode ``episode`` (a just-built simulator's first
reset is the fresh reference), reset it to another episode and step it with a moving policy (seeded uniform
actions), then reset it to ``episode`` again; the two first observations (state and every camera, after the
protocol's settle steps and image flips) must be equal bit for bit. So must the start digests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lerobench.envs.base import Backend, EnvSpec, LazyTaskEnv, env_action


@dataclass(frozen=True)
class ResetCheck:
    """One task's outcome: which parts of the first observation differed, and by how much."""

    task: str
    episode: int
    differences: dict[str, int] = field(default_factory=dict)
    """``state`` (values that differ), a camera (pixels that differ in any channel) or ``start_digest`` (1)."""
    error: str | None = None
    """The simulator failed (reset or step): the check could not run."""

    @property
    def ok(self) -> bool:
        """The first observation after a used simulator's reset equals a fresh one's, bit for bit."""
        return self.error is None and not self.differences

    def describe(self) -> str:
        """One line a user can act on."""
        if self.error is not None:
            return f"task {self.task!r}: the reset check could not run: {self.error}"
        if not self.differences:
            return f"task {self.task!r}: episode {self.episode}'s first observation is the same after other episodes"
        parts = ", ".join(f"{k}: {v} {'pixels' if k not in ('state', 'start_digest') else 'values'}"
                          for k, v in self.differences.items())
        return (f"task {self.task!r}: episode {self.episode}'s first observation depends on what the simulator "
                f"ran before (differs from a fresh simulator's in {parts})")


def observation_differences(fresh: dict[str, Any], again: dict[str, Any]) -> dict[str, int]:
    """Per part of two observations, how many values (state) or pixels (a camera) differ; equal parts left out."""
    out: dict[str, int] = {}
    a, b = np.asarray(fresh["state"]), np.asarray(again["state"])
    if a.shape != b.shape or a.tobytes() != b.tobytes():
        out["state"] = int(a.size) if a.shape != b.shape else int(np.count_nonzero(a != b))
    for cam, img in (fresh.get("images") or {}).items():
        other = again["images"][cam]
        if img.shape != other.shape:
            out[cam] = int(img.shape[0] * img.shape[1])
        elif img.tobytes() != other.tobytes():
            out[cam] = int(np.count_nonzero(np.any(img != other, axis=-1)))
    return out


def check_task_reset(backend: Backend, spec: EnvSpec, episode: int = 1, other: int = 0,
                     steps: int = 20, seed: int = 0) -> ResetCheck:
    """Run the reset check on ``spec``'s task (see the module docstring); ``steps`` moves between the resets."""
    env = LazyTaskEnv(replace(spec, slot=0, record_camera=None), backend)
    try:
        fresh, info = env.reset(options={"episodes": [episode]})
        if "episode_end" in info:
            return ResetCheck(spec.task.name, episode, error=str(info["episode_end"]["error"]))
        digest = env.start_digest
        env.reset(options={"episodes": [other]})
        rng = np.random.default_rng([seed, spec.task.index])
        for _ in range(steps):
            action = rng.uniform(-1.0, 1.0, spec.action_dim).astype(np.float32)
            *_, terminated, truncated, info = env.step(env_action(action, observe=False))  # nothing rendered
            if "episode_end" in info and info["episode_end"]["error"]:
                return ResetCheck(spec.task.name, episode, error=str(info["episode_end"]["error"]))
            if terminated or truncated:
                break
        fresh = copy_observation(fresh)
        again, info = env.reset(options={"episodes": [episode]})
        if "episode_end" in info:
            return ResetCheck(spec.task.name, episode, error=str(info["episode_end"]["error"]))
        differences = observation_differences(fresh, again)
        if env.start_digest != digest:
            differences["start_digest"] = 1
        return ResetCheck(spec.task.name, episode, differences)
    finally:
        env.close()


def copy_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """A copy of an env observation (the env reuses its buffers)."""
    return {"state": np.array(obs["state"]),
            **({"images": {c: np.array(i) for c, i in obs["images"].items()}} if "images" in obs else {})}


def check_resets(backend: Backend, specs: Sequence[EnvSpec], episode: int = 1, other: int = 0,
                 steps: int = 20) -> Iterator[ResetCheck]:
    """The reset check over ``specs`` (one per task), in order; each task's simulator is closed before the next."""
    for spec in specs:
        yield check_task_reset(backend, spec, episode=episode, other=other, steps=steps)
