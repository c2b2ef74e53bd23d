"""lerobench: honest, fast success rates for robot policies on real simulators.

``lerobench.evaluate(policy, suite, ...)`` is ``lerobench eval`` from Python (a training loop), ``compare`` and
``plan_comparison`` are ``lerobench compare`` and ``lerobench plan``. All are imported lazily: ``import lerobench``
stays instant, and changes nothing process-wide (no environment variable, MKL mode, thread count, warning
filter or signal handler: tests/test_imports.py).
"""

from typing import Any

from lerobench._version import __version__

_API = ("evaluate", "compare", "plan_comparison", "release_simulators", "Results", "TaskResult", "TrackerWarning",
        "EpisodeErrors", "EpisodeErrorWarning", "NumericsWarning")
"""Names served from ``lerobench.api``, imported on first use."""

__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    """The names of ``_API``, from ``lerobench.api`` on first use."""
    if name in _API:
        from lerobench import api

        return getattr(api, name)
    raise AttributeError(f"module 'lerobench' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What a user can call (tab completion, ``dir(lerobench)``), not this module's imports."""
    return sorted(__all__)
