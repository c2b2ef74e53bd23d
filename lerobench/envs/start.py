"""Worker processes start from lerobench's own entry point, never by re-running the caller's script.

Why: multiprocessing's forkserver and spawn start methods tell each new process which ``__main__`` to
re-import (``spawn.get_preparation_data``): the caller's script by its path. A training loop written as a
plain script, without an ``if __name__ == "__main__":`` guard, then ran ``lerobench.evaluate`` again inside
every simulator worker, which died with multiprocessing's bootstrapping ``RuntimeError``: every episode an
error and ``evaluate`` returning 0%. While lerobench starts its workers, ``__main__`` reads as
``lerobench.__main__``, a name multiprocessing never re-imports (``spawn._fixup_main_from_name`` skips any
``*.__main__``); the workers need nothing from the caller's script (they build policy and simulator from
the run's plan), so a guarded script, a plain one, a notebook and ``python -c`` start the same workers.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager

ENTRY_POINT = "lerobench.__main__"
"""The module name workers are told the parent runs: multiprocessing skips re-importing any ``*.__main__``."""

_LOCK = threading.RLock()


@contextmanager
def from_lerobench_entry_point() -> Iterator[None]:
    """Start processes inside this block: they do not re-import the caller's ``__main__``.

    Only the parent's ``sys.modules["__main__"]`` is swapped, for the length of the block (process start-up
    reads it once per process), and put back whatever happens.
    """
    with _LOCK:
        original = sys.modules.get("__main__")
        name = getattr(getattr(original, "__spec__", None), "name", None) or ""
        if original is None or name.endswith(".__main__"):
            yield  # ``python -m lerobench`` (or another package's ``__main__``): multiprocessing already skips it
            return
        stand_in = types.ModuleType("__main__")
        stand_in.__spec__ = importlib.machinery.ModuleSpec(ENTRY_POINT, None)
        sys.modules["__main__"] = stand_in
        try:
            yield
        finally:
            sys.modules["__main__"] = original
