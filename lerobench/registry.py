"""Finds suites (shipped TOML files or a path) and backends (built in or via entry points)."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from lerobench.config import Suite, load_suite_file
from lerobench.errors import ConfigError, unknown

if TYPE_CHECKING:
    from lerobench.envs.base import Backend

BACKEND_GROUP = "lerobench.backends"
_BUILTIN_BACKENDS = {
    "metaworld": "lerobench.envs.metaworld:BACKEND",
    "libero": "lerobench.envs.libero:BACKEND",
}


def suites_dir() -> Path:
    """Directory of shipped suites: inside the wheel, or ``suites/`` of a source checkout."""
    packaged = Path(__file__).parent / "suites"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "suites"


FAMILY_DIRS = ("libero_pro",)
"""Subfolders of ``suites/`` holding a family of suites (``lerobench list --family``), kept out of the main list."""


def shipped_suite_paths() -> dict[str, Path]:
    """Map suite name (file stem) to its shipped TOML file: the main suites, then each family's."""
    root = suites_dir()
    paths = {p.stem: p for p in sorted(root.glob("*.toml"))}
    for folder in FAMILY_DIRS:
        paths.update({p.stem: p for p in sorted((root / folder).glob("*.toml")) if p.stem not in paths})
    return paths


def main_suite_names() -> list[str]:
    """Names of the shipped suites outside a family folder (what ``lerobench list`` shows by default)."""
    return sorted(p.stem for p in suites_dir().glob("*.toml"))


def load_suite(name_or_path: str) -> Suite:
    """Resolve ``--suite``: a shipped suite name, or a path to a TOML file."""
    shipped = shipped_suite_paths()
    if name_or_path in shipped:
        suite = load_suite_file(shipped[name_or_path])
        if suite.name != name_or_path:
            raise ConfigError(f"{shipped[name_or_path]}: field 'name': must equal the file name {name_or_path!r}")
        return suite
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ConfigError(f"suite file {path} does not exist")
        return load_suite_file(path)
    # Close matches among every suite; otherwise the main list (the LIBERO-PRO family alone has 50 names).
    close = unknown("suite", name_or_path, shipped)
    if "Did you mean" in str(close):
        raise close
    error = unknown("suite", name_or_path, main_suite_names())
    raise type(error)(f"{error} Suite families: lerobench list --family libero-pro.")


def list_suites(family: str | None = None) -> list[Suite]:
    """The shipped suites, validated: the main ones, or those of ``family`` (``all``: every one)."""
    if family is None:
        return [load_suite(name) for name in main_suite_names()]
    suites = [load_suite(name) for name in shipped_suite_paths()]
    return suites if family == "all" else [s for s in suites if s.family == family]


def backend_names() -> dict[str, str]:
    """Backend name -> 'module:attr', built-ins first, then third-party entry points."""
    found = dict(_BUILTIN_BACKENDS)
    for ep in entry_points(group=BACKEND_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def get_backend(name: str) -> Backend:
    """Import a backend by registered name or ``module:attr`` (its simulator import stays lazy)."""
    names = backend_names()
    if ":" in name:  # "package.module:OBJECT" names a backend without registering an entry point
        target = name
    elif name in names:
        target = names[name]
    else:
        raise unknown("backend", name, names)
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr)
