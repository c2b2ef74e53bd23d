"""The inline executor: one env in this process, batch 1, no worker processes at all.

Cheapest for a single core or a state-only simulator whose step costs less than a round trip to a
worker; also the reference the other executors must match episode for episode.
"""

from __future__ import annotations

from typing import Any

from lerobench.execution.vector import VectorExecutor


class InlineExecutor(VectorExecutor):
    """The vector executor at batch 1, in-process, one task at a time."""

    name = "inline"

    def __init__(self, policy: Any):
        super().__init__(policy, batch=1, parallel=1, in_process=True)

    @classmethod
    def create(cls, plan: Any, choice: Any, policy: Any) -> InlineExecutor:
        """Registry factory (``execution/registry.py``)."""
        return cls(policy)
