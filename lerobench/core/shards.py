"""``--shard I/N``: which (task, episode) units of a run one machine evaluates.

Why a round-robin over (task, episode) units (as vla-eval does) rather than over tasks: suites have
fewer tasks than users have machines (Meta-World MT10 on 16 nodes), and tasks differ in cost, so
dealing out single episodes keeps every shard busy for about the same time. An episode is a pure
function of (seed, task, episode), so a shard's episodes are identical to the same episodes of an
unsharded run; ``lerobench merge`` puts the shards back together. All trials of an episode stay in
its unit (they are one episode's adaptation sequence).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lerobench.errors import ConfigError

_SPEC = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``0 <= index < count``); written to results.json as ``"I/N"``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, position: int) -> bool:
        """True if the unit at ``position`` in the run's unit order belongs to this shard."""
        return position % self.count == self.index


def parse_shard(text: str | None) -> Shard | None:
    """Parse ``--shard I/N`` (None or empty: unsharded); bad input is a one-line ``ConfigError``."""
    if text is None or not text.strip():
        return None
    match = _SPEC.fullmatch(text)
    if match is None:
        raise ConfigError(f"--shard must be I/N (shard I of N, e.g. 0/4), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ConfigError(f"--shard {text}: the number of shards N must be >= 1, got {count}")
    if index >= count:
        raise ConfigError(f"--shard {text}: the shard index I must be in 0..{count - 1} (shards count from 0)")
    return Shard(index, count)


def all_units(tasks: Sequence[str], episodes_per_task: int) -> list[tuple[str, int]]:
    """Every (task, episode) unit of a run, in run order: tasks in suite order, then episodes."""
    return [(task, episode) for task in tasks for episode in range(episodes_per_task)]


def shard_units(tasks: Sequence[str], episodes_per_task: int, shard: Shard | None) -> list[tuple[str, int]]:
    """The units ``shard`` evaluates (all of them when unsharded): unit k goes to shard k mod N."""
    units = all_units(tasks, episodes_per_task)
    return units if shard is None else [u for k, u in enumerate(units) if shard.owns(k)]


def shard_episodes(tasks: Sequence[str], task: str, episodes_per_task: int, shard: Shard | None) -> list[int]:
    """The episodes of ``task`` that ``shard`` evaluates (where ``RunPlan.work_units`` computes a task's to-do list)."""
    if shard is None:
        return list(range(episodes_per_task))
    base = list(tasks).index(task) * episodes_per_task
    return [e for e in range(episodes_per_task) if shard.owns(base + e)]
