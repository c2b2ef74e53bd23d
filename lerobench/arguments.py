"""Every argument of ``lerobench.evaluate`` checked before anything runs, each error naming the argument.

Why: a training loop calls ``evaluate`` after hours of training. An argument of the wrong type used to surface
deep in the planner (``episodes="2"``: ``'<' not supported between 'str' and 'int'``), after the evaluation
(``step="abc"``: a bare ``invalid literal for int()``), or never (``step=1.5`` logged at step 1, ``step=-1`` at -1);
a ``log_dir`` that is a file failed only once the evaluation was over, naming a temporary directory already gone.
Here each argument is checked first, in the API's own words (``episodes=``, ``resume=True``, ``output=``), not the
command line's flags: the planner's range checks speak ``--flags`` because the CLI is where most runs start.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lerobench.errors import ConfigError, unknown
from lerobench.plan.planner import MAX_SEED

INTS: dict[str, tuple[int, bool]] = {
    "episodes": (1, True), "batch_size": (0, False), "seed": (0, False), "max_steps": (1, True),
    "videos": (0, False), "video_size": (0, True), "record_size": (8, False),
    "replan_steps": (1, False), "parallel_tasks": (1, False),
    "trials": (1, True), "call_width": (0, True), "workers": (0, False), "log_step": (0, False),
    "max_errors": (0, True),
}
"""Integer arguments: (smallest value, None allowed). ``log_step`` is a training step: never negative."""

FLOATS: dict[str, tuple[float, float, bool, bool]] = {
    "episode_timeout": (0.0, math.inf, False, True), "policy_timeout": (0.0, math.inf, False, True),
    "alpha": (0.0, 1.0, False, False),
    "margin": (0.0, 1.0, False, False), "power": (0.0, 1.0, False, False), "effect": (-1.0, 1.0, True, True),
    "ray_gpus_per_worker": (0.0, math.inf, True, False),
}
"""Real arguments: (low, high, low included, None allowed); high is never included (``effect``: 1 is, below)."""

BOOLS = ("stop_on_success", "resume", "rerun", "allow_sim_drift", "share_task")
STRS = ("protocol", "device", "executor", "record", "log_project", "metric")
OPTIONAL_STRS = ("policy_name", "shard", "until", "ray_address")
PATHS = ("output", "log_dir", "versus")
"""Path-like arguments that may be None."""


def _type_name(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """Return ``args`` with ``tasks`` and ``log_to`` normalized; raise a ``ConfigError`` naming the first bad one.

    ``tasks`` and ``log_to`` take a comma-separated string as the CLI does (``log_to="tensorboard"`` was read
    letter by letter), or a sequence. Integers must be integers (``step=1.5`` is refused, not truncated).
    """
    for name, (least, optional) in INTS.items():
        value = args[name]
        if value is None and optional:
            continue
        if not _is_int(value):
            kind = "an int or None" if optional else "an int"
            raise ConfigError(f"lerobench.evaluate: {name} must be {kind}, got {_type_name(value)}")
        if value < least:
            raise ConfigError(f"lerobench.evaluate: {name} must be >= {least}, got {value}")
    if args["seed"] > MAX_SEED:
        raise ConfigError(f"lerobench.evaluate: seed must be between 0 and {MAX_SEED}, got {args['seed']}")
    for name in BOOLS:
        if not isinstance(args[name], bool):
            raise ConfigError(f"lerobench.evaluate: {name} must be True or False, got {_type_name(args[name])}")
    for name in STRS:
        if not isinstance(args[name], str):
            raise ConfigError(f"lerobench.evaluate: {name} must be a string, got {_type_name(args[name])}")
    for name in OPTIONAL_STRS:
        if args[name] is not None and not isinstance(args[name], str):
            raise ConfigError(f"lerobench.evaluate: {name} must be a string or None, got {_type_name(args[name])}")
    for name in (*PATHS, "suite"):
        value = args[name]
        if not (isinstance(value, (str, os.PathLike)) or (value is None and name != "suite")):
            raise ConfigError(f"lerobench.evaluate: {name} must be a path (str or Path)"
                              f"{'' if name == 'suite' else ' or None'}, got {_type_name(value)}")
    for name, (low, high, low_ok, optional) in FLOATS.items():
        _check_real(name, args[name], low, high, low_ok, optional)
    fps = args["video_fps"]
    if not isinstance(fps, numbers.Real) or isinstance(fps, bool) or not float(fps) > 0:
        raise ConfigError(f"lerobench.evaluate: video_fps must be a number > 0, got {_type_name(fps)}")
    _check_choices(args)
    if args["resume"] and args["output"] is None:
        raise ConfigError("lerobench.evaluate: resume=True needs output= (the run directory to continue)")
    return {**args, "tasks": _names("tasks", args["tasks"], allow_int=True),
            "log_to": _names("log_to", args["log_to"]) or (), "formats": _names("formats", args["formats"]) or (),
            "perturb": _names("perturb", args["perturb"]) or ()}


def _check_real(name: str, value: Any, low: float, high: float, low_ok: bool, optional: bool) -> None:
    """A real argument inside its range, said in the API's words."""
    if value is None and optional:
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or math.isnan(float(value)):
        raise ConfigError(f"lerobench.evaluate: {name} must be a number{' or None' * optional}, got "
                          f"{_type_name(value)}")
    high_ok, x = name == "effect", float(value)
    inside = (low <= x if low_ok else low < x) and (x <= high if high_ok else x < high)
    if not inside or (name == "effect" and x == 0):
        span = f"{'[' if low_ok else '('}{low:g}, {high:g}{']' if high_ok else ')'}"
        extra = ", not 0" if name == "effect" else ""
        raise ConfigError(f"lerobench.evaluate: {name} must lie in {span}{extra}, got {value!r}")


@contextmanager
def api_words() -> Iterator[None]:
    """Re-raise a ``ConfigError`` of the block with its message ``in_api_words`` (same type, no chained traceback)."""
    try:
        yield
    except ConfigError as exc:
        raise type(exc)(in_api_words(str(exc))) from None


def in_api_words(message: str) -> str:
    """A message written for the command line (``--delay-steps 'abc'``) in ``lerobench.evaluate``'s words.

    The planner's checks speak ``--flags`` (most runs start on the command line); from Python each flag becomes
    its argument's name (``delay_steps='abc'``), so the message names what the caller actually typed.
    """
    from lerobench.plan.options import flags_to_names

    names = flags_to_names()
    names.update({"--tasks": "tasks", "--suite": "suite", "--policy": "policy", "--output": "output"})

    def spoken(match: re.Match[str]) -> str:
        name = names.get(match.group(1))
        if name is None:
            return match.group(0)
        return f"{name}=" if match.group(2) else name

    text = re.sub(r"(?<![\w-])(--[a-z][a-z-]*)( (?=[-\d'\"./~]))?", spoken, message)
    return text if text.startswith("lerobench.evaluate") else f"lerobench.evaluate: {text}"


def _check_choices(args: dict[str, Any]) -> None:
    """The string settings whose values are a fixed set, and ``video_size``'s gap, in the API's words."""
    from lerobench.plan.options import RECORD_MODES
    from lerobench.plan.planner import EXECUTORS

    if args["record"] not in RECORD_MODES:
        raise ConfigError(f"lerobench.evaluate: record must be one of {', '.join(map(repr, RECORD_MODES))}, "
                          f"got {args['record']!r}")
    if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", args["device"]):
        raise ConfigError("lerobench.evaluate: device must be 'cpu', 'cuda', 'cuda:N' or 'auto', "
                          f"got {args['device']!r}")
    if args["executor"] not in EXECUTORS:
        raise unknown("executor", args["executor"], EXECUTORS, "(lerobench.evaluate: executor=)")
    if args["video_size"] is not None and 0 < args["video_size"] < 16:
        raise ConfigError(f"lerobench.evaluate: video_size must be 0 (the protocol's image size) or at least 16, "
                          f"got {args['video_size']}")


def _names(name: str, value: Any, allow_int: bool = False) -> tuple[str, ...] | None:
    """A comma-separated string or a sequence of names (``tasks``: also indices) as a tuple of strings."""
    if value is None:
        return None
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif allow_int and _is_int(value):  # one task index, as ``--tasks 5``
        items = [value]
    elif isinstance(value, Sequence) or (hasattr(value, "__iter__") and not isinstance(value, (bytes, dict))):
        items = list(value)
    else:
        raise ConfigError(f"lerobench.evaluate: {name} must be a string or a list of "
                          f"{'names or indices' if allow_int else 'names'}, got {_type_name(value)}")
    for item in items:
        if not (isinstance(item, str) or (allow_int and _is_int(item))):
            raise ConfigError(f"lerobench.evaluate: {name} holds {_type_name(item)}; expected "
                              f"{'task names or indices' if allow_int else 'names'}")
    return tuple(dict.fromkeys(s for s in (str(i).strip() for i in items) if s))  # in order, without repeats


def check_store(log_dir: Path) -> None:
    """Refuse a trackers' store ``log_dir`` that is a file or lies where nothing can be written, before the run.

    A file or a read-only place used to fail only after the evaluation, when logging started. Nothing is created
    here (a refused run leaves no files); the nearest existing folder must be a writable directory.
    """
    existing = next(p for p in (log_dir, *log_dir.parents) if p.exists())
    if not existing.is_dir():
        where = "is a file" if existing == log_dir else f"is under {existing}, a file"
        raise ConfigError(f"lerobench.evaluate: log_dir {log_dir} {where}, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"lerobench.evaluate: log_dir {log_dir} is not writable ({existing} is read-only "
                          "for this user)")


def check_output(output: Path, resume: bool) -> None:
    """Refuse an ``output`` that is a file, or that holds a run when ``resume`` is False (said with ``resume=True``).

    The run directory itself is made later; the sink would refuse the second case too, in the CLI's words.
    """
    from lerobench.core.results import EPISODES_FILE

    if output.exists() and not output.is_dir():
        raise ConfigError(f"lerobench.evaluate: output {output} is a file, not a run directory")
    episodes = output / EPISODES_FILE
    if not resume and episodes.is_file() and episodes.stat().st_size > 0:
        raise ConfigError(f"lerobench.evaluate: {episodes} already holds episodes: pass resume=True to continue "
                          "that run, or another output=")
