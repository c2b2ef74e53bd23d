"""One reader for run directories: ``results.json`` and ``episodes.jsonl`` loaded and validated once.

``--resume``, ``lerobench merge``, ``compare`` and ``report`` all read runs through ``RunDir.load``, so a
damaged input is refused the same way everywhere: one ``RunDirError`` line naming the file (and, for an
episode, the line number and field), raised before anything is written. Loading never modifies the
directory: a run may still be writing. An unterminated last line (a process killed mid-write) is not
damage: it is skipped and flagged (``cut_tail``); ``--resume`` cuts it when it continues the run.

Validated: ``results.json`` is a JSON object of a schema version this lerobench can read, with a ``config``
block whose identity fields have the right types; every complete episode line is a JSON object whose fields
match ``EpisodeRecord``'s types (read from the dataclass, so a field added there is validated here too);
two lines for one (task, episode, trial) must agree (identical duplicates are kept once and noted).
Missing episodes are not damage (a run may be incomplete): ``missing()`` lists them.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobench.core.identity import RunIdentity, identity_of
from lerobench.core.records import EpisodeRecord
from lerobench.core.results import EPISODES_FILE, IDENTITY_FILE, RESULTS_FILE, SCHEMA_VERSION
from lerobench.core.trials import group_episodes, is_whole, whole_episodes
from lerobench.errors import LerobenchError


class RunDirError(LerobenchError):
    """A run directory is missing or damaged (the message names the file and, for episodes, the line)."""


CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "suite": (str,), "policy": (str,), "tasks": (list,), "episodes_per_task": (int,), "seed": (int,),
    "protocol": (str,), "protocol_settings": (dict,), "trials": (int,), "replan_steps": (int,),
    "stop_on_success": (bool,), "backend_options": (dict,), "simulator": (dict,), "backend": (str,),
}
"""Types of the config keys a reader relies on (each optional: older files lack some; ``None`` allowed)."""
REQUIRED_CONFIG = ("suite", "policy", "tasks", "episodes_per_task", "seed")


def _type_name(kind: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(kind, getattr(kind, "__name__", str(kind)))


def _matches(value: Any, kind: Any) -> bool:
    """``value`` is of annotated type ``kind`` (``int``, ``float``, ``bool``, ``str``, ``X | None``) as JSON has it."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return any(_matches(value, k) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    origin = typing.get_origin(kind) or kind
    return isinstance(origin, type) and isinstance(value, origin)


def _expected(kind: Any) -> str:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return " or ".join("null" if k is type(None) else _type_name(k) for k in typing.get_args(kind))
    return _type_name(kind)


_HINTS = typing.get_type_hints(EpisodeRecord)
_FIELDS = {("return" if f.name == "return_" else f.name): f for f in dataclasses.fields(EpisodeRecord)}


def parse_record(data: Any, where: str) -> EpisodeRecord:
    """One episode line (already JSON-decoded) as a record, or ``RunDirError`` naming ``where`` and the field."""
    if not isinstance(data, dict):
        raise RunDirError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for name in data:
        if name not in _FIELDS:
            raise RunDirError(f"{where}: unknown field {name!r}")
    for name, f in _FIELDS.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RunDirError(f"{where}: field {name!r} is missing")
            continue
        kind = _HINTS[f.name]
        if not _matches(data[name], kind):
            raise RunDirError(f"{where}: field {name!r} must be {_expected(kind)}, got {data[name]!r:.60}")
    for name in ("episode", "trial", "steps"):
        if data[name] < 0:
            raise RunDirError(f"{where}: field {name!r} must be >= 0, got {data[name]}")
    return EpisodeRecord.from_json(data)


def parse_lines(raw: bytes, path: Path) -> tuple[list[tuple[int, EpisodeRecord]], bool]:
    """(line number, record) for every complete line of ``raw``, and whether an unterminated tail was skipped."""
    complete, newline, tail = raw.rpartition(b"\n")
    found = []
    for number, line in enumerate(complete.split(b"\n") if newline else [], start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise RunDirError(f"{where} is not JSON ({exc})") from exc
        found.append((number, parse_record(data, where)))
    return found, bool(tail.strip())


def read_episodes(path: Path) -> list[EpisodeRecord]:
    """The records of one ``episodes.jsonl`` on its own, validated as ``RunDir.load`` does; never modifies it.

    An unterminated last line (still being written, or killed mid-write) is skipped. For a whole run directory
    use ``RunDir.load``.
    """
    if not path.exists():
        return []
    return [r for _, r in parse_lines(path.read_bytes(), path)[0]]


def _read_summary(path: Path) -> dict[str, Any]:
    """``results.json`` or ``run.json``: read and validated (a ``config`` block); ``RunDirError`` if damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunDirError(f"{path} is not readable JSON ({exc})") from exc
    _check_results(data, path)
    return data


def _outcome(r: EpisodeRecord) -> tuple[Any, ...]:
    return (r.seed, r.init_state, r.success, r.success_at_end, r.steps, r.error is not None)


def _check_results(results: Any, path: Path) -> None:
    if not isinstance(results, dict):
        raise RunDirError(f"{path}: expected a JSON object, got {type(results).__name__}")
    version = results.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RunDirError(f"{path}: schema_version must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise RunDirError(f"{path}: schema_version {version} was written by a newer lerobench (this one reads up to "
                          f"{SCHEMA_VERSION}): upgrade lerobench")
    config = results.get("config")
    if not isinstance(config, dict):
        raise RunDirError(f"{path}: has no 'config' object (not a lerobench results file?)")
    for key in REQUIRED_CONFIG:
        if key not in config:
            raise RunDirError(f"{path}: config.{key} is missing")
    for key, kinds in CONFIG_TYPES.items():
        value = config.get(key)
        if value is not None and not any(_matches(value, k) for k in kinds):
            raise RunDirError(f"{path}: config.{key} must be {_type_name(kinds[0])}, got {value!r:.60}")
    if not all(isinstance(t, str) for t in config["tasks"]):
        raise RunDirError(f"{path}: config.tasks must be a list of task names")
    if config["episodes_per_task"] < 1:
        raise RunDirError(f"{path}: config.episodes_per_task must be >= 1, got {config['episodes_per_task']}")


@dataclass(frozen=True)
class RunDir:
    """A run directory as read from disk; validated, never modified by reading."""

    path: Path
    results: dict[str, Any]
    records: list[EpisodeRecord]
    """Every episode line, in file order, each (task, episode, trial) once."""
    cut_tail: bool = False
    """True if ``episodes.jsonl`` ended in an unterminated line (killed mid-write); that line is not in ``records``."""
    notes: tuple[str, ...] = field(default=())
    """What was repaired in memory (identical duplicate lines dropped)."""

    @classmethod
    def load(cls, path: Path | str, rebuild: bool = False) -> RunDir:
        """Read and validate ``path``; ``RunDirError`` (one line, file and line named) if it is damaged.

        ``rebuild`` (``--resume``): a missing or damaged ``results.json`` is rebuilt in memory from the run's
        identity file (``run.json``) and its episode lines, which are the run's record; ``notes`` says so.
        """
        path = Path(path)
        results_path, episodes_path = path / RESULTS_FILE, path / EPISODES_FILE
        rebuilt: tuple[str, ...] = ()
        try:
            if not results_path.is_file():
                raise RunDirError(f"{path} is not a lerobench run: {results_path} does not exist")
            results = _read_summary(results_path)
        except RunDirError as exc:
            if not rebuild or not (path / IDENTITY_FILE).is_file():
                raise
            identity = _read_summary(path / IDENTITY_FILE)["config"]
            results = {"schema_version": SCHEMA_VERSION, "config": identity, "complete": False}
            rebuilt = (f"{exc}: rebuilt from {IDENTITY_FILE} and {EPISODES_FILE}",)
        try:
            raw = episodes_path.read_bytes() if episodes_path.exists() else b""
        except OSError as exc:
            raise RunDirError(f"cannot read {episodes_path} ({exc.strerror or exc})") from exc
        lines, cut_tail = parse_lines(raw, episodes_path)
        seen: dict[tuple[str, int, int], tuple[int, EpisodeRecord]] = {}
        records, duplicates = [], 0
        for number, r in lines:
            key = (r.task, r.episode, r.trial)
            if key in seen:
                first, earlier = seen[key]
                if _outcome(earlier) != _outcome(r):
                    raise RunDirError(f"{episodes_path}: line {number}: task {r.task!r} episode {r.episode} trial "
                                      f"{r.trial} is also on line {first} with another outcome (success "
                                      f"{earlier.success} vs {r.success}, steps {earlier.steps} vs {r.steps})")
                duplicates += 1
                continue
            seen[key] = (number, r)
            records.append(r)
        notes = rebuilt + ((f"{episodes_path}: {duplicates} duplicate line(s) of the same episode trial ignored",)
                           if duplicates else ())
        return cls(path=path, results=results, records=records, cut_tail=cut_tail, notes=notes)

    @property
    def config(self) -> dict[str, Any]:
        """The run's ``config`` block."""
        return self.results["config"]

    @property
    def identity(self) -> RunIdentity:
        """What makes this run the run it is (``lerobench.core.identity``)."""
        return identity_of(self.config)

    @property
    def trials(self) -> int:
        """Trials per episode (1 for runs written before multi-trial runs existed)."""
        return int(self.config.get("trials") or 1)

    @property
    def episodes_per_task(self) -> int:
        """Episodes per task the run was asked for."""
        return int(self.config["episodes_per_task"])

    @property
    def tasks(self) -> list[str]:
        """Task names, in the suite's order."""
        return list(self.config["tasks"])

    @property
    def complete(self) -> bool:
        """Whether the run (or merge) said it finished every episode."""
        return bool(self.results.get("complete"))

    @property
    def drifted(self) -> bool:
        """Whether the run was made with ``--allow-sim-drift`` on a simulator that failed its golden check."""
        golden = (self.config.get("simulator") or {}).get("golden") or {}
        return golden.get("status") == "drifted"

    @property
    def mkl_mode(self) -> str | None:
        """MKL's mode the run's CPU torch policy computed in (``config.numerics.mkl``); None where not recorded."""
        mode = (self.config.get("numerics") or {}).get("mkl")
        return mode if isinstance(mode, str) else None

    def whole_records(self) -> list[EpisodeRecord]:
        """Records of finished episodes only (an episode cut between its trials is left out)."""
        return whole_episodes(self.records, self.trials)

    def missing(self) -> list[tuple[str, int]]:
        """(task, episode) units of the run without a finished episode, in task order."""
        finished = {unit for unit, rs in group_episodes(self.records).items() if is_whole(rs, self.trials)}
        return [(t, e) for t in self.tasks for e in range(self.episodes_per_task) if (t, e) not in finished]

    def summary(self) -> dict[str, Any]:
        """Who this run is, for a comparison's header."""
        return {"path": str(self.path), "policy": self.results.get("policy"), "suite": self.results.get("suite"),
                "complete": self.complete, "seed": self.config.get("seed"), "episode_lines": len(self.records),
                "trials": self.trials, "drifted": self.drifted, "mkl": self.mkl_mode}
