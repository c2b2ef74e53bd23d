"""``lerobench doctor``: what a user pastes into a bug report, and whether a run would work on this machine.

Each check is one row (name, status, value). ``fail`` rows are things a run needs that are broken (offscreen
rendering, an installed backend's assets or golden-state check); ``warn`` rows are worth knowing (a simulator
version other than the pinned one whose golden state still matches); ``missing`` is an optional backend that is
not installed. The CLI prints the rows (``cli/doctor.py``) and exits non-zero when any row failed.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from typing import Any

from lerobench import environment
from lerobench._version import __version__
from lerobench.errors import LerobenchError

STATUSES = ("ok", "info", "warn", "missing", "fail")
DOCTOR_EPISODES = 50
"""Episodes per task assumed for the auto batch size shown (the community protocol's count)."""


@dataclass(frozen=True)
class Check:
    """One row of the doctor's table."""

    name: str
    status: str
    value: str

    def to_json(self) -> dict[str, Any]:
        """JSON form (``--json``)."""
        return asdict(self)


RENDER_FIX = "export MUJOCO_GL=egl"
"""The one line that fixes offscreen rendering on a headless Linux box (GPU or Mesa EGL)."""


def _render_checks() -> list[Check]:
    from lerobench.envs.fingerprint import SimulatorCheckError, offscreen_render

    gl = environment.get(environment.MUJOCO_GL)
    rows = [Check("MUJOCO_GL", "info" if gl else "warn", gl or f"unset (headless rendering needs it: {RENDER_FIX})")]
    try:
        info = offscreen_render()
    except SimulatorCheckError as exc:
        setting = f"MUJOCO_GL={gl}" if gl else "MUJOCO_GL unset"
        rows.append(Check("offscreen render", "fail", f"{setting}: a real offscreen render failed ({exc}); fix: "
                                                      f"{RENDER_FIX} (GPU or Mesa EGL), then run doctor again"))
    else:
        rows.append(Check("offscreen render", "ok", f"{info.get('gl_renderer')} ({info.get('gl_vendor')}, OpenGL "
                                                    f"{info.get('gl_version')})"))
    return rows


def _backend_checks(name: str, fresh: bool, no_render: str | None = None) -> list[Check]:
    from lerobench.envs.fingerprint import fingerprint
    from lerobench.errors import MissingDependencyError
    from lerobench.plan.planner import check_importable
    from lerobench.suite.registry import get_backend

    try:
        backend = get_backend(name)
        check_importable(backend)
    except MissingDependencyError as exc:
        broken = exc.__cause__ is not None and not isinstance(exc.__cause__, ImportError)
        return [Check(name, "fail" if broken else "missing", str(exc))]
    except (LerobenchError, ImportError) as exc:
        return [Check(name, "fail", f"cannot load the backend ({exc})")]
    found = fingerprint(name, backend.packages, use_cache=not fresh, no_render=no_render)
    pinned = found.get("pinned") or {}
    versions = found["versions"]
    off_pin = [f"{k} {v} (pinned {pinned[k]})" for k, v in versions.items() if k in pinned and pinned[k] != v]
    rows = [Check(f"{name} versions", "warn" if off_pin else "ok",
                  "; ".join(off_pin) if off_pin else ", ".join(f"{k} {v}" for k, v in versions.items()))]
    missing = backend.missing_assets()
    rows.append(Check(f"{name} assets", "fail" if missing else "ok",
                      f"missing or empty: {', '.join(missing)}" if missing else "present"))
    golden = found["golden"]
    status = {"pass": "ok", "drifted": "fail"}.get(golden["status"], "info")
    if golden.get("reason"):
        detail = golden["reason"]
    elif golden["status"] == "pass":
        checked = golden.get("images_checked")
        status = status if checked else "warn"  # half a check is not a pass
        image = (f"image within {golden['max_image_mad']:.2g} grey levels" if checked else
                 f"image not checked: {golden.get('render_error')}")
        detail = (f"state matches the pinned stack (within {golden['max_state_diff']:.2g}), {image}"
                  f"{' (cached)' if golden.get('cached') else ''}")
    else:
        detail = golden["status"]
    rows.append(Check(f"{name} golden state", status, detail))
    return rows


def _memory_checks() -> list[Check]:
    """The measured memory per worker the auto batch size budgets, per backend and rendered cameras."""
    from lerobench.envs import template, worker_memory
    from lerobench.suite.registry import get_backend

    rows = []
    for (backend, cameras), found in sorted(worker_memory.MEASURED.items()):
        try:
            shared = get_backend(backend).task_template and template.sharing(True)
        except LerobenchError:
            shared = False
        rows.append(Check(f"worker memory ({backend}, {cameras} camera{'s' * (cameras != 1)})", "info",
                          f"{found.budget_mb(shared)} MB per further worker, {found.first_extra_mb(shared)} MB more "
                          f"for the first ({found.describe(shared)})"))
    return rows


def _machine_checks() -> list[Check]:
    from lerobench.envs import template, worker_memory
    from lerobench.suite.registry import get_backend, list_suites
    from lerobench.system import available_memory_mb, usable_cores

    cores, memory = usable_cores(), available_memory_mb()
    rows = [Check("usable cores", "info", str(cores)),
            Check("available memory", "info", f"{memory} MB" if memory is not None else "unknown")]
    seen: set[str] = set()
    for suite in list_suites():
        if suite.backend in seen:
            continue
        seen.add(suite.backend)
        cameras = len(suite.protocol().cameras)
        try:
            shared = get_backend(suite.backend).task_template and template.sharing(True)
        except LerobenchError:
            shared = False
        batch, how = worker_memory.auto_batch(DOCTOR_EPISODES, suite.backend, cameras, cores, memory, shared,
                                              suite.worker_memory_mb)
        rows.append(Check(f"auto batch size ({suite.backend})", "info",
                          f"{batch}: {how} (suite {suite.name}, {cameras} cameras)"))
    return rows + _memory_checks()


def run_doctor(fresh: bool = False) -> list[Check]:
    """Every check, in the table's order; ``fresh`` reruns golden-state checks instead of using the cache."""
    from lerobench.suite.registry import backend_names

    rows = [Check("python", "info", f"{platform.python_version()} ({platform.platform()})"),
            Check("lerobench", "info", __version__)]
    render = _render_checks()
    # Rendering failed: the golden checks compare the state only and say why, instead of rendering anyway (a
    # backend may pick a GL of its own and pass, or abort its child process in a libc++abi crash).
    broken = any(r.name == "offscreen render" and r.status == "fail" for r in render)
    no_render = f"offscreen rendering fails here (see 'offscreen render'; fix: {RENDER_FIX})" if broken else None
    rows += render
    for name in backend_names():
        rows += _backend_checks(name, fresh, no_render)
    return rows + _machine_checks()


def failures(rows: list[Check]) -> list[Check]:
    """The rows that make ``doctor`` exit non-zero."""
    return [r for r in rows if r.status == "fail"]
