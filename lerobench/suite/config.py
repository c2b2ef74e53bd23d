"""Suite configs as frozen dataclasses, parsed strictly from TOML data files.

Strict means: every unknown key is an error naming the file and the field, because a typo in a
benchmark config (``max_step = 220``) that is silently ignored changes published numbers.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from lerobench.errors import ConfigError, UnknownNameError, did_you_mean, unknown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DEFAULT_PROTOCOL = "standard"


@dataclass(frozen=True)
class TaskSpec:
    """One benchmark task: what the backend builds and what the policy is told."""

    name: str
    """Backend task identifier (Meta-World env name, LIBERO task name)."""
    description: str
    """Natural-language instruction given to language-conditioned policies."""
    index: int
    """Position of the task inside its suite (stable across runs; part of the episode seed)."""
    group: str | None = None
    """Difficulty or category group used for per-group aggregates, if the suite has groups."""


@dataclass(frozen=True)
class Protocol:
    """Settings that define how a number is produced; two runs are comparable only if these match."""

    max_steps: int
    """Step limit per episode (settle steps excluded)."""
    settle_steps: int = 0
    """Steps with ``settle_action`` at episode start that do not count toward the limit."""
    settle_action: tuple[float, ...] = ()
    """Action used during settle steps (LIBERO: zeros with the gripper open)."""
    image_size: tuple[int, int] = (256, 256)
    """(height, width) of every camera image the policy sees."""
    cameras: tuple[str, ...] = ()
    """Cameras available to policies, in order; only the ones a policy consumes are rendered."""
    flip_images: bool = False
    """Rotate images 180 degrees before the policy sees them (LIBERO's cameras are upside down)."""
    seeds: str = "lerobench"
    """How episode *i*'s seed follows from the run seed S: ``lerobench`` (a hash of S, the task and i: episodes of
    different tasks never share a seed) or ``lerobot`` (S + i, lerobot-eval's order: the same starts as
    ``lerobot-eval --seed S``). ``envs.base.episode_seed`` computes both."""


@dataclass(frozen=True)
class Suite:
    """A benchmark: a backend, its tasks and the default protocol, loaded from one TOML file."""

    name: str
    description: str
    backend: str
    tasks: tuple[TaskSpec, ...]
    episodes_per_task: int
    control_fps: float | None
    """Simulator control frequency: the fps of recorded videos; None: the backend's own rate (its ``control_fps``)."""
    worker_memory_mb: int
    """Resident memory of one simulator worker; caps the auto batch size."""
    protocols: dict[str, Protocol]
    """Named protocols; ``standard`` is the default."""
    video_camera: str | None = None
    """Camera used to record videos."""
    default_policy: str | None = "random"
    """Policy used without ``--policy``; None (``default_policy = ""`` in the file): none can succeed on every task,
    so ``--policy`` is required."""

    def chosen_policy(self, given: str | None) -> str:
        """``given``, else the suite's default; a ``ConfigError`` naming the suite when it has none."""
        if given:
            return given
        if self.default_policy is None:
            raise ConfigError(f"suite {self.name!r} has no default policy (no built-in policy can succeed on all its "
                              f"tasks: see `lerobench show {self.name}`); pass --policy")
        return self.default_policy
    notes: str = ""
    source: Path | None = None
    backend_options: dict[str, Any] = field(default_factory=dict)
    trials: int = 1
    """Default trials per episode (attempts at the same start, policy memory kept); ``--trials`` overrides."""
    init_states: int | None = None
    """Fixed start states per task (episode i starts from state i mod this); None: the backend's count."""
    family: str | None = None
    """Family of suites this one belongs to (``lerobench list --family``), e.g. ``libero-pro``."""
    video_size: tuple[int, int] | None = None
    """(height, width) of the frames rendered for the video alone, the benchmark's published visualisation size
    (PushT: 384x384, LeRobot's); None: the image size, capped at ``--video-size``."""

    @property
    def groups(self) -> list[str]:
        """Group names in first-appearance order (empty when the suite has no groups)."""
        seen: dict[str, None] = {}
        for task in self.tasks:
            if task.group:
                seen.setdefault(task.group, None)
        return list(seen)

    def protocol(self, name: str | None = None) -> Protocol:
        """Return a named protocol, with a did-you-mean error for unknown names."""
        name = name or DEFAULT_PROTOCOL
        if name not in self.protocols:
            raise UnknownNameError(f"suite {self.name!r} has no protocol {name!r}.{did_you_mean(name, self.protocols)}")
        return self.protocols[name]

    def select_tasks(self, names: list[str] | None, flag: str = "--tasks") -> Suite:
        """Narrow the suite to ``names`` (order of the suite kept); unknown names are errors.

        Each entry is a task name, a suite-local index (``3``, as ``lerobench show`` lists them) or an
        inclusive range of indices (``0-4``); Meta-World names hold dashes too, so only digits make a range.
        ``flag`` is how the caller's user gave them (``--task`` for ``check-policy``, ``tasks=`` in Python).
        """
        if not names:
            return self
        by_name = {t.name: t for t in self.tasks}
        wanted: set[str] = set()
        for n in names:
            match = re.fullmatch(r"(\d+)(?:-(\d+))?", n.strip())
            if n in by_name or match is None:
                if n not in by_name:
                    error = unknown("task", n, by_name, where=f"in suite {self.name!r}")
                    raise UnknownNameError(f"{error} Tasks can also be given by index or range (0-"
                                           f"{len(self.tasks) - 1}, as `lerobench show` numbers them).")
                wanted.add(n)
                continue
            first, last = int(match[1]), int(match[2] if match[2] is not None else match[1])
            if first > last or last >= len(self.tasks):
                raise UnknownNameError(f"{flag} {n}: suite {self.name!r} has tasks 0-{len(self.tasks) - 1}"
                                       + (" (a range goes low-high)" if first > last else ""))
            wanted.update(t.name for t in self.tasks[first:last + 1])
        return replace(self, tasks=tuple(t for t in self.tasks if t.name in wanted))


_SUITE_KEYS = {
    "name", "description", "backend", "tasks", "groups", "episodes_per_task", "control_fps",
    "worker_memory_mb", "protocol", "protocols", "video_camera", "default_policy", "notes",
    "backend_options", "trials", "init_states", "family", "video_size",
}
_PROTOCOL_KEYS = {f.name for f in fields(Protocol)}
SEED_SCHEMES = ("lerobench", "lerobot")
"""Values of a protocol's ``seeds`` (``Protocol.seeds``)."""


def _fail(path: Path | str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: field {key!r}: {message}")


def _typed(path: Path | str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
        raise _fail(path, key, f"expected {getattr(kind, '__name__', kind)}, got a boolean")
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(path, key, f"expected {expected}, got {type(value).__name__} {value!r}")
    return value


def _parse_protocol(path: Path | str, key: str, table: dict[str, Any], base: Protocol | None) -> Protocol:
    for k in table:
        if k not in _PROTOCOL_KEYS:
            raise ConfigError(
                f"{path}: unknown field {key}.{k!r}; expected one of {', '.join(sorted(_PROTOCOL_KEYS))}"
            )
    values: dict[str, Any] = {}
    for k, v in table.items():
        full = f"{key}.{k}"
        if k in ("max_steps", "settle_steps"):
            v = _typed(path, full, v, int)
            if v < (1 if k == "max_steps" else 0):
                raise _fail(path, full, f"must be {'>= 1' if k == 'max_steps' else '>= 0'}, got {v}")
        elif k == "flip_images":
            v = _typed(path, full, v, bool)
        elif k == "image_size":
            v = tuple(_typed(path, full, v, list))
            if len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
                raise _fail(path, full, f"expected [height, width] of positive integers, got {list(v)}")
        elif k == "cameras":
            v = tuple(_typed(path, full, v, list))
            if not all(isinstance(x, str) for x in v):
                raise _fail(path, full, "expected a list of camera names")
        elif k == "seeds":
            v = _typed(path, full, v, str)
            if v not in SEED_SCHEMES:
                raise _fail(path, full, f"expected one of {', '.join(SEED_SCHEMES)}, got {v!r}")
        elif k == "settle_action":
            v = tuple(float(_typed(path, full, x, (int, float))) for x in _typed(path, full, v, list))
        values[k] = v
    if base is None:
        if "max_steps" not in values:
            raise _fail(path, f"{key}.max_steps", "missing (every suite needs a step limit)")
        return Protocol(**values)
    return replace(base, **values)


def _parse_tasks(path: Path | str, raw: Any, groups: dict[str, list[str]]) -> tuple[TaskSpec, ...]:
    raw = _typed(path, "tasks", raw, list)
    if not raw:
        raise _fail(path, "tasks", "a suite needs at least one task")
    group_of = {t: g for g, names in groups.items() for t in names}
    tasks: list[TaskSpec] = []
    for i, entry in enumerate(raw):
        key = f"tasks[{i}]"
        if isinstance(entry, str):
            name, description = entry, entry
        elif isinstance(entry, dict):
            extra = set(entry) - {"name", "description"}
            if extra:
                raise _fail(path, key, f"unknown keys {sorted(extra)}; a task has 'name' and 'description'")
            if "name" not in entry:
                raise _fail(path, f"{key}.name", "missing")
            name = _typed(path, f"{key}.name", entry["name"], str)
            description = _typed(path, f"{key}.description", entry.get("description", name), str)
        else:
            raise _fail(path, key, f"expected a task name or a table, got {entry!r}")
        tasks.append(TaskSpec(name=name, description=description, index=i, group=group_of.get(name)))
    names = [t.name for t in tasks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise _fail(path, "tasks", f"duplicate task names {dupes}")
    unknown_in_groups = sorted(set(group_of) - set(names))
    if unknown_in_groups:
        raise _fail(path, "groups", f"names tasks that are not in 'tasks': {unknown_in_groups}")
    return tuple(tasks)


def parse_suite(data: dict[str, Any], source: Path | str) -> Suite:
    """Validate one suite table; every error names ``source`` and the offending field."""
    for k in data:
        if k not in _SUITE_KEYS:
            hint = unknown("field", k, _SUITE_KEYS).args[0].split(".", 1)[1]
            raise ConfigError(f"{source}: unknown field {k!r}.{hint}")
    for required in ("name", "backend", "tasks", "protocol"):
        if required not in data:
            raise _fail(source, required, "missing")
    groups_raw = _typed(source, "groups", data.get("groups", {}), dict)
    groups = {g: list(_typed(source, f"groups.{g}", v, list)) for g, v in groups_raw.items()}
    standard = _parse_protocol(source, "protocol", _typed(source, "protocol", data["protocol"], dict), None)
    protocols = {DEFAULT_PROTOCOL: standard}
    for pname, table in _typed(source, "protocols", data.get("protocols", {}), dict).items():
        protocols[pname] = _parse_protocol(
            source, f"protocols.{pname}", _typed(source, f"protocols.{pname}", table, dict), standard
        )
    episodes = _typed(source, "episodes_per_task", data.get("episodes_per_task", 10), int)
    if episodes < 1:
        raise _fail(source, "episodes_per_task", f"must be >= 1, got {episodes}")
    trials = _typed(source, "trials", data.get("trials", 1), int)
    if trials < 1:
        raise _fail(source, "trials", f"must be >= 1, got {trials}")
    init_states = _typed(source, "init_states", data.get("init_states"), (int, type(None)))
    if init_states is not None and init_states < 1:
        raise _fail(source, "init_states", f"must be >= 1, got {init_states}")
    memory = _typed(source, "worker_memory_mb", data.get("worker_memory_mb", 500), int)
    raw_fps = _typed(source, "control_fps", data.get("control_fps"), (int, float, type(None)))
    fps = None if raw_fps is None else float(raw_fps)
    if (fps is not None and fps <= 0) or memory <= 0:
        raise _fail(source, "control_fps" if fps is not None and fps <= 0 else "worker_memory_mb", "must be positive")
    return Suite(
        name=_typed(source, "name", data["name"], str),
        description=_typed(source, "description", data.get("description", ""), str),
        backend=_typed(source, "backend", data["backend"], str),
        tasks=_parse_tasks(source, data["tasks"], groups),
        episodes_per_task=episodes,
        control_fps=fps,
        worker_memory_mb=memory,
        protocols=protocols,
        video_camera=_typed(source, "video_camera", data.get("video_camera"), (str, type(None))),
        default_policy=_typed(source, "default_policy", data.get("default_policy", "random"), str) or None,
        notes=_typed(source, "notes", data.get("notes", ""), str),
        source=Path(source),
        backend_options=_typed(source, "backend_options", data.get("backend_options", {}), dict),
        trials=trials,
        init_states=init_states,
        family=_typed(source, "family", data.get("family"), (str, type(None))),
        video_size=_video_size(source, data.get("video_size")),
    )


def _video_size(source: Path | str, raw: Any) -> tuple[int, int] | None:
    """A suite's ``video_size``: [height, width] of positive integers, or None when absent."""
    if raw is None:
        return None
    size = tuple(_typed(source, "video_size", raw, list))
    if len(size) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 16 for x in size):
        raise _fail(source, "video_size", f"expected [height, width] of integers >= 16, got {list(size)}")
    return (int(size[0]), int(size[1]))


def load_suite_file(path: Path) -> Suite:
    """Read and validate one suite TOML file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read suite file ({exc.strerror})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    return parse_suite(data, path)
