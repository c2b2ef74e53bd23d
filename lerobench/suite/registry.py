"""Finds suites (shipped TOML files or a path) and backends (built in or via entry points)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lerobench.errors import ConfigError, unknown

if TYPE_CHECKING:
    from lerobench.envs.base import Backend
    from lerobench.suite.config import Suite

BACKEND_GROUP = "lerobench.backends"
_BUILTIN_BACKENDS = {
    "metaworld": "lerobench.envs.metaworld:BACKEND",
    "libero": "lerobench.envs.libero:BACKEND",
    "pusht": "lerobench.envs.pusht:BACKEND",
    "aloha": "lerobench.envs.aloha:BACKEND",
}


BACKEND_ATTRIBUTES = ("name", "extra", "state_dim", "action_dim", "n_init_states", "max_episode_steps",
                      "unrendered_step_ms", "control_fps", "preload_modules", "packages", "missing_assets",
                      "check_suite", "check_installed", "make_simulator",
                      "task_template", "make_template", "from_template", "dataset_layout", "dataset_attrs",
                      "action_bounds", "perturbations", "experts",
                      "camera_aliases", "partial_states")
"""Everything a ``Backend`` declares (``get_backend`` checks them once; the protocol is ``envs.base.Backend``)."""

def suites_dir() -> Path:
    """Directory of shipped suites: inside the wheel, or ``suites/`` of a source checkout."""
    package = Path(__file__).resolve().parent.parent  # lerobench/
    packaged = package / "suites"
    if packaged.is_dir():
        return packaged
    return package.parent / "suites"


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
    from lerobench.suite.config import load_suite_file  # dataclasses built at import: not for `lerobench list`

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
    error = unknown("suite", name_or_path, main_suite_names(), limit=50)
    raise type(error)(f"{error} Suite families: lerobench list --family libero-pro.")


def suite_loader_beside(name_or_path: str) -> Callable[[str], Suite]:
    """``load_suite`` for the suites named after a base suite: beside a base TOML file first, then shipped.

    Where ``name_or_path`` is a TOML file, a ``<name>.toml`` in its folder comes first (``robustness --base
    my/libero_object.toml`` finds ``my/libero_object_swap.toml`` and its ``_control``: families edited as the
    base was, e.g. to a policy's image size); other names are the shipped suites.

    Raises:
        ConfigError: A file beside the base whose ``name`` differs from its file name (which one is meant?).
    """
    from lerobench.suite.config import load_suite_file

    path = Path(name_or_path)
    folder = path.parent if path.suffix == ".toml" and path.is_file() else None

    def load(name: str) -> Suite:
        beside = folder / f"{name}.toml" if folder is not None else None
        if beside is None or not beside.is_file():
            return load_suite(name)
        suite = load_suite_file(beside)
        if suite.name != name:
            raise ConfigError(f"{beside}: field 'name': must equal the file name {name!r} (a suite beside "
                              f"{path.name} is found by its file name)")
        return suite

    return load


def list_suites(family: str | None = None) -> list[Suite]:
    """The shipped suites, validated: the main ones, or those of ``family`` (``all``: every one)."""
    if family is None:
        return [load_suite(name) for name in main_suite_names()]
    suites = [load_suite(name) for name in shipped_suite_paths()]
    return suites if family == "all" else [s for s in suites if s.family == family]


def suite_summaries(family: str | None = None) -> list[dict[str, Any]]:
    """What ``lerobench list`` shows of the shipped suites (the main ones, or ``family``'s; ``all``: every one).

    Read from the TOML tables without building ``Suite``s.

    Validating every suite (tasks, groups, protocols) to print six fields made ``list`` slower than it needs to
    be; ``show`` and ``eval`` validate the suite they use. A shipped file that does not have the shape
    expected here is loaded in full, so its error is the strict parser's.
    """
    import tomllib

    summaries = []
    main = set(main_suite_names())
    for name, path in shipped_suite_paths().items():
        if family is None and name not in main:
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            if family not in (None, "all") and data.get("family") != family:
                continue
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


def backend_experts() -> dict[str, tuple[str, str]]:
    """Every built-in backend's own policies: ``--policy`` name -> (backend name, ``"module:factory"``).

    Read from the backends' ``experts`` (their modules import no simulator), so a policy made for one benchmark is
    registered by its backend alone, and a suite of another backend can say where it runs.
    """
    found: dict[str, tuple[str, str]] = {}
    for name in _BUILTIN_BACKENDS:
        for policy, target in get_backend(name).experts.items():
            found.setdefault(policy, (name, target))
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
    if ":" in name:  # "package.module:OBJECT" names a backend without registering an entry point
        target = name
    elif name in _BUILTIN_BACKENDS:  # built-ins win over entry points: no scan of the installed packages (25 ms)
        target = _BUILTIN_BACKENDS[name]
    elif name in (names := backend_names()):
        target = names[name]
    else:
        raise unknown("backend", name, names)
    module_name, _, attr = target.partition(":")
    module = import_module_here(module_name)
    backend = getattr(module, attr)

    missing = [a for a in BACKEND_ATTRIBUTES if not hasattr(backend, a)]
    if missing:
        raise ConfigError(f"backend {name!r} ({target}) does not declare {', '.join(missing)}: subclass "
                          f"lerobench.envs.base.BackendDefaults for the optional facts (docs/adding-a-benchmark.md)")
    return backend
