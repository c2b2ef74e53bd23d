"""Output streams that outlive their reader: ``lerobench eval ... | head`` finishes the run.

Why: Python ignores SIGPIPE, so once ``head`` has read its lines every later print raised ``BrokenPipeError``
inside the run, which stopped it with exit 1 and left results.json incomplete (a new user saw it). The results
are files; what the terminal shows is a view of them. Once a stream's reader is gone, its writes go to
``/dev/null`` (the descriptor too, so the interpreter's last flush at exit cannot fail either). The command
wraps its own streams (``cli.main``); env workers and episode workers wrap theirs when they start (they inherit
the same pipe: a simulator's plain ``print`` there would otherwise end an episode in an error).
"""

from __future__ import annotations

import os
import sys
from typing import Any


class ReaderGoneTolerant:
    """A text stream whose writes and flushes, once its reader is gone, go nowhere instead of raising."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        """Write ``text``; once the reader is gone, count it as written."""
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._divert()
        return len(text)

    def flush(self) -> None:
        """Flush; once the reader is gone, nothing to do."""
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._divert()

    def _divert(self) -> None:
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): the flag alone serves
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def tolerate_gone_readers() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (once) for this process: the command's, or one of its workers."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, ReaderGoneTolerant):
            setattr(sys, name, ReaderGoneTolerant(stream))
