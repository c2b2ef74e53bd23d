"""Handing work to a background writer thread (videos, Rerun recordings) without hanging on a dead one."""

from __future__ import annotations

import queue
import threading
from typing import Any

from lerobench.errors import RunError


def put_while_alive(work: queue.Queue[Any], item: Any, thread: threading.Thread, what: str) -> None:
    """Block until ``work`` has room (backpressure); the timeout only lets a dead ``thread`` be noticed.

    Why: a plain blocking ``put`` on a full queue whose consumer died waits forever; this raises a ``RunError``
    naming ``what`` stopped instead.
    """
    while True:
        try:
            work.put(item, timeout=0.5)
            return
        except queue.Full:
            if not thread.is_alive():
                raise RunError(f"the {what} thread stopped unexpectedly") from None
