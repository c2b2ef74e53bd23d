"""How long a policy call may take, and which calls are waiting now (for the progress line).

Why: a policy that never answers (a deadlock, a server that stopped replying) used to leave a run printing
"0 env-steps/s" for ever; ``--episode-timeout`` covers only the simulator. Each call now has a deadline: the
``--policy-timeout`` given, or one derived from the run's own call times with a generous floor. Past a notice
threshold the progress line names the waiting call; at the deadline the rollout raises ``PolicyError`` naming the
call, the run stops, and every finished episode stays in ``episodes.jsonl`` for ``--resume``.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

FIRST_CALL_S = 600.0
"""A task's first call may load, compile or warm up a model (a JIT, a remote server's first batch): 10 minutes."""
FLOOR_S = 120.0
"""No later call's derived deadline is shorter than this."""
SLOWEST_FACTOR = 20.0
"""A later call's derived deadline: this many times the slowest call measured so far in the task (at least FLOOR_S)."""
NOTICE_FLOOR_S = 10.0
"""A call is named on the progress line once it has waited this long and five times its slowest peer."""


@dataclass(frozen=True)
class CallDeadline:
    """The deadline rule of a run: ``--policy-timeout`` when given, else derived from measured call times."""

    fixed_s: float | None = None

    def limit_s(self, slowest_s: float | None) -> float:
        """Seconds the next call may take, given the slowest call so far (None: no call has returned yet)."""
        if self.fixed_s is not None:
            return self.fixed_s
        if slowest_s is None:
            return FIRST_CALL_S
        return max(FLOOR_S, SLOWEST_FACTOR * slowest_s)

    def notice_s(self, slowest_s: float | None) -> float:
        """Seconds after which a waiting call is named on the progress line (always before its deadline)."""
        usual = NOTICE_FLOOR_S if slowest_s is None else max(NOTICE_FLOOR_S, 5 * slowest_s)
        return min(usual, 0.5 * self.limit_s(slowest_s))

    def source(self) -> str:
        """How the deadline was set, for messages."""
        return ("--policy-timeout" if self.fixed_s is not None else
                f"derived: {SLOWEST_FACTOR:g}x the task's slowest call, at least {FLOOR_S:g} s, {FIRST_CALL_S:g} s "
                "for its first; --policy-timeout sets it")


@dataclass(frozen=True)
class WaitingCall:
    """One policy call in flight: what it is for and when it must have answered."""

    what: str
    started: float
    notice_s: float
    limit_s: float


class WaitingCalls:
    """The policy calls in flight in this process (every rollout registers its own), for the progress line."""

    def __init__(self) -> None:
        self._calls: dict[int, WaitingCall] = {}
        self._relayed: dict[object, str] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()

    def relay(self, source: object, notice: str | None) -> None:
        """A worker process's notice (``notice()`` there), or None once its calls are on time again."""
        with self._lock:
            if notice is None:
                self._relayed.pop(source, None)
            else:
                self._relayed[source] = notice

    def add(self, call: WaitingCall) -> int:
        """Register a call; returns its key for ``remove``."""
        with self._lock:
            key = next(self._keys)
            self._calls[key] = call
            return key

    def remove(self, key: int) -> None:
        """The call answered (or its rollout ended)."""
        with self._lock:
            self._calls.pop(key, None)

    def notice(self, now: float | None = None) -> str | None:
        """The longest-waiting call past its notice threshold, in words; None when every call is on time."""
        now = time.perf_counter() if now is None else now
        with self._lock:
            late = [c for c in self._calls.values() if now - c.started >= c.notice_s]
            relayed = next(iter(self._relayed.values()), None)
        if not late:
            return relayed
        call = min(late, key=lambda c: c.started)
        return (f"waiting {now - call.started:.0f} s for the policy: {call.what} "
                f"(the run ends at {call.limit_s:.0f} s)")


WAITING = WaitingCalls()
"""This process's waiting calls: the rollouts add theirs, the progress reporters read them."""
