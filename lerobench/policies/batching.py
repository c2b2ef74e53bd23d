"""Dynamic batching for ``lerobench serve --max-batch N --max-wait-ms T``.

Why: process or Ray workers on many cores each drive a few simulators and send small requests; a
GPU policy answers one request of 32 rows about as fast as one of 1 row. Stacking concurrent
requests from many connections into one ``select_action`` call turns N small forward passes into
one, and splits the actions back to each connection.

The contract that keeps per-env state correct (docs/sharding.md, "Serve batching"):

- One policy instance serves every connection, so it must declare ``PolicyTraits(batchable=True)``: its action
  for a row depends only on that row's observation and on state it keys by the row's **slot**.
- Each (connection, client row id) pair gets a stable slot id for the connection's lifetime, passed as
  ``observation["slot"]`` (int64, (B,)); ``policies.base.row_ids`` returns it. The client's row id is the
  ``slot`` it sends (lerobench sends each env's index: a request holds only the envs that need an action),
  else the row's position. Rows of one request stay contiguous and in order; other rows may come from any
  client.
- A slot new to its connection starts an episode (``episode_start`` forced True), exactly as the
  fresh, reset policy copy an unbatched connection gets. Slots of a closed connection are reused.

Rejected alternative: padding every batch to all connected rows with ``active = False`` for rows
that sent nothing. Policies are free to advance state for inactive rows (an RNG draw, an action
queue pop), which would corrupt the episode of a client that simply had not asked yet.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.base import policy_traits


def check_batching(max_batch: int, max_wait_ms: float, policy: Any, spec: str) -> None:
    """Refuse batching settings (or a policy) that cannot be batched, in one line naming the flag."""
    if max_batch < 1:
        raise ConfigError(f"--max-batch must be >= 1, got {max_batch}")
    if max_wait_ms < 0:
        raise ConfigError(f"--max-wait-ms must be >= 0, got {max_wait_ms}")
    if max_batch > 1 and not policy_traits(policy).batchable:
        raise ConfigError(f"--max-batch {max_batch}: policy {spec!r} does not declare batchable = True, so its "
                          f"per-env state could mix rows of different clients; serve it without --max-batch "
                          f"(one policy copy per connection), or key its state by observation['slot']")


class SlotTable:
    """Stable slot ids per (connection, row); the lowest free ids are reused after a disconnect."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[int] = []
        self._next = 0
        self._owned: dict[int, dict[int, int]] = {}
        """Per connection: the client's row id -> its slot."""

    def connect(self, conn: int) -> None:
        """Register a connection (it counts as a client the batcher may wait for)."""
        with self._lock:
            self._owned.setdefault(conn, {})

    def rows(self, conn: int, keys: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots of ``conn``'s rows with client row ids ``keys`` (int n: 0..n-1), and which are new (episode start).

        Keyed by the client's row id, not by position: a client sends only the envs that need an action, so
        the same env may be row 0 of one request and row 2 of the next.
        """
        keys = np.arange(keys) if isinstance(keys, int) else np.asarray(keys)
        with self._lock:
            owned = self._owned.setdefault(conn, {})
            fresh = np.zeros(len(keys), dtype=bool)
            slots = np.zeros(len(keys), dtype=np.int64)
            for k, key in enumerate(keys.tolist()):
                if key < 0:  # a made-up row of a batch-invariance probe: no slot of its own, fresh every time
                    slots[k], fresh[k] = key, True
                    continue
                if key not in owned:
                    fresh[k] = True
                    if self._free:
                        self._free.sort()
                        owned[key] = self._free.pop(0)
                    else:
                        owned[key] = self._next
                        self._next += 1
                slots[k] = owned[key]
            return slots, fresh

    def disconnect(self, conn: int) -> None:
        """Return a connection's slots to the free list."""
        with self._lock:
            self._free.extend(self._owned.pop(conn, {}).values())

    @property
    def connections(self) -> int:
        """Connections currently open."""
        with self._lock:
            return len(self._owned)


@dataclass
class _Request:
    batch: dict[str, Any]
    descriptions: list[str]
    arrived: float = field(default_factory=time.perf_counter)
    future: Future = field(default_factory=Future)

    @property
    def rows(self) -> int:
        return len(self.batch["state"])


def stack(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate observation batches row-wise (lists are joined, arrays concatenated, images per camera)."""
    out: dict[str, Any] = {}
    for key, first in batches[0].items():
        if key == "images":
            out[key] = {cam: np.concatenate([b[key][cam] for b in batches]) for cam in first}
        elif isinstance(first, list):
            out[key] = [item for b in batches for item in b[key]]
        else:
            out[key] = np.concatenate([b[key] for b in batches])
    return out


class Batcher:
    """One thread that stacks queued requests, calls the policy once, and answers each request's future.

    A batch is sent when it holds ``max_batch`` rows, when every open connection has a request in it
    (waiting longer cannot add rows: each connection sends one request at a time), or ``max_wait_ms``
    after its first request arrived. A request with more rows than ``max_batch`` goes alone.
    """

    def __init__(self, infer: Callable[[dict[str, Any], list[str]], np.ndarray], slots: SlotTable,
                 max_batch: int, max_wait_ms: float):
        self._infer = infer
        self._slots = slots
        self._max_batch = max_batch
        self._max_wait = max_wait_ms / 1000.0
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._carry: _Request | None = None
        self._stopped = False
        self.batches = 0
        self.rows = 0
        self._thread = threading.Thread(target=self._run, name="lerobench-batcher", daemon=True)
        self._thread.start()

    def infer(self, batch: dict[str, Any], descriptions: list[str]) -> tuple[np.ndarray, dict[str, float]]:
        """Block until this request's rows are answered; returns its actions and timings (policy errors re-raise)."""
        request = _Request(batch, descriptions)
        if self._stopped:
            raise RuntimeError("the batcher has stopped (server shutting down)")
        self._queue.put(request)
        return request.future.result()

    def close(self) -> None:
        """Stop the thread after the batch in progress; later requests fail (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self._queue.put(None)
            self._thread.join()
            while not self._queue.empty():
                pending = self._queue.get_nowait()
                if pending is not None:
                    pending.future.set_exception(RuntimeError("server shutting down"))

    def _collect(self) -> list[_Request] | None:
        first = self._carry or self._queue.get()
        self._carry = None
        if first is None:
            return None
        items, rows = [first], first.rows
        deadline = first.arrived + self._max_wait
        while rows < self._max_batch and len(items) < self._slots.connections:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # stop after answering this batch
                break
            if rows + item.rows > self._max_batch:
                self._carry = item
                break
            items.append(item)
            rows += item.rows
        return items

    def _run(self) -> None:
        from lerobench.policies.torch_policy import follow_torch_threads

        follow_torch_threads()
        while (items := self._collect()) is not None:
            started = time.perf_counter()
            try:
                actions = self._infer(stack([r.batch for r in items]), [d for r in items for d in r.descriptions])
            except BaseException as exc:  # noqa: BLE001 - every client of the batch gets the error
                for r in items:
                    r.future.set_exception(exc)
                continue
            infer_ms = 1000 * (time.perf_counter() - started)
            self.batches += 1
            self.rows += len(actions)
            offset = 0
            for r in items:
                timing = {"infer_ms": infer_ms, "queue_ms": 1000 * (started - r.arrived), "batch_rows": len(actions)}
                r.future.set_result((actions[offset:offset + r.rows], timing))
                offset += r.rows
