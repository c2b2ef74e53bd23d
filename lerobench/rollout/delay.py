"""Inference delay counted in control steps (``--delay-steps``): real-time chunking's protocol on the action queues.

Why in control steps: on a robot the world moves on while the policy computes; a harness that paces the
simulator by the wall clock gives numbers that change with the machine. Here a call made at step *t* covers
the next *d* steps: the slot asks for its next chunk when *d* actions of its current one are left (those are
*committed*), keeps stepping them while the call is in flight, and executes the returned chunk from its
action *d* on, for the execute horizon *s*. That is the protocol of RTC's benchmark (Black, Galliker, Levine,
arXiv 2506.07339): a new chunk every *s* steps, its actions *d* … *d* + *s* − 1 executed, which needs
*s* ≥ *d* and *d* + *s* ≤ the chunk's length. The episode is a pure function of (seed, task, episode) at any
batch size or executor: if a chunk is late the slot is held, and a held env's simulated time stands still.

The first call of a trial has nothing committed: the env waits for it (as without a delay) and its chunk runs
from action 0. ``measured`` takes each call's *d* from its wall-clock latency at the suite's control rate
(``measured_steps``), so it is recorded, not reproducible; see docs/latency.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def chunk_too_short(delay: np.ndarray, execute: int, length: int) -> int | None:
    """The first row whose chunk of ``length`` actions cannot cover its delay plus ``execute`` (None: all can)."""
    short = np.flatnonzero(delay + execute > length)
    return int(short[0]) if len(short) else None


def committed_fields(queues: Sequence[Iterable[np.ndarray]], rows: np.ndarray, horizon: int,
                     action_dim: int) -> dict[str, Any]:
    """The delay keys of the policy batch for ``rows``: what is committed for the steps the call covers.

    ``delay_steps`` int64 (B,): the action of the returned chunk execution starts at (0 on a trial's first call);
    ``committed_actions`` float32 (B, horizon, action_dim): the actions the env executes meanwhile, in order,
    zero-padded; ``committed_from_previous`` bool (B, horizon): which of them come from the previous chunk.
    """
    n = len(rows)
    actions = np.zeros((n, horizon, action_dim), dtype=np.float32)
    known = np.zeros((n, horizon), dtype=bool)
    delay = np.zeros(n, dtype=np.int64)
    for k, i in enumerate(rows.tolist()):
        queued = list(queues[i])[:horizon]
        delay[k] = len(queued)
        if queued:
            actions[k, :len(queued)] = np.stack(queued)
            known[k, :len(queued)] = True
    return {"delay_steps": delay, "committed_actions": actions, "committed_from_previous": known}

