"""PushT backend (gym-pusht 0.1.8, LeRobot's first benchmark): push a T-shaped block onto its goal pose.

The protocol is LeRobot's (``lerobot-eval --env.type=pusht``): ``PushT-v0``, 300 steps at 10 Hz, the 96x96 image and
the agent's 2-D position, success when the block covers more than 95% of the goal (gym-pusht's ``is_success``), and
episode *i* of a run with seed S starts from ``reset(seed=S + i)`` (the suite's ``seeds = "lerobot"``): the same
starts as ``lerobot-eval --seed S``. Actions are the agent's target position in gym-pusht's 512x512 workspace, as
LeRobot's policies output them (``action_bounds`` [0, 512]). The simulator is pymunk, not MuJoCo: no GL, no
template process, and only the generic perturbations.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from lerobench.envs.base import BackendDefaults, EnvSpec, check_suite_names
from lerobench.errors import MissingDependencyError

TASKS = ("PushT-v0",)
POLICY_CAMERA = "top"
"""gym-pusht's observation image (``pixels``; LeRobot's ``observation.image``): the scene seen from above."""
VIDEO_CAMERA = "visualization"
"""gym-pusht's ``render()``: the same view with the last action's target marked, what LeRobot's videos show."""
CAMERAS = (POLICY_CAMERA, VIDEO_CAMERA)
PRIVILEGED_FIELDS = ("agent_x", "agent_y", "agent_vx", "agent_vy", "block_x", "block_y", "block_angle",
                     "block_vx", "block_vy", "block_angular_velocity", "goal_x", "goal_y", "goal_angle")
"""``privileged_state()``'s layout (what ``pusht-expert`` reads; zero padded to ``PRIVILEGED_DIM``): pymunk's bodies
as gym-pusht holds them; ``block_x/y`` is the T's body origin (gym-pusht's ``info['block_pose']``), its angle
unwrapped."""


def _pusht_env_class() -> Any:
    """gym-pusht's env class, imported without pygame's start-up banner (in a worker's own output)."""
    from lerobench import environment

    environment.set_default("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    from gym_pusht.envs.pusht import PushTEnv

    return PushTEnv


class PushTSimulator:
    """One PushT env, driven through gym-pusht's own ``reset``/``step`` (its physics, coverage and success)."""

    def __init__(self, spec: EnvSpec):
        if spec.task.name not in TASKS:
            raise ValueError(f"PushT has no task {spec.task.name!r}; it has {', '.join(TASKS)}")
        self._env = _pusht_env_class()(obs_type="state", render_mode="rgb_array")
        self._env._get_coverage = functools.partial(ordered_coverage, self._env)  # this instance only
        self._coverage = 0.0

    def reset_to(self, episode: int, seed: int) -> None:
        """gym-pusht's own reset with the episode's seed (S + episode under LeRobot's seeds): its RNG draws it."""
        self._env.reset(seed=int(seed))
        self._coverage = float(self._env._get_coverage())

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """One 10 Hz step (10 physics substeps); reward and success are gym-pusht's."""
        _, reward, _, _, info = self._env.step(np.asarray(action, dtype=np.float32))
        self._coverage = float(info["coverage"])
        return float(reward), bool(info["is_success"])

    def state(self) -> np.ndarray:
        """The agent's position (gym-pusht's ``agent_pos``, LeRobot's ``observation.state``)."""
        return np.asarray(self._env.agent.position, dtype=np.float32)

    def progress(self) -> float:
        """gym-pusht's coverage of the goal by the block, in [0, 1] (success is coverage > 0.95)."""
        return self._coverage

    def idle_action(self) -> np.ndarray:
        """Target the agent's own position: the action that keeps it where it is."""
        return np.asarray(self._env.agent.position, dtype=np.float32)

    def privileged_state(self) -> np.ndarray:
        """Agent, block and goal as ``PRIVILEGED_FIELDS`` lists them (read by ``pusht-expert``)."""
        return privileged_state(self._env)

    def physics_state(self) -> np.ndarray:
        """The bodies' poses and velocities (the start digest): two equal ones started from the same state."""
        return self.privileged_state()

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """gym-pusht's drawing resized to (height, width): the policy's image, or the video's with the action marked."""
        if camera not in CAMERAS:
            raise ValueError(f"unknown PushT camera {camera!r}; expected one of {CAMERAS}")
        screen = self._env._draw()
        return self._env._get_img(screen, width=width, height=height, render_action=camera == VIDEO_CAMERA)

    def close(self) -> None:
        """Drop the env (pymunk and pygame surfaces hold no process-wide resource); safe to call twice."""
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()


def privileged_state(env: Any) -> np.ndarray:
    """A gym-pusht env's agent, block and goal as ``PRIVILEGED_FIELDS`` lists them (the one reader of that layout)."""
    agent, block = env.agent, env.block
    return np.array([*agent.position, *agent.velocity, *block.position, block.angle, *block.velocity,
                     block.angular_velocity, *env.goal_pose], dtype=np.float64)


def ordered_coverage(env: Any) -> float:
    """gym-pusht's ``_get_coverage``, with the T's two rectangles always taken in the order they were made.

    Why: gym-pusht builds both T polygons from ``block.shapes``, a Python ``set`` (pymunk's), whose order follows
    the shapes' memory addresses; the intersection's area is then summed in another order from one process to the
    next, and the coverage (hence the reward and ``progress``) differs in its last bit with the same poses (measured:
    0.9832849721705403 and ...407 for one episode's last step). The same formula over ``_block_shapes`` (a list, in
    creation order) gives one value.
    """
    from gym_pusht.envs.pusht import pymunk_to_shapely

    goal_body = env.get_goal_pose_body(env.goal_pose)
    goal_geom = pymunk_to_shapely(goal_body, env._block_shapes)
    block_geom = pymunk_to_shapely(env.block, env._block_shapes)
    return float(goal_geom.intersection(block_geom).area / goal_geom.area)


class PushTBackend(BackendDefaults):
    """Static facts about PushT; simulators are built in the worker (or in-process: they cost a few ms)."""

    name = "pusht"
    extra = "pusht"
    state_dim = 2
    action_dim = 2
    action_bounds = (0.0, 512.0)
    """Target positions in gym-pusht's workspace, as LeRobot's PushT policies output them."""
    cameras = CAMERAS
    n_init_states = 2**32
    """No fixed start states: each episode's start is drawn from its seed (``init_state`` is the episode index)."""
    control_fps = 10.0
    unrendered_step_ms = 0.9
    """Measured on this project's 2-core box (gym-pusht's step: 10 pymunk substeps and the coverage's polygon
    intersection); below a worker round trip, so a state-only run stays in-process."""
    preload_modules = ("pygame", "pymunk", "shapely", "cv2")
    packages = ("gym-pusht", "pymunk", "pygame", "shapely", "opencv-python", "gymnasium")
    """Distributions whose versions are the simulator fingerprint (``lerobench/envs/fingerprint.py``)."""
    camera_aliases = {"image": POLICY_CAMERA, "pixels": POLICY_CAMERA}
    """gym-pusht's ``pixels``, LeRobot's ``observation.image``."""
    experts = {
        "pusht-expert": "lerobench.policies.experts.pusht:make_pusht_expert",
        "pusht-expert-noisy": "lerobench.policies.experts.pusht:make_pusht_expert_noisy",
        "pusht-expert-chunks": "lerobench.policies.experts.pusht_chunks:make_pusht_expert_chunks",
    }

    def check_installed(self) -> None:
        """Fail early with the install hint instead of inside a worker."""
        import importlib.util

        modules = ("gym_pusht", "pymunk", "pygame", "shapely", "cv2")
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            raise MissingDependencyError(f"PushT needs {', '.join(missing)}, which is not installed. Install it with: "
                                         "pip install 'lerobench[pusht]'")

    def check_suite(self, suite: Any) -> None:
        """Refuse unknown cameras and task names in a suite file before anything runs (``ConfigError``)."""
        check_suite_names(suite, CAMERAS, TASKS, "PushT")

    def make_simulator(self, spec: EnvSpec) -> PushTSimulator:
        """Build the task's env (in the worker process)."""
        return PushTSimulator(spec)


BACKEND = PushTBackend()
