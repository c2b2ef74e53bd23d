"""Batch invariance checked on a run's real rows, not declared: the first call's rows computed again elsewhere.

At the first call of a rollout (every row at its episode's first observation) the same rows are also sent
in another order between made-up neighbour rows, and the first row with another neighbour; each real row's
action must be bit-identical in every call. Every row of a probe call has ``probe`` True (its output is
discarded). Each probe call runs on a fresh twin of the policy (``copy.copy`` plus ``reset()``: shared
weights, its own state, as ``--parallel-tasks`` threads use), never on the object whose episodes are
recorded: a policy that counts its calls, keys noise on them or keeps any other state, and ignores ``probe``,
runs its episodes exactly as without the check (issue 33: probing the recording object changed 3 of 12
episodes of such a policy, and handed it 7 rows more than the chunks it executed at batch 3). A policy that
is not ``copy_safe`` is not probed: its run records ``unchecked``. Neighbour rows use negative slot ids
(-2, -3, ...): never a real row.

The outcome travels with the episode records (``EpisodeRecord.policy_check``) from whichever process made
the call, so every executor, ``--resume`` and ``merge`` see it, and ``results.json`` ``config.batch_invariant``
says ``verified``, ``failed`` (with the largest difference) or ``unchecked``; never a declaration.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from lerobench.policies.actions import to_numpy
from lerobench.policies.base import close_policy, policy_traits, row_ids
from lerobench.policies.batch import as_batch
from lerobench.policies.width import take_rows, thread_plan

VERIFIED, FAILED, UNCHECKED = "verified", "failed", "unchecked"
NEIGHBOURS = 2
"""Made-up rows around the real ones in the reordered probe call."""

Select = Callable[[dict[str, Any], list[str]], Any]


def as_actions(raw: Any) -> np.ndarray:
    """A policy's output as a float64 array (torch tensors moved to the CPU); what the check compares."""
    return to_numpy(raw, np.float64)


def neighbour_rows(observation: dict[str, Any], descriptions: list[str], count: int,
                   salt: int = 1) -> tuple[dict[str, Any], list[str]]:
    """``count`` plausible rows unlike the real ones, with negative slot ids (``-1 - salt - k``).

    Each is the first real row with its state and images perturbed and another episode key.
    """
    rows = take_rows(observation, np.zeros(count, dtype=np.int64))
    rng = np.random.default_rng(12345 + salt)
    state = np.asarray(rows["state"])
    rows["state"] = (state + rng.normal(0.0, 0.5, size=state.shape)).astype(state.dtype)
    if isinstance(rows.get("images"), dict):
        rows["images"] = {cam: np.ascontiguousarray(img[:, :, ::-1]) for cam, img in rows["images"].items()}
    rows["slot"] = -1 - salt - np.arange(count, dtype=np.int64)
    if "episode_seed" in rows:
        rows["episode_seed"] = np.asarray(rows["episode_seed"], dtype=np.int64) ^ (0x9E3779B9 + salt)
    return rows, [descriptions[0]] * count


def concat_rows(parts: list[tuple[dict[str, Any], list[str]]]) -> tuple[dict[str, Any], list[str]]:
    """Stack several row sets (same keys) into one observation."""
    first = parts[0][0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = {k: np.concatenate([np.asarray(p[0][key][k]) for p in parts]) for k in value}
        elif isinstance(value, np.ndarray) and value.ndim >= 1:
            out[key] = np.concatenate([np.asarray(p[0][key]) for p in parts])
        elif isinstance(value, list | tuple):
            out[key] = [x for p in parts for x in p[0][key]]
        else:
            out[key] = value
    return out, [d for p in parts for d in p[1]]


def probes(observation: dict[str, Any], descriptions: list[str]) -> list[tuple[dict[str, Any], list[str], np.ndarray]]:
    """Calls that hold the real rows elsewhere: (observation, descriptions, position of each real row or -1)."""
    n = len(observation["state"])
    observation = dict(observation, slot=row_ids(observation))  # the neighbours' negative slots need a column
    order = np.arange(n)[::-1]
    out = []
    before = neighbour_rows(observation, descriptions, 1, salt=1)
    after = neighbour_rows(observation, descriptions, NEIGHBOURS - 1, salt=2)
    reordered = concat_rows([before, (take_rows(observation, order), [descriptions[i] for i in order]), after])
    where = np.empty(n, dtype=np.int64)
    where[order] = 1 + np.arange(n)
    out.append((*reordered, where))
    if n > 1:  # the first row with one other neighbour, at the front
        alone = np.full(n, -1, dtype=np.int64)
        alone[0] = 0
        first = (take_rows(observation, np.array([0])), [descriptions[0]])
        out.append((*concat_rows([first, neighbour_rows(observation, descriptions, 1, salt=3)]), alone))
    for obs, _, _ in out:
        obs["probe"] = np.ones(len(obs["state"]), dtype=bool)
    return out


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| (NaN where both are NaN counts as equal, a lone NaN as infinite); inf for other shapes."""
    if a.shape != b.shape:
        return float("inf")
    same_nan = np.isnan(a) & np.isnan(b)
    diff = np.abs(np.where(same_nan, 0.0, a - b))
    return float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0


def compare(real: np.ndarray, probe: np.ndarray, where: np.ndarray) -> float | None:
    """Largest |difference| between each real row and its copy in ``probe``; None if the shapes cannot match."""
    rows = np.flatnonzero(where >= 0)
    if probe.ndim != real.ndim or probe.shape[1:] != real.shape[1:] or len(probe) <= where.max():
        return None
    return max_difference(real[rows], probe[where[rows]])


def twin(policy: Any) -> Any:
    """A fresh copy of ``policy`` for probe calls (shared weights, its own state), or None if it cannot be copied."""
    if not policy_traits(policy).copy_safe:
        return None
    clone = copy.copy(policy)
    clone.reset()
    return clone


NOT_COPYABLE = ("the policy declares copy_safe=False: the check's probe calls would have to run on the recording "
                "policy and could change its episodes, so none ran")


def unchecked(rows: int, reason: str) -> dict[str, Any]:
    """The outcome of a check that did not run, with why."""
    return {"status": UNCHECKED, "max_abs_diff": None, "rows": rows, "reason": reason}


def probe_calls(policy: Any, observation: dict[str, Any],
                descriptions: list[str]) -> tuple[list[tuple[np.ndarray | BaseException, np.ndarray]], int, float]:
    """Run every probe call, each on its own ``twin`` of ``policy``: (outputs with positions, rows, seconds)."""
    started = time.perf_counter()
    probe_out: list[tuple[np.ndarray | BaseException, np.ndarray]] = []
    rows = 0
    for obs, texts, where in probes(observation, descriptions):
        rows += len(obs["state"])
        clone = None
        try:
            clone = twin(policy)
            probe_out.append((as_actions(clone.select_action(as_batch(obs), texts)), where))
        except Exception as exc:  # noqa: BLE001 - recorded as the reason the check failed
            probe_out.append((exc, where))
        finally:
            if clone is not None:
                close_policy(clone)
    return probe_out, rows, time.perf_counter() - started


class PendingCheck:
    """A check whose probe calls may still run on a helper thread, beside the run's next steps; ``result`` waits."""

    def __init__(self, call_s: float, probing: Future[Any] | None = None, real: Any = None, key: Any = None,
                 finished: dict[str, Any] | None = None):
        self.call_s = call_s
        """The real call's seconds (known as soon as it returned)."""
        self._probing, self._real, self._key = probing, real, key
        self._outcome = finished

    def result(self) -> dict[str, Any]:
        """The outcome (``checked_call``'s dict), once the probe calls finished."""
        if self._outcome is None:
            assert self._probing is not None, "a PendingCheck with neither probes nor an outcome"
            probe_out, probe_rows, probe_s = self._probing.result()
            self._outcome = outcome(self._real, probe_out, probe_rows, probe_s, self.call_s, self._key)
        return self._outcome


def checked_call(policy: Any, observation: dict[str, Any], descriptions: list[str],
                 select: Select | None = None) -> tuple[Any, PendingCheck]:
    """Run ``policy`` on the real rows, and the probe calls on twins of it; return its output and the outcome.

    The outcome: ``{"status": "verified" | "failed" | "unchecked", "max_abs_diff": float, "rows": n,
    "reason": str | None, "probe_calls": k, "probe_rows": r, "probe_s": seconds, "call_s": the real call's
    seconds, "threads": the call pool's thread plan}``. For a policy on lerobench's CPU call pool the probe
    calls run beside the real call and go on after it returns (on twins: the real call's rows and state are
    untouched), so they do not hold the run's first steps back (``PendingCheck.result`` waits for them). A probe
    call that raises makes the check fail (the real call still decides the run). ``select`` replaces
    ``policy.select_action`` for the real call (a caller that wraps it); the probes never go through it.
    """
    select = select or policy.select_action

    def real_call() -> tuple[Any, float]:
        started = time.perf_counter()
        out = select(observation, descriptions)
        return out, time.perf_counter() - started

    if not policy_traits(policy).copy_safe:
        raw, call_s = real_call()
        return raw, PendingCheck(call_s, finished={**unchecked(len(observation["state"]), NOT_COPYABLE),
                                                   "call_s": call_s})
    key = getattr(policy, "call_key", None)
    if key is not None:
        # rows on lerobench's CPU call pool: the real call first, then the twins' rows run on the pool's cores
        # beside the run's next steps and calls
        raw, call_s = real_call()
        helper = ThreadPoolExecutor(1, thread_name_prefix="lerobench-probe")
        try:
            probing = helper.submit(probe_calls, policy, observation, descriptions)
        finally:
            helper.shutdown(wait=False)
        return raw, PendingCheck(call_s, probing, as_actions(raw), key)
    probe_out, probe_rows, probe_s = probe_calls(policy, observation, descriptions)
    raw, call_s = real_call()
    return raw, PendingCheck(call_s, finished=outcome(as_actions(raw), probe_out, probe_rows, probe_s, call_s, key))


def outcome(real: np.ndarray, probe_out: list[tuple[np.ndarray | BaseException, np.ndarray]], probe_rows: int,
            probe_s: float, call_s: float, key: Any) -> dict[str, Any]:
    """The check's outcome from the real call's actions and the probe calls' (``checked_call``)."""
    worst, reason = 0.0, None
    for out, where in probe_out:
        if isinstance(out, BaseException):
            reason = f"a probe call raised {type(out).__name__}: {out}"
            worst = float("inf")
            continue
        diff = compare(real, out, where)
        if diff is None:
            reason = f"a probe call returned shape {out.shape} for rows of shape {real.shape}"
            worst = float("inf")
        else:
            worst = max(worst, diff)
    if reason is None and worst > 0:
        reason = (f"a row's action changed by up to {worst:.3g} with other rows beside it: it depends on the "
                  "rest of the call (batch statistics? unpadded calls, --call-width 0? a random stream "
                  "not drawn from row_generators?)")
    return {"status": VERIFIED if worst == 0 else FAILED, "max_abs_diff": worst if np.isfinite(worst) else None,
            "rows": len(real), "reason": reason, "probe_calls": len(probe_out), "probe_rows": probe_rows,
            "probe_s": round(probe_s, 6), "call_s": call_s, "threads": thread_plan(key)}


def with_checks(config: dict[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any]:
    """``config`` with ``batch_invariant`` / ``batch_invariance`` from ``checks`` (the sink and merge both use it)."""
    if not isinstance(config.get("batch_invariance"), dict):
        return config  # a file from before checks existed: it keeps what it said
    found = summarize_checks(checks)
    return {**config, "batch_invariant": found["status"], "batch_invariance": {**config["batch_invariance"], **found}}


def summarize_checks(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """``config.batch_invariance`` from every record's check: failed if any failed, verified if any ran.

    A check that could not run (``unchecked``, with its reason) counts as no check.
    """
    threads = summarize_threads([c["threads"] for c in checks if isinstance(c.get("threads"), dict)])
    ran = [c for c in checks if c.get("status") != UNCHECKED]
    if not ran:
        reasons = [c.get("reason") for c in checks if c.get("reason")]
        return {"status": UNCHECKED, "checks": 0, "max_abs_diff": None, "reason": reasons[0] if reasons else None,
                "threads": threads}
    checks = ran
    failed = [c for c in checks if c.get("status") == FAILED]
    diffs = [c["max_abs_diff"] for c in checks if c.get("max_abs_diff") is not None]
    return {"status": FAILED if failed else VERIFIED, "checks": len(checks),
            "max_abs_diff": max(diffs) if diffs else None,
            "reason": failed[0].get("reason") if failed else None, "threads": threads}


def summarize_threads(plans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The thread checks of every process of a run (``call_threads.ThreadPlan.record``) as one record.

    ``counts``: the intra-op thread counts calls used somewhere, each checked equal to one thread's bits there;
    ``rejected``: counts that changed a row somewhere (never used there). None for a policy without a call pool.
    """
    if not plans:
        return None
    counts = sorted({c for p in plans for c in p.get("counts", [1])})
    checked = sorted({c for p in plans for c in p.get("checked", [1])})
    rejected: dict[str, float | None] = {}
    for p in plans:
        rejected.update(p.get("rejected") or {})
    reasons = [p["reason"] for p in plans if p.get("reason")]
    return {"status": VERIFIED if any(p.get("status") == VERIFIED for p in plans) else UNCHECKED,
            "counts": counts, "checked": checked, "rejected": rejected, "reason": reasons[0] if reasons else None,
            "check_s": round(sum(float(p.get("check_s") or 0.0) for p in plans), 3),
            "mkl": sorted({str(p.get("mkl")) for p in plans})}
