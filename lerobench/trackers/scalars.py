"""What a finished run tells a tracker: scalars, a flat identity, the videos (pure functions of the run directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PREFIX = "eval"
"""Every scalar's namespace: ``eval/<task>/success_rate``, ``eval/success_rate`` (LeRobot logs ``eval/...`` too)."""

_RATE_KEYS = ("success_rate", "n_episodes", "successes", "n_errors")
_THROUGHPUT_KEYS = ("env_steps_per_s", "episodes_per_s", "eval_s")


def _rate(block: dict[str, Any], prefix: str) -> dict[str, float]:
    """A rate block's numbers (a missing or null one is left out: trackers store no NaN)."""
    out = {f"{prefix}/{k}": float(block[k]) for k in _RATE_KEYS if block.get(k) is not None}
    ci = block.get("ci95")
    if ci is not None and None not in ci:
        out[f"{prefix}/ci_low"], out[f"{prefix}/ci_high"] = float(ci[0]), float(ci[1])
    return out


def scalars(results: dict[str, Any]) -> dict[str, float]:
    """The numbers logged at the training step: per task, per group, overall, and throughput.

    Names: ``eval/<task>/success_rate`` (and ``ci_low``, ``ci_high``, ``n_episodes``, ``successes``, ``n_errors``),
    ``eval/group/<group>/...``, ``eval/success_rate`` ... for the whole run, ``eval/env_steps_per_s``,
    ``eval/episodes_per_s``, ``eval/eval_s``. The values are results.json's, unrounded.
    """
    out: dict[str, float] = {}
    for task in results.get("tasks", []):
        out.update(_rate(task, f"{PREFIX}/{task['task']}"))
    for group, block in (results.get("groups") or {}).items():
        out.update(_rate(block, f"{PREFIX}/group/{group}"))
    overall = results.get("overall") or {}
    out.update(_rate(overall, PREFIX))
    out.update({f"{PREFIX}/{k}": float(overall[k]) for k in _THROUGHPUT_KEYS if overall.get(k) is not None})
    return out


def identity(results: dict[str, Any]) -> dict[str, Any]:
    """The run's config plus its provenance (versions, MUJOCO_GL, platform, command): the tracker run's config."""
    provenance = {k: v for k, v in (results.get("provenance") or {}).items() if k not in ("started", "ended")}
    return {**(results.get("config") or {}), "provenance": provenance}


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted keys with string values (lists and null as JSON), for trackers with flat params."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return flat


def videos(run_dir: Path) -> list[Path]:
    """The run's finished videos (``videos/<task>/*.mp4``; hidden partial files excluded), sorted."""
    return sorted(p for p in (run_dir / "videos").glob("*/*.mp4") if not p.name.startswith("."))
