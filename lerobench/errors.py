"""One error family, raised deep down and turned into one red line + exit code by the CLI."""

from __future__ import annotations

import difflib
import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

STOP_REQUESTED = threading.Event()
"""Set by the CLI's signal handlers the moment Ctrl-C or SIGTERM arrives (its exception may land a little later):
a failure seen meanwhile (workers stopped by the same signal) is a consequence of the stop, not a crash."""


HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGALRM}
"""The signals whose handlers may raise a stop: Ctrl-C, SIGTERM, and SIGALRM (a stop re-raised after an import)."""


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM (``HELD_SIGNALS``) until the block ends: their exception cannot split it.

    Why: the CLI's handlers raise in the main thread between any two bytecodes. Landing between "count this
    episode" and "queue its line", results.json counted an episode that episodes.jsonl never got. The handlers
    are swapped for one that only notes the signal, and the noted signals are raised again after the block, so
    the real handlers run right after it. Blocking the signal in this thread is not enough: the kernel hands a
    process-wide signal to any thread that does not block it (the writer's, a pool's), and Python then runs the
    handler in the main thread all the same, inside the block (CI saw it with pytest-xdist's I/O thread).
    Other threads never run Python signal handlers, so there is nothing to hold there.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)

    held = {s: signal.getsignal(s) for s in HELD_SIGNALS}
    held = {s: h for s, h in held.items() if h is not None}  # None: a handler set outside Python, left alone
    for s in held:
        signal.signal(s, note)
    try:
        yield
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(noted):  # each once, in arrival order, to the handler that was there before
            signal.raise_signal(signum)


class LerobenchError(Exception):
    """Base of every error a user can act on; ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class ConfigError(LerobenchError):
    """A suite file or a command-line setting is invalid."""


class UnknownNameError(LerobenchError):
    """A suite, task, backend, protocol or policy name does not exist."""


class MissingDependencyError(LerobenchError):
    """A backend or policy needs an optional extra that is not installed."""


class PolicyError(LerobenchError):
    """A policy raised or returned an invalid action; the run stops but finished results are kept.

    ``failure`` (type, message, task, episode of what the policy raised) goes to results.json and
    ``traceback_text`` to the run directory; both are set where it is raised, so they survive the trip from a
    worker process or Ray task (pickled through ``__reduce__``), where ``__cause__`` would not.
    """

    exit_code = 1

    def __init__(self, message: str, failure: dict[str, Any] | None = None, traceback_text: str | None = None):
        super().__init__(message)
        self.failure = failure
        self.traceback_text = traceback_text
        self.traceback_file: str | None = None
        """Where the run saved ``traceback_text`` (set by the sink), for the CLI's one line."""

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.failure, self.traceback_text)


class RunError(LerobenchError):
    """The evaluation could not continue (worker failure that cannot be contained, writer failure)."""

    exit_code = 1


class ResumeError(LerobenchError):
    """``--resume`` was asked for a directory whose run does not match this one."""


class SimulatorDriftError(LerobenchError):
    """The simulator failed its golden-state check: this stack does not reproduce the pinned simulation."""


class RendererError(LerobenchError):
    """The run renders images (videos, camera observations) and no offscreen renderer works here."""


class CompareError(LerobenchError):
    """Two runs cannot be compared (missing files, different suites, protocols or step limits)."""


def did_you_mean(name: str, valid: Iterable[str], limit: int = 20) -> str:
    """Return a ' Did you mean ...?' hint (or a list of valid names) for an unknown ``name``.

    Candidates are ranked by similarity, best first: a name containing what was typed ("bowl", "drawer")
    counts as close, so a fragment of a 70-character LIBERO name still finds it.
    """
    valid = list(dict.fromkeys(valid))
    if not valid:
        return ""
    wanted = name.lower()

    def score(candidate: str) -> float:
        ratio = difflib.SequenceMatcher(None, wanted, candidate.lower()).ratio()
        return ratio + (1.0 if wanted and wanted in candidate.lower() else 0.0)

    ranked = sorted(valid, key=lambda c: (-score(c), c))
    close = [c for c in ranked[:3] if score(c) >= 0.5]
    if close:
        return " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    # a complete list up to ``limit``; beyond it, say how many are not shown rather than "..."
    shown = ", ".join(valid[:limit])  # in the order given (a suite's task order), as `lerobench show` lists them
    more = f", and {len(valid) - limit} more" if len(valid) > limit else ""
    return f" Valid names: {shown}{more}."


def unknown(kind: str, name: str, valid: Iterable[str], where: str = "", limit: int = 20) -> UnknownNameError:
    """Build the standard 'unknown X' error with a did-you-mean hint; ``where`` follows the name ("in suite 'x'").

    ``limit``: the most valid names listed when none is close (the main suites are all listed: 50).
    """
    place = f" {where}" if where else ""
    return UnknownNameError(f"unknown {kind} {name!r}{place}.{did_you_mean(name, valid, limit)}")
