"""Turns a ``--policy`` string into a policy: built-in name, ``module:factory``, ``ws://`` URL or ``lerobot:DIR``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from lerobench.errors import ConfigError, LerobenchError, PolicyError, unknown
from lerobench.policies.base import ObservationNeeds, PolicyContext, observation_needs
from lerobench.policies.builtin import BUILTIN
from lerobench.suite.registry import import_module_here


def load_policy(spec: str, context: PolicyContext) -> Any:
    """Build the policy named by ``spec`` for ``context``; validates the result's interface."""
    if spec.startswith(("ws://", "wss://")):
        from lerobench.policies.remote import RemotePolicy  # websockets only when asked for

        policy: Any = RemotePolicy(spec, context)
    elif spec.startswith("lerobot:"):
        from lerobench.policies.lerobot_policy import make_lerobot_policy  # torch + lerobot only when asked for

        policy = make_lerobot_policy(spec, context)
    elif spec in BUILTIN:
        policy = BUILTIN[spec](context)
    elif ":" not in spec and (factory := expert_factory(spec, context)) is not None:
        policy = factory(context)
    elif spec.startswith(("http://", "https://")):
        secure = "s" if spec.startswith("https://") else ""
        raise ConfigError(f"policy {spec!r}: remote policies speak websockets (openpi's protocol): use "
                          f"ws{secure}://{spec.partition('://')[2]}")
    elif ":" in spec:
        policy = _from_factory(spec, context)
    else:
        raise unknown("policy", spec, [*policy_names(context.backend), "module.path:factory", "ws://host:port",
                                       "lerobot:<dir>"])
    from lerobench.policies.torch_policy import TorchPolicy, is_torch_module, resolve_device

    if is_torch_module(policy):
        policy = TorchPolicy(policy, resolve_device(context.device), context.call_width)
    return _validated(spec, policy, context)


def policy_names(backend: str) -> list[str]:
    """The ``--policy`` names that run on ``backend``'s suites: the baselines, then the backend's own experts."""
    from lerobench.suite.registry import get_backend

    return [*BUILTIN, *get_backend(backend).experts]


def expert_factory(spec: str, context: PolicyContext) -> Any:
    """The factory of expert ``spec`` for the suite's backend (``Backend.experts``); None if no backend has one.

    An expert of another benchmark is refused naming where it runs: its observations would not be that benchmark's.
    """
    from lerobench.suite.registry import backend_experts, get_backend

    target = get_backend(context.backend).experts.get(spec)
    if target is None:
        owner = backend_experts().get(spec)
        if owner is None:
            return None
        raise ConfigError(f"policy {spec!r} only runs on {owner[0]} suites; suite {context.suite!r} uses backend "
                          f"{context.backend!r} (its policies: {', '.join(policy_names(context.backend))})")
    module_name, _, attr = target.partition(":")
    factory = getattr(import_module_here(module_name), attr, None)
    if factory is None:
        raise ConfigError(f"policy {spec!r}: backend {context.backend!r} names {target!r}, which does not exist")
    return factory


def expected_needs(spec: str, context: PolicyContext) -> ObservationNeeds | None:
    """What a policy that is slow to load will read, known before loading it (None: not known cheaply).

    A run starts building its simulators meanwhile (``execution/runner.py``); the loaded policy's own needs decide
    what the run renders, so a wrong answer costs time, never a different episode.
    """
    if spec.startswith("lerobot:"):
        from lerobench.policies.lerobot_policy import declared_needs

        return declared_needs(spec, context)
    return None


def is_file_spec(spec: str) -> bool:
    """``./my_policy.py:make_policy`` or ``/abs/path.py:f``: a factory in a Python file, not a module path."""
    module, sep, _ = spec.rpartition(":")
    return bool(sep) and "://" not in spec and (module.endswith(".py") or "/" in module or os.sep in module)


def absolute_spec(spec: str) -> str:
    """A file spec with its path made absolute; any other spec unchanged.

    Why: worker processes and Ray tasks (other working directories) must load the same file.
    """
    if not is_file_spec(spec) or spec.startswith("lerobot:"):
        return spec
    path, _, attr = spec.rpartition(":")
    return f"{Path(path).expanduser().resolve()}:{attr}"


def _import_file(spec: str, path_text: str) -> Any:
    """Import the Python file ``path_text`` as a module (its folder on ``sys.path``, for its own imports)."""
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"policy {spec!r}: no such file {path}")
    name = f"lerobench_policy_{path.stem}_{abs(hash(str(path))):x}"  # unique: two files may share a stem
    if name in sys.modules:
        return sys.modules[name]
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name while it runs
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _where(exc: BaseException) -> str:
    """``file:line`` of a syntax error, or of the deepest frame in user code (not importlib's) that raised."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
              and "/importlib/" not in f.filename and f.filename != __file__]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def prepare_policy(policy: Any, context: PolicyContext, name: str) -> Any:
    """An in-memory policy (``lerobench.evaluate``) ready to run: torch modules wrapped, the interface checked.

    Nothing is copied: a ``torch.nn.Module`` is wrapped in ``TorchPolicy`` (moved to ``context.device``, eval
    mode, fixed call width), anything following the ``Policy`` protocol is used as it is.
    """
    from lerobench.policies.torch_policy import TorchPolicy, is_torch_module, resolve_device

    if is_torch_module(policy):
        return _validated(name, TorchPolicy(policy, resolve_device(context.device), context.call_width), context)
    return _validated(name, policy, context)


def _from_factory(spec: str, context: PolicyContext) -> Any:
    if is_file_spec(spec):
        module_name, _, attr = spec.rpartition(":")
    else:
        module_name, _, attr = spec.partition(":")
    try:
        module = _import_file(spec, module_name) if is_file_spec(spec) else import_module_here(module_name)
    except LerobenchError:
        raise
    except ModuleNotFoundError as exc:
        top = exc.name is not None and (module_name == exc.name or module_name.startswith(f"{exc.name}."))
        if top and not is_file_spec(spec):
            raise ConfigError(f"policy {spec!r}: cannot import module {module_name!r} ({exc})") from exc
        raise ConfigError(f"policy {spec!r}: importing {module_name!r} failed at {_where(exc)}: "
                          f"{type(exc).__name__}: {exc}{extra_hint(exc)}") from exc
    except SyntaxError as exc:
        raise ConfigError(f"policy {spec!r}: {type(exc).__name__} at {_where(exc)}: {exc.msg}") from exc
    except Exception as exc:  # noqa: BLE001 - a module raising at import: where, in one line
        raise ConfigError(f"policy {spec!r}: importing {module_name!r} failed at {_where(exc)}: "
                          f"{type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))
                  and not isinstance(getattr(module, n), type(importlib))]  # factories, not imported modules
        raise unknown("policy factory", attr, public, where=f"in module {module_name!r}")
    try:
        return factory(context)
    except Exception as exc:  # noqa: BLE001 - a user factory may raise anything; name it
        raise PolicyError(f"policy {spec!r}: factory raised {type(exc).__name__}: {exc}{extra_hint(exc)}") from exc


def extra_hint(exc: BaseException) -> str:
    """``"; pip install 'lerobench[torch]' installs it"`` when ``exc`` is a module an extra installs, else ``""``.

    Why: the README's set-up command installs the simulators only; a torch policy or ``--record`` then fails on a
    bare ``No module named 'torch'``.
    """
    from lerobench.extras import extra_of, pip_install

    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    extra = extra_of(name)
    if extra is not None:
        return f"; {pip_install(extra)} installs it"
    if (name or "").partition(".")[0] == "lerobot":
        return "; install LeRobot beside lerobench (docs/lerobot.md: the tested versions)"
    return ""


def _validated(spec: str, policy: Any, context: PolicyContext) -> Any:
    for method in ("reset", "select_action"):
        if not callable(getattr(policy, method, None)):
            raise ConfigError(f"policy {spec!r}: the object returned has no {method}() method")
    needs = observation_needs(policy)
    unknown_cams = [c for c in needs.cameras if c not in context.cameras]
    if unknown_cams:
        raise ConfigError(
            f"policy {spec!r} consumes cameras {unknown_cams}, but suite {context.suite!r} offers "
            f"{list(context.cameras) or 'no cameras'}"
        )
    return policy
