"""Finds suites (shipped TOML files or a path) and backends (built in or via entry points)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def shipped_suite_paths() -> dict[str, Path]:
    """Map suite name (file stem) to its shipped TOML file."""
    return {p.stem: p for p in sorted(suites_dir().glob("*.toml"))}


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
    raise unknown("suite", name_or_path, shipped)


def list_suites() -> list[Suite]:
    """All shipped suites, validated."""
    return [load_suite(name) for name in shipped_suite_paths()]


def suite_summaries() -> list[dict[str, Any]]:
    """What ``lerobench list`` shows of each shipped suite, read from the TOML tables without building ``Suite``s.

    Validating every suite (tasks, groups, protocols) to print six fields made ``list`` slower than it needs to
    be; ``show`` and ``eval`` validate the suite they use. A shipped file that does not have the shape
    expected here is loaded in full, so its error is the strict parser's.
    """
    import tomllib

    summaries = []
    for name, path in shipped_suite_paths().items():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            summary = {"name": data["name"], "backend": data["backend"], "tasks": len(data["tasks"]),
                       "episodes_per_task": data.get("episodes_per_task", 10),
                       "max_steps": data["protocol"]["max_steps"], "description": data.get("description", "")}
        except (OSError, ValueError, KeyError, TypeError):
            summary = None
        if summary is None or summary["name"] != name:
            suite = load_suite(name)  # raises the precise error
            summary = {"name": suite.name, "backend": suite.backend, "tasks": len(suite.tasks),
                       "episodes_per_task": suite.episodes_per_task, "max_steps": suite.protocol().max_steps,
                       "description": suite.description}
        summaries.append(summary)
    return summaries


def control_fps(suite: Suite) -> float | None:
    """The fps of a suite's videos: its ``control_fps``, else its backend's declared control rate (None: unknown)."""
    if suite.control_fps is not None:
        return suite.control_fps
    rate = get_backend(suite.backend).control_fps
    return float(rate) if rate else None


def backend_names() -> dict[str, str]:
    """Backend name -> 'module:attr', built-ins first, then third-party entry points."""
    from importlib.metadata import entry_points  # 8 ms: only when a backend is looked up, not for `list`

    found = dict(_BUILTIN_BACKENDS)
    for ep in entry_points(group=BACKEND_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def import_module_here(module_name: str) -> Any:
    """Import ``module_name``; if it is not importable, try once more with the working directory on ``sys.path``.

    ``python -m lerobench`` finds a ``my_policy.py`` beside the user, the ``lerobench`` console script does not
    (its ``sys.path[0]`` is the script's folder): without this, the docs' examples (a policy or backend
    module in the current folder) needed ``PYTHONPATH=.``.
    The working directory goes last, so an installed module of the same name still wins.
    """
    import os
    import sys

    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        top = module_name.partition(".")[0]
        if exc.name != top or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module_name)


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
    module = import_module_here(module_name)
    backend = getattr(module, attr)
    from lerobench.envs.base import BACKEND_ATTRIBUTES  # gymnasium: not for `lerobench list`

    missing = [a for a in BACKEND_ATTRIBUTES if not hasattr(backend, a)]
    if missing:
        raise ConfigError(f"backend {name!r} ({target}) does not declare {', '.join(missing)}: subclass "
                          f"lerobench.envs.base.BackendDefaults for the optional facts (docs/adding-a-benchmark.md)")
    return backend
