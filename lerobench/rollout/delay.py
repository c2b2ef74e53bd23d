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

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobench.errors import ConfigError

MEASURED = "measured"
"""``--delay-steps measured``: each call's delay from its latency (not reproducible; marked so in results.json)."""


@dataclass(frozen=True)
class Delay:
    """The inference delay of a run: ``steps`` (d) control steps, or ``measured`` per call at ``control_fps``."""

    steps: int = 0
    measured: bool = False
    control_fps: float = 20.0

    @property
    def due(self) -> int:
        """Actions left at which a slot asks for its next chunk: d (0 without a delay, and when measured)."""
        return 0 if self.measured else self.steps

    @property
    def on(self) -> bool:
        """A delay applies: the policy batch carries the delay keys (``committed_fields``)."""
        return self.measured or self.steps > 0

    def label(self) -> int | str:
        """What ``results.json`` ``config.delay_steps`` says: d, or ``measured``."""
        return MEASURED if self.measured else self.steps


def parse_delay(value: int | str | None) -> int | str:
    """``--delay-steps`` as given: a whole number >= 0 or ``measured``; a ``ConfigError`` saying so otherwise."""
    if value is None:
        return 0
    if isinstance(value, str):
        text = value.strip().lower()
        if text == MEASURED:
            return MEASURED
        try:
            value = int(text)
        except ValueError:
            sweep = ("; for a sweep against d=0: lerobench robustness --families "
                     + ",".join(f"delay_steps={d.strip()}" for d in text.split(",") if d.strip() not in ("", "0"))
                     if "," in text else "")
            raise ConfigError(f"--delay-steps must be a whole number of control steps >= 0 or 'measured', "
                              f"got {value!r}{sweep}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"--delay-steps must be a whole number of control steps >= 0 or 'measured', got {value!r}")
    return value


def check_horizon(delay: int, execute: int, chunk: int | None, policy: str) -> None:
    """RTC's constraint, before the run where the chunk length is known: ``execute`` >= d and d + ``execute`` <= it."""
    if delay <= 0:
        return
    if execute < delay:
        raise ConfigError(f"--delay-steps {delay} needs an execute horizon of at least {delay} actions per chunk "
                          f"(a new chunk is asked for every {execute} steps, {delay} of which it covers): policy "
                          f"{policy!r} executes {execute} (raise --replan-steps, or lower --delay-steps)")
    if chunk is not None and delay + execute > chunk:
        raise ConfigError(f"--delay-steps {delay} with {execute} actions executed per chunk needs chunks of at "
                          f"least {delay + execute} actions; policy {policy!r} returns {chunk}")


def chunk_too_short(delay: np.ndarray, execute: int, length: int) -> int | None:
    """The first row whose chunk of ``length`` actions cannot cover its delay plus ``execute`` (None: all can)."""
    short = np.flatnonzero(delay + execute > length)
    return int(short[0]) if len(short) else None


def committed_fields(queues: Sequence[Iterable[np.ndarray]], rows: np.ndarray, width: int,
                     action_dim: int) -> dict[str, Any]:
    """The delay keys of the policy batch for ``rows``: what is committed for the steps the call covers.

    ``delay_steps`` int64 (B,): the action of the returned chunk execution starts at (0 on a trial's first call);
    ``committed_actions`` float32 (B, width, action_dim): the actions the env executes meanwhile, in order,
    zero-padded; ``committed_from_previous`` bool (B, width): which of them come from the previous chunk.
    """
    n = len(rows)
    actions = np.zeros((n, width, action_dim), dtype=np.float32)
    known = np.zeros((n, width), dtype=bool)
    delay = np.zeros(n, dtype=np.int64)
    for k, i in enumerate(rows.tolist()):
        queued = list(queues[i])[:width]
        delay[k] = len(queued)
        if queued:
            actions[k, :len(queued)] = np.stack(queued)
            known[k, :len(queued)] = True
    return {"delay_steps": delay, "committed_actions": actions, "committed_from_previous": known}


def measured_steps(latency_s: float, control_fps: float) -> int:
    """The control steps a call of ``latency_s`` seconds covers at ``control_fps``: ⌈latency × rate⌉."""
    return math.ceil(round(latency_s * control_fps, 9))


def delay_summary(delays: Sequence[int], steps: int) -> dict[str, Any]:
    """Per task: the mean and 95th percentile of the calls' delays and the fraction of steps run on stale actions.

    A stale action is one executed while a newer observation was already with the policy (a committed one).
    """
    if not delays:
        return {"delay_steps_mean": None, "delay_steps_p95": None, "stale_action_fraction": None}
    values = np.asarray(delays, dtype=np.float64)
    return {"delay_steps_mean": round(float(values.mean()), 4),
            "delay_steps_p95": float(np.percentile(values, 95, method="higher")),
            "stale_action_fraction": round(min(1.0, float(values.sum()) / steps), 6) if steps else None}
