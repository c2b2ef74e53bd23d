"""An episode's task progress as the analysis reads it, and the progress block of results.json.

Each backend that defines progress (``progress()`` on its simulator: PushT's coverage, LIBERO's fraction of goal
conditions, Meta-World's reward over its maximum; docs/statistics.md) records two numbers per episode line: the
highest value at any step (``max_progress``, the analogue of ``success``: solved at any step) and the value after
the last step (``progress``, the analogue of ``success_at_end``). The headline is the highest.

An episode that ended in an error has no progress on its line; here it counts as 0, as an error counts as a
failure for the success rate, so every episode of a block is counted and runs stay paired. A block in which no
line carries progress (a backend without a definition, files from before it) has no progress block, and a line
written before its backend defined progress (a resumed older run) is left out of the means: nothing is invented.

``progress_by_episode`` and ``progress_differences`` are what a paired analysis reads (one value per
(task, episode) in index order, never in finish order).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lerobench.core.records import EpisodeRecord

EpisodeKey = tuple[str, int]

PROGRESS_NOTE = ("progress: each episode's highest task progress in [0, 1] by the benchmark's own definition "
                 "(docs/statistics.md), mean over episodes (an error counts 0); 95% CI: betting (one task), "
                 "Hoeffding-Bentkus (several)")
"""What the progress columns of the summary table and the report show."""


def defines_progress(records: Iterable[EpisodeRecord]) -> bool:
    """Whether any line of ``records`` carries progress (its backend defines it)."""
    return any(r.max_progress is not None for r in records)


def episode_progress(record: EpisodeRecord, at_end: bool = False) -> float:
    """One line's progress in [0, 1]: the highest (``at_end``: the final); 0 for an error or a line without it."""
    value = record.progress if at_end else record.max_progress
    return 0.0 if record.error is not None or value is None else float(value)


def counted(record: EpisodeRecord) -> bool:
    """Whether a line counts towards progress: it carries progress, or ended in an error (which counts 0).

    A line without either was written before its backend defined progress (a resumed or merged older run):
    left out, never counted as 0.
    """
    return record.error is not None or record.max_progress is not None


def progress_by_episode(records: Iterable[EpisodeRecord], trial: int = 0,
                        at_end: bool = False) -> dict[EpisodeKey, float]:
    """(task, episode) -> that episode's progress at ``trial``, in (task, episode) order; errors count 0."""
    chosen = sorted((r for r in records if r.trial == trial and counted(r)), key=lambda r: (r.task, r.episode))
    out: dict[EpisodeKey, float] = {}
    for r in chosen:
        out.setdefault((r.task, r.episode), episode_progress(r, at_end))
    return out


def progress_differences(a: Iterable[EpisodeRecord], b: Iterable[EpisodeRecord], trial: int = 0) -> list[float]:
    """Per pair, progress(B) - progress(A) in [-1, 1], over the (task, episode) keys both runs have, in index order.

    The paired outcome a progress A/B decides on (issue 62 item 2), as ``compare`` pairs successes.
    """
    pa, pb = progress_by_episode(a, trial), progress_by_episode(b, trial)
    return [pb[key] - pa[key] for key in sorted(pa.keys() & pb.keys())]


def progress_block(records: Sequence[EpisodeRecord]) -> dict[str, Any] | None:
    """The ``progress`` block of a results.json aggregate (one record per episode), or None without progress.

    ``mean`` and ``ci95``: the highest progress; ``mean_at_end`` and ``ci95_at_end``: the final. One task: the
    betting interval over the episodes in index order; several: Hoeffding–Bentkus (``stats/bounded.py``).
    """
    if not defines_progress(records):
        return None
    from lerobench.stats.bounded import BETTING_METHOD, HB_METHOD, betting_interval, hoeffding_bentkus_interval

    ordered = sorted((r for r in records if counted(r)), key=lambda r: (r.task, r.episode, r.trial))
    one_task = len({r.task for r in ordered}) <= 1
    interval = betting_interval if one_task else hoeffding_bentkus_interval
    highest = [episode_progress(r) for r in ordered]
    final = [episode_progress(r, at_end=True) for r in ordered]
    return {"n_episodes": len(ordered), "mean": _mean(highest), "ci95": _rounded(interval(highest)),
            "mean_at_end": _mean(final), "ci95_at_end": _rounded(interval(final)),
            "ci95_method": BETTING_METHOD if one_task else HB_METHOD}


def trial_progress(episodes: Sequence[Sequence[EpisodeRecord]], trials: int) -> list[dict[str, Any]] | None:
    """Per trial index k, the mean highest progress over ``episodes`` (each its lines, by trial) with its interval.

    A trial without a line (after an error) or with an error counts 0, as ``trials.outcomes`` counts it a
    failure; None where no line carries progress.
    """
    if not defines_progress(r for rs in episodes for r in rs):
        return None
    from lerobench.stats.bounded import BETTING_METHOD, HB_METHOD, betting_interval, hoeffding_bentkus_interval

    ordered = sorted(episodes, key=lambda rs: (rs[0].task, rs[0].episode))
    one_task = len({rs[0].task for rs in ordered}) <= 1
    interval = betting_interval if one_task else hoeffding_bentkus_interval
    out = []
    for k in range(trials):
        values = []
        for rs in ordered:
            by_trial = {r.trial: r for r in rs}
            broken = any(r.error is not None for r in rs if r.trial < k)
            line = by_trial.get(k)
            if broken or line is None:
                values.append(0.0)
            elif counted(line):
                values.append(episode_progress(line))
        out.append({"mean": _mean(values), "ci95": _rounded(interval(values)),
                    "ci95_method": BETTING_METHOD if one_task else HB_METHOD})
    return out


def _mean(values: Sequence[float]) -> float | None:
    import math

    return round(math.fsum(values) / len(values), 6) if values else None


def _rounded(ci: tuple[float, float]) -> list[float]:
    """Interval ends kept to 6 decimals, outward (the file never claims a narrower interval than computed)."""
    import math

    return [math.floor(ci[0] * 1e6) / 1e6, math.ceil(ci[1] * 1e6) / 1e6]
