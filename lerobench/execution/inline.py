"""The inline executor: a task's envs stepped in this process, one after another; no worker processes at all.

Cheapest for a single core or a state-only simulator whose step costs less than a round trip to a
worker: the envs of a batch (``--batch-size``) still share each policy call, and while calls are in flight
the envs that have actions keep stepping. Also the reference the other executors must match episode for
episode. No ``--episode-timeout`` (a step in this process cannot be interrupted) and no task threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lerobench.execution.vector import VectorExecutor

if TYPE_CHECKING:
    from lerobench.execution.base import ExecutionChoice
    from lerobench.plan.planner import RunPlan
    from lerobench.policies.base import Policy


class InlineExecutor(VectorExecutor):
    """The vector executor in-process, one task at a time (``batch_size`` envs per task, default 1)."""

    name = "inline"

    def __init__(self, policy: Policy, batch_size: int = 1):
        super().__init__(policy, batch_size=batch_size, parallel=1, in_process=True)

    @classmethod
    def create(cls, plan: RunPlan, choice: ExecutionChoice, policy: Policy) -> InlineExecutor:
        """Registry factory (``core/executors.py``): ``choice.batch_size`` envs per task."""
        return cls(policy, max(1, choice.batch_size))
