"""Which lerobench extra (pyproject.toml's optional dependencies) installs a missing module.

One table for every error that tells a user what to install, so two messages cannot name two different extras.
"""

from __future__ import annotations

EXTRAS = {"torch": "torch", "h5py": "record", "matplotlib": "report", "ray": "ray", "websockets": "serve",
          "msgpack": "serve", "metaworld": "metaworld", "libero": "libero", "gym_pusht": "pusht",
          "gym_aloha": "aloha"}
"""A missing top-level module and the lerobench extra that installs it."""


def pip_install(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'lerobench[extra]'``."""
    return f"pip install 'lerobench[{extra}]'"


def extra_of(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name: its top-level package counts), or None."""
    return EXTRAS.get((module or "").partition(".")[0])
