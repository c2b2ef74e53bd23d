"""``WorkerVectorEnv``: one worker process per env, lerobench's own (issue 47).

Why not a subclass of gymnasium's ``AsyncVectorEnv``: lerobench changes what a step means (held slots are not
sent anything, a step can time out, a single slot resets while the others step, a lost worker is named) and
that needed gymnasium's private members (``_state``, ``_add_info``, ``_raise_if_errors``, ``parent_pipes``,
``error_queue``): a minor release could break it. This env is small and uses gymnasium's public helpers only
(``batch_space``, shared memory, ``iterate``, ``CloudpickleWrapper``).

The per-slot contract, in one place:

- **Worker protocol.** Each worker holds one env (built by its factory *in the worker*) and answers commands on
  its pipe, one at a time: ``("reset", {"seed", "options"})``, ``("step", action)``, ``("call", (name, args,
  kwargs))``, ``("close", None)``. It writes each observation into its row of the shared observation memory and
  answers ``(result, True)``: ``(None, info)`` for a reset, ``(None, reward, terminated, truncated, info)`` for a
  step. On an exception it answers ``((type, message, traceback), False)`` and stops (its env closed).
- **Slots.** Slot ``i`` is worker ``i`` and row ``i`` of ``observations`` (live buffers, not copied: a row
  changes only when its slot is stepped or reset). A slot with a command in flight must not be sent another
  (``reset_one``: until its future is done).
- **Held slots** (``hold`` in the action, ``envs/base.env_action``) are not sent the step: reward 0, not
  terminated, no infos; their row keeps the last observation.
- **Failures.** A worker that dies, fails or does not answer within the timeout raises ``EOFError`` /
  ``multiprocessing.TimeoutError`` (the rollout makes it a ``WorkerFailure``); ``failed_slots`` names the lost
  slots and ``close_after_failure`` kills the workers. Ctrl-C reaching a worker is re-raised as
  ``KeyboardInterrupt``.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import (
    CloudpickleWrapper,
    batch_space,
    create_shared_memory,
    iterate,
    read_from_shared_memory,
    write_to_shared_memory,
)

from lerobench.envs.batched import add_info, slot_seeds
from lerobench.streams import tolerate_gone_readers
from lerobench.system import usable_cores

CLOSE_TIMEOUT_S = 10.0
"""How long ``close`` waits for a worker to answer "close" before it is terminated."""


def _serve(index: int, env_fn: Callable[[], gym.Env], pipe: Connection, parent_pipe: Connection,
           shared: Any) -> None:
    """A worker: build the env, then answer the driver's commands until "close" (the module's protocol)."""
    tolerate_gone_readers()  # `lerobench eval | head`: a simulator's print here must not end an episode
    parent_pipe.close()
    env = env_fn()
    space = env.observation_space
    try:
        while True:
            command, data = pipe.recv()
            if command == "reset":
                observation, info = env.reset(**data)
                write_to_shared_memory(space, index, observation, shared)
                pipe.send(((None, info), True))
            elif command == "step":
                observation, reward, terminated, truncated, info = env.step(data)
                write_to_shared_memory(space, index, observation, shared)
                pipe.send(((None, reward, terminated, truncated, info), True))
            elif command == "call":
                name, args, kwargs = data
                attribute = getattr(env, name)
                pipe.send((attribute(*args, **kwargs) if callable(attribute) else attribute, True))
            elif command == "close":
                pipe.send((None, True))
                return
            else:
                raise ValueError(f"unknown command {command!r}")
    except EOFError:  # the driver went away
        return
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - reported to the driver, then this worker stops
        try:
            pipe.send(((type(exc), str(exc), traceback.format_exc()), False))
        except (BrokenPipeError, OSError):
            pass
    finally:
        env.close()


class WorkerVectorEnv:
    """One worker process per env; the only place lerobench runs simulator workers for a vector env.

    Resets of single envs run beside the stepping of the others (``reset_one`` / ``reset_landed``): a reset
    costs tens of steps (Meta-World's settles the arm: ~6 ms against ~0.2 ms a step) and a whole-batch
    ``reset`` would hold every other env for it (state-only MT10 at batch 6: 2,890 against 2,250-2,370
    env-steps/s with the policy free).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], context: Any):
        """Start a worker per factory on ``context`` (a multiprocessing context or its start method's name).

        One env is made here first for the spaces (``LazyTaskEnv`` builds no simulator for that).
        """
        ctx: Any = multiprocessing.get_context(context) if isinstance(context, str) else context
        probe = env_fns[0]()
        self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        probe.close()
        self.num_envs = len(env_fns)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._shared = create_shared_memory(self.single_observation_space, self.num_envs, ctx=ctx)
        self.observations = read_from_shared_memory(self.single_observation_space, self._shared, self.num_envs)
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        self.closed = False
        self._resets: ThreadPoolExecutor | None = None
        self._unanswered: set[int] = set()
        """The slots the last step was sent to that have not answered yet: only they can be late."""
        self._template: Any = None
        """The task's template process the workers forked from (``envs/template.py``), if any."""
        try:
            for i, fn in enumerate(env_fns):
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_serve, name=f"lerobench-env-{i}", daemon=True,
                                      args=(i, CloudpickleWrapper(fn), child, parent, self._shared))
                self.pipes.append(parent)
                self.processes.append(process)
                process.start()
                child.close()
        except BaseException:
            self.close_after_failure()
            raise

    @property
    def concurrent_steps(self) -> int:
        """Rows a step runs at once: one per usable core (more only share the cores)."""
        return max(1, min(self.num_envs, usable_cores()))

    # -- answers --------------------------------------------------------------------------------------------
    def _answer(self, i: int, doing: str, end: float | None = None) -> Any:
        """Slot ``i``'s answer to its command; a failed or silent worker raises (module docstring)."""
        pipe = self.pipes[i]
        if end is not None and not pipe.poll(max(end - time.perf_counter(), 0)):
            raise multiprocessing.TimeoutError(f"worker {i} did not answer its {doing} in time")
        result, ok = pipe.recv()
        if ok:
            return result
        kind, message, _ = result
        if issubclass(kind, KeyboardInterrupt):  # Ctrl-C reached the worker too: the user's stop, not a failure
            raise KeyboardInterrupt
        raise EOFError(f"worker {i} stopped during a {doing} ({kind.__name__}: {message})")

    # -- resets ---------------------------------------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every slot (``seed``: None, an int for slot 0 counting up, or one per slot); blocking."""
        self._check_open()
        seeds = slot_seeds(seed, self.num_envs)
        for pipe, one in zip(self.pipes, seeds, strict=True):
            pipe.send(("reset", {"seed": one, "options": options}))
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            _, info = self._answer(i, "reset")
            if info:
                infos = add_info(infos, info, i, self.num_envs)
        return self.observations, infos

    def reset_one(self, i: int, seed: int, options: dict[str, Any]) -> Future:
        """Send env ``i`` its reset; a helper thread waits for the answer (the future holds (None, info)).

        Until the future is done env ``i`` must not be stepped (the rollout holds it): its pipe is busy. The
        helper does not print a worker's traceback: from a thread it would reach the user's terminal beside the
        one-line message (on Ctrl-C every worker reports an interrupted reset).
        """
        self._check_open()
        self.pipes[i].send(("reset", {"seed": seed, "options": options}))
        if self._resets is None:
            self._resets = ThreadPoolExecutor(max_workers=self.num_envs, thread_name_prefix="lerobench-reset")
        return self._resets.submit(self._answer, i, "reset")

    def reset_landed(self, i: int, result: Any) -> tuple[Any, dict[str, Any]]:
        """Take env ``i``'s finished reset: its first observation is in shared memory already."""
        _, info = result
        return self.observations, add_info({}, info, i, self.num_envs) if info else {}

    # -- steps ----------------------------------------------------------------------------------------------
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the slots that are not held; blocking."""
        return self.step_within(actions, None)

    def step_within(self, actions: Any, timeout: float | None
                    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the slots not held; raise ``multiprocessing.TimeoutError`` if they do not answer within ``timeout`` s.

        Why held slots are skipped: a held env does nothing but answer its last observation (already in
        shared memory), yet each worker's round trip costs as much as a state-only simulator step. Sending
        only to the stepped slots makes a step's cost follow the rows stepped, so continuous batching can
        step a few envs while the others wait for the policy.
        """
        self._check_open()
        hold = np.asarray(actions["hold"], dtype=bool) if isinstance(actions, dict) and "hold" in actions else None
        rows = list(range(self.num_envs)) if hold is None else np.flatnonzero(~hold).tolist()
        per_env = list(iterate(self.action_space, actions))
        self._unanswered = set(rows)
        for i in rows:
            self.pipes[i].send(("step", per_env[i]))
        end = None if timeout is None else time.perf_counter() + timeout
        n = self.num_envs
        rewards, terminations, truncations = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        try:
            for i in rows:
                _, rewards[i], terminations[i], truncations[i], info = self._answer(i, "step", end)
                self._unanswered.discard(i)
                if info:
                    infos = add_info(infos, info, i, n)
        except multiprocessing.TimeoutError:
            raise multiprocessing.TimeoutError(f"step timed out after {timeout} second(s)") from None
        return self.observations, rewards, terminations, truncations, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name(*args, **kwargs)`` (or attribute ``name``), in slot order."""
        self._check_open()
        for pipe in self.pipes:
            pipe.send(("call", (name, args, kwargs)))
        return tuple(self._answer(i, f"call of {name}") for i in range(self.num_envs))

    # -- failures and closing -------------------------------------------------------------------------------
    def failed_slots(self, active: list[int], hung: bool) -> list[int]:
        """Which ``active`` slots' workers are dead (or, after a timeout, have not answered); all if unclear."""
        for i in active:
            self.processes[i].join(timeout=0 if hung else 0.5)
        dead = [i for i in active if not self.processes[i].is_alive()]
        if not dead and hung:
            dead = [i for i in active if i in self._unanswered and not self.pipes[i].poll()]
        return dead or list(active)

    def close_after_failure(self) -> None:
        """Kill the workers (dead or hung ones cannot be asked to close), then close the env.

        SIGKILL, not SIGTERM: a hung worker may be stuck in C code or hold SIGTERM in its signal mask.
        """
        for process in self.processes:
            if process.is_alive():
                process.kill()
        self.close(terminate=True)

    def close(self, terminate: bool = False) -> None:
        """Close the workers (asked to, or terminated), the reset threads and the template (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            if not terminate:
                self._ask_to_close()
            for process in self.processes:
                if process.is_alive():
                    process.terminate()
            for process in self.processes:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
                    process.join()
            for pipe in self.pipes:
                pipe.close()
        finally:
            resets, self._resets = self._resets, None
            if resets is not None:  # a thread waiting on a closed pipe ends with it
                resets.shutdown(wait=False, cancel_futures=True)
            template, self._template = self._template, None
            if template is not None:
                from lerobench.envs import template as templates

                templates.release(template)

    def _ask_to_close(self) -> None:
        """Send "close" to every live worker and wait for its answer (bounded: a busy one is terminated after)."""
        asked = []
        for i, pipe in enumerate(self.pipes):
            if self.processes[i].is_alive():
                try:
                    pipe.send(("close", None))
                    asked.append(i)
                except (BrokenPipeError, OSError):
                    pass
        end = time.perf_counter() + CLOSE_TIMEOUT_S
        for i in asked:  # its answer, or its end (an answer in flight to a reset thread may come first)
            try:
                while self.pipes[i].poll(max(end - time.perf_counter(), 0)):
                    if self.pipes[i].recv() == (None, True):
                        break
            except (EOFError, OSError):
                pass

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this vector env is closed")

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close(terminate=True)
            except Exception:  # noqa: BLE001, S110 - at interpreter exit the modules it needs may be gone
                pass
