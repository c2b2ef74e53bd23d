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
    """``state`` (values that differ), a camera (pixels that differ in any channel), ``scene_poses`` (pose values
    a camera would draw differently, where the simulator offers ``scene_poses()``) or ``start_digest`` (1)."""
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
        parts = ", ".join(f"{k}: {v} {'pixels' if k not in ('state', 'start_digest', 'scene_poses') else 'values'}"
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
        fresh, digest, poses = copy_observation(fresh), env.start_digest, env.scene_poses()
        env.reset(options={"episodes": [other]})
        rng = np.random.default_rng([seed, spec.task.index])
        for _ in range(steps):
            action = rng.uniform(-1.0, 1.0, spec.action_dim).astype(np.float32)
            *_, terminated, truncated, info = env.step(env_action(action, observe=False))  # nothing rendered
            if "episode_end" in info and info["episode_end"]["error"]:
                return ResetCheck(spec.task.name, episode, error=str(info["episode_end"]["error"]))
            if terminated or truncated:
                break
        again, info = env.reset(options={"episodes": [episode]})
        if "episode_end" in info:
            return ResetCheck(spec.task.name, episode, error=str(info["episode_end"]["error"]))
        differences = observation_differences(fresh, again)
        if env.start_digest != digest:
            differences["start_digest"] = 1
        again_poses = env.scene_poses()
        if poses is not None and again_poses is not None and poses.tobytes() != again_poses.tobytes():
            differences["scene_poses"] = int(np.count_nonzero(poses != again_poses)) if poses.shape == \
                again_poses.shape else int(poses.size)
        return ResetCheck(spec.task.name, episode, differences)
    finally:
        env.close()


def copy_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """A copy of an env observation (the env reuses its buffers)."""
    return {"state": np.array(obs["state"]),
            **({"images": {c: np.array(i) for c, i in obs["images"].items()}} if "images" in obs else {})}


def reset_specs(suite: Any, image_size: tuple[int, int] | None = None, protocol: str | None = None,
                seed: int = 0, cameras: Sequence[str] | None = None) -> list[EnvSpec]:
    """One ``EnvSpec`` per task of ``suite`` rendering ``cameras`` (default: its protocol's) at ``image_size``."""
    from lerobench.suite.registry import get_backend

    backend = get_backend(suite.backend)
    chosen = suite.protocol(protocol)
    if image_size is not None:
        chosen = replace(chosen, image_size=tuple(image_size))
    read = tuple(chosen.cameras if cameras is None else cameras)
    return [EnvSpec(suite=suite.name, backend=suite.backend, task=task, protocol=chosen, seed=seed,
                    state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=read,
                    backend_options=dict(suite.backend_options)) for task in suite.tasks]


def check_resets(specs: Sequence[EnvSpec], episode: int = 1, other: int = 0, steps: int = 10,
                 processes: int = 1) -> Iterator[ResetCheck]:
    """The reset check over ``specs`` (one per task), in order; each task's simulator is closed before the next.

    ``processes`` > 1 checks tasks in that many worker processes (forkserver; one Mesa render thread each):
    building a task's simulator dominates (LIBERO ~3-10 s, Meta-World ~0.5-1.5 s), so two workers on two
    cores nearly halve the sweep. Backends are looked up by ``spec.backend`` in each process.
    """
    if processes <= 1:
        for spec in specs:
            yield _check_one(spec, episode, other, steps)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from lerobench.envs.start import from_lerobench_entry_point

    context = multiprocessing.get_context("forkserver")
    group = processes * MAX_TASKS_PER_WORKER
    for start in range(0, len(specs), group):  # fresh workers per group (see MAX_TASKS_PER_WORKER)
        with ProcessPoolExecutor(processes, mp_context=context, initializer=_one_render_thread) as pool:
            with from_lerobench_entry_point():  # submit starts the workers (envs/start.py)
                futures = [pool.submit(_check_one, spec, episode, other, steps) for spec in specs[start:start + group]]
            try:
                for future in futures:
                    yield future.result()
            finally:
                for future in futures:
                    future.cancel()


MAX_TASKS_PER_WORKER = 25
"""Workers are replaced after about this many tasks each: built and closed simulators leave memory behind (LIBERO
~2 GB). A new pool per group, not ``max_tasks_per_child``: with it Python 3.11's pool hung once a worker retired
(seen in the libero_90 sweep: no worker left, every future pending)."""


def _one_render_thread() -> None:
    from lerobench import environment

    environment.set_default(environment.RENDER_THREADS, "1")


def _check_one(spec: EnvSpec, episode: int, other: int, steps: int) -> ResetCheck:
    from lerobench.suite.registry import get_backend

    return check_task_reset(get_backend(spec.backend), spec, episode=episode, other=other, steps=steps)


def _cache_file(suite: str, backend: str) -> Any:
    """Where ``check-resets`` keeps its per-task outcomes for ``suite`` on this simulator stack (a cache file)."""
    import hashlib
    import json

    from lerobench.environment import cache_dir
    from lerobench.envs.fingerprint import package_versions
    from lerobench.suite.registry import get_backend

    versions = package_versions(get_backend(backend).packages)
    key = hashlib.sha256(json.dumps({"suite": suite, "backend": backend, "versions": versions},
                                    sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / f"resets-{key}.json"


def remember(suite: str, backend: str, checks: Sequence[ResetCheck]) -> None:
    """Keep the outcome of each checked task (merged with earlier ones) for the runs' ``resets`` claim."""
    from lerobench.core.files import write_cache_json

    path = _cache_file(suite, backend)
    known = recalled(path)
    known.update({c.task: c.describe() if not c.ok else None for c in checks})
    write_cache_json(path, known)  # not writable (a read-only home): runs then record the check as unchecked


def recalled(path: Any) -> dict[str, str | None]:
    """Task -> None (forgets) or why it is stale, from a cache file (empty when there is none)."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def reset_claim(suite: str, backend: str, tasks: Sequence[str]) -> dict[str, Any]:
    """What a run may say about its suite's resets, from what ``check-resets`` found on this simulator stack.

    ``verified``: every task passed; ``failed``: one is stale (``reason`` names it); ``unchecked``: some task never
    checked.
    """
    known = recalled(_cache_file(suite, backend))
    stale = [known[t] for t in tasks if t in known and known[t] is not None]
    missing = [t for t in tasks if t not in known]
    if stale:
        return {"status": "failed", "tasks_checked": len(tasks) - len(missing), "reason": stale[0]}
    if missing:
        return {"status": "unchecked", "tasks_checked": len(tasks) - len(missing),
                "reason": f"{len(missing)} of {len(tasks)} tasks never passed `lerobench check-resets {suite}` "
                          f"on this simulator stack"}
    return {"status": "verified", "tasks_checked": len(tasks), "reason": None}
