"""What makes two runs "the same run": defined once, read by resume, merge, compare, report and ``--versus``.

A run's identity has two parts, both read from the ``config`` block of ``results.json``:

- **episodes**: what makes episode *i* of a task start from the same state in two runs: the resolved
  suite's content (backend, ``backend_options`` such as an ML1 train/test split, tasks), the protocol
  and its settings (step limit included), the seed and the simulator fingerprint (simulator package
  versions and the golden-state reference the run was checked against, ``lerobench/envs/fingerprint.py``).
- **treatment**: what was done from those starts: the policy, the replan steps actually executed, trials
  per episode, stop-on-success, the device and the inference delay (``--delay-steps``).

``--resume`` and ``lerobench merge`` require both parts to match; ``compare`` and ``report`` require the
episodes to match (``--allow-different`` overrides and lists what differs) and show the treatment
difference as what is being compared. How many episodes a run has (``episodes_per_task``) and which shard
it is are its *extent*, not its identity: callers check them where they matter (resume, merge).

Every refusal names the field (dotted into nested settings: ``episodes.backend_options.split``) and both
values, through ``diff``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EPISODE_FIELDS = ("suite", "backend", "backend_options", "tasks", "protocol", "protocol_settings", "seed",
                  "simulator")
"""Config keys that fix the episodes' start states (``simulator``: ``simulator_identity`` of the fingerprint)."""

TREATMENT_FIELDS = ("policy", "replan_steps", "trials", "stop_on_success", "device", "perturb", "call_width",
                    "delay_steps", "image_size")
"""Config keys that fix what is done from those starts (``replan_steps``: the executed value; ``perturb``: the
``--perturb`` wrappers, which never move a start; ``call_width``: the rows per call of a torch policy, which
fixes its numerics; None for policies that do not pad; ``delay_steps``: the inference delay, d or ``measured``;
``image_size``: the size the policy's cameras were rendered at, its declared size or the protocol's)."""

DEFAULTS: dict[str, Any] = {"trials": 1, "backend_options": {}, "device": "cpu", "perturb": None,
                            "call_width": None, "delay_steps": 0}
"""Values of keys that result files written by older lerobench versions lack."""

PARTS = ("episodes", "treatment")


def simulator_identity(fingerprint: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The part of a simulator fingerprint that defines the episodes: package versions and the golden check.

    The renderer (``MUJOCO_GL``, GL vendor and renderer strings) is recorded but not compared: the golden
    check already compares a rendered image within a tolerance, and requiring equal GL strings would refuse
    merging shards that ran on a GPU node and a CPU node with matching pixels.
    """
    if not fingerprint:
        return None
    golden = fingerprint.get("golden") or {}
    return {"versions": dict(fingerprint.get("versions") or {}),
            "golden_reference": golden.get("reference"), "golden_status": golden.get("status")}


@dataclass(frozen=True)
class RunIdentity:
    """The two parts of a run's identity, as JSON-ready dicts keyed by config field."""

    episodes: dict[str, Any]
    treatment: dict[str, Any]

    def part(self, name: str) -> dict[str, Any]:
        """``episodes`` or ``treatment``."""
        if name not in PARTS:
            raise ValueError(f"unknown identity part {name!r}; expected one of {PARTS}")
        return self.episodes if name == "episodes" else self.treatment


def identity_of(config: Mapping[str, Any]) -> RunIdentity:
    """The identity of the run whose ``results.json`` has this ``config`` block (or ``RunPlan.config()``)."""

    def value(key: str) -> Any:
        found = config.get(key, DEFAULTS.get(key))
        if key == "simulator":
            return simulator_identity(found)
        if key == "replan_steps":  # what ran: a policy's own chunking wins over --replan-steps (older files: as given)
            return config.get("replan_steps_executed", found)
        if key == "image_size" and found is None:  # older files: every camera at the protocol's size
            return (config.get("protocol_settings") or {}).get("image_size")
        return found

    return RunIdentity(episodes={k: value(k) for k in EPISODE_FIELDS},
                       treatment={k: value(k) for k in TREATMENT_FIELDS})


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    """Nested dicts as dotted keys, so a difference names the innermost field (``protocol_settings.max_steps``)."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key in value:
            out.update(_flatten(value[key], f"{prefix}.{key}"))
        return out
    return {prefix: value}


def _normal(value: Any) -> Any:
    """Tuples as lists (as JSON stores them), so an in-memory config equals the one read back from disk."""
    if isinstance(value, tuple | list):
        return [_normal(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, Mapping) and not value)


def diff(a: RunIdentity | Mapping[str, Any], b: RunIdentity | Mapping[str, Any],
         parts: tuple[str, ...] = PARTS, labels: tuple[str, str] | None = None) -> list[str]:
    """What differs between two identities (or two config blocks), one line per field with both values.

    Lines read ``episodes.seed: 5 vs 6``, or with ``labels=("previous", "now")``
    ``episodes.seed: previous 5, now 6``. An empty list means the runs are the same in ``parts``.
    """
    ia = a if isinstance(a, RunIdentity) else identity_of(a)
    ib = b if isinstance(b, RunIdentity) else identity_of(b)
    found = []
    for part in parts:
        fa, fb = ia.part(part), ib.part(part)
        for key in fa:
            va, vb = _normal(fa[key]), _normal(fb.get(key))
            if va == vb:
                continue
            flat_a, flat_b = _flatten(va, f"{part}.{key}"), _flatten(vb, f"{part}.{key}")
            for name in dict.fromkeys([*flat_a, *flat_b]):
                x, y = flat_a.get(name), flat_b.get(name)
                if x == y or (_empty(x) and _empty(y)):
                    continue
                found.append(f"{name}: {labels[0]} {x!r}, {labels[1]} {y!r}" if labels else f"{name}: {x!r} vs {y!r}")
    return found
