"""Episode records, aggregates (with exact intervals) and the files they are written to.

Only this module (and ``videos.py``) writes files. Every episode line is appended, flushed and
fsynced by one background writer as soon as the episode ends; ``results.json`` is replaced
atomically (temp file + ``os.replace``) so a crash never leaves a half-written or lying file.
"""

from __future__ import annotations

import json
import math
import os
import queue
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lerobench.core.files import json_text, write_json_atomic, write_text_atomic
from lerobench.core.progress import progress_block
from lerobench.core.records import EpisodeRecord
from lerobench.errors import ConfigError, RunError
from lerobench.stats.binomial import CI_METHOD, STRATIFIED_CI_METHOD, exact_interval, file_interval, wilson_interval

if TYPE_CHECKING:
    from lerobench.suite.config import Suite  # summarize reads .tasks and .groups only

EPISODES_FILE = "episodes.jsonl"
RESULTS_FILE = "results.json"
IDENTITY_FILE = "run.json"
"""The run's identity (its ``config`` block), written once before the first episode: what ``--resume`` rebuilds a
missing or damaged ``results.json`` from, with ``episodes.jsonl``."""
SCHEMA_VERSION = 3
"""Version of the ``results.json`` layout (1: before it was written; 2: adds ``config.simulator``, identity keys;
3: ``config.batch_invariant`` is the run's check (a string), ``call_width`` and ``numerics``, ``timing``,
``failure``, episode lines may carry ``policy_check`` and ``clipped``)."""


def _stratified_interval(records: list[EpisodeRecord]) -> list[float]:
    from lerobench.stats.binomial import stratified_exact

    counts: dict[str, list[int]] = {}
    for r in records:
        c = counts.setdefault(r.task, [0, 0])
        c[0] += int(r.success)
        c[1] += 1
    n = len(records)
    p = sum(c[0] for c in counts.values()) / n if n else None
    low, high = stratified_exact([(s, k) for s, k in counts.values()])
    return file_interval(p, low, high)


def _mean(values: list[float]) -> float | None:
    """Mean through ``math.fsum`` (exactly rounded): the same digits whatever order episodes finished in."""
    return math.fsum(values) / len(values) if values else None


@dataclass(frozen=True)
class Aggregate:
    """One block of results.json (a task, a group, overall) over trial-0 records: what ``aggregate`` writes.

    Typed like ``EpisodeRecord`` so the block's keys are declared once; ``to_dict`` is its JSON form.
    """

    n_episodes: int
    successes: int
    success_rate: float | None
    """None (never NaN) when there are no episodes."""
    ci95: list[float]
    """Exact 95% interval: Clopper-Pearson for one task, stratified over several (``ci95_method``)."""
    ci95_method: str
    success_at_end_rate: float | None
    n_errors: int
    """Episodes whose (trial-0) line ended in an error."""
    mean_steps: float | None
    mean_return: float | None
    clipped_action_fraction: float | None
    measured_delays: dict[str, Any] = field(default_factory=dict)
    """``--delay-steps measured`` only: the calls' delays and stale-action fraction (``core/delay.py``)."""
    progress: dict[str, Any] | None = None
    """Mean task progress with its interval (``core/progress.py``); None (the key left out) where no line has it."""

    @classmethod
    def of(cls, records: Iterable[EpisodeRecord]) -> Aggregate:
        """The block for ``records``."""
        records = list(records)
        n = len(records)
        successes = sum(r.success for r in records)
        one_task = len({r.task for r in records}) <= 1
        return cls(n_episodes=n, successes=successes, success_rate=successes / n if n else None,
                   ci95=exact_interval(successes, n) if one_task else _stratified_interval(records),
                   ci95_method=CI_METHOD if one_task else STRATIFIED_CI_METHOD,
                   success_at_end_rate=sum(r.success_at_end for r in records) / n if n else None,
                   n_errors=sum(r.error is not None for r in records), mean_steps=_mean([r.steps for r in records]),
                   mean_return=_mean([r.return_ for r in records]),
                   clipped_action_fraction=_clipped_fraction(records), measured_delays=_measured_delays(records),
                   progress=progress_block(records))

    def to_dict(self) -> dict[str, Any]:
        """The block as results.json writes it (the measured delays' keys at its top level; no progress: no key)."""
        block = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("measured_delays", "progress")}
        if self.progress is not None:
            block["progress"] = self.progress
        return {**block, **self.measured_delays}


def aggregate(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """Counts, success rate with CI, error count and means (``Aggregate``), as results.json writes them."""
    return Aggregate.of(records).to_dict()


def _measured_delays(records: list[EpisodeRecord]) -> dict[str, Any]:
    """``--delay-steps measured``: the calls' delays (mean, p95) and the fraction of stale actions; else nothing."""
    measured = [r for r in records if r.call_delays is not None]
    if not measured:
        return {}
    from lerobench.core.delay import delay_summary

    return delay_summary([d for r in measured for d in r.call_delays or ()], sum(r.steps for r in measured))


def _clipped_fraction(records: list[EpisodeRecord]) -> float | None:
    """Fraction of all action values that were outside the action space (step-weighted over episodes)."""
    known = [r for r in records if r.clipped is not None and r.steps > 0]
    steps = sum(r.steps for r in known)
    return round(math.fsum(r.clipped * r.steps for r in known) / steps, 6) if steps else None  # type: ignore[operator]


def summarize(suite: Suite, records: Iterable[EpisodeRecord], trials: int = 1) -> dict[str, Any]:
    """Per-task, per-group and overall aggregates for the tasks of ``suite`` that have episodes.

    With ``trials`` > 1 (see ``lerobench/core/trials.py``) today's keys describe trial 0, so the headline
    number stays comparable with one-trial runs, and each block gains the per-trial keys.
    """
    by_task: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        by_task.setdefault(r.task, []).append(r)

    def block(rs: list[EpisodeRecord]) -> dict[str, Any]:
        if trials == 1:
            return aggregate(rs)
        from lerobench.core.trials import trial_summary

        return {**aggregate(r for r in rs if r.trial == 0), **trial_summary(rs, trials)}

    tasks, groups = [], {}
    for spec in suite.tasks:
        if spec.name not in by_task:
            continue
        tasks.append({"task": spec.name, "index": spec.index, "description": spec.description, "group": spec.group,
                      **block(by_task[spec.name])})
    for group in suite.groups:
        members = [r for t in suite.tasks if t.group == group for r in by_task.get(t.name, [])]
        if members:
            groups[group] = block(members)
    overall = block([r for rs in by_task.values() for r in rs])
    return {"tasks": tasks, "groups": groups, "overall": overall}


def lerobot_eval_info(suite: Suite, records: Iterable[EpisodeRecord], eval_s: float) -> dict[str, Any]:
    """The same results in LeRobot's ``eval_info.json`` layout (``overall.pc_success`` etc.), no NaN.

    LeRobot has no trials: with ``--trials`` > 1 its episode is lerobench's trial 0.
    """
    by_task: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        if r.trial == 0:
            by_task.setdefault(r.task, []).append(r)

    def counts(rs: list[EpisodeRecord]) -> dict[str, Any]:
        # LeRobot PR #4628: counts and a Wilson interval in percent beside every pc_success.
        n, successes = len(rs), sum(r.success for r in rs)
        return {"pc_success": 100.0 * successes / n if n else None, "n_episodes": n, "n_success": successes,
                "pc_success_ci95": [round(100 * x, 2) for x in wilson_interval(successes, n)]}

    def block(rs: list[EpisodeRecord]) -> dict[str, Any]:
        maxes = [r.max_reward for r in rs if r.max_reward is not None]
        return {"avg_sum_reward": _mean([r.return_ for r in rs]), "avg_max_reward": _mean(maxes), **counts(rs)}

    per_task: list[dict[str, Any]] = []
    per_group: dict[str, Any] = {}
    for spec in suite.tasks:
        rs = sorted(by_task.get(spec.name, []), key=lambda r: r.episode)
        if not rs:
            continue
        group = spec.group or suite.name
        per_task.append({"task_group": group, "task_id": spec.index, "task": spec.name, "metrics": {
            "sum_rewards": [r.return_ for r in rs], "max_rewards": [r.max_reward for r in rs],
            "successes": [r.success for r in rs], "video_paths": [r.video for r in rs if r.video]}, **counts(rs)})
        per_group.setdefault(group, []).extend(rs)
    everything = [r for rs in per_group.values() for r in rs]
    overall = block(everything)
    overall["eval_s"] = eval_s
    overall["eval_ep_s"] = eval_s / len(everything) if everything else None
    return {"per_task": per_task, "per_group": {g: block(rs) for g, rs in per_group.items()}, "overall": overall}


_json_dumps = json_text


def write_trajectory(output: Path, task: str, episode: int, attrs: dict[str, Any], arrays: dict[str, Any]) -> None:
    """Write one episode as group ``episode_<i>`` of ``recordings/<task>.h5`` (replaced if present).

    Trial k > 0 of an episode (``--trials``) is group ``episode_<i>_trial_<k>``; trial 0 keeps the plain name.
    """
    import h5py

    folder = output / "recordings"
    folder.mkdir(exist_ok=True)
    with h5py.File(folder / f"{task}.h5", "a") as f:
        trial = int(attrs.get("trial", 0))
        _replace_group(f, f"episode_{episode}" if trial == 0 else f"episode_{episode}_trial_{trial}", attrs, arrays)
        f.flush()


def _replace_group(parent: Any, name: str, attrs: dict[str, Any], arrays: dict[str, Any]) -> None:
    """Group ``name`` of ``parent`` (an h5py group) made anew: ``attrs``, and ``arrays`` by path (images LZF)."""
    if name in parent:
        del parent[name]
    group = parent.create_group(name)
    for key, value in attrs.items():
        group.attrs[key] = value
    for key, array in arrays.items():
        group.create_dataset(key, data=array, compression="lzf" if array.ndim >= 3 else None)


DEMO_FILE = "{task}_demo.hdf5"
"""A backend-layout recording's file in ``recordings/`` (LIBERO names its demo files so)."""


def write_demo(output: Path, task: str, episode: int, attrs: dict[str, Any], arrays: dict[str, Any],
               file_attrs: dict[str, str]) -> None:
    """Write one episode (trial ``attrs["trial"]``) as a demo of ``recordings/<task>_demo.hdf5``.

    The robomimic layout LIBERO's demo files use: ``file_attrs`` on the ``data`` group; ``arrays`` by their paths
    in the demo. Demos are ``demo_0 ... demo_{n-1}`` in the order they were saved (a loader may iterate
    ``range(num_demos)``); the episode and trial are the demo's attributes, and an episode run again (``--resume``)
    replaces its own demo under the same name. ``num_demos``, ``total`` (rows of all demos) and robomimic's filter
    keys ``mask/successful`` and ``mask/failed`` (the demos' names as bytes) are kept current after every demo.
    """
    import h5py
    import numpy as np

    folder = output / "recordings"
    folder.mkdir(exist_ok=True)
    with h5py.File(folder / DEMO_FILE.format(task=task), "a") as f:
        data = f.require_group("data")
        for key, value in file_attrs.items():
            data.attrs[key] = value
        trial = int(attrs.get("trial", 0))
        name = next((name for name, demo in data.items()
                     if int(demo.attrs["episode"]) == episode and int(demo.attrs.get("trial", 0)) == trial),
                    f"demo_{len(data)}")
        _replace_group(data, name, {"episode": episode, **attrs}, arrays)
        names = sorted(data, key=lambda name: int(name[5:]))
        data.attrs["num_demos"] = len(names)
        data.attrs["total"] = int(sum(int(data[name].attrs["num_samples"]) for name in names))
        masks = f.require_group("mask")
        for key, success in (("successful", True), ("failed", False)):
            if key in masks:
                del masks[key]
            kept = [name for name in names if bool(data[name].attrs["success"]) == success]
            masks.create_dataset(key, data=np.array(kept, dtype="S"))
        f.flush()


def rewrite_episodes(path: Path, records: Iterable[EpisodeRecord]) -> None:
    """Replace ``episodes.jsonl`` atomically with exactly ``records``.

    Resume uses it to drop an episode interrupted between its trials, ``merge`` to write the merged set.
    """
    write_text_atomic(path, "".join(_json_dumps(r.to_json()) + "\n" for r in records))


def check_output_dir(output: Path) -> None:
    """Refuse an unwritable output directory before any env starts."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=output, prefix=".write-test.", delete=True)
        probe.close()
    except OSError as exc:
        raise ConfigError(f"output directory {output} is not writable ({exc.strerror or exc})") from exc


_NOTHING = object()
"""No item held back by the writer's group commit (``None`` already means "stop")."""


class ResultsWriter:
    """One background thread that appends episode lines and replaces ``results.json``.

    The rollout never waits on the disk. The queue is bounded so a stalled disk applies
    backpressure instead of growing memory; a write failure is stored and re-raised on the
    main thread at the next ``put``/``flush``/``close`` rather than silently losing results.
    """

    def __init__(self, output: Path, max_pending: int = 1024):
        self.output = output
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._closed = False
        self._file = open(output / EPISODES_FILE, "a", encoding="utf-8")  # noqa: SIM115 - owned by thread
        self._thread = threading.Thread(target=self._run, name="lerobench-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        held: Any = _NOTHING  # an item taken while gathering lines, handled next
        while True:
            item = self._queue.get() if held is _NOTHING else held
            held, taken = _NOTHING, 1
            try:
                if item is None:
                    return
                kind, payload = item
                if self._error is not None:
                    continue
                if kind == "episode":
                    lines = [payload]
                    held, more = self._gather_lines(lines)
                    taken += more
                    self._write_lines(lines)
                elif kind == "json":
                    write_json_atomic(self.output / payload[0], payload[1])
                elif kind == "trajectory":
                    task, index, attrs, arrays, file_attrs = payload
                    if file_attrs is None:
                        write_trajectory(self.output, task, index, attrs, arrays)
                    else:
                        write_demo(self.output, task, index, attrs, arrays, file_attrs)
            except BaseException as exc:  # noqa: BLE001 - surfaced on the main thread
                self._error = exc
            finally:
                for _ in range(taken):
                    self._queue.task_done()

    def _write_lines(self, lines: list[Any]) -> None:
        """Append ``lines`` with one fsync; a line that cannot be serialised (NaN) still lets those before it land."""
        texts: list[str] = []
        try:
            for line in lines:
                texts.append(_json_dumps(line) + "\n")
        finally:
            if texts:
                self._file.write("".join(texts))
                self._file.flush()
                os.fsync(self._file.fileno())  # once per group: a backlog of lines costs one fsync, not one each

    def _gather_lines(self, lines: list[Any]) -> tuple[Any, int]:
        """Append the episode lines queued right behind the first to ``lines`` (group commit).

        Why: under heavy disk load (CI building images beside the tests) one fsync can take a tenth of a second;
        a line each made a backlog of hundreds take minutes to drain. Stops at the first item that is not an
        episode line and returns it (``_NOTHING`` when the queue ran dry) with the count taken, so a
        ``results.json`` queued after a line is still written after that line is on disk.
        """
        taken = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return _NOTHING, taken
            taken += 1
            if item is None or item[0] != "episode":
                return item, taken - 1
            lines.append(item[1])

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RunError(f"writing results to {self.output} failed: {self._error}") from self._error

    def put_episode(self, record: EpisodeRecord) -> None:
        """Queue one finished episode (serialized now: later mutation cannot change what is written)."""
        self._raise_if_failed()
        self._queue.put(("episode", record.to_json()))

    def put_results(self, results: dict[str, Any]) -> None:
        """Queue a full ``results.json`` snapshot (serialized now, validated for NaN now)."""
        self.put_json(RESULTS_FILE, results)

    def put_json(self, name: str, data: dict[str, Any]) -> None:
        """Queue another JSON document (e.g. ``eval_info.json``), replaced atomically like results.json."""
        self._raise_if_failed()
        self._queue.put(("json", (name, json.loads(_json_dumps(data)))))

    def put_trajectory(self, task: str, index: int, attrs: dict[str, Any], arrays: dict[str, Any],
                       file_attrs: dict[str, str] | None = None) -> None:
        """Queue one episode's recorded arrays: ``recordings/<task>.h5``, or a demo of a backend's layout."""
        self._raise_if_failed()
        self._queue.put(("trajectory", (task, index, dict(attrs), arrays, file_attrs)))

    def flush(self) -> None:
        """Wait until everything queued is on disk."""
        self._queue.join()
        self._raise_if_failed()

    def close(self) -> None:
        """Flush, stop the thread and close the file; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self._file.close()
        self._raise_if_failed()
