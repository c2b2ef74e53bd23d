"""Real-time chunking's prefix for LeRobot's flow policies under ``--delay-steps`` (pi0, pi0.5, SmolVLA).

Why: under a delay of *d* steps a new chunk starts where the env will be after the *d* committed actions of
the previous one. RTC (Black, Galliker, Levine, arXiv 2506.07339) makes the new chunk continue that prefix by
guiding the flow's denoising towards it: LeRobot 0.4.4's pi0, pi0.5 and SmolVLA take
``predict_action_chunk(batch, inference_delay=d, prev_chunk_left_over=...)`` when their config's ``rtc_config``
is enabled. ``prev_chunk_left_over`` is what LeRobot's own RTC loop passes (its ``ActionQueue.get_left_over``):
the previous chunk in the model's normalised action space, from the first committed action to its end; the
first *d* are held (weight 1), the rest pulled with weights that fall to 0 over the config's execution horizon.

Each row keeps its last chunk as the model returned it (before un-normalising) and the action its execution
began at. A chunk begun at *b* and executed for *s* steps (the replan steps) asks for the next when *d* of its
actions are left: those are actions *b* + *s* − *d* … *b* + *s* − 1, the committed ones, so the leftover starts
there. The rollout sends the committed actions too (``committed_actions``); the adapter checks that the
leftover's first *d*, un-normalised, are those actions, so a leftover that is not what the env executes is an
error, never a silent drift. A row's first call of a trial has nothing committed (*d* = 0) and no prefix.

``inference_delay`` is one number per call in LeRobot, so rows that differ in *d* or in leftover length go to
separate calls of the same width (``prefix_groups``): a row's chunk depends only on its own inputs, at any
batch size. ``--delay-steps measured`` knows *d* only after the call, so it runs without a prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobench.policies.width import PADDING_SLOT

RTC_PREFIX = "rtc: inference_delay and prev_chunk_left_over (the previous chunk from its committed actions)"
"""``results.json`` ``config.committed_prefix`` of a run that hands RTC its prefix."""


def rtc_enabled(config: Any) -> bool:
    """Whether a LeRobot policy config takes RTC's prefix (``rtc_config.enabled``; LeRobot's flow policies)."""
    rtc = getattr(config, "rtc_config", None)
    return bool(rtc is not None and getattr(rtc, "enabled", False))


@dataclass
class PrefixMemory:
    """Each row's last chunk (model space) and the action its execution began at, keyed by the row's slot."""

    executed: int
    """Actions executed of each chunk (the run's replan steps)."""
    chunks: dict[int, tuple[Any, int]] = field(default_factory=dict)

    def leftover(self, slot: int, delay: int) -> Any | None:
        """The previous chunk from its first committed action on, for a call with ``delay`` committed actions."""
        entry = self.chunks.get(slot)
        if entry is None or delay <= 0:
            return None
        chunk, began = entry
        start = began + self.executed - delay
        if start < 0 or start + delay > len(chunk):
            raise RuntimeError(f"RTC prefix: row {slot}'s previous chunk ({len(chunk)} actions, begun at {began}) "
                               f"cannot hold {delay} committed actions after {self.executed} executed")
        return chunk[start:]

    def remember(self, slot: int, chunk: Any, delay: int) -> None:
        """Keep ``slot``'s new chunk; its execution begins at action ``delay`` (0 on a trial's first call)."""
        if slot != PADDING_SLOT:
            self.chunks[slot] = (chunk, max(0, delay))


def prefix_groups(slots: list[int], delays: np.ndarray,
                  leftovers: list[Any | None]) -> dict[tuple[int, int], list[int]]:
    """Rows by (delay, leftover length): one model call per group; (0, 0) for rows without a prefix."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, slot in enumerate(slots):
        if slot == PADDING_SLOT:
            continue
        left = leftovers[i]
        key = (int(delays[i]), len(left)) if left is not None else (0, 0)
        groups.setdefault(key, []).append(i)
    return groups


def check_committed(leftover_actions: np.ndarray, committed: np.ndarray, slot: int, delay: int) -> None:
    """The leftover's first ``delay`` actions, un-normalised, must be the actions the env executes meanwhile."""
    if not np.allclose(leftover_actions[:delay], committed[:delay], rtol=1e-5, atol=1e-6):
        worst = float(np.max(np.abs(leftover_actions[:delay] - committed[:delay])))
        raise RuntimeError(f"RTC prefix: row {slot}'s leftover chunk does not start with its {delay} committed "
                           f"actions (largest difference {worst:.3g}); the prefix would not be what the env runs")
