"""Multi-trial episodes (``--trials K``): per-trial aggregates, the adaptation delta, whole-episode resume.

An episode is K trials of one task from one start; ``episodes.jsonl`` holds one line per trial. An
error ends the episode: the erroring trial's line has ``error`` set and later trials have no line.
For aggregation such an episode counts as a failure at every trial index from the erroring one on,
so every per-trial row has the same ``n`` (the number of episodes) and trials stay paired.

Statistics: one rate gets an exact (Clopper-Pearson) 95% interval (as everywhere in lerobench); the adaptation delta
``rate(trial k) - rate(trial 0)`` compares two outcomes of the *same* episode, so it is paired:
``lerobench.stats.binomial.compare_paired`` gives the Bonett-Price paired CI and the exact McNemar p-value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lerobench.core.progress import trial_progress
from lerobench.core.records import EpisodeRecord
from lerobench.stats.binomial import CI_METHOD, compare_paired, exact_interval, rate_block


def is_whole(trial_records: Sequence[EpisodeRecord], trials: int) -> bool:
    """True if one episode's records (sorted by trial) are trials 0..K-1, or 0..j with trial j errored."""
    indices = [r.trial for r in trial_records]
    if not indices or indices != list(range(len(indices))) or len(indices) > trials:
        return False
    errors = [r.error is not None for r in trial_records]
    if any(errors[:-1]):
        return False
    return errors[-1] or len(indices) == trials


def group_episodes(records: Iterable[EpisodeRecord]) -> dict[tuple[str, int], list[EpisodeRecord]]:
    """Records per (task, episode), each list sorted by trial; the first line of a duplicated trial wins."""
    grouped: dict[tuple[str, int], dict[int, EpisodeRecord]] = {}
    for r in records:
        grouped.setdefault((r.task, r.episode), {}).setdefault(r.trial, r)
    return {key: [by_trial[k] for k in sorted(by_trial)] for key, by_trial in grouped.items()}


def whole_episodes(records: Iterable[EpisodeRecord], trials: int) -> list[EpisodeRecord]:
    """The records of whole episodes only (see ``is_whole``), in their original order.

    Used on resume: an episode interrupted between its trials lost the policy's memory with the
    process, so it is dropped and rerun from trial 0 rather than continued.
    """
    records = list(records)
    keep = {key for key, rs in group_episodes(records).items() if is_whole(rs, trials)}
    seen: set[tuple[str, int, int]] = set()
    out = []
    for r in records:
        if (r.task, r.episode) in keep and (r.task, r.episode, r.trial) not in seen:
            seen.add((r.task, r.episode, r.trial))
            out.append(r)
    return out


def outcomes(trial_records: Sequence[EpisodeRecord], trials: int) -> list[bool]:
    """One episode's success per trial index; missing trials (after an error) and errors are failures."""
    by_trial = {r.trial: r for r in trial_records}
    result, broken = [], False
    for k in range(trials):
        r = by_trial.get(k)
        broken = broken or r is None or r.error is not None
        result.append(not broken and bool(r and r.success))
    return result


def _rate_row(k: int, successes: int, n: int) -> dict[str, Any]:
    return {"trial": k, **rate_block(successes, n), "ci95_method": CI_METHOD}


def unbiased_pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one success among k of an episode's n trials drawn without replacement), c of them successes.

    The unbiased estimator of pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"):
    ``1 - C(n-c, k) / C(n, k)``, computed as a product so it never overflows. Exact for exchangeable trials;
    with memory kept across trials (what ``--trials`` measures) the first k trials are not a random k of n, so
    results.json reports it beside the rate within the first k (``within_first_k``).
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    fail_all = 1.0
    for i in range(n - c + 1, n + 1):
        fail_all *= 1.0 - k / i
    return 1.0 - fail_all


def pass_at_k(table: Sequence[Sequence[bool]]) -> list[dict[str, Any]]:
    """pass@k for k = 1..K over episodes (rows of per-trial outcomes): within the first k, and unbiased."""
    n_episodes = len(table)
    out = []
    trials = len(table[0]) if table else 0
    for k in range(1, trials + 1):
        within = sum(any(o[:k]) for o in table)
        unbiased = sum(unbiased_pass_at_k(trials, sum(o), k) for o in table) / n_episodes if n_episodes else None
        out.append({"k": k, "n": n_episodes, "within_first_k": within / n_episodes if n_episodes else None,
                    "ci95": exact_interval(within, n_episodes), "ci95_method": CI_METHOD,
                    "unbiased": round(unbiased, 6) if unbiased is not None else None})
    return out


def trial_summary(records: Iterable[EpisodeRecord], trials: int) -> dict[str, Any]:
    """The keys a block of results.json gains when K > 1: per_trial, success_within_k, pass_at_k, adaptation."""
    episodes = list(group_episodes(records).values())
    table = [outcomes(rs, trials) for rs in episodes]
    n = len(table)
    per_trial = [_rate_row(k, sum(o[k] for o in table), n) for k in range(trials)]
    within = [_rate_row(k, sum(any(o[: k + 1]) for o in table), n) for k in range(trials)]
    adaptation = []
    for k in range(1, trials):
        c = compare_paired([o[0] for o in table], [o[k] for o in table])
        adaptation.append({"trial": k, "delta": c.delta, "ci95": c.ci95, "p_value": c.p_value, "n": c.n,
                           "gained": c.gained, "lost": c.lost})
    progress = trial_progress(episodes, trials)
    if progress is not None:  # beside each trial's success rate, where the backend defines progress
        per_trial = [{**row, "progress": p} for row, p in zip(per_trial, progress, strict=True)]
    return {"trials": trials, "per_trial": per_trial, "success_within_k": within, "pass_at_k": pass_at_k(table),
            "adaptation": adaptation}
