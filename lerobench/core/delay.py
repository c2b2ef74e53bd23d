"""The inference delay of a run as plain data (``--delay-steps``): parsed, checked, summarised.

What the delay means and how the rollout applies it: ``lerobench.rollout.delay`` and docs/latency.md. The plan
parses it, the task run carries it, the results summarise it; so the value lives here, on the ground floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
        if chunk is not None and 2 * delay > chunk:  # no --replan-steps can help: d + execute >= 2d > chunk
            raise ConfigError(f"--delay-steps {delay} needs chunks of at least {2 * delay} actions (at least {delay} "
                              f"executed while the next is computed, after the {delay} it skips); policy {policy!r} "
                              f"returns {chunk}: lower --delay-steps to at most {chunk // 2}")
        span = f"{delay}..{chunk - delay}" if chunk is not None else f"at least {delay}"
        raise ConfigError(f"--delay-steps {delay} needs an execute horizon of at least {delay} actions per chunk "
                          f"(a new chunk is asked for every {execute} steps, {delay} of which it covers): policy "
                          f"{policy!r} executes {execute} (raise --replan-steps to {span}, or lower --delay-steps)")
    if chunk is not None and delay + execute > chunk:
        raise ConfigError(f"--delay-steps {delay} with {execute} actions executed per chunk needs chunks of at "
                          f"least {delay + execute} actions; policy {policy!r} returns {chunk}")


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
