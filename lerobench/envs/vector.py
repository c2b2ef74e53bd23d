"""Builds one task's vector env from lazy envs: workers start first, simulators are built inside them."""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array

from lerobench.envs.base import EnvSpec, LazyTaskEnv
from lerobench.envs.batched import add_info, slot_seeds, write_row
from lerobench.envs.workers import WorkerVectorEnv
from lerobench.system import usable_cores

START_METHOD = "forkserver"
"""Workers start from a clean server process: no inherited GL contexts, torch threads or locks."""


def preload_forkserver(backend: str) -> None:
    """Ask the forkserver to import the backend's simulator modules when it starts, so each worker forks ready.

    Only imports: no simulator, renderer or GL context is built before a worker starts. Saves ~0.5 s per worker
    per task for Meta-World. The forkserver starts once per process, with the list set last before it starts; a
    backend used after that (a second suite in one process) has its workers import the modules themselves.
    No state of ours: ``multiprocessing`` keeps the list.
    """
    from lerobench.suite.registry import get_backend

    modules = list(get_backend(backend).preload_modules)
    multiprocessing.set_forkserver_preload(["lerobench.envs.base", *modules])


def _make_env(spec: EnvSpec, render_threads: int | None = None) -> LazyTaskEnv:
    """The lazy env of one worker; it caps Mesa's llvmpipe render threads where it builds its simulator.

    Without the cap N rendering workers each spawn a thread per core (measured on 2 cores, Meta-World
    480x480, camera policy: batch 2 went from 10 to 11 env-steps/s, efficiency 0.52 -> 0.83). A
    user-set ``LP_NUM_THREADS`` wins. Not set here: gymnasium also calls this in the driver (for the spaces).
    """
    from lerobench.envs.template import FromTemplate
    from lerobench.suite.registry import get_backend

    return LazyTaskEnv(spec, FromTemplate(get_backend(spec.backend)), render_threads)


def _done(fn: Any, *args: Any, **kwargs: Any) -> Future:
    """``fn`` run now, as a finished future (its result or its exception)."""
    future: Future = Future()
    try:
        future.set_result(fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
        future.set_exception(exc)
    return future


class InProcessVectorEnv:
    """Envs stepped in this process: no workers to lose, nothing to time out.

    It has the methods of ``WorkerVectorEnv`` (``envs/workers.py``, whose docstring states the per-slot contract
    both keep), so the rollout and executors call them on any vector env. Observations are one batched buffer
    (``envs/batched.py``), row ``i`` written when env ``i`` is reset or stepped, never copied.
    """

    concurrent_steps = 1
    """Rows a step runs at once: one after another in this process."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]):
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observations = create_empty_array(self.single_observation_space, self.num_envs)
        self.closed = False

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env (``seed``: None, an int for env 0 counting up, or one per env)."""
        seeds = slot_seeds(seed, self.num_envs)
        infos: dict[str, Any] = {}
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=seeds[i], options=options)
            write_row(self.observations, obs, i)
            if info:
                infos = add_info(infos, info, i, self.num_envs)
        return self.observations, infos

    def reset_one(self, i: int, seed: int, options: dict[str, Any]) -> Future:
        """Reset env ``i`` now; the finished future holds (obs, info).

        Not on a helper thread: MuJoCo releases the GIL inside a step, but the Python around it (Meta-World's
        arm settling) does not, and a reset thread beside the stepping measured no faster (state-only MT10,
        batch 6: 2,560-2,660 against 2,590-2,890 env-steps/s).
        """
        return _done(self.envs[i].reset, seed=seed, options=options)

    def reset_landed(self, i: int, result: Any) -> tuple[Any, dict[str, Any]]:
        """Take env ``i``'s finished reset: the batched observations (row ``i`` now its first) and its infos."""
        obs, info = result
        write_row(self.observations, obs, i)
        return self.observations, add_info({}, info, i, self.num_envs) if info else {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the envs that are not held."""
        return self.step_within(actions, None)

    def step_within(self, actions: Any, timeout: float | None
                    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the envs that are not held; an in-process simulator cannot be timed out (``timeout`` is ignored)."""
        hold = np.asarray(actions["hold"], dtype=bool) if isinstance(actions, dict) and "hold" in actions else None
        rows = range(self.num_envs) if hold is None else np.flatnonzero(~hold).tolist()
        n = self.num_envs
        rewards, terminations, truncations = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        for i in rows:
            single = {k: v[i] for k, v in actions.items()} if isinstance(actions, dict) else actions[i]
            obs, rewards[i], terminations[i], truncations[i], info = self.envs[i].step(single)
            write_row(self.observations, obs, i)  # only this env's rows changed
            if info:
                infos = add_info(infos, info, i, n)
        return self.observations, rewards, terminations, truncations, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name(*args, **kwargs)`` (or attribute ``name``), in env order."""
        return tuple(attr(*args, **kwargs) if callable(attr := getattr(env, name)) else attr for env in self.envs)

    def failed_slots(self, active: list[int], hung: bool) -> list[int]:
        """A failure in-process cannot be pinned on one slot: every active one."""
        return list(active)

    def close_after_failure(self) -> None:
        """Close the envs (there are no workers to kill)."""
        self.close()

    def close(self) -> None:
        """Close every env (idempotent)."""
        if not self.closed:
            self.closed = True
            for env in self.envs:
                env.close()


def make_vector_env(spec: EnvSpec, batch_size: int, in_process: bool | None = None,
                    share_task: bool = True, render_threads: int | None = None) -> InProcessVectorEnv | WorkerVectorEnv:
    """``batch_size`` lazy envs of one task: in-process for 1, one worker process each otherwise.

    ``in_process=False`` keeps even a single env in a worker process (the last episode of a task
    that runs with workers keeps its crash isolation and timeout). ``render_threads``: each worker's Mesa
    threads, from the run's compute budget (None: the usable cores split among the workers). ``share_task``:
    the run's setting; workers fork from one built scene where the backend allows it and ``template.sharing``
    agrees (``envs/template.py``).

    No env resets itself: the rollout decides which slot starts which episode, so the init-state order never
    depends on which episode finished first. Observations are not copied at every step: an env's rows change
    only when it is stepped or reset, and whatever keeps them (the policy's sub-batch, trajectories, video
    frames) copies them. Both kinds keep the per-slot contract of ``envs/workers.py``.
    """
    in_process = in_process if in_process is not None else batch_size == 1
    threads = None if in_process else worker_render_threads(render_threads, batch_size)
    fns = [functools.partial(_make_env, replace(spec, slot=i), threads) for i in range(batch_size)]
    if in_process:
        return InProcessVectorEnv(fns)
    from lerobench.envs import template
    from lerobench.envs.start import from_lerobench_entry_point
    from lerobench.suite.registry import get_backend

    backend = get_backend(spec.backend)
    if not (backend.task_template and template.sharing(share_task)):
        preload_forkserver(spec.backend)
        with from_lerobench_entry_point():
            return WorkerVectorEnv(fns, context=START_METHOD)
    ctx = template.context_for(spec, template_preload(backend), template.shares_renderer(threads))
    try:
        with from_lerobench_entry_point():
            env = WorkerVectorEnv(fns, context=ctx)
    except BaseException:
        _close_template(ctx)
        raise
    env._template = ctx
    return env


def worker_render_threads(render_threads: int | None, batch_size: int) -> int:
    """Each worker's Mesa threads: the run's budget, else the usable cores split among ``batch_size`` workers."""
    return render_threads or max(1, usable_cores() // batch_size)


def template_preload(backend: Any) -> list[str]:
    """The modules a task's template process imports before it builds the scene."""
    return ["lerobench.envs.base", *backend.preload_modules]


def prewarm_template(spec: EnvSpec, share_task: bool, render_threads: int) -> None:
    """Start building ``spec``'s task template in its own process now, if its workers would fork from one.

    Why: the driver then imports and loads the policy while the scene compiles (LIBERO: 4-6 s each) instead of
    one after the other. ``make_vector_env`` uses it when the run's spec (and its workers' ``render_threads``,
    which decide whether they share the template's renderer) is the same; whether it was is only a matter of
    time, never of outcome (a template never steps).
    """
    from lerobench.envs import template
    from lerobench.suite.registry import get_backend

    backend = get_backend(spec.backend)
    if backend.task_template and template.sharing(share_task):
        template.prewarm(spec, template_preload(backend), template.shares_renderer(render_threads))


def _close_template(ctx: Any) -> None:
    ctx.close()
