"""Files replaced atomically: a crash leaves the old file or the new one, never a mix.

One place for the temp-file + fsync + ``os.replace`` dance that results.json, merged runs, reports and the
simulator-check cache all need. Standard library only: anything may import it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def json_text(data: Any, **kwargs: Any) -> str:
    """``data`` as JSON, refusing NaN and infinities (which are not JSON and which readers turn into errors)."""
    return json.dumps(data, allow_nan=False, **kwargs)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temp file in the same directory, fsync, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared like episodes.jsonl
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_cache_json(path: Path, data: Any) -> None:
    """Replace a private cache file with ``data`` as JSON; a read-only home only costs the next process a recompute.

    JSON as ``json.dumps`` writes it (infinities kept: the file is lerobench's own, never a result).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data))
    except OSError:
        pass


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace ``path`` atomically with ``data`` as indented JSON (never NaN)."""
    write_text_atomic(path, json_text(data, indent=2) + "\n")
