"""lerobench: honest, fast success rates for robot policies on real simulators.

``lerobench.evaluate(policy, suite, ...)`` evaluates from Python (a training loop); the rest is the CLI.
Both are imported lazily: ``import lerobench`` stays instant.
"""

from typing import Any

from lerobench._version import __version__
from lerobench.system import strict_mkl_default

strict_mkl_default()  # before any MKL call: a CPU call's threads may then follow the cores (policies/kernels.py)

__all__ = ["Results", "TaskResult", "TrackerWarning", "__version__", "evaluate"]


def __getattr__(name: str) -> Any:
    """``evaluate``, ``Results``, ``TaskResult``, ``TrackerWarning`` from ``lerobench.api``, imported on first use."""
    if name in ("evaluate", "Results", "TaskResult", "TrackerWarning"):
        from lerobench import api

        return getattr(api, name)
    raise AttributeError(f"module 'lerobench' has no attribute {name!r}")
