"""Compare two runs episode by episode: paired exact tests where episodes match, unpaired ones where not.

Two runs with the same seed play the same episodes (same LIBERO init states, same Meta-World variants), so
their outcomes are *paired*: an episode is matched when (task, episode, seed, init_state) agree, its
``start_digest`` (the hash of the simulator state after reset) is the same in both runs where both recorded one,
and it has finished in both runs, and each trial index ``k`` is compared on those episodes. Runs that share no episode
(different seeds) are compared as two independent samples and say so. The statistics are in
``lerobench.stats.binomial``; this module only reads runs, matches episodes and lays out the numbers (no printing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobench.core.identity import diff
from lerobench.core.records import EpisodeRecord
from lerobench.core.rundir import RunDir
from lerobench.core.trials import is_whole, outcomes
from lerobench.errors import CompareError
from lerobench.stats.binomial import (
    PAIRED_P_FLOOR,
    compare_paired,
    holm,
    paired_difference_exact,
    stratified_bootstrap_ci,
    unpaired_difference_ci,
    unpaired_exact,
)

EpisodeKey = tuple[str, int, int, int]
"""(task, episode, seed, init_state): what makes an episode the same episode in two runs."""

BOOTSTRAP_SEED = 0
"""Seed of the stratified bootstrap, so the same two runs always give the same suite CI."""


Run = RunDir
"""A run directory as compare reads it (``lerobench.core.rundir.RunDir``)."""


def load_run(path: Path) -> RunDir:
    """Read and validate a run directory without modifying it (it may still be running)."""
    return RunDir.load(path)


def differences(a: RunDir, b: RunDir) -> list[str]:
    """How the runs' episodes differ (``lerobench.core.identity``): any difference: not the same episodes."""
    return diff(a.identity, b.identity, parts=("episodes",))


def treatment(a: RunDir, b: RunDir) -> list[str]:
    """What differs in what was done from the same starts: what the comparison compares (policy, replan steps...)."""
    return diff(a.identity, b.identity, parts=("treatment",))


def trial_outcomes(records: Sequence[EpisodeRecord], trials: int) -> dict[EpisodeKey, list[bool]]:
    """Success at each trial index for every *finished* episode (``lerobench.core.trials.is_whole``).

    An error ends an episode: the erroring trial and every later index count as failures (TRIALS_SCHEMA).
    An episode with fewer lines than trials and no error is still running and is left out.
    """
    lines: dict[EpisodeKey, dict[int, EpisodeRecord]] = {}
    for r in records:
        lines.setdefault((r.task, r.episode, r.seed, r.init_state), {})[r.trial] = r
    found = {}
    for key, by_trial in lines.items():
        episode = [by_trial[k] for k in sorted(by_trial)]
        if is_whole(episode, trials):
            found[key] = outcomes(episode, trials)
    return found


def start_digests(records: Sequence[EpisodeRecord]) -> dict[EpisodeKey, str]:
    """The start digest of each episode that has one (runs written before digests existed have none)."""
    return {(r.task, r.episode, r.seed, r.init_state): r.start_digest for r in records
            if r.trial == 0 and r.start_digest is not None}


def same_inputs(a: Sequence[EpisodeRecord], b: Sequence[EpisodeRecord],
                matched: Sequence[EpisodeKey]) -> dict[str, Any]:
    """Did the policy see the same observations in both runs? Per matched episode, every trial's ``obs_digest``.

    ``identical``: episodes whose every trial has equal digests in both runs; ``different``: some trial's differ
    (``first``: the first such episode in suite order, with the first read that differs, as
    ``lerobench.rollout.observation_digest.first_difference`` names it); ``unknown``: a run recorded no digest (files
    written before digests existed). Runs of one policy at another batch size must be all ``identical``.
    """
    from lerobench.core.digest_compare import first_difference

    def by_key(records: Sequence[EpisodeRecord]) -> dict[EpisodeKey, dict[int, EpisodeRecord]]:
        found: dict[EpisodeKey, dict[int, EpisodeRecord]] = {}
        for r in records:
            found.setdefault((r.task, r.episode, r.seed, r.init_state), {})[r.trial] = r
        return found

    lines_a, lines_b = by_key(a), by_key(b)
    identical, unknown, different = 0, 0, []
    for key in matched:
        ta, tb = lines_a.get(key, {}), lines_b.get(key, {})
        trials = sorted(set(ta) & set(tb))
        if not trials or any(ta[k].obs_digest is None or tb[k].obs_digest is None for k in trials):
            unknown += 1
            continue
        diverged = [(k, d) for k in trials if (d := first_difference(ta[k], tb[k])) is not None]
        if not diverged:
            identical += 1
        else:
            trial, where = diverged[0]
            different.append({"task": key[0], "episode": key[1], "trial": trial, "call": where.read,
                              "part": where.part, "where": where.describe()})
    return {"identical": identical, "different": len(different), "unknown": unknown,
            "first": different[0] if different else None}


def describe_inputs(inputs: dict[str, Any]) -> str | None:
    """A note naming the first episode whose inputs differ between the runs; None when none does."""
    first = inputs.get("first")
    if not first:
        return None
    trial = f" trial {first['trial']}" if first["trial"] else ""
    return (f"{inputs['different']} paired episodes showed the policy different observations (same seed and start "
            f"state); first: task {first['task']!r} episode {first['episode']}{trial}, {first['where']}")


def mkl_cause(a: RunDir, b: RunDir, inputs: dict[str, Any]) -> str | None:
    """The cause of different inputs when the runs computed in different MKL modes; None when that cannot be it.

    MKL's reproducibility mode (``MKL_CBWR``, read once when MKL starts) changes the last bits of a CPU torch
    policy's matrix products: the same observation gives another action, and the next observation differs. So
    the runs' first reads are equal and a later one is not (``first["call"] > 0``); a difference at the first
    read is the simulator's, never the policy's. The ``lerobench`` command computes in strict mode,
    ``lerobench.evaluate`` in its caller's (``config.numerics.mkl``).
    """
    from lerobench.system import MKL_MATCH, mkl_modes_differ

    first = inputs.get("first")
    if not first or not first["call"] or not mkl_modes_differ(a.mkl_mode, b.mkl_mode):
        return None
    return (f"cause: the runs computed in different MKL modes (A {a.mkl_mode!r}, B {b.mkl_mode!r}; config.numerics"
            f".mkl): the policy saw the same observations until call {first['call']} of task {first['task']!r} "
            f"episode {first['episode']} and acted differently before it. To compare like with like, {MKL_MATCH}, "
            f"or run both with the lerobench command")


def _rates(successes_a: int, n_a: int, successes_b: int, n_b: int) -> dict[str, Any]:
    rate_a = successes_a / n_a if n_a else None
    rate_b = successes_b / n_b if n_b else None
    return {"n_a": n_a, "n_b": n_b, "successes_a": successes_a, "successes_b": successes_b,
            "rate_a": rate_a, "rate_b": rate_b,
            "difference": rate_b - rate_a if rate_a is not None and rate_b is not None else None}


def _task_block(a: list[bool], b: list[bool], paired: bool) -> dict[str, Any]:
    block = _rates(sum(a), len(a), sum(b), len(b))
    if paired:
        result = compare_paired(a, b)
        block.update(ci95=result.ci95, p_value=result.p_value, gained=result.gained, lost=result.lost,
                     test="exact McNemar")
    else:
        p_value, test = unpaired_exact(sum(a), len(a), sum(b), len(b))
        block.update(ci95=unpaired_difference_ci(sum(a), len(a), sum(b), len(b)), p_value=p_value,
                     test={"boschloo": "Boschloo exact", "fisher": "Fisher exact", "none": "none"}[test])
    return block


PAIRED_POOLED_METHOD = ("exact unconditional: McNemar-score ordering, the discordance maximised over its plausible "
                        "values (Berger-Boos), pooled over tasks")


def _pooled_block(strata: list[tuple[list[bool], list[bool]]], paired: bool) -> dict[str, Any]:
    all_a = [x for a, _ in strata for x in a]
    all_b = [x for _, b in strata for x in b]
    block = _rates(sum(all_a), len(all_a), sum(all_b), len(all_b))
    if paired:
        # Exact: a bootstrap collapses where every pair of a task went the same way (few pairs per task).
        gained = sum(1 for a, b in strata for x, y in zip(a, b, strict=True) if not x and y)
        lost = sum(1 for a, b in strata for x, y in zip(a, b, strict=True) if x and not y)
        ci, p_value = paired_difference_exact(gained, lost, len(all_a))
        block.update(ci95=ci, ci95_method=PAIRED_POOLED_METHOD, p_value=p_value, p_value_floor=PAIRED_P_FLOOR,
                     gained=gained, lost=lost, test=PAIRED_POOLED_METHOD)
        return block
    block["ci95"] = stratified_bootstrap_ci(strata, paired=False, seed=BOOTSTRAP_SEED)
    block["ci95_method"] = "stratified bootstrap over tasks"
    if block["ci95"][0] == block["ci95"][1]:
        # No episode varied within its task, so every resample is identical and the bootstrap collapses to a
        # point; it cannot see noise no episode showed. The analytic interval on the pooled counts can.
        block["ci95"] = unpaired_difference_ci(sum(all_a), len(all_a), sum(all_b), len(all_b))
        block["ci95_method"] = "Newcombe on pooled counts (bootstrap degenerate: no variation)"
    p_value, test = unpaired_exact(sum(all_a), len(all_a), sum(all_b), len(all_b))
    block.update(p_value=p_value, test=f"{'Boschloo' if test == 'boschloo' else 'Fisher'} exact, pooled")
    return block


def _compare_trial(strata: dict[str, tuple[list[bool], list[bool]]], groups: dict[str, str | None],
                   paired: bool, alpha: float) -> dict[str, Any]:
    """Per task (with Holm-adjusted p), per group and overall for one trial index."""
    tasks = [{"task": name, "group": groups.get(name), **_task_block(a, b, paired)}
             for name, (a, b) in strata.items()]
    for task, adjusted in zip(tasks, holm([t["p_value"] for t in tasks]), strict=True):
        task["p_holm"] = adjusted
        task["significant"] = adjusted < alpha
    by_group: dict[str, list[tuple[list[bool], list[bool]]]] = {}
    for name, pair in strata.items():
        if group := groups.get(name):
            by_group.setdefault(group, []).append(pair)
    group_blocks = {g: _pooled_block(members, paired) for g, members in by_group.items()}
    overall = _pooled_block(list(strata.values()), paired)
    for block in (*group_blocks.values(), overall):
        block["significant"] = block["p_value"] < alpha
    return {"tasks": tasks, "groups": group_blocks, "overall": overall}


def _task_order(a: Run, b: Run) -> tuple[list[str], dict[str, str | None]]:
    order: list[str] = []
    groups: dict[str, str | None] = {}
    for run in (a, b):
        for name in run.config.get("tasks") or []:
            if name not in order:
                order.append(name)
        for entry in run.results.get("tasks", []):
            groups.setdefault(entry["task"], entry.get("group"))
            if entry["task"] not in order:
                order.append(entry["task"])
    return order, groups


def suite_indices(*runs: Run) -> dict[str, int]:
    """Each task's index in its suite (results.json's ``index``; older runs: its position in ``config.tasks``).

    LIBERO names run to 90 characters and share long prefixes: tables and charts label tasks by index + name.
    """
    index: dict[str, int] = {}
    for run in runs:
        for entry in run.results.get("tasks", []):
            if isinstance(entry.get("index"), int):
                index.setdefault(entry["task"], entry["index"])
        for i, name in enumerate(run.config.get("tasks") or []):
            index.setdefault(name, i)
    return index


VERDICTS = {"B better": "B better than A", "A better": "B worse than A"}


def recorded_rule_interval(stopping: dict[str, Any]) -> dict[str, Any] | None:
    """The ``--until decided`` rule's own interval at its stop: as recorded, or recomputed from the block."""
    from lerobench.plan.stopping import rule_interval

    versus = stopping["versus"]
    if versus.get("decision_interval") or versus.get("metric") == "progress":
        return versus.get("decision_interval")  # progress: the differences are in the episodes, not the block
    design = versus.get("design")
    if design and not design.get("table"):
        return None  # recorded before the design's table was kept
    from lerobench.stats.stagewise import from_rows

    actions = from_rows(design["table"]) if design else None
    return rule_interval(actions, stopping["alpha"], versus["gained"], versus["lost"], versus["pairs"],
                         (design or {}).get("effect", 1) > 0)


def sequential_analysis(a: Run, b: Run) -> dict[str, Any] | None:
    """The analysis by the rule that stopped a run, when an ``--until`` rule did (None: nothing stopped either).

    A run B decided ``--versus`` A by ``--until decided`` is analysed with that rule: its decision, its own
    interval (``recorded_rule_interval``) and p-value; a fixed-n analysis of it is descriptive only. A run stopped
    by a rule on its own rate (``halfwidth``, ``suite-halfwidth``) has no sequential analysis of a difference:
    said, and the fixed-n figures are marked descriptive.
    """
    from lerobench.plan.stopping import stopping_line

    for label, run in (("B", b), ("A", a)):
        stopping = run.results.get("stopping")
        if not stopping:
            continue
        rule = f"--until {stopping.get('rule')}"
        if label == "B" and stopping.get("versus"):
            versus = stopping["versus"]
            against = versus.get("versus")
            same = bool(against) and Path(against).resolve() == Path(a.path).resolve()
            interval = recorded_rule_interval(stopping)
            return {"run": "B", "rule": rule, "designed": bool(versus.get("design")), "decision": versus["decision"],
                    "metric": versus.get("metric", "success"),
                    "pairs": versus["pairs"], "gained": versus["gained"], "lost": versus["lost"],
                    "interval": interval, "p_value": (interval or {}).get("p_value"), "versus": against,
                    "against_this_a": same, "line": stopping_line(stopping)}
        return {"run": label, "rule": rule, "decision": None, "interval": None, "p_value": None,
                "line": (f"run {label} was stopped by {rule}, a rule on its own success rate: no sequential analysis "
                         f"of the difference exists, so the fixed-n figures are descriptive only")}
    return None


@dataclass
class _Pairing:
    """Which episodes of A and B are compared, and the notes that say what was left out and why."""

    out_a: dict[EpisodeKey, list[bool]]
    out_b: dict[EpisodeKey, list[bool]]
    matched: list[EpisodeKey]
    different_start: set[EpisodeKey]
    unmatched: dict[str, int]
    inputs: dict[str, Any]
    notes: list[str]

    @property
    def paired(self) -> bool:
        return bool(self.matched)


def _pair(a: Run, b: Run) -> _Pairing:
    """Match episodes by (task, episode, seed, init state) and start digest; note what is not compared."""
    out_a, out_b = trial_outcomes(a.records, a.trials), trial_outcomes(b.records, b.trials)
    common = set(out_a) & set(out_b)
    digests_a, digests_b = start_digests(a.records), start_digests(b.records)
    # Same (task, episode, seed, init state) but another start (another scene, a changed backend): not a pair.
    different_start = {k for k in common if k in digests_a and k in digests_b and digests_a[k] != digests_b[k]}
    matched = sorted(common - different_start)
    notes = [f"run {label} is incomplete (complete: false): compared on the episodes it has finished"
             for label, run in (("A", a), ("B", b)) if not run.results.get("complete")]
    notes += [f"run {label} ran on a simulator that failed its golden-state check (--allow-sim-drift): its "
              f"numbers may not be comparable with runs on the pinned stack" for label, run in (("A", a), ("B", b))
              if run.drifted]
    if different_start:
        notes.append(f"{len(different_start)} episodes with the same seed and init state started from different "
                     f"simulator states (start_digest differs): not paired")
    inputs = same_inputs(a.records, b.records, matched)
    inputs_note = describe_inputs(inputs)
    if inputs_note and not treatment(a, b):  # one treatment: the inputs should have been the same
        notes.append(inputs_note)
        cause = mkl_cause(a, b, inputs)
        if cause:
            inputs["cause"] = "mkl"
            notes.append(cause)
    if matched:
        unmatched = {"a": len(set(out_a) - set(matched)), "b": len(set(out_b) - set(matched))}
        if unmatched["a"] or unmatched["b"]:
            notes.append(f"paired on the {len(matched)} episodes both runs finished with the same seed and start "
                         f"state; left out: {unmatched['a']} of A, {unmatched['b']} of B")
    else:
        unmatched = {"a": len(out_a), "b": len(out_b)}
        notes.append("no episode matches (different seeds or start states): UNPAIRED comparison of two "
                     "independent samples, far less powerful than a paired one")
    tasks_a, tasks_b = {k[0] for k in out_a}, {k[0] for k in out_b}
    for label, only in (("A", tasks_a - tasks_b), ("B", tasks_b - tasks_a)):
        if only:
            notes.append(f"tasks only in run {label} (not compared): {', '.join(sorted(only))}")
    return _Pairing(out_a, out_b, matched, different_start, unmatched, inputs, notes)


def _strata(pairing: _Pairing, order: list[str], k: int,
            within: bool = False) -> dict[str, tuple[list[bool], list[bool]]]:
    """Per task, A's and B's outcomes at trial ``k`` (``within``: any success in trials 0..k, pass@k+1)."""
    pick = (lambda v: any(v[: k + 1])) if within else (lambda v: v[k])
    out_a, out_b = pairing.out_a, pairing.out_b
    strata = {}
    for name in order:
        if pairing.paired:
            keys = [key for key in pairing.matched if key[0] == name]
            pair = ([pick(out_a[key]) for key in keys], [pick(out_b[key]) for key in keys])
        else:
            pair = ([pick(v) for key, v in sorted(out_a.items()) if key[0] == name],
                    [pick(v) for key, v in sorted(out_b.items()) if key[0] == name])
        if pair[0] and pair[1]:
            strata[name] = pair
    return strata


def _verdict(result: dict[str, Any], a: Run, b: Run) -> None:
    """The headline: fixed-n tests, unless a rule stopped run B (then its decision; fixed-n is descriptive)."""
    overall, notes = result["overall"], result["notes"]
    worse_tasks = [t["task"] for t in result["tasks"] if t["significant"] and t["difference"] < 0]
    result["worse_tasks"] = worse_tasks
    result["b_worse"] = bool(worse_tasks) or (overall["significant"] and overall["difference"] < 0)
    if overall["significant"]:
        result["verdict"] = "B better than A" if overall["difference"] > 0 else "B worse than A"
    else:
        result["verdict"] = "no significant difference overall"
    sequential = sequential_analysis(a, b)
    result["sequential"] = sequential
    result["verdict_by"] = "fixed-n tests"
    result["descriptive"] = sequential is not None  # a fixed-n analysis after a sequential stop
    if sequential is None:
        return
    decision = sequential["decision"]
    if decision is not None:  # the rule that stopped B decides the headline, not the fixed-n test
        result["verdict"] = VERDICTS.get(decision, decision)
        if sequential["metric"] == "progress" and decision != "undecided":
            result["verdict"] += " on mean progress (max_progress), not success"
        result["verdict_by"] = f"the rule that stopped run B ({sequential['rule']})"
        result["b_worse"] = decision == "A better"
        if not sequential["against_this_a"]:
            notes.append(f"run B was decided against {sequential['versus']}, not {a.path}: the rule's analysis "
                         f"is of that pairing")
    else:
        result["verdict_by"] = "fixed-n tests, descriptive only after a sequential stop"
    notes.append("fixed-n intervals and p-values in this comparison are descriptive only: a run was stopped by "
                 "a sequential rule, after which they are not valid")


def compare_runs(a: Run, b: Run, alpha: float = 0.05, allow_different: bool = False) -> dict[str, Any]:
    """The full comparison of run B against run A (``difference`` = rate(B) - rate(A)).

    Raises:
        CompareError: The runs' episodes differ (suite, backend options, tasks, protocol, step limit, seed,
            simulator: ``lerobench.core.identity``) and ``allow_different`` is False; or they share no task with
            finished episodes.
    """
    if not 0 < alpha < 1:
        raise CompareError(f"--alpha must be between 0 and 1, got {alpha}")
    found = differences(a, b)
    if found and not allow_different:
        raise CompareError(f"{a.path} and {b.path} ran different episodes ({'; '.join(found)}); "
                           f"pass --allow-different to compare them anyway")
    trials = min(a.trials, b.trials)
    pairing = _pair(a, b)
    paired = pairing.paired
    order, groups = _task_order(a, b)
    headline = _strata(pairing, order, 0)
    if not headline:
        raise CompareError(f"{a.path} and {b.path} have no task with finished episodes in both runs")
    result: dict[str, Any] = {
        "a": a.summary(), "b": b.summary(), "paired": paired, "matched_episodes": len(pairing.matched),
        "unmatched_episodes": pairing.unmatched, "start_digest_mismatches": len(pairing.different_start),
        "alpha": alpha, "same_observations_throughout": pairing.inputs,
        "differences": found, "treatment": treatment(a, b), "notes": pairing.notes,
        "trials_compared": trials, **_compare_trial(headline, groups, paired, alpha),
    }
    if trials > 1:
        result["per_trial"] = [{"trial": k, **_compare_trial(_strata(pairing, order, k), groups, paired, alpha)}
                               for k in range(trials)]
        # pass@k: success within the first k trials, compared episode by episode like a trial
        result["pass_at_k"] = [{"k": k + 1, **_compare_trial(_strata(pairing, order, k, within=True), groups,
                                                             paired, alpha)} for k in range(trials)]
    index = suite_indices(a, b)
    for task in result["tasks"]:
        task["index"] = index.get(task["task"])
    _verdict(result, a, b)
    return result
