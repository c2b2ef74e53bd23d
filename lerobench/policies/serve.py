"""``lerobench serve``: any lerobench policy behind openpi's websocket protocol.

Why serve at all: a policy with heavy or conflicting dependencies (a CUDA torch, another Python) can
run in its own environment while ``lerobench eval --policy ws://...`` drives the simulators, and
openpi clients (``openpi_client.WebsocketClientPolicy``) can use lerobench policies unchanged.

One thread per connection (websockets' sync server); each connection gets its own ``copy.copy`` of
the policy, then ``reset()``, so per-episode state never leaks between clients while weights stay
shared. A policy that declares ``PolicyTraits(copy_safe=False)`` serves one connection at a time.

With ``--max-batch N`` (> 1) one shared policy instance answers every connection and concurrent
requests are stacked into one ``select_action`` call (``policies/batching.py`` says how per-env state
stays correct: stable slots, ``batchable = True`` policies only).

A bad request (not msgpack, not a map, wrong shapes, a policy exception) is answered by a text frame
with the reason and the connection stays open, so one bad request does not end an evaluation that
chooses to continue. (openpi's own server closes the connection after an error; clients cope with
both.)
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from lerobench._version import __version__
from lerobench.errors import ConfigError, MissingDependencyError
from lerobench.policies.actions import ActionError, action_chunk
from lerobench.policies.base import PolicyContext, close_policy, policy_numerics, policy_traits
from lerobench.policies.batch import as_batch
from lerobench.policies.batching import Batcher, SlotTable, check_batching
from lerobench.policies.loading import load_policy, observation_needs
from lerobench.policies.msgpack_numpy import SERVE_EXTRA_HINT, DecodeError, packb, unpackb
from lerobench.policies.remote import OPENPI_LIBERO_IMAGES, OPENPI_LIBERO_STATE
from lerobench.policies.torch_policy import follow_torch_threads

try:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import Server, ServerConnection
    from websockets.sync.server import serve as ws_serve
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(SERVE_EXTRA_HINT) from exc

_ALIASES = {cam: key for key, cam in OPENPI_LIBERO_IMAGES.items()}
"""Camera -> openpi LIBERO key also accepted for it, so openpi's LIBERO client can talk to us."""


class RequestError(ValueError):
    """A request the server cannot turn into an observation batch; its text goes back to the client."""


def suite_context(suite: str, protocol: str | None = None, seed: int = 0, device: str = "cpu",
                  call_width: int | None = None) -> PolicyContext:
    """The ``PolicyContext`` a policy gets when evaluated on ``suite`` (shapes from its backend)."""
    from lerobench.suite.registry import get_backend, load_suite

    s = load_suite(suite)
    backend = get_backend(s.backend)
    proto = s.protocol(protocol)
    return PolicyContext(suite=s.name, backend=s.backend, tasks=s.tasks, action_dim=backend.action_dim,
                         state_dim=backend.state_dim, cameras=proto.cameras, image_size=proto.image_size,
                         seed=seed, device=device, call_width=call_width,
                         backend_options=dict(s.backend_options), action_bounds=(float(backend.action_bounds[0]),
                                                                          float(backend.action_bounds[1])),
                         camera_aliases=dict(backend.camera_aliases), partial_states=tuple(backend.partial_states))


class PolicyServer:
    """A bound (listening) server for one policy; ``serve_forever`` answers, ``shutdown`` stops it."""

    def __init__(self, policy_spec: str, context: PolicyContext, host: str = "127.0.0.1", port: int = 8000,
                 on_event: Callable[[str], None] | None = None, max_batch: int = 1, max_wait_ms: float = 5.0,
                 protocol: str | None = None):
        self.policy = load_policy(policy_spec, context)
        check_batching(max_batch, max_wait_ms, self.policy, policy_spec)
        self.context = context
        needs = observation_needs(self.policy)
        if needs.privileged:  # the simulator's state never crosses the websocket: a served run could not feed it
            close_policy(self.policy)
            raise ConfigError(f"policy {policy_spec!r} reads the simulator's privileged state, which a served "
                              "client does not send: evaluate it locally (lerobench eval --policy "
                              f"{policy_spec}), not through lerobench serve")
        self.cameras = needs.cameras
        self.metadata = {
            "server": "lerobench", "version": __version__, "policy": policy_spec, "suite": context.suite,
            "backend": context.backend, "tasks": [t.name for t in context.tasks], "batched": True,
            "action_dim": context.action_dim, "state_dim": context.state_dim,
            "cameras": list(self.cameras), "image_size": list(context.image_size), "protocol": protocol,
            "max_batch": max_batch,
            "every_frame": needs.every_frame, "batch_invariant": policy_traits(self.policy).batch_invariant,
            "stochastic": policy_traits(self.policy).stochastic, "numerics": policy_numerics(self.policy),
        }
        if needs.replan_steps is not None:  # the served policy fixes how much of each chunk is executed
            self.metadata["replan_steps"] = needs.replan_steps
        self._on_event = on_event or (lambda message: None)
        self._batcher: Batcher | None = None
        self._slots = SlotTable()
        self._ids = itertools.count()
        if max_batch > 1:  # one shared instance, reset once; rows keep their state through their slots
            self.policy.reset()
            self._batcher = Batcher(self._infer, self._slots, max_batch, max_wait_ms)
        copy_unsafe = not policy_traits(self.policy).copy_safe
        self._exclusive = threading.Lock() if copy_unsafe and self._batcher is None else None
        self._serving = False
        try:
            self._server: Server = ws_serve(self._handle, host, port, compression=None, max_size=None)
        except OSError as exc:
            if self._batcher is not None:
                self._batcher.close()
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    @property
    def url(self) -> str:
        """``ws://host:port`` actually bound (the port is real even when 0 was asked for)."""
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{f'[{host}]' if ':' in host else host}:{port}"

    def serve_forever(self) -> None:
        """Answer connections until ``shutdown`` (from another thread) or Ctrl-C."""
        self._serving = True
        self._server.serve_forever()

    def shutdown(self) -> None:
        """Stop accepting, close open connections and wait for their threads (idempotent).

        Before ``serve_forever`` only the socket is closed: websockets' shutdown would wait forever
        for a serving loop that never started.
        """
        if self._serving:
            self._server.shutdown()
        else:
            self._server.socket.close()
        if self._batcher is not None:  # after the connections: their pending requests are answered first
            self._batcher.close()

    @property
    def batch_stats(self) -> tuple[int, int]:
        """(policy calls, rows answered) by the batcher so far; (0, 0) when not batching."""
        return (self._batcher.batches, self._batcher.rows) if self._batcher is not None else (0, 0)

    def _infer(self, batch: dict[str, Any], descriptions: list[str]) -> np.ndarray:
        """The shared policy on a stacked batch (called by the batcher thread only)."""
        return _checked_actions(self.policy.select_action(as_batch(batch), descriptions), len(batch["state"]),
                                self.context.action_dim)

    def _handle(self, conn: ServerConnection) -> None:
        peer = "{}:{}".format(*conn.remote_address[:2])
        if self._exclusive is not None and not self._exclusive.acquire(blocking=False):
            conn.send("server busy: this policy declares copy_safe = False and serves one client at a time")
            return
        conn_id = next(self._ids)
        follow_torch_threads()  # this connection's thread may run the policy (unbatched)
        try:
            if self._batcher is not None:
                self._slots.connect(conn_id)
                session = _Session(self.policy, self.context, self.cameras, self._batched_infer(conn_id))
            else:
                policy = self.policy if self._exclusive is not None else copy.copy(self.policy)
                policy.reset()
                session = _Session(policy, self.context, self.cameras)
            conn.send(packb(self.metadata))
            self._on_event(f"{peer} connected")
            for message in conn:
                reply = session.answer(message)
                if isinstance(reply, str):
                    self._on_event(f"{peer}: {reply.splitlines()[0]}")
                conn.send(reply)
            self._on_event(f"{peer} disconnected after {session.requests} requests")
        except ConnectionClosed:
            self._on_event(f"{peer} dropped the connection")
        finally:
            self._slots.disconnect(conn_id)
            if self._exclusive is not None:
                self._exclusive.release()

    def _batched_infer(self, conn_id: int) -> _Infer:
        """One connection's door to the batcher: its rows get their stable slots (new slots start episodes)."""
        assert self._batcher is not None
        batcher = self._batcher

        def infer(batch: dict[str, Any], descriptions: list[str]) -> tuple[np.ndarray, dict[str, float]]:
            slots, fresh = self._slots.rows(conn_id, batch["slot"])
            batch["slot"] = slots
            batch["episode_start"] = batch["episode_start"] | fresh
            return batcher.infer(batch, descriptions)

        return infer


def serve(policy_spec: str, context: PolicyContext, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``policy_spec`` for ``context`` on ``ws://host:port`` until interrupted."""
    server = PolicyServer(policy_spec, context, host, port)
    try:
        server.serve_forever()
    finally:
        server.shutdown()


_Infer = Callable[[dict[str, Any], list[str]], tuple[np.ndarray, dict[str, float]]]
"""Answers one request's observation batch with checked actions (B, T, A) and a timing map."""


def _direct_infer(policy: Any, action_dim: int) -> _Infer:
    """A connection's own policy copy, called in the connection's thread (no batching)."""

    def infer(batch: dict[str, Any], descriptions: list[str]) -> tuple[np.ndarray, dict[str, float]]:
        started = time.perf_counter()
        actions = _checked_actions(policy.select_action(as_batch(batch), descriptions), len(batch["state"]), action_dim)
        return actions, {"infer_ms": 1000 * (time.perf_counter() - started)}

    return infer


class _Session:
    """One connection's request count (the first request starts an episode) and its way to the policy."""

    def __init__(self, policy: Any, context: PolicyContext, cameras: tuple[str, ...], infer: _Infer | None = None):
        self.context = context
        self.cameras = cameras
        self.infer = infer or _direct_infer(policy, context.action_dim)
        self.requests = 0

    def answer(self, message: str | bytes) -> str | bytes:
        """Reply bytes for a good request; the error text for a bad one."""
        try:
            if isinstance(message, str):
                raise RequestError("expected a binary msgpack frame, got a text frame")
            batch, descriptions, single = to_batch(unpackb(message), self.context, self.cameras,
                                                   first=self.requests == 0)
        except (DecodeError, RequestError) as exc:
            return f"bad request: {exc}"
        self.requests += 1
        try:
            actions, timing = self.infer(batch, descriptions)
        except RequestError as exc:
            return f"bad policy output: {exc}"
        except Exception as exc:  # noqa: BLE001 - any policy failure goes back to the client, server lives on
            return f"policy raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        return packb({"actions": actions[0] if single else actions, "server_timing": timing})


def to_batch(request: Any, context: PolicyContext, cameras: tuple[str, ...],
             first: bool = True) -> tuple[dict[str, Any], list[str], bool]:
    """Turn a request into lerobench's observation batch; return it, task descriptions, and single.

    A request is single (openpi style: no batch dimension) if its ``state`` is 1-D, batched if 2-D.
    Missing entries get defaults: ``episode_start`` is True on a connection's first request only
    (``trial_start`` defaults to it, ``trial`` to 0, ``reward`` to 0, ``success`` to False, ``slot`` -- the
    client's id of each row -- to the row's position, ``call`` to 0),
    ``task`` comes from the prompt (or is the suite's only task), the prompt from the task.
    """
    if not isinstance(request, dict):
        raise RequestError(f"a request must be a map of observations, got {type(request).__name__}")
    if "state" not in request and OPENPI_LIBERO_STATE not in request:
        raise RequestError(f"request has no 'state' (keys: {sorted(map(str, request))})")
    state = _numeric(request.get("state", request.get(OPENPI_LIBERO_STATE)), "state")
    if state.ndim not in (1, 2) or state.shape[-1] != context.state_dim:
        raise RequestError(f"'state' must have shape ({context.state_dim},) or (B, {context.state_dim}) for suite "
                           f"{context.suite!r}, got {state.shape}")
    single = state.ndim == 1
    n = 1 if single else len(state)

    def per_env(key: str, default: Any, dtype: type) -> np.ndarray:
        value = _numeric(request.get(key, default), key, dtype)
        value = np.broadcast_to(value, (n,)) if value.ndim == 0 else value
        if value.shape != (n,):
            raise RequestError(f"'{key}' must be a scalar or have shape ({n},), got {value.shape}")
        return np.array(value)

    tasks, prompts = _strings(request, "task", n, single), _strings(request, "prompt", n, single)
    tasks, descriptions = _tasks_and_descriptions(tasks, prompts, context, n)
    batch: dict[str, Any] = {
        "state": state[None] if single else state,
        "task": tasks,
        "episode": per_env("episode", 0, np.int64),
        "episode_seed": per_env("episode_seed", context.seed, np.int64),
        "episode_start": per_env("episode_start", first, bool),
        "active": per_env("active", True, bool),
        "slot": per_env("slot", np.arange(n), np.int64),
        "call": per_env("call", 0, np.int64),
        "probe": per_env("probe", False, bool),
    }
    batch |= {  # --trials: a client that does not send them is running one trial per episode
        "trial": per_env("trial", 0, np.int64),
        "trial_start": per_env("trial_start", batch["episode_start"], bool),
        "reward": per_env("reward", 0.0, np.float32),
        "success": per_env("success", False, bool),
    }
    if "delay_steps" in request:  # --delay-steps: the actions committed for the steps the call covers
        batch["delay_steps"] = per_env("delay_steps", 0, np.int64)
        committed = _numeric(request.get("committed_actions", np.zeros((0, context.action_dim))), "committed_actions")
        known = np.asarray(request.get("committed_from_previous", np.zeros(committed.shape[:-1], bool)), dtype=bool)
        batch["committed_actions"] = committed[None] if single else committed
        batch["committed_from_previous"] = known[None] if single else known
    if cameras:
        batch["images"] = {cam: _image(request, cam, context.image_size, n, single) for cam in cameras}
    return batch, descriptions, single


def _numeric(value: Any, key: str, dtype: type = np.float32) -> np.ndarray:
    try:
        return np.array(value, dtype=dtype)  # a copy: decoded arrays are read-only views
    except (TypeError, ValueError) as exc:
        raise RequestError(f"'{key}' must be numeric ({exc})") from exc


def _strings(request: dict[str, Any], key: str, n: int, single: bool) -> list[str] | None:
    value = request.get(key)
    if value is None:
        return None
    if single and isinstance(value, str):
        return [value]
    if not single and isinstance(value, list) and len(value) == n and all(isinstance(v, str) for v in value):
        return value
    raise RequestError(f"'{key}' must be {'a string' if single else f'a list of {n} strings'}, got {value!r:.80}")


def _tasks_and_descriptions(tasks: list[str] | None, prompts: list[str] | None, context: PolicyContext,
                            n: int) -> tuple[list[str], list[str]]:
    by_description = {t.description: t.name for t in context.tasks}
    by_name = {t.name: t.description for t in context.tasks}
    only = context.tasks[0].name if len(context.tasks) == 1 else ""
    if tasks is None:
        tasks = [by_description.get(p, only) for p in prompts] if prompts is not None else [only] * n
    if prompts is None:
        prompts = [by_name.get(t, t) for t in tasks]
    return tasks, prompts


def _image(request: dict[str, Any], cam: str, size: tuple[int, int], n: int, single: bool) -> np.ndarray:
    images = request.get("images")
    value = images.get(cam) if isinstance(images, dict) else None
    if value is None:
        value = request.get(_ALIASES.get(cam, ""))
    if value is None:
        keys = f"'images' -> '{cam}'" + (f" or '{_ALIASES[cam]}'" if cam in _ALIASES else "")
        raise RequestError(f"the policy consumes camera {cam!r}: send it as {keys}")
    image = np.array(value)
    want = (*size, 3) if single else (n, *size, 3)
    if image.dtype != np.uint8 or image.shape != want:
        raise RequestError(f"camera {cam!r} must be uint8 of shape {want}, got {image.dtype} {image.shape}")
    return image[None] if single else image


def _checked_actions(raw: Any, n: int, action_dim: int) -> np.ndarray:
    """The policy's actions as float32 (B, T, A) (``policies.actions.action_chunk``), or a ``RequestError``."""
    try:
        return action_chunk(raw, n, action_dim, finite=False)
    except ActionError as exc:
        raise RequestError(str(exc)) from exc
