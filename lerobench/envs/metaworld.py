"""Meta-World v3 backend: episode *i* of a task runs on ``MT1(task, seed).train_tasks[i % 50]``."""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobench.envs.base import EnvSpec
from lerobench.errors import MissingDependencyError

CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")
MAX_PATH_LENGTH = 500
"""Meta-World raises once an episode exceeds this many steps, so suites may not ask for more."""


class MetaWorldSimulator:
    """One Meta-World task. Renderers exist only for consumed cameras (none for state-only policies)."""

    def __init__(self, spec: EnvSpec):
        import metaworld

        task = spec.task.name
        if spec.protocol.max_steps > MAX_PATH_LENGTH:
            raise ValueError(f"Meta-World episodes are limited to {MAX_PATH_LENGTH} steps")
        self._benchmark = metaworld.MT1(task, seed=spec.seed)
        self._env = self._benchmark.train_classes[task]()
        self._variants = self._benchmark.train_tasks
        self._renderers: dict[str, Any] = {}
        self._obs = np.zeros(39, dtype=np.float32)

    def reset_to(self, episode: int, seed: int) -> None:
        """Select the episode's task variant (goal/object placement), then reset with its seed."""
        self._env.set_task(self._variants[episode % len(self._variants)])
        obs, _ = self._env.reset(seed=seed % (2**31))
        self._obs = np.asarray(obs, dtype=np.float32)

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """Step once; success is Meta-World's ``info['success']``."""
        obs, reward, _, _, info = self._env.step(np.clip(action, -1.0, 1.0))
        self._obs = np.asarray(obs, dtype=np.float32)
        return float(reward), bool(info.get("success", 0.0) >= 1.0)

    def state(self) -> np.ndarray:
        """The 39-D Meta-World observation (what its scripted experts consume)."""
        return self._obs

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """Render ``camera`` with a renderer created on first use (the GL context costs ~2 s)."""
        renderer = self._renderers.get(camera)
        if renderer is None:
            from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer

            if camera not in CAMERAS:
                raise ValueError(f"unknown Meta-World camera {camera!r}; expected one of {CAMERAS}")
            model = self._env.model
            model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
            model.vis.global_.offheight = max(model.vis.global_.offheight, height)
            renderer = MujocoRenderer(model, self._env.data, width=width, height=height, camera_name=camera)
            self._renderers[camera] = renderer
        return renderer.render("rgb_array")

    def close(self) -> None:
        """Free renderers and the env; safe to call twice."""
        renderers, self._renderers = self._renderers, {}
        for renderer in renderers.values():
            renderer.close()
        env, self._env = self._env, None
        if env is not None:
            env.close()


class MetaWorldBackend:
    """Static facts about Meta-World; simulators are built in the worker."""

    name = "metaworld"
    extra = "metaworld"
    state_dim = 39
    action_dim = 4
    cameras = CAMERAS
    n_init_states = 50
    max_episode_steps = MAX_PATH_LENGTH
    unrendered_step_ms = 0.3
    """Measured; cheaper than a worker round trip, so state-only runs stay in-process."""
    preload_modules = ("metaworld", "metaworld.policies")

    def check_installed(self) -> None:
        """Fail early with the install hint instead of inside a worker."""
        try:
            import metaworld  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(
                f"Meta-World is not installed ({exc}). Install it with: pip install 'lerobench[metaworld]'"
            ) from exc

    def make_simulator(self, spec: EnvSpec) -> MetaWorldSimulator:
        """Build the task's simulator (in the worker process)."""
        return MetaWorldSimulator(spec)


BACKEND = MetaWorldBackend()
