"""Builds one task's vector env from lazy envs: workers start first, simulators are built inside them."""

from __future__ import annotations

import functools
import multiprocessing
import queue
import time
from concurrent.futures import Future, ThreadPoolExecutor
from copy import deepcopy
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import iterate

from lerobench.envs.base import EnvSpec, LazyTaskEnv
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


class InProcessVectorEnv(gym.vector.SyncVectorEnv):
    """Envs stepped in this process: no workers to lose, nothing to time out.

    It has the same three worker methods as ``WorkerVectorEnv``, so the rollout and executors call them on any
    vector env instead of probing gymnasium's internals (``processes``, ``parent_pipes``, ``step_wait``).
    """

    step_width = 1
    """Rows a step runs at once: one after another in this process."""

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
        self._env_obs[i] = obs
        _write_row(self._observations, obs, i)
        return self._observations, self._add_info({}, info, i) if info else {}

    def step_within(self, actions: Any, timeout: float | None) -> Any:
        """Step the envs that are not held; an in-process simulator cannot be timed out (``timeout`` is ignored).

        Why not gymnasium's ``step``: it steps every env (a held one only answers its last observation, but
        through the whole wrapper) and, with autoreset disabled, refuses to step an env whose episode ended
        until it is reset, while the rollout holds such slots until their next episode is assigned.
        """
        hold = np.asarray(actions["hold"], dtype=bool) if isinstance(actions, dict) and "hold" in actions else None
        rows = range(self.num_envs) if hold is None else np.flatnonzero(~hold).tolist()
        n = self.num_envs
        rewards, terminations, truncations = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        for i in rows:
            single = {k: v[i] for k, v in actions.items()} if isinstance(actions, dict) else actions[i]
            self._env_obs[i], rewards[i], terminations[i], truncations[i], info = self.envs[i].step(single)
            _write_row(self._observations, self._env_obs[i], i)  # only this env's rows changed
            if info:
                infos = self._add_info(infos, info, i)
        observations = deepcopy(self._observations) if self.copy else self._observations
        return observations, rewards, terminations, truncations, infos

    def failed_slots(self, active: list[int], hung: bool) -> list[int]:
        """A failure in-process cannot be pinned on one slot: every active one."""
        return list(active)

    def close_after_failure(self) -> None:
        """Close the envs (there are no workers to kill)."""
        self.close()


def _write_row(batch: Any, single: Any, i: int) -> None:
    """Write one env's observation into row ``i`` of the batched observation (nested dicts of arrays)."""
    if isinstance(batch, dict):
        for key, value in single.items():
            _write_row(batch[key], value, i)
    else:
        batch[i] = single


class WorkerVectorEnv(gym.vector.AsyncVectorEnv):
    """One worker process per env; the only place lerobench reads gymnasium's worker internals.

    Workers can die (a simulator segfault) or hang (``--episode-timeout``): these methods say which slots'
    workers failed and shut them down, so callers never touch ``processes`` or ``parent_pipes`` themselves.

    Resets of single envs run beside the stepping of the others (``reset_one`` / ``reset_landed``): a reset
    costs tens of steps (Meta-World's settles the arm: ~6 ms against ~0.2 ms a step) and a whole-batch
    ``reset`` would hold every other env for it (state-only MT10 at batch 6: 2,890 against 2,250-2,370
    env-steps/s with the policy free).
    """

    _reset_pool: ThreadPoolExecutor | None = None

    def _background(self, fn: Any, *args: Any) -> Future:
        if self._reset_pool is None:
            self._reset_pool = ThreadPoolExecutor(max_workers=self.num_envs, thread_name_prefix="lerobench-reset")
        return self._reset_pool.submit(fn, *args)

    def _stop_resets(self) -> None:
        pool, self._reset_pool = self._reset_pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def reset_one(self, i: int, seed: int, options: dict[str, Any]) -> Future:
        """Send env ``i`` its reset; a helper thread waits for the answer (the future holds (None, info)).

        Until the future is done env ``i`` must not be stepped (the rollout holds it): its pipe is busy.
        """
        self._assert_is_running()
        self.parent_pipes[i].send(("reset", {"seed": seed, "options": options}))
        return self._background(self._reset_answer, i)

    def _reset_answer(self, i: int) -> Any:
        """The worker's answer; a worker that failed (it stops after reporting) counts as died.

        Not gymnasium's ``_raise_if_errors``: from this thread its coloured log line would reach the
        user's terminal beside the one-line message (on Ctrl-C every worker reports an interrupted reset).
        """
        result, success = self.parent_pipes[i].recv()
        if success:
            return result
        try:
            _, kind, message, _ = self.error_queue.get(timeout=1.0)
        except queue.Empty:
            raise EOFError(f"worker {i} stopped during a reset") from None
        if issubclass(kind, KeyboardInterrupt):  # Ctrl-C reached the worker too: the user's stop, not a failure
            raise KeyboardInterrupt
        raise EOFError(f"worker {i} stopped during a reset ({kind.__name__}: {message})")

    def reset_landed(self, i: int, result: Any) -> tuple[Any, dict[str, Any]]:
        """Take env ``i``'s finished reset: its first observation is in shared memory already."""
        _, info = result
        return self.observations, self._add_info({}, info, i) if info else {}

    _template: Any = None
    """The task's template process the workers forked from (``envs/template.py``), if any."""

    def close(self, **kwargs: Any) -> None:
        """Close the workers, the reset threads (a thread waiting on a closed pipe ends with it), the template."""
        try:
            super().close(**kwargs)
        finally:
            self._stop_resets()
            ctx, self._template = self._template, None
            if ctx is not None:
                from lerobench.envs import template

                template.release(ctx)

    @property
    def step_width(self) -> int:
        """Rows a step runs at once: one per usable core (more only share the cores)."""
        return max(1, min(self.num_envs, usable_cores()))

    _sent: np.ndarray | None = None
    """The slots the last partial step was sent to (None: all); only they can be late to answer."""

    def step_within(self, actions: Any, timeout: float | None) -> Any:
        """``step``, raising ``multiprocessing.TimeoutError`` if the workers do not answer within ``timeout`` s.

        Why held slots are skipped: a held env does nothing but answer its last observation (already in
        shared memory), yet each worker's round trip costs as much as a state-only simulator step. Sending
        only to the stepped slots makes a step's cost follow the rows stepped, so continuous batching can
        step a few envs while the others wait for the policy. Held slots get reward 0 and no infos.
        """
        hold = np.asarray(actions["hold"], dtype=bool) if isinstance(actions, dict) and "hold" in actions else None
        if hold is None or not hold.any() or hold.all() or not self.shared_memory:
            self._sent = None
            if timeout is None:
                return self.step(actions)
            self.step_async(actions)
            return self.step_wait(timeout=timeout)
        self._assert_is_running()
        rows = np.flatnonzero(~hold)
        self._sent = rows
        per_env = list(iterate(self.action_space, actions))
        for i in rows:
            self.parent_pipes[i].send(("step", per_env[i]))
        end = None if timeout is None else time.perf_counter() + timeout
        n = self.num_envs
        rewards, terminations, truncations = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        successes = [True] * n
        for i in rows:
            pipe = self.parent_pipes[i]
            if end is not None and not pipe.poll(max(end - time.perf_counter(), 0)):
                raise multiprocessing.TimeoutError(f"step timed out after {timeout} second(s)")
            result, successes[i] = pipe.recv()
            if successes[i]:
                rewards[i], terminations[i], truncations[i] = result[1], result[2], result[3]
                infos = self._add_info(infos, result[4], int(i))
        self._raise_if_errors(successes)
        observations = deepcopy(self.observations) if self.copy else self.observations
        return observations, rewards, terminations, truncations, infos

    def failed_slots(self, active: list[int], hung: bool) -> list[int]:
        """Which ``active`` slots' workers are dead (or, after a timeout, have not answered); all if unclear."""
        for i in active:
            self.processes[i].join(timeout=0 if hung else 0.5)
        dead = [i for i in active if not self.processes[i].is_alive()]
        if not dead and hung:
            sent = active if self._sent is None else [i for i in active if i in set(self._sent.tolist())]
            dead = [i for i in sent if not self.parent_pipes[i].poll()]
        return dead or list(active)

    def close_after_failure(self) -> None:
        """Kill the workers (dead or hung ones cannot be asked to close), then close the env.

        SIGKILL, not gymnasium's SIGTERM: a hung worker may be stuck in C code or hold SIGTERM in its signal mask,
        and ``close(terminate=True)`` joins every worker without a timeout.
        """
        for proc in self.processes:
            if proc.is_alive():
                proc.kill()
        # The step in flight is abandoned on purpose: without this gymnasium warns "Calling `close` while waiting
        # for a pending call" (raw ANSI colour codes on stderr, under the one-line "interrupted" message) and waits
        # on the dead workers' pipes. Said here, for this env only: no process-wide warning filter.
        self._state = AsyncState.DEFAULT
        try:
            self.close(terminate=True)
        except Exception:  # noqa: BLE001 - closing after a failure: the workers are killed below anyway
            for proc in self.processes:
                if proc.is_alive():
                    proc.kill()
            for proc in self.processes:
                proc.join(timeout=5)


def make_vector_env(spec: EnvSpec, batch_size: int, in_process: bool | None = None,
                    share_task: bool = True, render_threads: int | None = None) -> InProcessVectorEnv | WorkerVectorEnv:
    """``batch_size`` lazy envs of one task: in-process for 1, one worker process each otherwise.

    ``in_process=False`` keeps even a single env in a worker process (the last episode of a task
    that runs with workers keeps its crash isolation and timeout). ``render_threads``: each worker's Mesa
    threads, from the run's compute budget (None: the usable cores split among the workers). ``share_task``:
    the run's setting; workers fork from one built scene where the backend allows it and ``template.sharing``
    agrees (``envs/template.py``).

    Autoreset is disabled: the rollout decides which slot starts which episode, so the init-state
    order never depends on which episode finished first. Observations are not copied at every step
    (``copy=False``): an env's rows change only when it is stepped or reset, and whatever keeps them
    (the policy's sub-batch, trajectories, video frames) copies them. Both kinds have ``step_within``, ``failed_slots``
    and ``close_after_failure`` (``InProcessVectorEnv``, ``WorkerVectorEnv``).
    """
    in_process = in_process if in_process is not None else batch_size == 1
    threads = None if in_process else render_threads or max(1, usable_cores() // batch_size)
    fns = [functools.partial(_make_env, replace(spec, slot=i), threads) for i in range(batch_size)]
    if in_process:
        return InProcessVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED, copy=False)
    from lerobench.envs import template
    from lerobench.envs.start import from_lerobench_entry_point
    from lerobench.suite.registry import get_backend

    backend = get_backend(spec.backend)
    if not (backend.task_template and template.sharing(share_task)):
        preload_forkserver(spec.backend)
        with from_lerobench_entry_point():
            return WorkerVectorEnv(
                fns, shared_memory=True, context=START_METHOD, autoreset_mode=AutoresetMode.DISABLED, copy=False
            )
    ctx = template.context_for(spec, template_preload(backend))
    ctx.register()
    try:
        with from_lerobench_entry_point():
            env = WorkerVectorEnv(
                fns, shared_memory=True, context=ctx.key, autoreset_mode=AutoresetMode.DISABLED, copy=False
            )
    except BaseException:
        _close_template(ctx)
        raise
    env._template = ctx
    return env


def template_preload(backend: Any) -> list[str]:
    """The modules a task's template process imports before it builds the scene."""
    return ["lerobench.envs.base", *backend.preload_modules]


def prewarm_template(spec: EnvSpec, share_task: bool) -> None:
    """Start building ``spec``'s task template in its own process now, if its workers would fork from one.

    Why: the driver then imports and loads the policy while the scene compiles (LIBERO: 4-6 s each) instead of
    one after the other. ``make_vector_env`` uses it when the run's spec is the same; whether it was is only a
    matter of time, never of outcome (a template never steps).
    """
    from lerobench.envs import template
    from lerobench.suite.registry import get_backend

    backend = get_backend(spec.backend)
    if backend.task_template and template.sharing(share_task):
        template.prewarm(spec, template_preload(backend))


def _close_template(ctx: Any) -> None:
    ctx.close()
