"""lerobench: honest, fast success rates for robot policies on real simulators.

``lerobench.evaluate(policy, suite, ...)`` evaluates from Python (a training loop); the rest is the CLI.
Both are imported lazily: ``import lerobench`` stays instant.
"""

from typing import Any

from lerobench._version import __version__

__all__ = ["Results", "TaskResult", "TrackerWarning", "__version__", "evaluate"]


def __getattr__(name: str) -> Any:
    """``evaluate``, ``Results``, ``TaskResult``, ``TrackerWarning`` from ``lerobench.api``, imported on first use."""
    if name in ("evaluate", "Results", "TaskResult", "TrackerWarning"):
        from lerobench import api

        return getattr(api, name)
    raise AttributeError(f"module 'lerobench' has no attribute {name!r}")
