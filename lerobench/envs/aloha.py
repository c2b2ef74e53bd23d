"""ALOHA backend (gym-aloha 0.1.5 on dm-control 1.0.28 and MuJoCo 3.3.0): two ViperX arms, LeRobot's second benchmark.

The protocol is LeRobot's (``lerobot-eval --env.type=aloha --env.task=AlohaTransferCube-v0`` or
``AlohaInsertion-v0``): 400 steps at 50 Hz, the 480x640 ``top`` camera (height x width: the first backend whose
camera is not square) and ``agent_pos``, the 14 joint positions (6 per arm and a normalised gripper each); actions
are the 14 target joint positions in the same layout. Success is gym-aloha's: the staged reward reaches its top
stage (4) at a step (transfer cube: 1 the right gripper touches the cube, 2 lifts it, 3 the left gripper touches it,
4 holds it off the table; insertion: 1 both grippers touch, 2 both lift, 3 peg touches socket, 4 peg touches pin).
Each step's reward is that stage; ``progress()`` is stage / 4, so ``max_progress`` in episodes.jsonl is the highest
stage an episode reached. Episode *i* of a run with seed S starts from gym-aloha's ``reset(seed=S + i)`` (the
suite's ``seeds = "lerobot"``), as ``lerobot-eval --seed S`` does.

Why gym-aloha's env is built with its task's observation cut down to the joints (``_unrendered``): gym-aloha's
dm-control task renders three 480x640 cameras (``top``, ``angle``, ``front_close``) inside every reset and step,
0.5 s of a 0.5 s step on a CPU renderer (Mesa llvmpipe; the physics is 3 ms). Here its reset and step run as they
are (its seeding, its global ``BOX_POSE``, its reward and success), and ``render`` draws the one camera asked for
with the same ``physics.render`` call, only at the steps a policy or a video reads.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from lerobench.envs.base import (
    RENDER_QUALITY_OPTION,
    BackendDefaults,
    EnvSpec,
    check_suite_names,
    render_quality,
    set_render_quality,
)
from lerobench.errors import MissingDependencyError

TASKS = {"AlohaTransferCube-v0": "transfer_cube", "AlohaInsertion-v0": "insertion"}
"""lerobench's task names (gym-aloha's env ids, LeRobot's ``--env.task``) -> gym-aloha's own task names."""
CAMERAS = ("top", "angle", "front_close", "left_wrist", "right_wrist", "left_pillar", "right_pillar")
"""The scene's cameras; LeRobot's policies read ``top`` (gym-aloha's only observation image)."""
MAX_STAGE = 4
"""gym-aloha's top reward stage: success (``reward == 4``)."""
JOINT_LIMIT = 3.14158
"""The waist's and the rolls' range in gym-aloha's scene (+-3.14158 rad), the widest of the 14 actuators'."""
OPTIONS = (RENDER_QUALITY_OPTION,)
"""Keys a suite may set in ``backend_options``."""
PRIVILEGED_FIELDS = ("qpos", "qvel")
"""``privileged_state()``'s layout: MuJoCo's ``qpos`` (per arm 6 joints and 2 finger joints, then each object's free
joint: xyz and quaternion wxyz; the cube, or the peg then the socket) followed by ``qvel`` (velocities, same order,
6 per free joint): 23 + 21 floats on transfer cube, 30 + 28 on insertion."""


@functools.cache
def _unrendered(task_class: type) -> type:
    """``task_class`` whose observation is the joints alone: no camera is rendered inside reset or step."""

    class Unrendered(task_class):
        def get_observation(self, physics: Any) -> dict[str, Any]:
            return {"qpos": self.get_qpos(physics), "images": {"top": _NOT_RENDERED}}

    Unrendered.__name__ = Unrendered.__qualname__ = f"Unrendered{task_class.__name__}"
    return Unrendered


_NOT_RENDERED = np.zeros((0, 0, 3), dtype=np.uint8)
"""What gym-aloha's observation carries as its ``top`` image here: lerobench renders cameras in ``render``."""


@functools.cache
def _aloha_env_class() -> type:
    """gym-aloha's ``AlohaEnv`` building its dm-control environment from ``_unrendered`` tasks (imported lazily)."""
    from dm_control import mujoco
    from dm_control.rl import control
    from gym_aloha.constants import ASSETS_DIR, DT
    from gym_aloha.env import AlohaEnv
    from gym_aloha.tasks.sim import InsertionTask, TransferCubeTask

    scenes = {"transfer_cube": ("bimanual_viperx_transfer_cube.xml", TransferCubeTask),
              "insertion": ("bimanual_viperx_insertion.xml", InsertionTask)}

    class UnrenderedAlohaEnv(AlohaEnv):
        def _make_env_task(self, task_name: str) -> Any:
            """gym-aloha's ``_make_env_task`` for the two joint-controlled tasks, with the unrendered task."""
            xml, task_class = scenes[task_name]
            physics = mujoco.Physics.from_xml_path(str(ASSETS_DIR / xml))
            return control.Environment(physics, _unrendered(task_class)(), float("inf"), control_timestep=DT,
                                       n_sub_steps=None, flat_observation=False)

    return UnrenderedAlohaEnv


class AlohaSimulator:
    """One gym-aloha task, reset and stepped by gym-aloha's own ``AlohaEnv`` (its seeding, reward and success)."""

    def __init__(self, spec: EnvSpec):
        if spec.task.name not in TASKS:
            raise ValueError(f"ALOHA has no task {spec.task.name!r}; it has {', '.join(TASKS)}")
        unknown = sorted(set(spec.backend_options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown ALOHA backend_options {unknown}; expected {', '.join(OPTIONS)}")
        quality = render_quality(spec.backend_options, f"ALOHA task {spec.task.name!r}: backend_options."
                                                        f"{RENDER_QUALITY_OPTION}")
        self._env = _aloha_env_class()(task=TASKS[spec.task.name], obs_type="pixels_agent_pos")
        self._physics = self._env._env.physics
        model = self._physics.model
        set_render_quality(model.ptr, quality)  # before dm-control makes its GL context (on the first render)
        sizes = [spec.protocol.image_size, *(s for s in (spec.video_size, spec.dataset_size) if s is not None)]
        model.vis.global_.offheight = max(model.vis.global_.offheight, *(h for h, _ in sizes))
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, *(w for _, w in sizes))
        self._state = np.zeros(14, dtype=np.float32)
        self._stage = 0.0

    def reset_to(self, episode: int, seed: int) -> None:
        """gym-aloha's own reset with the episode's seed (S + episode under LeRobot's seeds): the objects' poses."""
        obs, _ = self._env.reset(seed=int(seed))
        self._state = np.asarray(obs["agent_pos"], dtype=np.float32)
        self._stage = 0.0

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """One 50 Hz step (10 physics substeps of 2 ms); the reward is gym-aloha's stage, success its top stage."""
        obs, reward, _, _, info = self._env.step(np.asarray(action, dtype=np.float32))
        self._state = np.asarray(obs["agent_pos"], dtype=np.float32)
        self._stage = float(reward)
        return float(reward), bool(info["is_success"])

    def state(self) -> np.ndarray:
        """gym-aloha's ``agent_pos`` (LeRobot's ``observation.state``): 14 joint positions, grippers normalised."""
        return self._state

    def progress(self) -> float:
        """The reward stage reached at this step over the top stage: 0, 0.25, ... 1 (success)."""
        return self._stage / MAX_STAGE

    def idle_action(self) -> np.ndarray:
        """The arms' present joints as targets: the action that holds them where they are."""
        return self._state.copy()

    def privileged_state(self) -> np.ndarray:
        """Joints and objects as ``PRIVILEGED_FIELDS`` lays them out (the scene's exact MuJoCo state)."""
        data = self._physics.data
        return np.concatenate([data.qpos, data.qvel]).astype(np.float64)

    def physics_state(self) -> np.ndarray:
        """Positions, velocities and controls (the start digest): two equal ones started from the same state."""
        data = self._physics.data
        return np.concatenate([data.qpos, data.qvel, data.ctrl]).astype(np.float64)

    def scene_poses(self) -> np.ndarray:
        """Where every geom, camera and light is drawn (``envs/resets.py``: exact, whatever the image size)."""
        from lerobench.envs.metaworld import drawn_poses

        return drawn_poses(self._physics.data.ptr)

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """``camera`` through dm-control's ``physics.render``, as gym-aloha renders its ``top`` observation."""
        if camera not in CAMERAS:
            raise ValueError(f"unknown ALOHA camera {camera!r}; expected one of {CAMERAS}")
        return np.asarray(self._physics.render(height=height, width=width, camera_id=camera), dtype=np.uint8)

    def close(self) -> None:
        """Free the physics and its GL context; safe to call twice."""
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()
            self._physics.free()


class AlohaBackend(BackendDefaults):
    """Static facts about ALOHA; simulators are built in the worker."""

    name = "aloha"
    extra = "aloha"
    state_dim = 14
    action_dim = 14
    action_bounds = (-JOINT_LIMIT, JOINT_LIMIT)
    """The widest joint range (waist and rolls, radians), not gym-aloha's declared ``Box(-1, 1, (14,))``: gym-aloha
    never clips to that box and its own start pose is outside it (elbows at 1.16 rad), so with it every correct
    policy was reported as clipping (the expert: 24% of its action values). One range serves every dimension
    (the seam has no per-joint bounds): MuJoCo clamps each target to its actuator's own, narrower range (shoulder
    -1.85..1.26, elbow -1.76..1.61, wrist angle -1.87..2.23, grippers 0..1 normalised)."""
    cameras = CAMERAS
    n_init_states = 2**32
    """No fixed start states: each episode's start is drawn from its seed (``init_state`` is the episode index)."""
    control_fps = 50.0
    unrendered_step_ms = 3.0
    """Measured on this project's 2-core box: gym-aloha's step (10 MuJoCo substeps and the reward's contact scan)
    without a render, 2.8 ms."""
    preload_modules = ("mujoco", "scipy.ndimage", "lxml.etree", "dm_env")
    """Not dm-control itself: importing it with ``MUJOCO_GL=egl`` opens an EGL display, which a forkserver must not
    hold before forking workers."""
    packages = ("gym-aloha", "dm-control", "mujoco", "gymnasium")
    """Distributions whose versions are the simulator fingerprint (``lerobench/envs/fingerprint.py``)."""
    camera_aliases = {"image": "top", "pixels": "top"}
    """gym-aloha's ``pixels/top``; LeRobot's ``observation.images.top`` finds ``top`` by name."""
    experts = {"aloha-expert": "lerobench.policies.experts.aloha:make_aloha_expert",
               "aloha-expert-chunks": "lerobench.policies.experts.aloha:make_aloha_expert_chunks"}
    """The privileged scripted expert (both tasks; it reads ``privileged_state()``) and its chunked form."""

    def check_installed(self) -> None:
        """Fail early with the install hint instead of inside a worker."""
        import importlib.util

        missing = [m for m in ("gym_aloha", "dm_control", "mujoco") if importlib.util.find_spec(m) is None]
        if missing:
            raise MissingDependencyError(f"ALOHA needs {', '.join(missing)}, which is not installed. Install it with: "
                                         "pip install 'lerobench[aloha]'")

    def check_suite(self, suite: Any) -> None:
        """Refuse unknown cameras and task names in a suite file before anything runs (``ConfigError``)."""
        check_suite_names(suite, CAMERAS, tuple(TASKS), "ALOHA")

    def make_simulator(self, spec: EnvSpec) -> AlohaSimulator:
        """Build the task's scene (in the worker process: ~0.1 s, its GL context on the first render)."""
        return AlohaSimulator(spec)


BACKEND = AlohaBackend()
