"""Meta-World v3 backend: episode *i* of a task runs on ``MT1(task, seed).train_tasks[i % 50]``.

With ``backend_options = {benchmark = "ML1" | "ML10" | "ML45", split = "test"}`` a suite evaluates
Meta-World's meta-learning benchmarks instead: episode *i* runs on the *i*-th test variant of its
task (mod the number of variants), built by Meta-World's own task generator with Meta-World's seeds,
and the goal is hidden from the observation (``partially_observable``) as those benchmarks define.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from lerobench.envs.base import (
    RENDER_QUALITY_OPTION,
    BackendDefaults,
    EnvSpec,
    check_suite_names,
    missing_folders,
    render_quality,
    set_render_quality,
)
from lerobench.errors import MissingDependencyError

CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")
MAX_PATH_LENGTH = 500
"""Meta-World raises once an episode exceeds this many steps, so suites may not ask for more."""
REWARD_MAX = 10.0
"""The top of Meta-World's shaped rewards (``SawyerXYZEnv.evaluate_state``: "reward between 0 and 10")."""


class MetaWorldSimulator:
    """One Meta-World task. Renderers exist only for consumed cameras (none for state-only policies)."""

    OPTIONS: tuple[str, ...] = ("benchmark", "split", RENDER_QUALITY_OPTION)
    """Keys a suite may set in ``backend_options`` (a subclass adding its own extends this)."""

    def __init__(self, spec: EnvSpec):

        task = spec.task.name
        if spec.protocol.max_steps > MAX_PATH_LENGTH:
            raise ValueError(f"Meta-World episodes are limited to {MAX_PATH_LENGTH} steps")
        options = dict(spec.backend_options)
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ValueError(f"unknown Meta-World backend_options {unknown}; expected {', '.join(self.OPTIONS)}")
        benchmark = options.get("benchmark", "MT1")
        split = options.get("split", "train" if benchmark == "MT1" else "test")
        classes, variants = task_variants(benchmark, split, task, spec.seed)
        self._env = classes[task]()
        self._quality = render_quality(options, f"Meta-World task {task!r}: backend_options.{RENDER_QUALITY_OPTION}")
        self._variants = variants
        self._renderers: dict[tuple[Any, ...], Any] = {}
        self._obs = np.zeros(39, dtype=np.float32)
        self._progress = 0.0

    def reset_to(self, episode: int, seed: int) -> None:
        """Select the episode's task variant (goal/object placement), reset with its seed, forward the kinematics.

        Why ``mj_forward``: Meta-World's reset writes object positions into ``qpos`` after its last physics
        step, so body poses (what a camera draws) stay where the previous episode, or the constructor, left
        them until the first step. push-v3's first corner2 image at 480x480 differed from a fresh simulator's
        in 51-73 pixels (issue 33; docs/suites.md). Forwarding changes no ``qpos``/``qvel`` and not the state
        vector Meta-World returned: only what is drawn, which is then the episode's own.
        """
        import mujoco

        self._env.set_task(self._variants[episode % len(self._variants)])
        obs, _ = self._env.reset(seed=seed % (2**31))
        mujoco.mj_forward(self._env.model, self._env.data)
        self._obs = np.asarray(obs, dtype=np.float32)
        self._progress = 0.0

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """Step once; success is Meta-World's ``info['success']``."""
        obs, reward, _, _, info = self._env.step(np.clip(action, -1.0, 1.0))
        self._obs = np.asarray(obs, dtype=np.float32)
        success = bool(info.get("success", 0.0) >= 1.0)
        self._progress = 1.0 if success else min(max(float(reward) / REWARD_MAX, 0.0), 1.0)
        return float(reward), success

    def progress(self) -> float:
        """The task's progress after the last step: 1 where Meta-World reports success, else its reward / 10.

        Meta-World's v3 tasks (reward function "v2") shape their reward in [0, 10] from the task's own stage
        terms (reach, grasp, object-to-goal distance) and give 10 once the object is within the task's goal
        radius (``evaluate_state``: "reward between 0 and 10"). That radius and the success threshold differ in
        many tasks (measured at the expert's success step: button-press-v3 1.5 of 10, coffee-button-v3 1.2), so
        a solved step counts 1 (docs/statistics.md).
        """
        return self._progress

    def state(self) -> np.ndarray:
        """The 39-D Meta-World observation (what its scripted experts consume)."""
        return self._obs

    def physics_state(self) -> np.ndarray:
        """Joint positions and velocities, mocap poses and the observation (it holds the goal): the start digest."""
        data = self._env.data
        return np.concatenate([data.qpos, data.qvel, data.mocap_pos.ravel(), data.mocap_quat.ravel(), self._obs])

    def mujoco_model(self) -> Any:
        """The MuJoCo model (cameras and lights are edited in place by ``--perturb``)."""
        return self._env.model

    def scene_poses(self) -> np.ndarray:
        """Where every geom, camera and light is drawn (``envs/resets.py``: exact, whatever the image size)."""
        return drawn_poses(self._env.data)

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """Render ``camera`` with a renderer created on first use (the GL context costs ~2 s)."""
        renderer = self._renderers.get((camera, height, width))
        if renderer is None:
            renderer = self._renderers[(camera, height, width)] = self._renderer(camera, height, width)
        return renderer.render("rgb_array")

    def _renderer(self, camera: str, height: int, width: int) -> Any:
        from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer

        if camera not in CAMERAS:
            raise ValueError(f"unknown Meta-World camera {camera!r}; expected one of {CAMERAS}")
        model = self._env.model
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        set_render_quality(model, self._quality)  # before the renderer makes its GL context
        return MujocoRenderer(model, self._env.data, width=width, height=height, camera_name=camera)

    def close(self) -> None:
        """Free renderers and the env; safe to call twice."""
        renderers, self._renderers = self._renderers, {}
        for renderer in renderers.values():
            renderer.close()
        env, self._env = self._env, None
        if env is not None:
            env.close()


def drawn_poses(data: Any) -> np.ndarray:
    """The poses a MuJoCo render reads from ``data``: geoms, sites, bodies, cameras, lights, as one float64 vector."""
    parts = (data.geom_xpos, data.geom_xmat, data.site_xpos, data.site_xmat, data.xpos, data.xquat,
             data.cam_xpos, data.cam_xmat, data.light_xpos, data.light_xdir)
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in parts])


BENCHMARKS = ("MT1", "ML1", "ML10", "ML45")
"""Meta-World benchmarks a suite may name in ``backend_options.benchmark``."""


def task_variants(benchmark: str, split: str, task: str, seed: int) -> tuple[dict[str, Any], list[Any]]:
    """Classes and the ordered task variants of ``task`` in ``benchmark``'s ``split`` (Meta-World's own)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown Meta-World benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    if split not in ("train", "test"):
        raise ValueError(f"Meta-World split must be 'train' or 'test', got {split!r}")
    classes, tasks = _split_tasks(benchmark, split, None if benchmark in ("ML10", "ML45") else task, seed)
    if task not in classes:
        raise ValueError(f"{task!r} is not a {split} task of Meta-World {benchmark}; it has {sorted(classes)}")
    return classes, [t for t in tasks if t.env_name == task]


TASKS_CACHE_FORMAT = 1
"""Bump when the cached task file changes shape, so files of the old shape are not read."""


@functools.lru_cache(maxsize=8)
def _split_tasks(benchmark: str, split: str, task: str | None, seed: int) -> tuple[dict[str, Any], list[Any]]:
    """Build one split of a benchmark once per process, and once per simulator stack on disk.

    Why the disk cache: Meta-World draws its 50 variants per task by resetting a fresh env 50 times, 1.1 s
    per task and process for MT1 (a worker's start-up, a training loop's every evaluation) and 7 s for an ML10
    test split. The variants depend only on the versions of Meta-World, MuJoCo and NumPy and on the
    arguments, which key the file (``~/.cache/lerobench``, ``LEROBENCH_CACHE_DIR``); it holds Meta-World's own
    ``Task`` records (name, pickled arguments), so a hit hands the simulator the same bytes a miss makes
    (a test compares both with Meta-World's ``MT1``/``ML10`` objects).
    """
    classes = _split_classes(benchmark, split, task)
    path = _tasks_cache_file(benchmark, split, task, seed)
    tasks = _read_tasks(path)
    if tasks is None:
        tasks = _generate_tasks(benchmark, split, task, seed)
        _write_tasks(path, tasks)
    return classes, tasks


def _split_classes(benchmark: str, split: str, task: str | None) -> dict[str, Any]:
    """The env classes of one split, as Meta-World's benchmark objects list them (no variants drawn)."""
    from metaworld import _env_dict

    if benchmark in ("MT1", "ML1"):
        if task is None or task not in _env_dict.ALL_V3_ENVIRONMENTS:
            raise ValueError(f"{task} is not a V3 environment")
        return {task: _env_dict.ALL_V3_ENVIRONMENTS[task]}
    return dict(getattr(_env_dict, f"{benchmark}_V3")[split])


def _generate_tasks(benchmark: str, split: str, task: str | None, seed: int) -> list[Any]:
    """Meta-World's own generator.

    ``ML10(seed)``/``ML45(seed)`` generate the train split first, which costs 16 s / 71 s per worker.
    Their test split is generated from ``np.random.seed(seed)`` independently of the train split, so
    calling Meta-World's own generator (``_make_tasks``) with the same class and argument tables gives
    the same tasks (a test checks equality with ``ML10(seed).test_tasks``) at 7 s instead of 16 s.
    """
    import metaworld

    if benchmark in ("MT1", "ML1"):
        bench = metaworld.MT1(task, seed=seed) if benchmark == "MT1" else metaworld.ML1(task, seed=seed)
        return list(bench.train_tasks if split == "train" else bench.test_tasks)
    from metaworld import _ML_OVERRIDE, _env_dict, _make_tasks

    classes = getattr(_env_dict, f"{benchmark}_V3")[split]
    args = getattr(_env_dict, f"{benchmark}_ARGS_KWARGS")[split]
    return list(_make_tasks(classes, args, _ML_OVERRIDE, seed=seed))


def _tasks_cache_file(benchmark: str, split: str, task: str | None, seed: int) -> Path:
    from lerobench.environment import cache_dir
    from lerobench.envs.fingerprint import package_versions

    key = {"format": TASKS_CACHE_FORMAT, "benchmark": benchmark, "split": split, "task": task, "seed": seed,
           "versions": package_versions(("metaworld", "mujoco", "numpy"))}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / f"metaworld-tasks-{benchmark}-{split}-{task or 'all'}-{digest}.json"


def _read_tasks(path: Path) -> list[Any] | None:
    """The cached tasks, or None when there is no readable file (a miss: generate them)."""
    from metaworld import Task

    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return [Task(env_name=row["env_name"], data=base64.b64decode(row["data"])) for row in rows]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_tasks(path: Path, tasks: list[Any]) -> None:
    from lerobench.core.files import write_cache_json

    write_cache_json(path, [{"env_name": t.env_name, "data": base64.b64encode(t.data).decode("ascii")} for t in tasks])


class MetaWorldBackend(BackendDefaults):
    """Static facts about Meta-World; simulators are built in the worker."""

    name = "metaworld"
    extra = "metaworld"
    state_dim = 39
    action_dim = 4
    cameras = CAMERAS
    n_init_states = 50
    max_episode_steps = MAX_PATH_LENGTH
    control_fps = 80.0
    """Meta-World's control rate (frame_skip 5 at a 2.5 ms timestep): the fps of its videos."""
    unrendered_step_ms = 0.3
    """Measured; cheaper than a worker round trip, so state-only runs stay in-process."""
    preload_modules = ("metaworld", "metaworld.policies")
    packages = ("mujoco", "metaworld", "gymnasium")
    """Distributions whose versions are the simulator fingerprint (``lerobench/envs/fingerprint.py``)."""

    camera_aliases = {"image": "corner2"}
    """LeRobot's MetaworldEnv renders corner2 as its one image."""
    partial_states = (4,)
    """LeRobot's MetaworldEnv gives its policies ``agent_pos = obs[:4]`` (hand position and gripper)."""
    experts = {
        "metaworld-expert": "lerobench.policies.experts.metaworld:make_metaworld_expert",
        "metaworld-expert-chunks": "lerobench.policies.experts.metaworld:make_metaworld_expert_chunks",
        "metaworld-expert-blend": "lerobench.policies.experts.metaworld:make_metaworld_expert_blend",
        "metaworld-adaptive-reach": "lerobench.policies.experts.metaworld_adaptive:make_adaptive_reach",
    }
    """Meta-World's scripted experts (``policies/experts/metaworld.py``) and the trial-adaptive reach expert."""
    perturbations = ("obs_noise", "action_noise", "action_delay", "camera_shift", "light")
    """Every ``--perturb``: its simulator edits cameras and lights through ``mujoco_model()``."""

    def check_installed(self) -> None:
        """Fail early with the install hint instead of inside a worker."""
        try:
            import metaworld  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(
                f"Meta-World is not installed ({exc}). Install it with: pip install 'lerobench[metaworld]'"
            ) from exc

    def missing_assets(self) -> list[str]:
        """Meta-World's MuJoCo models (``metaworld/assets``), without importing metaworld."""
        import importlib.util
        from pathlib import Path

        found = importlib.util.find_spec("metaworld")
        if found is None or not found.submodule_search_locations:
            return ["metaworld"]
        return missing_folders([Path(next(iter(found.submodule_search_locations))) / "assets"])
    def check_suite(self, suite: Any) -> None:
        """Refuse unknown cameras and task names in a suite file before any worker starts (``ConfigError``)."""
        import metaworld

        options = dict(suite.backend_options)
        benchmark = options.get("benchmark", "MT1")
        split = options.get("split", "train" if benchmark == "MT1" else "test")
        known: Any = None
        if benchmark in ("MT1", "ML1"):
            known = list(metaworld.ALL_V3_ENVIRONMENTS)
        elif benchmark in ("ML10", "ML45") and split in ("train", "test"):
            from metaworld import _env_dict

            known = list(getattr(_env_dict, f"{benchmark}_V3")[split])
        check_suite_names(suite, CAMERAS, known, f"Meta-World {benchmark}" if benchmark != "MT1" else "Meta-World")

    def make_simulator(self, spec: EnvSpec) -> MetaWorldSimulator:
        """Build the task's simulator (in the worker process)."""
        return MetaWorldSimulator(spec)

    task_template = True
    """Workers fork from a per-task template process that built the task once (``envs/template.py``)."""

    def make_template(self, spec: EnvSpec, share_renderer: bool = False) -> Any:
        """The task built in the template process: renderers (GL) are made only at a worker's first render.

        ``share_renderer`` is not acted on: a Meta-World worker's GL context is ~0.2 GB, LIBERO's ~0.6 GB.
        """
        return self.make_simulator(spec)

    def from_template(self, built: Any, spec: EnvSpec) -> Any:
        """The template's simulator, as it is: it has no renderer yet."""
        return built


BACKEND = MetaWorldBackend()
