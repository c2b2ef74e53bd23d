"""A run's output directory: checked before the launch, made only once it succeeded, held by one writer.

Why each rule: a launch that fails (a policy that does not import, a server that refuses) must not leave an
empty directory behind; two evals started in the same second must not share ``outputs/<suite>/<timestamp>``;
and two processes appending to one ``episodes.jsonl`` would mix two policies' episodes under one
``results.json``. So the directory is created when the run starts (a default name is made unique with an
exclusive ``mkdir``), a lock file is held with ``fcntl.flock`` for the run's life (the kernel drops it when
the process dies, even on ``kill -9``), and a directory this run created is removed again if the run fails
before writing anything of value.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import IO

from lerobench.errors import ConfigError

LOCK_FILE = ".lerobench.lock"
"""Held (``flock``) by the process writing the directory; holds its PID, to name it to a second writer."""
EMPTY_OUTPUTS = ("results.json", "run.json", "eval_info.json", "episodes.jsonl", LOCK_FILE)
"""Files a run writes before its first episode: a directory holding only these (episodes.jsonl empty) holds
nothing of value."""


def check_writable(path: Path) -> None:
    """Refuse an output path that cannot be created or written, without creating anything."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"output directory {path} is not writable ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"output directory {path} is not writable (no write permission on {probe})")


def unique_name(path: Path) -> Path:
    """``path`` itself if free, else ``path-2``, ``path-3``, ... (a default name taken in the same second)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def holds_value(path: Path) -> bool:
    """Whether the directory holds anything a failed run should keep (episodes, a traceback, videos)."""
    for root, _, files in os.walk(path):
        for name in files:
            file = Path(root) / name
            if Path(root) != path or name not in EMPTY_OUTPUTS:
                return True
            if name == "episodes.jsonl" and file.stat().st_size > 0:
                return True
    return False


class OutputDir:
    """The directory of one run, created and locked by ``claim``; ``release`` unlocks (and cleans up a failure)."""

    def __init__(self, path: Path, created: bool, lock: IO[str] | None):
        self.path = path
        self.created = created
        """This run made the directory (so it may remove it again when the run fails with nothing in it)."""
        self._lock = lock

    @classmethod
    def claim(cls, path: Path, unique: bool = False) -> OutputDir:
        """Create ``path`` (a free variant of it when ``unique``) and lock it for this process.

        ``unique``: ``path`` is a default name, so a taken one is not an error: ``path-2`` is used instead, made
        with an exclusive ``mkdir`` so two runs racing for the same name get different directories.
        """
        created = False
        try:
            if unique:
                path.parent.mkdir(parents=True, exist_ok=True)
                while True:
                    path = unique_name(path)
                    try:
                        path.mkdir()
                        created = True
                        break
                    except FileExistsError:
                        continue
            elif not path.exists():
                path.mkdir(parents=True)
                created = True
        except FileExistsError:  # made meanwhile by someone else: ours to share only through the lock below
            pass
        except OSError as exc:
            raise ConfigError(f"output directory {path} is not writable ({exc.strerror or exc})") from exc
        claimed = cls(path, created, None)
        claimed._lock = claimed._acquire()
        return claimed

    def _acquire(self) -> IO[str] | None:
        import fcntl

        try:
            handle = open(self.path / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held for the run's life
        except OSError as exc:
            self.release(failed=True)
            raise ConfigError(f"output directory {self.path} is not writable ({exc.strerror or exc})") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return handle  # a filesystem without flock: run unlocked rather than not at all
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            who = f"PID {holder}" if holder.isdigit() else "another process"
            raise ConfigError(f"output directory {self.path} is being written by another lerobench run ({who}): "
                              f"wait for it to end, or choose another --output") from None
        return handle

    def mark(self) -> None:
        """Write this process's PID into the lock file (after the run was accepted: a refusal changes nothing)."""
        if self._lock is not None:
            self._lock.seek(0)
            self._lock.truncate()
            self._lock.write(f"{os.getpid()}\n")
            self._lock.flush()

    def release(self, failed: bool) -> None:
        """Unlock; after a failure, remove the directory if this run made it and it holds nothing of value."""
        lock, self._lock = self._lock, None
        if lock is not None:
            with contextlib.suppress(OSError):  # a finished run leaves no lock file behind (unlinked while held,
                (self.path / LOCK_FILE).unlink()  # so no other run can take it in between)
            lock.close()  # closing drops the flock
        if failed and self.created and self.path.is_dir() and not holds_value(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
