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

With an inference delay of d control steps (``--delay-steps d``, ``lerobench.rollout.delay``) a READY slot
goes DRY when d actions are left, not none; sent with those d committed actions it is COASTING: it steps
them while its call is in flight (the env is not held), READY once the chunk lands, WAITING (held) if it
ran out first. An episode may end while COASTING, or on the committed action that made it WAITING (its
call's answer is then dropped)::

    DRY ──sent with d actions left──▶ COASTING ──answer──▶ READY
                                          └──last committed action──▶ WAITING ──answer──▶ READY

A RESETTING or WAITING slot is held (never stepped); only READY and COASTING slots step; only DRY slots are
sent to the policy. A slot whose episode ended is reset to its next trial, its next episode, or idleness; the reset of
a slot going idle still runs (the env drops its episode), so it is RESETTING until that lands, then IDLE.
"""

from __future__ import annotations

import functools
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
    COASTING = 5
    """In a policy call in flight, stepping the actions committed before it (``--delay-steps``)."""


TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    SlotState.IDLE: frozenset({SlotState.RESETTING}),
    SlotState.RESETTING: frozenset({SlotState.DRY, SlotState.IDLE}),
    SlotState.DRY: frozenset({SlotState.WAITING, SlotState.COASTING, SlotState.RESETTING}),
    SlotState.WAITING: frozenset({SlotState.READY, SlotState.RESETTING}),
    SlotState.READY: frozenset({SlotState.DRY, SlotState.RESETTING}),
    SlotState.COASTING: frozenset({SlotState.READY, SlotState.WAITING, SlotState.RESETTING}),
}
"""The legal moves; anything else is a bug in the rollout (``Slots.move`` raises)."""

_IDLE, _DRY, _WAITING, _READY, _COASTING = (int(SlotState.IDLE), int(SlotState.DRY), int(SlotState.WAITING),
                                             int(SlotState.READY), int(SlotState.COASTING))
"""Plain ints for the per-tick paths: an ``IntEnum`` member lookup costs a microsecond each."""


_STATES = len(SlotState)
_NAMES = [state.name for state in SlotState]


@functools.cache
def _table(states: tuple[int, ...]) -> np.ndarray:
    """A lookup table ``table[state]`` -> in ``states``: masks by one fancy index (``np.isin`` costs ~10x more)."""
    table = np.zeros(_STATES, dtype=bool)
    table[list(states)] = True
    return table


@functools.cache
def _check_transition(expected: tuple[SlotState, ...], to: SlotState) -> None:
    """Raise unless ``to`` may follow every state in ``expected`` (cached: the rollout asks each tick)."""
    for state in expected:
        if to not in TRANSITIONS[state]:
            raise SlotStateError(f"no transition {state.name} -> {to.name} (allowed from {state.name}: "
                                 f"{sorted(s.name for s in TRANSITIONS[state])})")


class SlotStateError(RuntimeError):
    """A slot was moved from a state the transition does not start from: a bug in the rollout, not the user's.

    Like gymnasium's ``AlreadyPendingCallError``: raised at the wrong move, not later as a wrong episode.
    """


class Slots:
    """The only mutable per-slot scheduling state: one ``SlotState`` each, their action queues, dry times.

    Episode facts (which episode, trial, recording) are ``EpisodeBook``'s; this class knows nothing of them.
    """

    def __init__(self, n: int, due: int = 0):
        self.n = n
        self.due = due
        """Actions left at which a READY slot goes DRY (asks for its next chunk): the delay d, 0 without one."""
        self.state = np.full(n, _IDLE, dtype=np.int8)
        self.queues: list[deque[np.ndarray]] = [deque() for _ in range(n)]
        """Each slot's actions left from its last chunk, executed one per step."""
        self.dry_since = np.full(n, np.nan)
        """When each DRY slot not yet sent ran dry (``perf_counter``; NaN otherwise): how long it has waited."""

    def mask(self, *states: SlotState) -> np.ndarray:
        """Boolean mask of the slots in any of ``states``."""
        if len(states) == 1:
            return self.state == int(states[0])
        return _table(tuple(int(s) for s in states))[self.state]

    def all_idle(self) -> bool:
        """Every slot is IDLE (state 0): the rollout is over."""
        return not self.state.any()

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
        _check_transition(expected, to)
        now = self.state[rows]
        wrong = ~_table(tuple(int(s) for s in expected))[now]
        if wrong.any():
            k = int(np.flatnonzero(wrong)[0])
            raise SlotStateError(f"slot {int(rows[k])} is {_NAMES[now[k]]}, expected "
                                 f"{' or '.join(s.name for s in expected)} to move to {to.name}")
        if to is SlotState.RESETTING:
            for i in rows.tolist():
                self.queues[i].clear()
        if to is SlotState.WAITING or to is SlotState.COASTING or to is SlotState.RESETTING:
            self.dry_since[rows] = np.nan
        self.state[rows] = int(to)

    def fill(self, rows: np.ndarray, chunk: np.ndarray, steps: int, start: np.ndarray | int = 0) -> None:
        """WAITING or COASTING -> READY: queue ``steps`` actions of each row's chunk from its action ``start``.

        ``chunk[k]`` is ``rows[k]``'s; ``start`` (per row) skips the actions a delay covered (their steps run the
        committed actions still queued, which stay in front). A row left with ``due`` actions goes DRY at once.
        """
        self.move(rows, SlotState.READY, expect=(SlotState.WAITING, SlotState.COASTING) if self.due else
                  SlotState.WAITING)
        starts = np.broadcast_to(np.asarray(start, dtype=np.int64), (len(rows),))
        for k, i in enumerate(rows.tolist()):
            first = int(starts[k])
            self.queues[i].extend(chunk[k, first:first + steps])
            if self.due and len(self.queues[i]) == self.due:
                self.state[i] = _DRY

    def pop(self, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Take each stepping row's next action into ``out[i]``. Returns the rows that went DRY.

        A READY row goes DRY when ``due`` actions are left (none without a delay); a COASTING row that used its
        last committed action goes WAITING (held until its chunk lands).
        """
        state = self.state[rows]
        wrong = (state != _READY) & (state != _COASTING)
        if wrong.any():
            i = int(rows[np.flatnonzero(wrong)[0]])
            raise SlotStateError(f"slot {i} is {_NAMES[self.state[i]]}, expected READY to step")
        dried = np.zeros(self.n, dtype=bool)
        due = self.due
        for i in rows.tolist():
            queue = self.queues[i]
            out[i] = queue.popleft()
            if len(queue) == due and self.state[i] == _READY:
                dried[i] = True
            elif not queue:  # COASTING, out of committed actions
                self.state[i] = _WAITING
        self.state[dried] = _DRY
        return dried

    def stamp_dry(self, now: float) -> None:
        """Note ``now`` as the moment DRY slots not stamped yet ran dry (what ``waited`` measures from)."""
        self.dry_since[(self.state == _DRY) & np.isnan(self.dry_since)] = now

    def waited(self, rows: np.ndarray, now: float) -> float:
        """How long the longest-waiting of ``rows`` (DRY, stamped) has waited."""
        return now - float(self.dry_since[rows].min())

    def running(self) -> int:
        """Slots with a running episode that is not resetting (DRY, WAITING or READY)."""
        return int(np.count_nonzero(self.state >= _DRY))

    def next_dry(self, rows: np.ndarray) -> int | None:
        """Steps until the first READY one of ``rows`` runs dry (down to ``due`` actions); None without one."""
        return min((len(self.queues[i]) - self.due for i in rows.tolist() if self.state[i] == _READY), default=None)

    def stepping(self) -> np.ndarray:
        """Mask of the slots that step: READY, and COASTING (running committed actions during a call)."""
        return (self.state == _READY) | (self.state == _COASTING)

    def drop_all(self) -> None:
        """Every slot IDLE, unchecked: after a failure, when the vector env is given up."""
        for queue in self.queues:
            queue.clear()
        self.dry_since[:] = np.nan
        self.state[:] = _IDLE


def _indices(rows: Iterable[int] | np.ndarray, n: int) -> np.ndarray:
    """Slot indices from indices or a boolean mask of ``n``."""
    rows = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows))
    if rows.dtype == bool:
        if rows.shape != (n,):
            raise ValueError(f"a slot mask must have shape ({n},), got {rows.shape}")
        return np.flatnonzero(rows)
    return rows.astype(np.int64, copy=False)
