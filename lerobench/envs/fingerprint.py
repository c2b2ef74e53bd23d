"""The simulator fingerprint: which stack a run simulated on, and a golden-state check that it is the pinned one.

Why: scores from these simulators change silently with the stack under them (MuJoCo >= 3.4 breaks
libero_spatial task 5, newer MuJoCo renders LIBERO floors darker, EGL and OSMesa differ). Versions alone do not
catch a rebuilt wheel or another GL driver, so for each backend a few fixed (task, episode) pairs are built and
their first observation compared with values stored in the repository for the pinned stack
(``lerobench/envs/golden/<backend>.json``):

- the state vector right after ``reset_to`` and after a few steps of a fixed action (physics), to
  ``state_atol`` (1e-5: same MuJoCo on another x86 CPU agrees far closer; a physics change moves it far more);
- one small camera image, compared as a block-mean downsampled image (16x16): mean absolute difference at most
  ``image_mad`` grey levels of 255 (Mesa llvmpipe and GPU EGL differ by a little anti-aliasing; a darker
  floor moves the mean by far more).

The check runs in a child process (a broken ``MUJOCO_GL`` cannot take the caller down, and LIBERO's ~2 GB env is
freed with it) and its result is cached per environment under ``~/.cache/lerobench`` (``LEROBENCH_CACHE_DIR``),
keyed by the backend's package versions, ``MUJOCO_GL``, the golden file's hash, the Python prefix and the host.
Measured on a 2-core box (``benchmarks/golden_check.py``): Meta-World 1.9 s the first time, LIBERO 3.9 s (one
32x32 render; 4-9 s while other jobs load the box), then 1.4 ms from the cache.

``python -m lerobench.envs.fingerprint BACKEND`` prints one check as JSON (what the parent runs);
``--record`` rewrites the golden file from this machine (only on the pinned stack).
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from lerobench import environment
from lerobench.core.files import write_cache_json

CHECK_VERSION = 2
"""Bump when the check itself changes, so cached results of the old check are not reused."""
CHECK_TIMEOUT_S = 300


class SimulatorCheckError(Exception):
    """The golden-state check could not run at all (the message is the child's last error line)."""


def golden_path(backend: str) -> Path:
    """Where ``backend``'s golden file is read from (``LEROBENCH_GOLDEN_DIR`` overrides the shipped one)."""
    folder = environment.get(environment.GOLDEN_DIR)
    return Path(folder) / f"{backend}.json" if folder else Path(__file__).parent / "golden" / f"{backend}.json"


def package_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Installed versions of ``packages`` (None: not installed)."""
    found: dict[str, str | None] = {}
    for dist in packages:
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = None
    return found


def gl_info() -> dict[str, str | None]:
    """``MUJOCO_GL`` and the GL vendor/renderer/version strings of a real offscreen context (raises if none)."""
    import mujoco

    context = mujoco.GLContext(8, 8)
    try:
        context.make_current()
        from OpenGL import GL

        def text(name: int) -> str | None:
            value = GL.glGetString(name)
            return value.decode(errors="replace") if value else None

        return {"MUJOCO_GL": environment.get(environment.MUJOCO_GL), "gl_vendor": text(GL.GL_VENDOR),
                "gl_renderer": text(GL.GL_RENDERER), "gl_version": text(GL.GL_VERSION)}
    finally:
        context.free()


PROBE_XML = """<mujoco><worldbody><light pos="0 0 2"/>
<geom type="plane" size="1 1 .1" rgba=".2 .3 .4 1"/><geom type="box" pos="0 0 .1" size=".1 .1 .1" rgba="1 0 0 1"/>
</worldbody></mujoco>"""


def render_probe() -> dict[str, Any]:
    """A real offscreen render of a tiny scene (a red box on a plane) with ``MUJOCO_GL``; raises if it fails.

    A context that can be created but draws nothing (a black or uniform image) counts as a failure too.
    """
    import mujoco
    import numpy as np

    model = mujoco.MjModel.from_xml_string(PROBE_XML)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    renderer = mujoco.Renderer(model, 32, 32)
    try:
        renderer.update_scene(data)
        image = renderer.render()
    finally:
        renderer.close()
    if float(np.asarray(image, dtype=np.float64).std()) < 1.0:
        raise RuntimeError("the offscreen render came back uniform (nothing was drawn)")
    return gl_info()


def _downsample(image: Any, block: int) -> Any:
    import numpy as np

    h, w, c = image.shape
    img = np.asarray(image, dtype=np.float64)[: h - h % block, : w - w % block]
    return img.reshape(h // block, block, w // block, block, c).mean(axis=(1, 3))


def observe_case(backend_name: str, case: dict[str, Any], render: bool = True) -> dict[str, Any]:
    """Build one golden case's simulator and return its first state, its state after the steps, and the image.

    ``render=False`` (or a render that raises) leaves the image out: a machine without a renderer can still run
    state-only evaluations, so their state is checked.
    """
    import numpy as np

    from lerobench.envs.base import EnvSpec, episode_seed
    from lerobench.suite.config import Protocol, TaskSpec
    from lerobench.suite.registry import get_backend

    backend = get_backend(backend_name)
    h, w = case["image_size"]
    task = TaskSpec(name=case["task"], description="", index=case["task_index"])
    spec = EnvSpec(suite="golden", backend=backend_name, task=task, protocol=Protocol(max_steps=10, image_size=(h, w)),
                   seed=case["seed"], state_dim=backend.state_dim, action_dim=backend.action_dim,
                   record_camera=case["camera"] if render else None,
                   backend_options=dict(case.get("backend_options") or {}))
    where = f"{case['task']} episode {case['episode']}"
    with _phase(where, "building the simulator"):
        sim = backend.make_simulator(spec)
    image, render_error = None, None if render else "not attempted (a render crashed the check)"
    try:
        with _phase(where, "reset to its start"):
            sim.reset_to(case["episode"], episode_seed(case["seed"], case["task_index"], case["episode"]))
            first = np.asarray(sim.state(), dtype=np.float64)
        try:
            if not render:
                raise _NoRender
            image = np.rint(_downsample(sim.render(case["camera"], h, w), case["block"])).astype(int).tolist()
        except _NoRender:
            pass
        except Exception as exc:  # noqa: BLE001 - no renderer here: state-only runs still work, so check the state
            render_error = f"{type(exc).__name__}: {exc}"
        for i in range(case["steps"]):
            with _phase(where, f"step {i + 1} of {case['steps']}"):
                sim.step(np.asarray(case["action"], dtype=np.float32))
        after = np.asarray(sim.state(), dtype=np.float64)
    finally:
        sim.close()
    return {"state": first.tolist(), "state_after": after.tolist(), "image": image, "render_error": render_error}


@contextmanager
def _phase(where: str, phase: str) -> Iterator[None]:
    """Name the case and the phase in which the simulator raised.

    Why: a newer MuJoCo fails inside the stack (``... shape=(43, 43))``); its last line alone says nothing.
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised with its place; the child's last line is the reason
        raise RuntimeError(f"{where}: {phase} raised {type(exc).__name__}: {exc}") from exc


def _sizes(name: str, want: Any, got: Any) -> str:
    """What differs between two arrays of different shapes, in words."""
    if want.ndim == got.ndim == 1:
        return f"{name} size differs: expected {want.shape[0]}, got {got.shape[0]}"
    return f"{name} shape differs: expected {want.shape}, got {got.shape}"


def compare_case(case: dict[str, Any], seen: dict[str, Any], state_atol: float, image_mad: float) -> dict[str, Any]:
    """How far one case's observation is from its golden values, and whether it is within tolerance.

    Arrays of different shapes (another state layout) are infinitely far; ``shape`` says which sizes differ.
    """
    import numpy as np

    state_diff, shape = 0.0, None
    for key in ("state", "state_after"):
        want, got = np.asarray(case[key], dtype=np.float64), np.asarray(seen[key], dtype=np.float64)
        if want.shape != got.shape:
            shape = shape or _sizes("state", want, got)
        state_diff = max(state_diff, float("inf") if want.shape != got.shape else float(np.max(np.abs(want - got))))
    mad = None
    if seen["image"] is not None:
        want, got = np.asarray(case["image"], dtype=np.float64), np.asarray(seen["image"], dtype=np.float64)
        if want.shape != got.shape:
            shape = shape or _sizes("image", want, got)
        mad = round(float("inf") if want.shape != got.shape else float(np.mean(np.abs(want - got))), 3)
    ok = state_diff <= state_atol and (mad is None or mad <= image_mad)
    return {"task": case["task"], "episode": case["episode"], "state_diff": state_diff, "image_mad": mad,
            "render_error": seen.get("render_error"), "ok": ok, "shape": shape}


class _NoRender(Exception):
    pass


def run_check(backend: str, path: Path, render: bool = True) -> dict[str, Any]:
    """The golden-state check itself (run in the child process): every case observed and compared."""
    golden = json.loads(path.read_text(encoding="utf-8"))
    results = [compare_case(case, observe_case(backend, case, render), golden["state_atol"], golden["image_mad"])
               for case in golden["cases"]]
    bad = [r for r in results if not r["ok"]]
    reason = None
    if bad:
        r = bad[0]
        image = ("not rendered" if r["image_mad"] is None else
                 f"{r['image_mad']:.3g} grey levels (tolerance {golden['image_mad']:g})")
        reason = (f"{r['task']} episode {r['episode']}: {r['shape']}" if r.get("shape") else
                  f"{r['task']} episode {r['episode']}: state differs by {r['state_diff']:.3g} (tolerance "
                  f"{golden['state_atol']:g}), image by {image}")
    mads = [r["image_mad"] for r in results if r["image_mad"] is not None]
    unrendered = next((r["render_error"] for r in results if r["render_error"]), None)
    try:
        if not render:
            raise _NoRender
        renderer: dict[str, Any] = gl_info()
    except _NoRender:
        renderer = {"MUJOCO_GL": environment.get(environment.MUJOCO_GL), "error": "not attempted"}
    except Exception as exc:  # noqa: BLE001 - recorded: no GL here
        renderer = {"MUJOCO_GL": environment.get(environment.MUJOCO_GL), "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "drifted" if bad else "pass", "reason": reason, "cases": results,
            "max_state_diff": max(r["state_diff"] for r in results), "max_image_mad": max(mads) if mads else None,
            "images_checked": unrendered is None, "render_error": unrendered, "renderer": renderer}


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _cache_key(backend: str, versions: dict[str, str | None], reference: str) -> str:
    key = {"check": CHECK_VERSION, "backend": backend, "versions": versions, "reference": reference,
           "MUJOCO_GL": environment.get(environment.MUJOCO_GL),
           "PYOPENGL_PLATFORM": environment.get(environment.PYOPENGL_PLATFORM),
           "prefix": sys.prefix, "host": platform.node()}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def _run_child(*arguments: str) -> dict[str, Any]:
    """Run the check (a backend name, or ``--render-probe``) in a fresh interpreter; its last error line if it fails."""
    try:
        done = subprocess.run([sys.executable, "-m", "lerobench.envs.fingerprint", *arguments], capture_output=True,
                              text=True, timeout=CHECK_TIMEOUT_S, env=environment.snapshot())
    except subprocess.TimeoutExpired as exc:
        raise SimulatorCheckError(f"timed out after {CHECK_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise SimulatorCheckError(lines[-1].strip() if lines else f"exit code {done.returncode}")
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError) as exc:
        raise SimulatorCheckError(f"the check printed no result ({done.stdout[-200:]!r})") from exc


def offscreen_render() -> dict[str, Any]:
    """``render_probe`` in a child process, so a broken GL cannot crash the caller (``SimulatorCheckError``)."""
    return _run_child("--render-probe")


def fingerprint(backend: str, packages: tuple[str, ...], use_cache: bool = True,
                no_render: str | None = None) -> dict[str, Any]:
    """The simulator fingerprint of ``backend`` on this machine: versions, renderer and the golden check.

    ``golden.status`` is ``pass``, ``drifted`` (the stack does not reproduce the stored first observations, or
    the check could not run: ``reason`` says which) or ``unchecked`` (the backend ships no golden file).
    ``no_render``: why images are not to be rendered (``doctor`` after its render check failed): only the state
    is checked, ``render_error`` says why, nothing is cached (a render with a working GL would check more).
    """
    versions = package_versions(packages)
    path = golden_path(backend)
    out: dict[str, Any] = {"backend": backend, "versions": versions}
    if not path.is_file():
        out["renderer"] = {"MUJOCO_GL": environment.get(environment.MUJOCO_GL)}
        out["golden"] = {"status": "unchecked", "reference": None, "reason": f"no golden file {path}"}
        return out
    reference = _file_hash(path)
    cached = environment.cache_dir() / f"golden-{backend}-{_cache_key(backend, versions, reference)}.json"
    started = time.perf_counter()
    result = None
    if use_cache and no_render is None and cached.is_file():
        try:
            result = json.loads(cached.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            result = None
    from_cache = result is not None
    if result is None and no_render is not None:
        try:
            result = _run_child(backend, "--state-only")
            result["render_error"] = no_render
        except SimulatorCheckError as exc:
            result = {"status": "drifted", "reason": f"the check could not run: {exc}", "cases": [],
                      "renderer": {"MUJOCO_GL": environment.get(environment.MUJOCO_GL)}}
    elif result is None:
        try:
            result = _run_child(backend)
        except SimulatorCheckError as exc:
            try:  # a renderer that aborts the process (no display for glfw): the state can still be checked
                result = _run_child(backend, "--state-only")
                result["render_error"] = f"rendering crashed the check: {exc}"
            except SimulatorCheckError as again:
                result = {"status": "drifted", "reason": f"the check could not run: {again}", "cases": [],
                          "renderer": {"MUJOCO_GL": environment.get(environment.MUJOCO_GL)}}
        if result.get("cases"):
            write_cache_json(cached, result)  # a failed check's inf difference is kept as is
    pinned = json.loads(path.read_text(encoding="utf-8")).get("recorded_with", {})
    out["pinned"] = {k: v for k, v in pinned.items() if k in versions}
    out["renderer"] = result.get("renderer") or {}
    reason = result.get("reason")
    moved = [f"{k} {versions[k]} here, recorded with {v}" for k, v in out["pinned"].items() if versions[k] != v]
    if result["status"] == "drifted" and moved:  # the likeliest cause, named beside the symptom
        reason = f"{reason}; versions differ from the golden file's: {', '.join(moved)}"
    out["golden"] = {"status": result["status"], "reason": reason, "reference": reference,
                     "max_state_diff": result.get("max_state_diff"), "max_image_mad": result.get("max_image_mad"),
                     "images_checked": result.get("images_checked", False), "render_error": result.get("render_error"),
                     "cached": from_cache, "seconds": round(time.perf_counter() - started, 3)}
    return out


def checked_fingerprint(backend: str, packages: tuple[str, ...], allow_drift: bool) -> dict[str, Any]:
    """``fingerprint`` for a run: ``SimulatorDriftError`` (one line) when the check fails and drift is not allowed."""
    from lerobench.errors import SimulatorDriftError

    found = fingerprint(backend, packages)
    golden = found["golden"]
    if golden["status"] == "drifted" and not allow_drift:
        versions = ", ".join(f"{k} {v}" for k, v in found["versions"].items())
        raise SimulatorDriftError(
            f"simulator drift: the {backend} golden-state check failed ({golden['reason']}) on {versions}, "
            f"MUJOCO_GL={environment.get(environment.MUJOCO_GL)}: this stack does not reproduce the pinned "
            f"simulation, so its scores are not comparable; run `lerobench doctor`, or pass --allow-sim-drift to "
            f"run anyway (the run is marked drifted)")
    return found


def require_renderer(found: dict[str, Any], why: str) -> None:
    """Refuse a run that renders (``why``: videos, the policy's cameras) when offscreen rendering fails here.

    Checked before any worker starts: otherwise workers start, the first render raises mujoco's
    ``FatalError: an OpenGL platform library has not been loaded`` (``MUJOCO_GL`` unset) or gymnasium prints an
    "Exception ignored" traceback (``MUJOCO_GL=glx`` without a display), and half a run is left behind. A
    fingerprint whose golden check compared images proves the renderer works; otherwise doctor's probe (a real
    offscreen render in a child process, ``offscreen_render``) decides.
    """
    from lerobench.errors import RendererError

    if found.get("golden", {}).get("images_checked"):
        return
    try:
        offscreen_render()
    except SimulatorCheckError as exc:
        gl = environment.get(environment.MUJOCO_GL)
        raise RendererError(
            f"this run renders images ({why}) but offscreen rendering fails with "
            f"{f'MUJOCO_GL={gl}' if gl else 'MUJOCO_GL unset'} ({exc}): set MUJOCO_GL=egl (Mesa or GPU EGL; "
            f"`lerobench doctor` checks it)" + (", or pass --videos 0" if "--videos" in why else "")) from None


def record(backend: str, cases: list[dict[str, Any]], packages: tuple[str, ...], state_atol: float,
           image_mad: float) -> dict[str, Any]:
    """Observe ``cases`` on this machine and return the golden document for them (``--record``)."""
    observed = []
    for case in cases:
        seen = observe_case(backend, case)
        if seen.pop("render_error"):
            raise RuntimeError(f"cannot record {case['task']} episode {case['episode']}: rendering failed")
        observed.append({**case, **seen})
    return {"backend": backend, "recorded_with": {**package_versions(packages), **gl_info()},
            "state_atol": state_atol, "image_mad": image_mad, "cases": observed}


def _golden_text(doc: dict[str, Any]) -> str:
    """The golden document as reviewable JSON: settings indented, one line per case."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n'
    return lines + ",\n".join("  " + json.dumps(case) for case in doc["cases"]) + "\n ]\n}\n"


def _main(argv: list[str]) -> int:
    from lerobench.suite.registry import get_backend

    if argv[0] == "--render-probe":
        print(json.dumps(render_probe()))
        return 0
    backend = argv[0]
    if "--record" in argv:
        golden = json.loads(golden_path(backend).read_text(encoding="utf-8"))
        cases = [{k: v for k, v in c.items() if k not in ("state", "state_after", "image")} for c in golden["cases"]]
        doc = record(backend, cases, get_backend(backend).packages, golden["state_atol"], golden["image_mad"])
        golden_path(backend).write_text(_golden_text(doc), encoding="utf-8")
        return 0
    print(json.dumps(run_check(backend, golden_path(backend), render="--state-only" not in argv)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
