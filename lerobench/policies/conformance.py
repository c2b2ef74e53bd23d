"""``lerobench check-policy``: does a policy keep the promises a long evaluation relies on? Checked, not declared.

On observations from the suite's real first steps (the first ``episodes`` episodes of one task, a few steps
each) the policy is asked the same rows in many ways. A benchmark's numbers are a pure function of
(seed, task, episode) only if a row's action is

- **deterministic**: the same rows twice give the same bits;
- **batch-invariant**: a row alone, among all rows, at the call width and beyond it (split calls), and in
  reversed order gives the same bits;
- **row-isolated**: changing a neighbour row never changes a row (a policy normalising over the batch, e.g.
  BatchNorm in train mode, fails here with a difference of the size of the actions);
- **noise keyed per episode** (stochastic policies): another episode draws other noise, the same one the same;
- **reset**: after ``reset()`` the first rows give what they gave a fresh policy;
- **state keyed by row**: a second call with the rows in another order gives each episode the same action (state
  kept by position in the call, not by ``row_ids``, fails: with continuous batching a call's rows change);
- **valid**: the declared shape, finite, inside the action space (the backend's ``action_bounds``: [-1, 1] on
  LIBERO and Meta-World, [0, 512] on PushT).

Latency and memory per call are measured at 1 .. 2W (at least 8) rows and turned into a suggested ``--batch-size``.
Nothing here prints: ``cli/check_policy.py`` draws the table.
"""

from __future__ import annotations

import copy
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobench.envs.base import READ_ALWAYS, env_action, episode_seed
from lerobench.policies.base import Policy, close_policy, observation_needs, policy_numerics, policy_traits
from lerobench.policies.batch import as_batch
from lerobench.policies.invariance import as_actions, concat_rows, max_difference, neighbour_rows
from lerobench.policies.width import DEFAULT_CALL_WIDTH, keeps_positions, take_rows, width_advice

PASS, FAIL, WARN, INFO = "pass", "fail", "warn", "info"
BATCH_HINT = ("a row's action depends on the other rows of the call: does it normalise over the batch (BatchNorm "
              "in train mode, statistics of the call)? Compute each row from its own inputs")


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    status: str
    detail: str
    max_abs_diff: float | None = None


@dataclass
class Report:
    """Every check, plus the latency table and the suggestion; ``ok`` is False when an invariant failed."""

    policy: str
    suite: str
    task: str
    checks: list[Check] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    suggestion: str = ""
    numerics: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """No check failed."""
        return all(c.status != FAIL for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        """JSON form (``--json``)."""
        return {"ok": self.ok, "policy": self.policy, "suite": self.suite, "task": self.task,
                "checks": [{**c.__dict__, "max_abs_diff": c.max_abs_diff if c.max_abs_diff is None
                            or np.isfinite(c.max_abs_diff) else None} for c in self.checks], "latency": self.latency,
                "suggestion": self.suggestion, "numerics": self.numerics}


def first_rows(plan: Any, policy: Policy, task: Any, episodes: int, steps: int) -> list[dict[str, Any]]:
    """One-row observations of the first ``episodes`` episodes of ``task`` at steps 0..``steps``-1.

    Built as the rollout builds them (slot = episode, ``episode_seed``, ``call`` = step, ``episode_start``); the
    policy itself chooses the actions that lead from one step to the next (then it is reset).
    """
    from lerobench.envs.vector import make_vector_env

    needs = observation_needs(policy)
    venv = make_vector_env(plan.env_spec(task, needs, None), 1, in_process=True)
    rows: list[dict[str, Any]] = []
    try:
        for episode in range(episodes):
            policy.reset()
            obs, _ = venv.reset(options={"episodes": [episode], "trials": [0]})
            queue: list[np.ndarray] = []
            reward, success = 0.0, False
            for step in range(steps):
                row: dict[str, Any] = {"state": np.array(obs["state"], dtype=np.float32)}
                if needs.cameras:
                    row["images"] = {c: np.array(obs["images"][c]) for c in needs.cameras}
                if needs.privileged:
                    row["privileged"] = np.array(obs["privileged"])
                row.update(slot=np.array([episode]), task=[task.name], episode=np.array([episode]),
                           episode_seed=np.array([episode_seed(plan.settings.seed, task.index, episode,
                                                                    plan.protocol.seeds)]),
                           episode_start=np.array([step == 0]), trial=np.array([0]), trial_start=np.array([step == 0]),
                           call=np.array([step]), reward=np.array([reward], np.float32), success=np.array([success]),
                           active=np.array([True]))
                rows.append(row)
                if not queue:
                    out = as_actions(policy.select_action(as_batch(row), [task.description]))
                    queue = list(out[0] if out.ndim == 3 else out[:1])
                action = np.asarray([queue.pop(0)], np.float32)
                obs, r, _, _, info = venv.step(env_action(action, np.full(1, READ_ALWAYS)))
                reward, success = float(np.asarray(r)[0]), bool(np.asarray(info.get("success", [False]))[0])
    finally:
        venv.close()
        policy.reset()
    return rows


def _stack(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    return concat_rows([(r, list(r["task"])) for r in rows])


def _call(policy: Policy, batch: tuple[dict[str, Any], list[str]], descriptions: dict[str, str]) -> np.ndarray:
    """A fresh-state call (``reset`` first: every row is at its episode start)."""
    policy.reset()
    obs, tasks = batch
    return as_actions(policy.select_action(as_batch(obs), [descriptions.get(t, t) for t in tasks]))


def run_checks(spec: str, plan: Any, policy: Policy, task: Any, episodes: int = 4, steps: int = 3,
               probe_rows: int | None = None, at_width: Callable[[int], Policy] | None = None) -> Report:
    """Every check of the module docstring on ``task``'s first rows; never raises for a failing policy.

    ``at_width(w)`` builds the same policy at call width ``w`` (torch policies): each call shape a run may
    give it is then checked too (``call_shape_checks``).
    """
    descriptions = {task.name: task.description}
    numerics = policy_numerics(policy)
    probe_rows = probe_rows or (numerics or {}).get("call_width") or 8  # rows checked beside each other
    report = Report(policy=spec, suite=plan.suite.name, task=task.name, numerics=numerics)
    starts: list[dict[str, Any]] = []
    try:
        rows = first_rows(plan, policy, task, episodes, steps)
        starts = [r for r in rows if r["episode_start"][0]]
        _checks_at_the_run_shape(report, plan, policy, rows, starts, probe_rows, descriptions, numerics)
    except Exception as exc:  # noqa: BLE001 - a policy that raises on real rows fails the check, in one line
        report.checks.append(Check("calls", FAIL, f"the policy raised {type(exc).__name__}: {exc}"))
    if at_width is not None and numerics is not None and not starts:  # its first steps failed at this width:
        starts = _starts_at_another_width(plan, at_width, task, episodes)  # the shapes still get real rows
    if at_width is not None and numerics is not None and starts:
        report.checks.extend(call_shape_checks(at_width, starts, descriptions))
    return report


def _checks_at_the_run_shape(report: Report, plan: Any, policy: Policy, rows: list[dict[str, Any]],
                             starts: list[dict[str, Any]], probe_rows: int, descriptions: dict[str, str],
                             numerics: dict[str, Any] | None) -> None:
    """The module docstring's checks at the policy's own call width (the run's), appended to ``report``."""
    batch = _stack(starts)
    base = _call(policy, batch, descriptions)
    report.checks.append(_validity(base, len(starts), plan.action_dim, plan.action_bounds))
    again = _call(policy, batch, descriptions)
    d = max_difference(base, again)
    report.checks.append(Check("deterministic", PASS if d == 0 else FAIL,
                               "same rows twice: identical bits" if d == 0 else
                               f"same rows twice differ by up to {d:.3g}: a random stream outside row_generators, "
                               "or state not reset", d))
    padded = (numerics or {}).get("call_width") if numerics else None
    report.checks.append(_invariance(policy, starts, base, probe_rows, descriptions, padded))
    report.checks.append(_isolation(policy, starts, base, descriptions, padded))
    report.checks.append(_noise(policy, starts, base, descriptions))
    report.checks.append(_reset(policy, rows, base, batch, descriptions))
    report.checks.append(_row_state(policy, rows, descriptions))
    report.latency, report.suggestion = _latency(policy, starts, probe_rows, descriptions, plan)


def _starts_at_another_width(plan: Any, at_width: Callable[[int], Policy], task: Any,
                             episodes: int) -> list[dict[str, Any]]:
    """The episodes' first rows, with the policy built at the CUDA width choosing (none if it raises there too)."""
    policy = None
    try:
        policy = at_width(DEFAULT_CALL_WIDTH["cuda"])
        return [r for r in first_rows(plan, policy, task, episodes, 1) if r["episode_start"][0]]
    except Exception:  # noqa: BLE001 - the "calls" check already failed, naming the error
        return []
    finally:
        if policy is not None:
            close_policy(policy)


UNCHECKED = "unchecked"

CALL_SHAPES = ((DEFAULT_CALL_WIDTH["cpu"], "1 row per call (the CPU default)"),
               (DEFAULT_CALL_WIDTH["cuda"], f"{DEFAULT_CALL_WIDTH['cuda']} rows per call, padded (the CUDA default), "
                                            f"computed on this machine's CPU"),
               (0, f"unpadded calls of 1 to {2 * DEFAULT_CALL_WIDTH['cuda'] + 1} rows (--call-width 0)"))
"""Every call shape a run may give a torch policy: ``--call-width`` 1, 16 and 0 (``policies/width.py``)."""


def call_shape_checks(at_width: Callable[[int], Policy], starts: list[dict[str, Any]],
                      descriptions: dict[str, str]) -> list[Check]:
    """The policy at each of ``CALL_SHAPES``: a row's bits alone, among others, reversed, with its neighbours changed.

    Why: on a CPU every call is one row by default, so a policy that mixes rows (statistics of the call) passed
    the checks above and then gave batch-dependent numbers at the GPU's 16 rows per call. The CUDA shape is
    computed on the CPU here (rows mixed inside a call show on any device); its bits on a GPU are ``unchecked``
    unless this machine has one (``check-policy --device cuda`` checks them there).
    """
    checks = []
    for width, label in CALL_SHAPES:
        policy = None
        try:
            policy = at_width(width)
            base = _call(policy, _stack(starts), descriptions)
            padded = width or None
            found = [_invariance(policy, starts, base, width or DEFAULT_CALL_WIDTH["cuda"], descriptions, padded),
                     _isolation(policy, starts, base, descriptions, padded)]
        except Exception as exc:  # noqa: BLE001 - a policy failing at a shape is a finding, not a crash
            checks.append(Check(f"shape: width {width}", FAIL, f"{label}: the policy raised {type(exc).__name__}: "
                                                               f"{exc}"))
            continue
        finally:
            if policy is not None:
                close_policy(policy)
        failed = [c for c in found if c.status == FAIL]
        worst = max((c.max_abs_diff or 0.0) for c in found)
        if not failed:
            checks.append(Check(f"shape: width {width}", PASS,
                                f"{label}: identical bits alone, among other rows and reversed", worst))
            continue
        if width == 0 and worst < 1e-4:  # rounding by call size: what --call-width 0 accepts, said, not failed
            checks.append(Check(f"shape: width {width}", WARN,
                                f"{label}: rows move by up to {worst:.3g} with the call's size (the CPU kernels' "
                                f"rounding, not rows mixing): what --call-width 0 accepts; the default widths "
                                f"give identical bits", worst))
            continue
        cause = BATCH_HINT if worst >= 1e-4 else f"a row's bits depend on the call's shape: {width_advice(padded)}"
        checks.append(Check(f"shape: width {width}", FAIL,
                            f"{label}: a row moves by up to {worst:.3g} with the other rows of its call "
                            f"({' and '.join(c.name for c in failed)} fail): {cause}", worst))
    if not _cuda_available():
        checks.append(Check("shape: cuda", UNCHECKED, f"{DEFAULT_CALL_WIDTH['cuda']} rows per call on a GPU: no CUDA "
                                                      "device here; run check-policy --device cuda on the GPU machine"))
    return checks


def _cuda_available() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def _validity(out: np.ndarray, n: int, action_dim: int, bounds: tuple[float, float] = (-1.0, 1.0)) -> Check:
    if out.ndim not in (2, 3) or out.shape[0] != n or out.shape[-1] != action_dim:
        return Check("actions", FAIL, f"expected ({n}, {action_dim}) or ({n}, T, {action_dim}), got {out.shape}")
    if not np.isfinite(out).all():
        return Check("actions", FAIL, "NaN or infinity in the actions")
    low, high = bounds
    outside = float(np.mean((out < low) | (out > high)))
    shape = "chunk " + "x".join(map(str, out.shape[1:])) if out.ndim == 3 else f"{action_dim}-D"
    space = f"[{low:g}, {high:g}]"
    if outside:
        return Check("actions", WARN, f"{shape}, finite; {outside:.0%} of values outside {space} (the simulator "
                                      "clips them: un-normalised outputs?)")
    return Check("actions", PASS, f"{shape}, finite, inside {space}")


def _positions(policy: Policy, row: dict[str, Any], width: int, descriptions: dict[str, str]) -> float:
    """The same row at every position of one ``width``-row call: how far its outputs are apart (0: not at all).

    Every input is equal, so any difference comes from the row's position in the call alone.
    """
    out = _call(policy, _stack([row] * max(width, 2)), descriptions)
    return max(max_difference(out[i], out[0]) for i in range(1, len(out)))


def _shape_hint(policy: Policy, starts: list[dict[str, Any]], padded: int | None,
                descriptions: dict[str, str]) -> str:
    """What a small difference between calls means here: the position in the call, measured, or the call's shape."""
    if padded is not None and padded > 1 and not keeps_positions(padded):
        moved = _positions(policy, starts[0], padded, descriptions)
        if moved > 0:
            return (f"measured here, the same row in all {padded} positions of a call gives outputs up to {moved:.3g} "
                    f"apart; {width_advice(padded)}")
    return f"a row's bits depend on the call's shape: {width_advice(padded)}"


def _invariance(policy: Policy, starts: list[dict[str, Any]], base: np.ndarray, width: int,
                descriptions: dict[str, str], padded: int | None = None) -> Check:
    """Each row alone, all rows reversed, and all rows among neighbours beyond 2W rows (split calls)."""
    n = len(starts)
    worst = 0.0
    for i, row in enumerate(starts):
        worst = max(worst, max_difference(_call(policy, _stack([row]), descriptions)[0], base[i]))
    reversed_out = _call(policy, _stack(starts[::-1]), descriptions)[::-1]
    worst = max(worst, max_difference(reversed_out, base))
    obs, tasks = _stack(starts)
    fill = neighbour_rows(obs, tasks, max(1, 2 * width + 1 - n), salt=7)
    wide = _call(policy, concat_rows([fill, (obs, tasks)]), descriptions)[-n:]
    worst = max(worst, max_difference(wide, base))
    if worst == 0:
        return Check("batch-invariant", PASS, f"1, {n} and {2 * width + 1} rows, reversed: identical bits", 0.0)
    hint = _shape_hint(policy, starts, padded, descriptions) if worst < 1e-4 else BATCH_HINT
    return Check("batch-invariant", FAIL, f"a row differs by up to {worst:.3g} between calls: {hint}", worst)


def _isolation(policy: Policy, starts: list[dict[str, Any]], base: np.ndarray, descriptions: dict[str, str],
               padded: int | None = None) -> Check:
    obs, tasks = _stack(starts)
    other = neighbour_rows(obs, tasks, len(starts), salt=11)
    for key in ("slot", "episode", "episode_seed"):  # same identity as the real rows: only their inputs differ
        if key in other[0]:
            other[0][key] = np.asarray(obs[key])
    changed = take_rows(other[0], np.arange(len(starts)))
    changed_obs = take_rows(obs, np.arange(len(starts)))
    changed_obs["state"] = np.array(changed_obs["state"])
    changed_obs["state"][1:] = changed["state"][1:]
    if "images" in changed_obs:
        changed_obs["images"] = {c: np.array(v) for c, v in changed_obs["images"].items()}
        for c in changed_obs["images"]:
            changed_obs["images"][c][1:] = changed["images"][c][1:]
    out = _call(policy, (changed_obs, tasks), descriptions)
    d = max_difference(out[:1], base[:1])
    if len(starts) < 2:
        return Check("row isolation", INFO, "one row only: nothing to change beside it")
    return Check("row isolation", PASS if d == 0 else FAIL,
                 "changing the other rows leaves row 0 unchanged" if d == 0 else
                 f"changing the other rows moves row 0 by {d:.3g}: "
                 f"{BATCH_HINT if d >= 1e-4 else _shape_hint(policy, starts, padded, descriptions)}", d)


def _noise(policy: Policy, starts: list[dict[str, Any]], base: np.ndarray, descriptions: dict[str, str]) -> Check:
    """Another episode key must change a stochastic policy's draw; a deterministic one must not care."""
    obs, tasks = _stack(starts)
    shifted = dict(obs, episode_seed=np.asarray(obs["episode_seed"]) + 1_000_003)
    out = _call(policy, (shifted, tasks), descriptions)
    moved = max_difference(out, base)
    if policy_traits(policy).stochastic:
        if moved == 0:
            return Check("noise per episode", WARN, "declared stochastic, but another episode key draws the same "
                                                    "actions: is the noise keyed per episode (row_generators)?")
        return Check("noise per episode", PASS, "another episode key draws other noise; the same key the same")
    if moved:
        return Check("noise per episode", WARN, f"not declared stochastic, yet the episode key moves actions by "
                                                f"{moved:.3g}: declare PolicyTraits(stochastic=True)", moved)
    return Check("noise per episode", INFO, "deterministic: actions do not depend on the episode key")


def _reset(policy: Policy, rows: list[dict[str, Any]], base: np.ndarray, batch: tuple[dict[str, Any], list[str]],
           descriptions: dict[str, str]) -> Check:
    """Run some later steps, then ``reset()``: the first rows must give what they gave a fresh policy."""
    policy.reset()
    for row in rows:
        policy.select_action(as_batch(row), [descriptions.get(t, t) for t in row["task"]])
    d = max_difference(_call(policy, batch, descriptions), base)
    clone = copy.copy(policy) if policy_traits(policy).copy_safe else None
    d_copy = max_difference(_call(clone, batch, descriptions), base) if clone is not None else 0.0
    worst = max(d, d_copy)
    return Check("reset", PASS if worst == 0 else FAIL,
                 "after later steps, reset() (and a copy's reset) gives the fresh policy's actions" if worst == 0 else
                 f"after reset() the first rows differ by up to {worst:.3g}: reset() must forget every episode's "
                 "state (or key state by row_ids and reset it at episode_start)", worst)


def _row_state(policy: Policy, rows: list[dict[str, Any]], descriptions: dict[str, str]) -> Check:
    """Every episode's first and second step in two calls; then again with the second call's rows reversed.

    Why: the rollout sends only the rows that need an action, so an env's row moves within the call from one call
    to the next. A policy that keeps state by position (``self._last`` of the previous call's shape) hands an
    episode another episode's state: its numbers then depend on timing. Keyed by ``row_ids`` each episode gets
    its own, whatever the order.
    """
    first = [r for r in rows if r["call"][0] == 0]
    second = [r for r in rows if r["call"][0] == 1]
    if len(second) < 2:
        return Check("state per row", INFO, "fewer than 2 episodes with a second step (--steps 1): not checked")
    def second_call(order: list[dict[str, Any]], after_first: bool) -> np.ndarray:
        policy.reset()
        for step in ([first] if after_first else []) + [order]:  # with the first call's state kept, or fresh
            obs, tasks = _stack(step)
            out = policy.select_action(as_batch(obs), [descriptions.get(t, t) for t in tasks])
        return as_actions(out)

    d = max_difference(second_call(second[::-1], True)[::-1], second_call(second, True))
    # The same reorder without state: what the rows' positions alone change (numerics; batch-invariant reports it)
    moved = max_difference(second_call(second[::-1], False)[::-1], second_call(second, False)) if d else 0.0
    policy.reset()
    if d == 0:
        return Check("state per row", PASS, "the rows of a second call reordered: each episode gets the same action",
                     0.0)
    if moved and d < 1e-4:
        return Check("state per row", INFO, f"not decided: reordered rows differ by up to {d:.3g}, as they do "
                                            f"without state ({moved:.3g}: see batch-invariant)", d)
    return Check("state per row", FAIL,
                 f"the rows of a second call reordered change an episode's action by up to {d:.3g}: state is kept "
                 "by position in the call; key it by row_ids(observation) (docs/policies.md#per-episode-state)", d)


def _cuda_peak_reset(policy: Policy) -> Any:
    """``torch.cuda`` with its peak-memory counter reset, for a policy computing on a GPU; else None."""
    device = str((policy_numerics(policy) or {}).get("device", "cpu"))
    if not device.startswith("cuda"):
        return None
    import torch

    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda


def _latency(policy: Policy, starts: list[dict[str, Any]], width: int, descriptions: dict[str, str],
             plan: Any) -> tuple[list[dict[str, Any]], str]:
    """Median latency, rows/s and peak memory growth per call at 1, 2, 4, .. up to 2W (at least 8) rows."""
    from lerobench.system import auto_batch_size

    obs, tasks = _stack(starts)
    reach = max(2 * width, 8)  # one-row calls too: what a request of several rows costs on the call pool
    sizes = sorted({1, 2, *[w for w in (4, 8, 16, 32, 64) if w <= reach], width, reach})
    table: list[dict[str, Any]] = []
    for size in sizes:
        index = np.arange(size) % len(starts)
        batch = (take_rows(obs, index), [tasks[i] for i in index])
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cuda = _cuda_peak_reset(policy)
        _call(policy, batch, descriptions)  # warm-up: first calls at a shape pick kernels, allocate
        times = []
        for _ in range(3):
            started = time.perf_counter()
            _call(policy, batch, descriptions)
            times.append(time.perf_counter() - started)
        grew = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
        median = float(np.median(times))
        table.append({"rows": size, "latency_ms": round(median * 1e3, 3),
                      "cuda_peak_mb": round(cuda.max_memory_allocated() / 2**20, 1) if cuda is not None else None,
                      "rows_per_s": round(size / median, 1) if median > 0 else None,
                      "peak_rss_growth_mb": round(grew, 1)})
    best = max(table, key=lambda r: r["rows_per_s"] or 0)
    auto = auto_batch_size(plan.episodes_per_task, plan.suite.worker_memory_mb)
    step_ms = plan.unrendered_step_ms or 1.0
    call_ms = table[0]["latency_ms"]
    if call_ms < 5 * step_ms:  # a call costs a few simulator steps: the simulation decides the speed
        suggestion = (f"a 1-row call ({call_ms} ms) costs about {call_ms / step_ms:.1f} simulator steps: keep the "
                      f"auto batch size ({auto.batch_size} here: {auto.usable_cores} usable cores); the policy is not "
                      "the bottleneck")
    else:
        suggestion = (f"calls are policy-bound ({call_ms} ms for 1 row, ~{call_ms / step_ms:.0f} simulator steps); "
                      f"most rows/s at {best['rows']} rows per call ({best['rows_per_s']} rows/s): --batch-size "
                      f"{max(best['rows'], auto.batch_size)} keeps calls that full (auto would pick {auto.batch_size})"
                      + ("; the policy may overlap calls (PolicyTraits.concurrent_calls) if it waits on I/O"
                         if best["rows"] == 1 else ""))
    return table, suggestion
