"""``lerobench merge``: shard outputs (``--shard I/N``) put back together into one run.

Why a merge step instead of a shared results file: shards run on different machines, often on a
network filesystem where a shared append-only file or SQLite database (vla-eval's choice) is unsafe.
Each shard writes its own directory exactly as an unsharded run would; merging reads them, checks
that they really are parts of one run, and writes one ``episodes.jsonl`` and ``results.json`` whose
aggregates are those of the unsharded run (an episode is a pure function of (seed, task, episode)).

What is refused (one-line ``MergeError`` naming the field or unit): shards whose result-defining
settings differ, and two records of one (task, episode, trial) with different outcomes. Identical
duplicates (a unit present in two directories, e.g. an overlapping rerun) are kept once. Missing
units are not an error: the merged run says ``complete: false`` and lists them.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lerobench.core.digest_compare import first_difference
from lerobench.core.files import write_json_atomic
from lerobench.core.identity import diff
from lerobench.core.provenance import provenance
from lerobench.core.records import EpisodeRecord
from lerobench.core.results import (
    EPISODES_FILE,
    RESULTS_FILE,
    SCHEMA_VERSION,
    check_output_dir,
    lerobot_eval_info,
    rewrite_episodes,
    summarize,
)
from lerobench.core.rundir import RunDir, RunDirError
from lerobench.core.shards import all_units
from lerobench.core.trials import group_episodes, is_whole, whole_episodes
from lerobench.errors import LerobenchError
from lerobench.policies.invariance import with_checks
from lerobench.suite.config import Suite

MUST_MATCH = ("episodes_per_task",)
"""Besides the run's identity (``lerobench.core.identity``: episodes and treatment), the extent every shard must
share; ``shard`` differs by design."""

FLOAT_RTOL = 1e-9
"""Relative tolerance for float outcomes of duplicate records (return, max_reward): the same episode
rerun on another CPU may differ in the last bits; success, steps and errors must match exactly."""


class MergeError(LerobenchError):
    """Shard directories that cannot be merged into one run (different settings, conflicting episodes)."""


ShardRun = RunDir
"""One input directory as merge reads it (``lerobench.core.rundir.RunDir``)."""


def read_shard(path: Path) -> RunDir:
    """Read and validate one shard directory without modifying it (an unterminated last line is flagged)."""
    try:
        return RunDir.load(path)
    except RunDirError as exc:
        raise MergeError(f"cannot merge: {exc}") from exc


def check_compatible(shards: Sequence[RunDir]) -> None:
    """Refuse shards whose identity or extent differ, naming the field and both values."""
    first = shards[0]
    for other in shards[1:]:
        found = diff(first.identity, other.identity)
        found += [f"{key}: {first.config.get(key)!r} vs {other.config.get(key)!r}" for key in MUST_MATCH
                  if first.config.get(key) != other.config.get(key)]
        if found:
            raise MergeError(f"cannot merge: {first.path} and {other.path} are different runs ({'; '.join(found)})")


def check_distinct(inputs: Sequence[Path]) -> None:
    """Refuse one directory given twice (also through another path or a link): its time would count twice."""
    seen: dict[Path, Path] = {}
    for p in inputs:
        real = Path(p).resolve()
        if real in seen:
            same = "" if Path(p) == seen[real] else f" (as {seen[real]} and {p})"
            raise MergeError(f"cannot merge: {p} is given twice{same}: list each shard directory once")
        seen[real] = Path(p)


def check_not_copies(shards: Sequence[RunDir]) -> None:
    """Refuse two directories that hold the same run's output (a copy): same shard, same start time.

    A shard rerun elsewhere starts at another time and merges (its duplicates kept once); a copy would only
    double its time and halve its rates.
    """
    seen: dict[tuple[Any, Any], Path] = {}
    for s in shards:
        started = (s.results.get("provenance") or {}).get("started")
        key = (s.config.get("shard"), started)
        if started is not None and key in seen:
            raise MergeError(f"cannot merge: {seen[key]} and {s.path} hold the same run (shard "
                             f"{key[0] or 'unsharded'} started {started}): one is a copy of the other; list it once")
        seen[key] = s.path


def _outcome(r: EpisodeRecord) -> tuple[Any, ...]:
    """What two records of the same unit must agree on (timings, videos and error texts may differ)."""
    return (r.seed, r.init_state, r.success, r.success_at_end, r.steps, r.error is not None)


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=FLOAT_RTOL, abs_tol=1e-12)


def combine(shards: Sequence[ShardRun], tasks: Sequence[str]) -> list[tuple[EpisodeRecord, Path]]:
    """Every (task, episode, trial) record once, sorted by task order, episode, trial, with its directory.

    The first directory's copy of a duplicate is kept; a duplicate with another outcome is refused.
    Records of tasks or episodes outside the run are refused too (they cannot belong to it).
    """
    order = {name: i for i, name in enumerate(tasks)}
    episodes = shards[0].config.get("episodes_per_task")
    if not isinstance(episodes, int):
        raise MergeError(f"cannot merge {shards[0].path}: its results.json config has no episodes_per_task "
                         f"(got {episodes!r})")
    kept: dict[tuple[str, int, int], tuple[EpisodeRecord, Path]] = {}
    for shard in shards:
        for r in shard.records:
            if r.task not in order or not 0 <= r.episode < episodes:
                raise MergeError(f"cannot merge {shard.path}: it holds task {r.task!r} episode {r.episode}, "
                                 f"outside the run ({len(tasks)} tasks x {episodes} episodes)")
            key = (r.task, r.episode, r.trial)
            if key not in kept:
                kept[key] = (r, shard.path)
                continue
            seen, where = kept[key]
            if _outcome(seen) != _outcome(r) or not _close(seen.return_, r.return_) \
                    or not _close(seen.max_reward, r.max_reward):
                raise MergeError(f"cannot merge: task {r.task!r} episode {r.episode} trial {r.trial} has different "
                                 f"outcomes in {where} and {shard.path} (success {seen.success} vs {r.success}, "
                                 f"steps {seen.steps} vs {r.steps}, error {seen.error!r:.60} vs {r.error!r:.60})")
            differs = first_difference(seen, r) if seen.obs_digest and r.obs_digest else None
            if differs is not None:
                raise MergeError(f"cannot merge: task {r.task!r} episode {r.episode} trial {r.trial} showed the policy "
                                 f"other observations in {where} and {shard.path} (same outcome; first differing "
                                 f"read: {differs.describe()}): a stale simulator or another policy")
    return [kept[k] for k in sorted(kept, key=lambda k: (order[k[0]], k[1], k[2]))]


def missing_units(records: Sequence[EpisodeRecord], tasks: Sequence[str], episodes: int,
                  trials: int) -> list[tuple[str, int]]:
    """(task, episode) units without a finished episode: all ``trials`` trials, or trials 0..j with j an error."""
    finished = {unit for unit, rs in group_episodes(records).items() if is_whole(rs, trials)}
    return [unit for unit in all_units(tasks, episodes) if unit not in finished]


def load_run_suite(config: dict[str, Any], shard_dirs: Sequence[Path] = ()) -> Suite:
    """The suite the shards ran, narrowed to their tasks: from their ``suite_file`` first, else the shipped one.

    A custom suite may share a shipped suite's name (an edited ``libero_spatial.toml``): the shards' own file
    defines their tasks, descriptions and groups. A relative ``suite_file`` (runs before paths were stored
    absolute) is tried from here, then from beside each shard directory.
    """
    from lerobench.suite.registry import load_suite, shipped_suite_paths

    name, source = config.get("suite"), config.get("suite_file")
    candidates: list[str] = []
    if source:
        path = Path(source)
        tried = [path] if path.is_absolute() else [path, *(d.parent / path for d in shard_dirs),
                                                      *(d / path for d in shard_dirs)]
        candidates += [str(p) for p in tried if p.is_file()]
    if name in shipped_suite_paths():
        candidates.append(name)
    for candidate in candidates:
        try:
            suite = load_suite(candidate)
        except LerobenchError:
            continue
        if suite.name == name:
            return suite.select_tasks(config.get("tasks"))
    raise MergeError(f"cannot merge: suite {name!r} is neither shipped nor readable from {source!r} on this "
                     f"machine (its task descriptions and groups are needed for results.json)")


def version_notes(shards: Sequence[ShardRun]) -> list[str]:
    """Package versions that differ between shards (mujoco changes LIBERO scores): worth a warning."""
    seen: dict[str, dict[str, list[str]]] = {}
    for s in shards:
        prov = s.results.get("provenance") or {}
        versions = {"lerobench": prov.get("lerobench"), **(prov.get("versions") or {})}
        for package, version in versions.items():
            seen.setdefault(package, {}).setdefault(str(version), []).append(str(s.path))
    return [f"shards ran different {package} versions: "
            + "; ".join(f"{v} in {', '.join(dirs)}" for v, dirs in by_version.items())
            for package, by_version in seen.items() if len(by_version) > 1]


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link a video into the merged directory (free, survives deleting the shard), else copy it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _timing(shards: Sequence[ShardRun], n_records: int) -> dict[str, Any]:
    """Summed shard time (machine-seconds, not wall time), the rates over it, and the shards' policy calls."""
    eval_s = sum(float(s.results.get("overall", {}).get("eval_s") or 0.0) for s in shards)
    steps = sum(float(s.results.get("overall", {}).get("env_steps_per_s") or 0.0)
                * float(s.results.get("overall", {}).get("eval_s") or 0.0) for s in shards)
    calls = sum(int(s.results.get("overall", {}).get("policy_calls") or 0) for s in shards)
    rows = sum(int(s.results.get("overall", {}).get("policy_calls") or 0)
               * float(s.results.get("overall", {}).get("rows_per_call") or 0.0) for s in shards)
    busy = sum(float(s.results.get("overall", {}).get("policy_busy_s") or 0.0) for s in shards)
    return {"eval_s": round(eval_s, 3),
            "episodes_per_s": round(n_records / eval_s, 4) if eval_s > 0 else None,
            "env_steps_per_s": round(steps / eval_s, 2) if eval_s > 0 else None,
            "policy_calls": calls or None, "rows_per_call": round(rows / calls, 3) if calls else None,
            "policy_busy_s": round(busy, 3) if calls else None,
            "policy_busy_fraction": round(busy / eval_s, 4) if calls and eval_s > 0 else None,
            "call_shape": _call_shape([s.results.get("overall", {}).get("call_shape") for s in shards], calls, rows,
                                      busy)}


def _call_shape(shapes: list[Any], calls: int, rows: float, busy: float) -> dict[str, Any] | None:
    """The shards' call shapes summed (``CallStats.call_shape``); None unless every shard has one, at one width."""
    if not shapes or not all(isinstance(x, dict) for x in shapes) or len({x["call_width"] for x in shapes}) != 1:
        return None
    model, padded = sum(x["model_calls"] for x in shapes), sum(x["padded_rows"] for x in shapes)
    computed = rows + padded
    return {"call_width": shapes[0]["call_width"], "model_calls": model, "padded_rows": padded,
            "model_calls_per_request": round(model / calls, 3) if calls else None,
            "padding_share": round(padded / computed, 4) if computed else 0.0,
            "padding_s_estimate": round(busy * padded / computed, 3) if computed else 0.0}


def merge(output: Path, inputs: Sequence[Path], command: Sequence[str] | None = None) -> dict[str, Any]:
    """Merge shard directories ``inputs`` into ``output``; return the merged results.json document."""
    started = datetime.now(timezone.utc)
    if not inputs:
        raise MergeError("lerobench merge needs at least one shard directory")
    resolved = {Path(p).resolve() for p in inputs}
    if output.resolve() in resolved:
        raise MergeError(f"--output {output} is one of the shard directories: choose a new directory")
    check_distinct(inputs)
    shards = [read_shard(Path(p)) for p in inputs]
    check_compatible(shards)
    check_not_copies(shards)
    config = shards[0].config
    suite = load_run_suite(config, [Path(p) for p in inputs])
    tasks = [t.name for t in suite.tasks]
    if tasks != config.get("tasks"):
        raise MergeError(f"cannot merge: suite {suite.name!r} on this machine has tasks {tasks}, the shards ran "
                         f"{config.get('tasks')}")
    episodes, trials = shards[0].episodes_per_task, shards[0].trials
    check_output_dir(output)
    if (output / EPISODES_FILE).exists() and (output / EPISODES_FILE).stat().st_size > 0:
        raise MergeError(f"{output / EPISODES_FILE} already holds episodes: merge into a new --output directory")
    combined = combine(shards, tasks)
    # Like --resume: an episode cut between its trials is not half-counted, it is missing (rerun it whole).
    whole = {(r.task, r.episode, r.trial) for r in whole_episodes([r for r, _ in combined], trials)}
    merged = [(r, origin) for r, origin in combined if (r.task, r.episode, r.trial) in whole]
    records = [r for r, _ in merged]
    halves = sorted({(r.task, r.episode) for r, _ in combined} - {(r.task, r.episode) for r in records})
    notes = version_notes(shards) + [n for s in shards for n in s.notes]
    notes += [f"{s.path / EPISODES_FILE}: ignored an unterminated last line (killed mid-write; that episode "
              f"counts as missing)" for s in shards if s.cut_tail]
    notes += [f"{s.path / 'recordings'}: --record trajectories are not merged; they stay in the shard directory"
              for s in shards if (s.path / "recordings").is_dir()]
    notes += [f"task {t!r} episode {e}: left out, its trials stop before the last one without an error "
              f"(interrupted between trials); it counts as missing" for t, e in halves]
    for r, origin in merged:
        if r.video:
            source = origin / r.video
            if source.is_file():
                link_or_copy(source, output / r.video)
            else:
                notes.append(f"video {source} is missing: task {r.task!r} episode {r.episode} keeps its name only")
    missing = missing_units(records, tasks, episodes, trials)
    rewrite_episodes(output / EPISODES_FILE, records)
    summary = summarize(suite, records, trials)
    summary["overall"].update(_timing(shards, len(records)))
    results = {
        "schema_version": SCHEMA_VERSION, "suite": config.get("suite"), "policy": config.get("policy"),
        "complete": not missing,
        "config": with_checks({**config, "shard": None, "output": str(output)},
                              [r.policy_check for r in records if r.policy_check is not None]),
        "provenance": provenance(command if command is not None else sys.argv, started,
                                 datetime.now(timezone.utc)),
        "missing": [{"task": t, "episode": e} for t, e in missing], "merge_notes": notes,
        "shards": [{"dir": str(s.path), "shard": s.config.get("shard"), "complete": s.results.get("complete"),
                    "records": len(s.records), "cut_unterminated_line": s.cut_tail,
                    "provenance": s.results.get("provenance")} for s in shards],
        **summary,
    }
    write_json_atomic(output / RESULTS_FILE, results)
    if "lerobot" in (config.get("formats") or []):
        write_json_atomic(output / "eval_info.json", lerobot_eval_info(suite, records, summary["overall"]["eval_s"]))
    return results
