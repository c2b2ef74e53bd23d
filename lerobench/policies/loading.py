"""Turns a ``--policy`` string into a policy: built-in name, ``module:factory``, ``ws://`` URL or ``lerobot:DIR``."""

from __future__ import annotations

import importlib
from typing import Any

from lerobench.errors import ConfigError, PolicyError, unknown
from lerobench.policies.base import PolicyContext, observation_needs
from lerobench.policies.builtin import BUILTIN
from lerobench.registry import import_module_here


def load_policy(spec: str, context: PolicyContext) -> Any:
    """Build the policy named by ``spec`` for ``context``; validates the result's interface."""
    if spec.startswith(("ws://", "wss://")):
        from lerobench.policies.remote import RemotePolicy  # websockets only when asked for

        policy = RemotePolicy(spec, context)
    elif spec.startswith("lerobot:"):
        from lerobench.policies.lerobot_policy import make_lerobot_policy  # torch + lerobot only when asked for

        policy = make_lerobot_policy(spec, context)
    elif spec in BUILTIN:
        policy = BUILTIN[spec](context)
    elif spec.startswith(("http://", "https://")):
        secure = "s" if spec.startswith("https://") else ""
        raise ConfigError(f"policy {spec!r}: remote policies speak websockets (openpi's protocol): use "
                          f"ws{secure}://{spec.partition('://')[2]}")
    elif ":" in spec:
        policy = _from_factory(spec, context)
    else:
        raise unknown("policy", spec, [*BUILTIN, "module.path:factory", "ws://host:port", "lerobot:<dir>"])
    from lerobench.policies.torch_policy import TorchPolicy, is_torch_module, resolve_device

    if is_torch_module(policy):
        policy = TorchPolicy(policy, resolve_device(context.device))
    return _validated(spec, policy, context)


def _from_factory(spec: str, context: PolicyContext) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = import_module_here(module_name)
    except ImportError as exc:
        raise ConfigError(f"policy {spec!r}: cannot import module {module_name!r} ({exc})") from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))
                  and not isinstance(getattr(module, n), type(importlib))]  # factories, not imported modules
        raise unknown("policy factory", attr, public, where=f"in module {module_name!r}")
    try:
        return factory(context)
    except Exception as exc:  # noqa: BLE001 - a user factory may raise anything; name it
        raise PolicyError(f"policy {spec!r}: factory raised {type(exc).__name__}: {exc}") from exc


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
