"""``eval --versus RUN_DIR``: the recorded run A that the evaluated policy B is paired with.

B must play exactly A's episodes, so the two runs must share their identity (suite, tasks, protocol and its
settings, seed, backend options where recorded); anything else is refused naming the field and both values.
``identity_differences`` is the one place that decides it (issue 19's identity diff can replace it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobench.errors import ConfigError

IDENTITY_FIELDS = ("suite", "tasks", "protocol", "protocol_settings", "seed", "backend_options")
"""Config keys that must agree for B's episode k of a task to be A's episode k (``backend_options``: if recorded)."""


def identity_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One sentence per identity field that differs between run A's config and this run's, naming both values."""
    current = json.loads(json.dumps(current))  # tuples -> lists, as the recorded config was stored
    out = []
    for key in IDENTITY_FIELDS:
        if key == "backend_options" and (key not in recorded or key not in current):
            continue
        old, new = recorded.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):  # name the setting inside, e.g. protocol_settings.max_steps
            out += [f"{key}.{k} differs (recorded run {old.get(k)!r}, this run {new.get(k)!r})"
                    for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        elif old != new:
            out.append(f"{key} differs (recorded run {old!r}, this run {new!r})")
    return out


@dataclass(frozen=True)
class Recorded:
    """Run A as the ledger needs it: trial-0 success per (task, episode) and its episodes per task."""

    path: Path
    outcomes: dict[tuple[str, int], bool]
    episodes_per_task: int
    policy: str | None


def load_recorded(path: Path, current: dict[str, Any]) -> Recorded:
    """Read run A, refuse a different identity or missing episodes; ``current`` is this run's config."""
    from lerobench.analysis.compare import load_run
    from lerobench.errors import LerobenchError

    try:
        run = load_run(path)
    except LerobenchError as exc:
        raise ConfigError(f"--versus: {exc}") from exc
    stored = run.config
    current = {**current, "tasks": list(current.get("tasks", []))}
    problems = identity_differences(stored, current)
    if problems:
        raise ConfigError(f"--versus {path}: not the same episodes: {problems[0]}")
    cap = int(stored.get("episodes_per_task") or 0)
    outcomes = {(r.task, r.episode): bool(r.success) for r in run.records if r.trial == 0 and r.episode < cap}
    for task in current["tasks"]:
        for episode in range(cap):
            if (task, episode) not in outcomes:
                raise ConfigError(f"--versus {path}: the recorded run has no episode {episode} of task {task!r} "
                                  f"(finish it with `lerobench eval --resume --output {path}`)")
    return Recorded(path=path, outcomes=outcomes, episodes_per_task=cap, policy=run.results.get("policy"))
