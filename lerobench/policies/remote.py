"""``--policy ws://host:port``: a policy that runs in another process, spoken to over openpi's protocol.

Why openpi's protocol: it is what the openpi servers (pi0, pi0-FAST, pi0.5) already speak, so any of
them can be evaluated here unchanged, and ``lerobench serve`` speaks it too. The wire format is in
docs/remote.md; in short the server sends a msgpack metadata map on connect, then answers every
msgpack-numpy observation map with a map holding ``"actions"``; a text frame is a server error.

Two request modes, chosen by the server's metadata:

- ``"batched": true`` (``lerobench serve``): one request per ``select_action`` with arrays of leading
  dimension B, answered by actions (B, A) or (B, T, A).
- otherwise (openpi servers): one request per active env, without a batch dimension, answered by a
  chunk (T, A) or one action (A,). Inactive envs are not sent and get zero actions (ignored anyway).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import numpy as np

from lerobench.errors import ConfigError, MissingDependencyError, PolicyError
from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.msgpack_numpy import SERVE_EXTRA_HINT, DecodeError, packb, unpackb

try:
    from websockets.exceptions import ConnectionClosed, WebSocketException
    from websockets.sync.client import ClientConnection, connect
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(SERVE_EXTRA_HINT) from exc

OPENPI_LIBERO_IMAGES = {"observation/image": "agentview", "observation/wrist_image": "robot0_eye_in_hand"}
"""openpi's LIBERO observation keys and the lerobench camera each one carries."""
OPENPI_LIBERO_STATE = "observation/state"
"""openpi's key for LIBERO's 8-D state (eef pos 3, eef axis-angle 3, gripper qpos 2)."""
LIBERO_STATE_DIM = 8
PER_ENV_KEYS = ("episode", "episode_seed", "episode_start", "trial", "trial_start", "reward", "success", "slot", "call",
                "probe")
"""Batch entries sent along with state and images (plus ``active`` in batched mode)."""
DELAY_KEYS = ("delay_steps", "committed_actions", "committed_from_previous")
"""``--delay-steps``: what the call covers (``lerobench.rollout.delay.committed_fields``), sent when present."""


class RemotePolicy:
    """Client of an openpi-compatible websocket policy server.

    The connection opens on first use, which is the first read of ``observation_needs`` (the server's
    metadata says which cameras it consumes): so ``load_policy`` already fails on an unreachable
    server, before any simulator starts. ``copy.copy`` gives an unconnected twin that opens its own
    connection, because a websocket must not be shared by the task threads of ``--parallel-tasks``.

    A server error (text frame) raises ``PolicyError`` with the server's message and drops the
    connection, since openpi's server closes it after an error; the next call reconnects. A
    connection that drops during a request is reopened once and the request fails with a
    ``PolicyError``: re-sending it could act on a server whose per-episode state was lost.
    """


    def __init__(self, url: str, context: PolicyContext, open_timeout: float = 10.0):
        if context.backend == "libero" and context.state_dim != LIBERO_STATE_DIM:
            raise ConfigError(f"policy {url!r}: openpi's LIBERO key {OPENPI_LIBERO_STATE!r} is 8-D, but suite "
                              f"{context.suite!r} has a {context.state_dim}-D state")
        self.url = url
        self.context = context
        self.open_timeout = open_timeout
        self.server_timing: dict[str, Any] = {}
        """Timing map of the last reply, if the server sends one (openpi and lerobench do)."""
        self._metadata: dict[str, Any] | None = None
        self._conn: ClientConnection | None = None
        self._closer: ExitStack | None = None
        """Closes ``_conn``: websockets wants connections used as context managers."""

    def __copy__(self) -> RemotePolicy:
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)  # metadata and context are read-only: share them
        twin._conn = twin._closer = None
        twin.server_timing = {}
        return twin

    # -- connection ------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """The server's metadata map (connects if this policy never has)."""
        if self._metadata is None:
            self._open()
        assert self._metadata is not None
        return self._metadata

    @property
    def observation_needs(self) -> ObservationNeeds:
        """Cameras from the metadata's ``cameras`` (by default LIBERO's suite cameras, else none).

        Optional ``replan_steps`` (actions executed per returned chunk, else ``--replan-steps``) and
        ``every_frame`` (render at every step) come from the metadata too; ``lerobench serve`` sends
        its policy's. openpi servers send neither: pass ``--replan-steps`` as openpi's clients do.
        """
        cameras = self.metadata.get("cameras")
        if cameras is None:
            cameras = self.context.cameras if self.context.backend == "libero" else ()
        return ObservationNeeds(cameras=tuple(cameras), replan_steps=self.metadata.get("replan_steps"),
                                every_frame=bool(self.metadata.get("every_frame", False)))

    @property
    def traits(self) -> PolicyTraits:
        """Copy-safe and replicable; ``batch_invariant`` and ``stochastic`` are the served policy's (metadata).

        Each copy / episode worker opens its own connection; the server batches or serializes them. Batch
        invariance is checked through a ``lerobench serve`` server (its rows keep per-slot state); any other
        server is a black box whose extra calls might leave traces: its runs record ``unchecked``.
        """
        invariant = self.metadata.get("batch_invariant")
        return PolicyTraits(copy_safe=True, replicable=True, stochastic=bool(self.metadata.get("stochastic", False)),
                            batch_invariant=invariant if isinstance(invariant, bool) else None,
                            checkable=self.metadata.get("server") == "lerobench")

    @property
    def numerics(self) -> dict[str, Any] | None:
        """The served torch policy's numerics (call width, device, torch), as the server reports them."""
        numerics = self.metadata.get("numerics")
        return numerics if isinstance(numerics, dict) else None

    @property
    def batched(self) -> bool:
        """True if the server takes one batched request (``"batched": true`` in its metadata)."""
        return bool(self.metadata.get("batched", False))

    def _open(self) -> ClientConnection:
        with ExitStack() as stack:  # closes the connection unless it is kept (pop_all below)
            try:
                conn = stack.enter_context(
                    connect(self.url, compression=None, max_size=None, open_timeout=self.open_timeout))
            except (OSError, WebSocketException) as exc:
                raise PolicyError(f"cannot connect to policy server {self.url}: {_describe(exc)}. "
                                  f"Is it running (`lerobench serve`, or openpi's serve_policy.py)?") from exc
            try:
                first = conn.recv(timeout=self.open_timeout)
                metadata = first if isinstance(first, str) else unpackb(first)
            except (OSError, ConnectionClosed, DecodeError) as exc:
                raise PolicyError(f"policy server {self.url} sent no valid metadata on connect "
                                  f"({_describe(exc)})") from exc
            if isinstance(metadata, str):
                raise PolicyError(f"policy server {self.url} refused the connection: {metadata}")
            self._metadata = self._checked_metadata(metadata)
            self._conn, self._closer = conn, stack.pop_all()
        return conn

    def _checked_metadata(self, metadata: Any) -> dict[str, Any]:
        if not isinstance(metadata, dict):
            raise PolicyError(f"policy server {self.url}: metadata must be a map, got {type(metadata).__name__}")
        cameras = metadata.get("cameras")
        if cameras is not None and not (isinstance(cameras, list) and all(isinstance(c, str) for c in cameras)):
            raise PolicyError(f"policy server {self.url}: metadata 'cameras' must be a list of names, "
                              f"got {cameras!r}")
        replan = metadata.get("replan_steps")
        if replan is not None and not (isinstance(replan, int) and not isinstance(replan, bool) and replan >= 1):
            raise PolicyError(f"policy server {self.url}: metadata 'replan_steps' must be an integer >= 1, "
                              f"got {replan!r}")
        action_dim = metadata.get("action_dim")
        if action_dim is not None and action_dim != self.context.action_dim:
            raise ConfigError(f"policy server {self.url} returns {action_dim}-D actions, but suite "
                              f"{self.context.suite!r} takes {self.context.action_dim}-D actions")
        self._check_served_suite(metadata)
        self._check_served_images(metadata)
        return metadata

    def _check_served_suite(self, metadata: dict[str, Any]) -> None:
        """Refuse a server built for other tasks (``lerobench serve`` says which), before any episode runs.

        Why: its policy was made for its own suite's tasks; asked about another task it fails mid-run with a
        server-side traceback (``KeyError: 'push-v3'``). openpi servers send none of these keys: not checked.
        """
        served = f"serves suite {metadata.get('suite')!r}" if metadata.get("suite") else "serves"
        backend, state_dim = metadata.get("backend"), metadata.get("state_dim")
        if isinstance(backend, str) and backend != self.context.backend:
            raise ConfigError(f"policy server {self.url} {served} on backend {backend!r}, but suite "
                              f"{self.context.suite!r} runs on {self.context.backend!r}: serve this suite")
        if isinstance(state_dim, int) and state_dim != self.context.state_dim:
            raise ConfigError(f"policy server {self.url} {served} with a {state_dim}-D state, but suite "
                              f"{self.context.suite!r} has a {self.context.state_dim}-D state")
        tasks = metadata.get("tasks")
        if isinstance(tasks, list):
            missing = [t.name for t in self.context.tasks if t.name not in tasks]
            if missing:
                shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
                raise ConfigError(f"policy server {self.url} {served}, which has no task {shown} of suite "
                                  f"{self.context.suite!r}: serve that suite (`lerobench serve --suite "
                                  f"{self.context.suite}`)")

    def _check_served_images(self, metadata: dict[str, Any]) -> None:
        """Refuse a server whose policy reads other images than this run renders: at connect, before any worker.

        Why: the server checks each request's images against its own protocol, so a client on another protocol
        (``lerobench serve --suite libero_spatial``, 256x256, and ``eval --protocol lerobot``, 360x360) learnt it
        only from the first call's error, after its workers had built their scenes. ``lerobench serve`` declares
        its ``cameras``, ``image_size`` and ``protocol``; a server that declares no size (openpi's) is not checked.
        """
        cameras, size = metadata.get("cameras") or [], metadata.get("image_size")
        served = f"policy server {self.url} (suite {metadata.get('suite')!r}, protocol {metadata.get('protocol')!r})"
        offered = self.context.cameras
        unknown = [c for c in cameras if c not in offered]
        if unknown:
            raise ConfigError(f"{served} reads camera {', '.join(unknown)}, which suite {self.context.suite!r} does "
                              f"not render (its cameras: {', '.join(offered) or 'none'})")
        if not cameras or not (isinstance(size, list) and len(size) == 2):
            return
        ours = tuple(self.context.image_size)
        if tuple(size) != ours:
            protocol = metadata.get("protocol")
            raise ConfigError(f"{served} takes {size[0]}x{size[1]} images of {', '.join(cameras)}, but this run "
                              f"renders {ours[0]}x{ours[1]} (suite {self.context.suite!r} at this run's --protocol): "
                              f"evaluate with the server's protocol{f' (--protocol {protocol})' if protocol else ''}"
                              f", or serve this run's (lerobench serve --protocol ...)")

    def close(self) -> None:
        """Close the connection (idempotent); a later call would reconnect."""
        closer, self._closer, self._conn = self._closer, None, None
        if closer is not None:
            closer.close()

    # -- policy protocol -------------------------------------------------------------------------
    def reset(self) -> None:
        """Clear per-run state; the connection stays open (the server keeps no state lerobench owns)."""
        self.server_timing = {}

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Ask the server for actions (B, A) or a chunk (B, T, A) for the batch."""
        n = len(observation["state"])
        if self.batched:
            return self._ask(self._request(observation, task_descriptions, None), n)
        active = np.asarray(observation.get("active", np.ones(n, dtype=bool)), dtype=bool)
        chunks = {int(i): self._ask(self._request(observation, task_descriptions, int(i)), None)
                  for i in np.flatnonzero(active)}
        horizon = min((len(c) for c in chunks.values()), default=1)  # rollout uses <= T anyway
        actions = np.zeros((n, horizon, self.context.action_dim), dtype=np.float32)
        for i, chunk in chunks.items():
            actions[i] = chunk[:horizon]
        return actions

    # -- wire ------------------------------------------------------------------------------------
    def _request(self, observation: dict[str, Any], descriptions: list[str], i: int | None) -> dict[str, Any]:
        """The request map for the whole batch (``i`` None) or for env ``i`` alone."""

        def pick(value: Any) -> Any:
            if i is None:
                return list(value) if isinstance(value, (list, tuple)) else value
            item = value[i]
            return item.item() if isinstance(item, np.generic) else item

        request: dict[str, Any] = {"state": pick(observation["state"]), "task": pick(observation["task"]),
                                   "prompt": pick(descriptions)}
        images = {cam: pick(img) for cam, img in observation.get("images", {}).items()}
        if images:
            request["images"] = images
        for key in (*PER_ENV_KEYS, *DELAY_KEYS, "active") if i is None else (*PER_ENV_KEYS, *DELAY_KEYS):
            if key in observation:
                request[key] = pick(np.asarray(observation[key]))
        if self.context.backend == "libero":
            request[OPENPI_LIBERO_STATE] = request["state"]
            request.update({key: images[cam] for key, cam in OPENPI_LIBERO_IMAGES.items() if cam in images})
        return request

    def _ask(self, request: dict[str, Any], batch: int | None) -> np.ndarray:
        """Send one request; return its actions as float32 (batch, T, A), or (T, A) if ``batch`` is None."""
        payload = packb(request)
        conn = self._conn if self._conn is not None else self._open()
        try:
            conn.send(payload)
            raw = conn.recv()
        except (OSError, ConnectionClosed) as exc:
            self.close()
            try:
                self._open()
                status = "reconnected for the next request"
            except PolicyError as again:
                status = f"reconnecting failed: {again}"
            raise PolicyError(f"connection to policy server {self.url} dropped during a request "
                              f"({_describe(exc)}); {status}") from exc
        if isinstance(raw, str):
            self.close()
            raise PolicyError(f"policy server {self.url} error: {raw.strip()}")
        try:
            reply = unpackb(raw)
        except DecodeError as exc:
            raise PolicyError(f"policy server {self.url}: undecodable reply ({exc})") from exc
        if not isinstance(reply, dict) or "actions" not in reply:
            raise PolicyError(f"policy server {self.url}: reply has no 'actions' "
                              f"(got {sorted(reply) if isinstance(reply, dict) else type(reply).__name__})")
        if isinstance(reply.get("server_timing"), dict):
            self.server_timing = reply["server_timing"]
        return self._actions(reply["actions"], batch)

    def _actions(self, raw: Any, batch: int | None) -> np.ndarray:
        try:
            actions = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise PolicyError(f"policy server {self.url}: actions are not numeric ({exc})") from exc
        lead = () if batch is None else (batch,)
        a = self.context.action_dim
        if actions.ndim == len(lead) + 1:
            actions = np.expand_dims(actions, len(lead))
        if actions.shape[:len(lead)] != lead or actions.ndim != len(lead) + 2 or actions.shape[-1] != a \
                or actions.shape[-2] < 1:
            want = f"({batch}, {a}) or ({batch}, T, {a})" if batch is not None else f"({a},) or (T, {a})"
            raise PolicyError(f"policy server {self.url}: expected actions {want}, got {actions.shape}")
        return actions


def _describe(exc: BaseException) -> str:
    """An exception as text; several socket errors have an empty message."""
    return str(exc) or type(exc).__name__
