"""How many intra-op threads a CPU model call may use: the counts checked on the policy itself to keep a row's bits.

Why: a row must come out the same whether it was computed alone at batch 1 (where all the cores could work on
it) or beside seven others (one core each). ``policies/kernels.py`` removes the two causes found in ACT and the
diffusion policy, but a policy may hold others (a parallel reduction over a large tensor sums in a
thread-dependent order), so before a model's first CPU call its first row is computed on fresh twins of the
policy (``copy.copy`` + ``reset()``: never the recording object) at 1 thread and at each other count the call
pool could give it (1, 2, 4, ... up to the cores). Calls then use only the counts whose output was bit-identical
to one thread's; a count that changed a row is never used and is named in ``results.json``
(``config.batch_invariance.threads``). So a row's bits are always its one-thread bits, on any machine, at any
batch size; where nothing but one thread keeps them, batch 1 runs on one core as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

VERIFIED, UNCHECKED = "verified", "unchecked"

Compute = Callable[[dict[str, Any], list[str]], Any]
RunAt = Callable[[Compute, dict[str, Any], list[str], int], np.ndarray]


@dataclass(frozen=True)
class ThreadPlan:
    """The intra-op thread counts a model's CPU calls may use, and how that was decided."""

    counts: tuple[int, ...] = (1,)
    """Counts a call may use: each gave the first row one thread's bits (1 is the reference)."""
    checked: tuple[int, ...] = (1,)
    rejected: dict[int, float | None] = field(default_factory=dict)
    """Counts that changed the row: the largest |difference| from one thread (None: another shape, or raised)."""
    status: str = UNCHECKED
    reason: str | None = None
    check_s: float = 0.0
    mkl: str | None = None

    def best(self, at_most: int) -> int:
        """The largest usable count that is at most ``at_most`` (at least 1)."""
        return max((c for c in self.counts if c <= at_most), default=1)

    def record(self) -> dict[str, Any]:
        """What ``results.json`` says about it (``config.batch_invariance.threads``)."""
        return {"status": self.status, "counts": list(self.counts), "checked": list(self.checked),
                "rejected": {str(k): v for k, v in self.rejected.items()}, "reason": self.reason,
                "check_s": round(self.check_s, 3), "mkl": self.mkl}


def candidate_counts(cores: int) -> tuple[int, ...]:
    """1, the powers of two below ``cores``, and ``cores``: the counts the call pool hands out."""
    counts = {1, max(1, cores)}
    power = 2
    while power < cores:
        counts.add(power)
        power *= 2
    return tuple(sorted(counts))


def one_thread(reason: str, mkl: str | None = None) -> ThreadPlan:
    """A plan that keeps every call on one thread, with why no other count was checked."""
    return ThreadPlan(reason=reason, mkl=mkl)


def check_counts(make_compute: Callable[[], Compute], observation: dict[str, Any], texts: list[str], cores: int,
                 run_at: RunAt, mkl: str | None = None, reference: np.ndarray | None = None) -> ThreadPlan:
    """Compute ``observation`` on a fresh twin (``make_compute()``) at each candidate count; keep those equal to 1's.

    ``reference``: the real call's one-thread output for ``observation`` (saves a call); if a count differs from
    it, a twin's own one-thread output is the reference instead (the real object's row may have had state).
    """
    counts = candidate_counts(cores)
    if len(counts) == 1:
        return one_thread("one usable core: calls run on one thread, nothing else to check", mkl)
    started = time.perf_counter()

    def output(count: int) -> np.ndarray | BaseException:
        try:
            return np.asarray(run_at(make_compute(), observation, texts, count), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - the count is rejected with the reason; the real call decides the run
            return exc

    outputs = {count: output(count) for count in counts[1:]}
    given = None if reference is None else np.asarray(reference, np.float64)
    base = given if given is not None and all(_same(out, given) for out in outputs.values()) else output(1)
    seconds = time.perf_counter() - started
    if isinstance(base, BaseException):
        return ThreadPlan(checked=counts, reason=f"the check's one-thread call raised {type(base).__name__}: {base}",
                          check_s=seconds, mkl=mkl)
    same, rejected = [1], {}
    for count, out in outputs.items():
        if _same(out, base):
            same.append(count)
        else:
            rejected[count] = (None if isinstance(out, BaseException) or out.shape != base.shape
                               else float(np.nanmax(np.abs(out - base))))
    reason = None
    if rejected:
        worst = ", ".join(f"{c} threads ({'raised' if d is None else f'{d:.3g}'})" for c, d in rejected.items())
        reason = (f"the first row changed at {worst} from one thread's bits: those counts are never used"
                  + ("" if mkl == "strict" else f" (MKL is not in strict reproducibility mode: {mkl})"))
    return ThreadPlan(counts=tuple(same), checked=counts, rejected=rejected,
                      status=VERIFIED if len(same) > 1 else UNCHECKED, reason=reason, check_s=seconds, mkl=mkl)


def _same(out: np.ndarray | BaseException, reference: np.ndarray) -> bool:
    return not isinstance(out, BaseException) and np.array_equal(out, reference, equal_nan=True)


def observation_signature(observation: dict[str, Any]) -> tuple[Any, ...]:
    """The shapes and dtypes a call's kernels are chosen by: one check per model and signature."""
    parts: list[Any] = []
    for key in sorted(observation):
        value = observation[key]
        if isinstance(value, dict):
            parts.extend((key, k, np.shape(v), str(getattr(v, "dtype", type(v).__name__)))
                         for k, v in sorted(value.items()))
        elif isinstance(value, np.ndarray):
            parts.append((key, value.shape, str(value.dtype)))
    return tuple(parts)
