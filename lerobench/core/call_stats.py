"""Policy-call statistics of a run: counted by the rollout, written by the sink (plain data, no stage)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CALL_STATS_KEYS = ("policy_calls", "rows_per_call", "policy_busy_s", "policy_busy_fraction", "call_latency_p95_s",
                   "implied_delay_steps_mean", "implied_delay_steps_p95", "probe_calls", "probe_rows", "probe_s",
                   "call_shape")
"""What ``CallStats.summary`` adds to ``results.json`` ``overall``: like the timings, a property of the session."""


def model_calls(rows: int, width: int) -> tuple[int, int]:
    """(model calls, padding rows) that a request of ``rows`` rows costs at call width ``width`` (0: unpadded)."""
    if rows <= 0:
        return 0, 0
    if width <= 0:
        return 1, 0
    calls = -(-rows // width)
    return calls, calls * width - rows


@dataclass
class CallStats:
    """Policy calls of a run, for ``results.json`` ``overall``: where the time went (thread-safe).

    ``calls``/``rows``/``busy_s`` are the recording policy's calls only; the batch-invariance check's probe calls
    (on twins of the policy, ``lerobench.policies.invariance``) are counted apart in ``probe_*``. For a torch
    policy (a call width) also what its fixed call shape cost: the model calls the requests were split into and
    the padding rows computed beside the real ones (``call_shape``).
    """

    calls: int = 0
    rows: int = 0
    busy_s: float = 0.0
    control_fps: float | None = None
    """The suite's control rate: each call's latency as the delay it implies (``--delay-steps``, docs/latency.md)."""
    latencies: list[float] = field(default_factory=list, repr=False)
    model_calls: int = 0
    padded_rows: int = 0
    width: int | None = None
    probe_calls: int = 0
    probe_rows: int = 0
    probe_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_probes(self, calls: int, rows: int, seconds: float) -> None:
        """Count the check's probe calls (not the recording policy's)."""
        with self._lock:
            self.probe_calls += calls
            self.probe_rows += rows
            self.probe_s += seconds

    def add(self, rows: int, seconds: float, width: int | None = None) -> None:
        """Count one call of ``rows`` rows that took ``seconds`` (``width``: the policy's call width, if any)."""
        with self._lock:
            self.calls += 1
            self.rows += rows
            self.busy_s += seconds
            self.latencies.append(seconds)
            if width is not None:
                split, padded = model_calls(rows, width)
                self.model_calls += split
                self.padded_rows += padded
                self.width = width

    def call_shape(self) -> dict[str, Any] | None:
        """What the call width cost this run: model calls per request and the padding's share of computed rows.

        On a CPU a model call costs about in proportion to its rows, so ``padding_share`` is also about the
        share of ``policy_busy_s`` spent on padding; ``model_calls_per_request`` > 1 means requests were split
        (one-row calls run side by side on the call pool, padded calls one per ``width`` rows).
        """
        if self.width is None or not self.calls:
            return None
        computed = self.rows + self.padded_rows
        return {"call_width": self.width, "model_calls": self.model_calls, "padded_rows": self.padded_rows,
                "model_calls_per_request": round(self.model_calls / self.calls, 3),
                "padding_share": round(self.padded_rows / computed, 4) if computed else 0.0,
                "padding_s_estimate": round(self.busy_s * self.padded_rows / computed, 3) if computed else 0.0}

    def summary(self, elapsed_s: float | None) -> dict[str, Any]:
        """``policy_calls``, ``rows_per_call``, ``policy_busy_s`` and the busy fraction of ``elapsed_s``.

        All None when no call was counted here (the policy ran in worker processes, which keep their own).
        """
        with self._lock:
            calls, rows, busy, latencies = self.calls, self.rows, self.busy_s, np.array(self.latencies)
            probes = {"probe_calls": self.probe_calls, "probe_rows": self.probe_rows,
                      "probe_s": round(self.probe_s, 3), "call_shape": self.call_shape()}
        if not calls:
            return dict.fromkeys(CALL_STATS_KEYS)
        implied = np.ceil(np.round(latencies * self.control_fps, 9)) if self.control_fps else None
        return {"policy_calls": calls, "rows_per_call": round(rows / calls, 3) if calls else None,
                "policy_busy_s": round(busy, 3),
                "policy_busy_fraction": round(busy / elapsed_s, 4) if calls and elapsed_s else None,
                "call_latency_p95_s": round(float(np.percentile(latencies, 95)), 5),
                "implied_delay_steps_mean": round(float(implied.mean()), 3) if implied is not None else None,
                "implied_delay_steps_p95": float(np.percentile(implied, 95, method="higher"))
                if implied is not None else None, **probes}
