"""The rollout's per-slot state machine: every slot of the vector env is in exactly one named state.

Why named, checked states: the rollout used to read a slot's state off six structures (its episode being
``IDLE``, its queue being empty, a ``waiting`` flag, a pending reset, ...), and a slot stepped while its reset
was still running or sent to the policy twice would only show up as a wrong episode much later. As in
gymnasium's ``AsyncVectorEnv`` (``AlreadyPendingCallError``), a transition names the states it expects and a
wrong one raises at once (``SlotStateError``).

::

    IDLE ──reset──▶ RESETTING ──lands──▶ DRY ──sent──▶ WAITING ──answer──▶ READY ──last action──▶ DRY
                        ▲     └─lands, no episode left─▶ IDLE                 │
                        └──────────────── episode ended (DRY or READY) ◀──────┘

A RESETTING or WAITING slot is held (never stepped); only READY slots step; only DRY slots are sent to the
policy. A slot whose episode ended is reset to its next trial, its next episode, or idleness; the reset of
a slot going idle still runs (the env drops its episode), so it is RESETTING until that lands, then IDLE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from enum import IntEnum

import numpy as np


class SlotState(IntEnum):
    """Where a slot is in its episode's cycle (see the module docstring's diagram)."""

    IDLE = 0
    """No episode: nothing left to run (or before the first reset)."""
    RESETTING = 1
    """Its reset runs (in the background after the first): held until its first observation lands."""
    DRY = 2
    """No queued action: its observation waits to be sent to the policy."""
    WAITING = 3
    """In a policy call in flight: held until its chunk arrives."""
    READY = 4
    """Has queued actions: steps."""


TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    SlotState.IDLE: frozenset({SlotState.RESETTING}),
    SlotState.RESETTING: frozenset({SlotState.DRY, SlotState.IDLE}),
    SlotState.DRY: frozenset({SlotState.WAITING, SlotState.RESETTING}),
    SlotState.WAITING: frozenset({SlotState.READY}),
    SlotState.READY: frozenset({SlotState.DRY, SlotState.RESETTING}),
}
"""The legal moves; anything else is a bug in the rollout (``Slots.move`` raises)."""


class SlotStateError(RuntimeError):
    """A slot was moved from a state the transition does not start from: a bug in the rollout, not the user's.

    Like gymnasium's ``AlreadyPendingCallError``: raised at the wrong move, not later as a wrong episode.
    """


class Slots:
    """The only mutable per-slot scheduling state: one ``SlotState`` each, their action queues, dry times.

    Episode facts (which episode, trial, recording) are ``EpisodeBook``'s; this class knows nothing of them.
    """

    def __init__(self, n: int):
        self.n = n
        self.state = np.full(n, SlotState.IDLE, dtype=np.int8)
        self.queues: list[deque[np.ndarray]] = [deque() for _ in range(n)]
        """Each slot's actions left from its last chunk, executed one per step."""
        self.dry_since = np.full(n, np.nan)
        """When each DRY slot not yet sent ran dry (``perf_counter``; NaN otherwise): how long it has waited."""

    def mask(self, *states: SlotState) -> np.ndarray:
        """Boolean mask of the slots in any of ``states``."""
        if len(states) == 1:
            return self.state == states[0]
        return np.isin(self.state, np.asarray(states, dtype=np.int8))

    def all_idle(self) -> bool:
        """Every slot is IDLE: the rollout is over."""
        return bool((self.state == SlotState.IDLE).all())

    def move(self, rows: Iterable[int] | np.ndarray, to: SlotState, *,
             expect: SlotState | tuple[SlotState, ...]) -> None:
        """Move ``rows`` (indices or a mask) to ``to``; raise ``SlotStateError`` if any is not in ``expect``.

        Entering RESETTING drops the queue (actions planned for the last attempt never leak into the next);
        entering WAITING ends the dry wait.
        """
        rows = _indices(rows, self.n)
        if not len(rows):
            return
        expected = expect if isinstance(expect, tuple) else (expect,)
        for state in expected:
            if to not in TRANSITIONS[state]:
                raise SlotStateError(f"no transition {state.name} -> {to.name} (allowed from {state.name}: "
                                     f"{sorted(s.name for s in TRANSITIONS[state])})")
        now = self.state[rows]
        wrong = ~np.isin(now, np.asarray(expected, dtype=np.int8))
        if wrong.any():
            k = int(np.flatnonzero(wrong)[0])
            raise SlotStateError(f"slot {int(rows[k])} is {SlotState(int(now[k])).name}, expected "
                                 f"{' or '.join(s.name for s in expected)} to move to {to.name}")
        if to == SlotState.RESETTING:
            for i in rows.tolist():
                self.queues[i].clear()
        if to in (SlotState.WAITING, SlotState.RESETTING):
            self.dry_since[rows] = np.nan
        self.state[rows] = to

    def fill(self, rows: np.ndarray, chunk: np.ndarray, steps: int) -> None:
        """WAITING -> READY: queue the first ``steps`` actions of each row's chunk (``chunk[k]`` for ``rows[k]``)."""
        self.move(rows, SlotState.READY, expect=SlotState.WAITING)
        for k, i in enumerate(rows.tolist()):
            self.queues[i].extend(chunk[k, :steps])

    def pop(self, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Take each READY row's next action into ``out[i]``; rows left without one go DRY. Returns those."""
        wrong = self.state[rows] != SlotState.READY
        if wrong.any():
            i = int(rows[np.flatnonzero(wrong)[0]])
            raise SlotStateError(f"slot {i} is {SlotState(int(self.state[i])).name}, expected READY to step")
        dried = np.zeros(self.n, dtype=bool)
        for i in rows.tolist():
            queue = self.queues[i]
            out[i] = queue.popleft()
            if not queue:
                dried[i] = True
        self.state[dried] = SlotState.DRY
        return dried

    def stamp_dry(self, now: float) -> None:
        """Note ``now`` as the moment DRY slots not stamped yet ran dry (what ``waited`` measures from)."""
        self.dry_since[(self.state == SlotState.DRY) & np.isnan(self.dry_since)] = now

    def waited(self, rows: np.ndarray, now: float) -> float:
        """How long the longest-waiting of ``rows`` (DRY, stamped) has waited."""
        return now - float(self.dry_since[rows].min())

    def next_dry(self, rows: np.ndarray) -> int | None:
        """Steps until the first of ``rows`` runs dry (its queue's length); None without rows."""
        return min((len(self.queues[i]) for i in rows.tolist()), default=None)

    def drop_all(self) -> None:
        """Every slot IDLE, unchecked: after a failure, when the vector env is given up."""
        for queue in self.queues:
            queue.clear()
        self.dry_since[:] = np.nan
        self.state[:] = SlotState.IDLE


def _indices(rows: Iterable[int] | np.ndarray, n: int) -> np.ndarray:
    """Slot indices from indices or a boolean mask of ``n``."""
    rows = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows))
    if rows.dtype == bool:
        if rows.shape != (n,):
            raise ValueError(f"a slot mask must have shape ({n},), got {rows.shape}")
        return np.flatnonzero(rows)
    return rows.astype(np.int64, copy=False)
