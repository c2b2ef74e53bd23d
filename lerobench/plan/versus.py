"""``eval --versus RUN_DIR``: the recorded run A that the evaluated policy B is paired with.

B must play exactly A's episodes, so the two runs must share the *episodes* part of their identity (suite,
backend options, tasks, protocol and its settings, seed, simulator fingerprint: ``lerobench.core.identity``); anything
else is refused naming the field and both values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobench.core.identity import diff
from lerobench.core.records import EpisodeRecord
from lerobench.errors import ConfigError


def identity_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """How run A's episodes differ from this run's: the *episodes* part of the run identity (``plan.identity``).

    One line per field, naming both values; the treatment (policy, replan steps...) is what is being compared.
    """
    return diff(json.loads(json.dumps(recorded)), json.loads(json.dumps(current)), parts=("episodes",),
                labels=("recorded run", "this run"))


MAX_SAID = 4
"""Differences named in a refusal; a run of another suite differs in dozens of fields (tasks, their options)."""


def said_briefly(problems: list[str], width: int = 160) -> str:
    """The first ``MAX_SAID`` differences, each cut to ``width`` characters, and how many more there are.

    Why: run A of another suite differs in every task name and option, and the refusal was ~1,300 characters on
    one line; the suite alone says it (it comes first), the rest is counted.
    """
    suite = [p for p in problems if p.startswith("episodes.suite:")]
    shown = suite or problems[:MAX_SAID]
    text = "; ".join(p if len(p) <= width else p[: width - 1] + "…" for p in shown)
    rest = len(problems) - len(shown)
    return text + (f" (and {rest} more difference{'s' * (rest != 1)})" if rest else "")


@dataclass(frozen=True)
class BaselineRun:
    """Run A as the ledger needs it: trial-0 success per (task, episode) and its episodes per task."""

    path: Path
    outcomes: dict[tuple[str, int], bool]
    episodes_per_task: int
    policy: str | None
    records: dict[tuple[str, int], EpisodeRecord] = field(default_factory=dict)
    """Run A's trial-0 records: B's first observation of each episode must be A's (``first_read_differs``)."""

    def progress(self) -> dict[tuple[str, int], float]:
        """Run A's highest progress per (task, episode) (an error counts 0), for ``--metric progress``.

        Raises ``ConfigError`` (before B runs) when run A's episodes carry no progress: its backend defines none,
        or A was recorded before it did; nothing is invented.
        """
        from lerobench.core.progress import counted, defines_progress, episode_progress

        if not defines_progress(self.records.values()):
            raise ConfigError(f"--metric progress: the --versus run {self.path} has no task progress on its episodes "
                              f"(its backend defines none, or it was recorded before it did; docs/statistics.md): "
                              f"use --metric success")
        missing = [key for key, r in self.records.items() if not counted(r)]
        if missing:
            task, episode = min(missing)
            raise ConfigError(f"--metric progress: the --versus run {self.path} has no progress for episode "
                              f"{episode} of task {task!r} (recorded before its backend defined progress)")
        return {key: episode_progress(r) for key, r in self.records.items()}


def with_recorded_extent(settings: Any) -> Any:
    """``settings`` with run A's episode count as the cap: ``--episodes`` defaults to it and may not exceed it.

    Why here: the plan (and so the progress total, the units, the ``--until`` cap) is made once from settings that
    already say how many episodes run; A's identity is checked later, once this machine's simulator is known.
    """
    from dataclasses import replace

    results = Path(settings.versus) / "results.json"
    try:
        cap = int(json.loads(results.read_text(encoding="utf-8"))["config"]["episodes_per_task"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--versus {settings.versus}: cannot read its episodes per task from {results} "
                          f"({type(exc).__name__}: {exc}); is it a lerobench run directory?") from exc
    if settings.episodes is None:
        return replace(settings, episodes=cap)
    if settings.episodes > cap:
        raise ConfigError(f"--episodes {settings.episodes} is more than the {cap} episodes per task of the "
                          f"--versus run {settings.versus}: there is nothing to pair them with")
    return settings


def load_recorded(path: Path, current: dict[str, Any]) -> BaselineRun:
    """Read run A, refuse a different identity or missing episodes; ``current`` is this run's config."""
    from lerobench.core.rundir import RunDir
    from lerobench.errors import LerobenchError

    try:
        run = RunDir.load(path)
    except LerobenchError as exc:
        raise ConfigError(f"--versus: {exc}") from exc
    stored = run.config
    current = {**current, "tasks": list(current.get("tasks", []))}
    problems = identity_differences(stored, current)
    if problems:
        raise ConfigError(f"--versus {path}: not the same episodes: {said_briefly(problems)}")
    cap = int(stored.get("episodes_per_task") or 0)
    records = {(r.task, r.episode): r for r in run.records if r.trial == 0 and r.episode < cap}
    outcomes = {key: bool(r.success) for key, r in records.items()}
    for task in current["tasks"]:
        for episode in range(cap):
            if (task, episode) not in outcomes:
                raise ConfigError(f"--versus {path}: the recorded run has no episode {episode} of task {task!r} "
                                  f"(finish it with `lerobench eval --resume --output {path}`)")
    return BaselineRun(path=path, outcomes=outcomes, episodes_per_task=cap, policy=run.results.get("policy"),
                       records=records)
