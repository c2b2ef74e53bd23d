"""The env boundary: a tiny ``Simulator`` protocol per backend, wrapped by one lazy gymnasium env.

Backends only know how to build a task, reset it to episode *i*'s start, step it, read its state and
render a camera. Everything that defines the protocol (settle steps, step limits, success at any
step, freezing after the end, flipping images, rendering only consumed cameras, rendering them only
at the steps whose observation the policy reads) lives once, here.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

import gymnasium as gym
import numpy as np

from lerobench.envs.perturb import perturb, start_digest
from lerobench.suite.config import Protocol as EvalProtocol
from lerobench.suite.config import TaskSpec


@runtime_checkable
class Simulator(Protocol):
    """One task's simulator, built inside a worker process."""

    def reset_to(self, episode: int, seed: int) -> None:
        """Put the simulator in episode ``episode``'s start state (fully determined by the arguments)."""

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """Apply one action; return (reward, success now)."""

    def state(self) -> np.ndarray:
        """Low-dimensional proprioceptive state as float32 (cheap: never renders)."""

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """Render ``camera`` as uint8 (height, width, 3), in the simulator's native orientation."""

    def close(self) -> None:
        """Release the simulator (idempotent)."""


# Optional simulator methods, used when present: ``privileged_state()`` (float64 (PRIVILEGED_DIM,): the state a
# privileged expert reads, sent only to a policy that declares ``ObservationNeeds.privileged``),
# ``physics_state()`` (the full physics state as floats, hashed into each episode's ``start_digest``; without it
# ``state()`` is hashed) and ``mujoco_model()`` (the MuJoCo model, for the ``camera_shift`` and ``light``
# perturbations). See ``lerobench.envs.perturb``. ``scene_poses()`` (where every geom, camera and light is drawn,
# as floats) lets the reset check (``envs/resets.py``) compare what the cameras see exactly, at any image size.
# ``progress()`` (a float in [0, 1]: how far the task is done by the benchmark's own definition, PushT's coverage of
# the goal) is read after every step; the episode's final and highest values go into ``episodes.jsonl``.
# ``idle_action()`` (the action that holds the robot where it is now; zeros without it) is what ``action_delay``
# executes before the first action arrives.
# ``dataset_row(render)`` (a backend with ``dataset_layout``): the current step's row of the backend's own dataset
# files, as HDF5 paths relative to a demo group -> arrays (``obs/agentview_rgb``, ``states``...); ``render(camera)``
# gives a camera's image in the simulator's native orientation, as the benchmark's own files hold it (never turned by
# ``flip_images``: the file says how the policy's view relates), at the recording's size (``EnvSpec.dataset_size``).


def announce_reads(sim: Simulator, cameras: Sequence[str]) -> None:
    """Tell ``sim`` which cameras will be rendered after its next ``step`` / ``reset_to`` (none: ``()``).

    Optional for a backend: a simulator that renders only in ``render`` needs nothing. One that renders
    inside its step (LIBERO: robosuite renders camera observables on a physics substep) defines
    ``will_read(cameras)`` and renders only those cameras during the next step or reset.
    """
    will_read = getattr(sim, "will_read", None)
    if will_read is not None:
        will_read(tuple(cameras))


class Backend(Protocol):
    """What a benchmark family provides: static facts and a simulator factory.

    Every attribute is declared (nothing is probed with ``getattr``): a backend that needs no special value
    subclasses ``BackendDefaults``, which declares the optional facts. ``registry.get_backend`` refuses an
    object that lacks one, naming it.
    """

    name: str
    extra: str
    """pip extra that installs the simulator (for 'install lerobench[extra]' hints)."""
    state_dim: int
    action_dim: int
    n_init_states: int
    """Init state = episode mod this (plan/planner.py)."""
    max_episode_steps: int | None
    """Step limit the simulator enforces (None: none); suites asking for more are refused up front (plan/planner.py)."""
    unrendered_step_ms: float | None
    """Declared cost of a step without rendering (None: unknown); below ~1 ms state-only runs stay in-process."""
    preload_modules: tuple[str, ...]
    """Imported once in the forkserver so workers start faster (envs/vector.py)."""
    packages: tuple[str, ...]
    """Distributions whose versions are the simulator fingerprint (envs/fingerprint.py)."""
    control_fps: float | None
    """The simulator's control rate: the fps of videos where a suite sets no ``control_fps`` (None: unknown)."""
    action_bounds: tuple[float, float]
    """(low, high) of every action dimension in the simulator's own units: [-1, 1] for LIBERO and Meta-World,
    [0, 512] for PushT's target positions. Values beyond are counted as clipped (``clipped``), a random policy draws
    within them, and ``--perturb action_noise=σ`` is σ times the half-width."""
    perturbations: tuple[str, ...]
    """The ``--perturb`` names this backend can honour (``envs/perturb.py``); others are refused before the run."""
    camera_aliases: Mapping[str, str]
    """Names other tools give this backend's cameras (LeRobot's env keys: LIBERO's ``image`` / ``image2``) -> the
    lerobench camera; ``image`` is the main camera, what a single ``observation.image`` reads."""
    partial_states: tuple[int, ...]
    """Shorter states other tools hand their policies, as a prefix of ``state()``: Meta-World's 4 (LeRobot's
    ``agent_pos = obs[:4]``); a LeRobot ``observation.state`` of one of these sizes reads that prefix."""
    experts: Mapping[str, str]
    """Policies made for this benchmark, by ``--policy`` name: ``"module:factory"`` (imported only when asked for).
    Its scripted experts live in ``lerobench/policies/experts/``; the loader finds them here, so a new benchmark
    registers its expert without touching the policy code."""

    def missing_assets(self) -> list[str]:
        """Asset folders (models, meshes, task files) that are missing or empty; ``lerobench doctor`` lists them."""

    def check_suite(self, suite: Any) -> None:
        """Refuse a suite file's typos (unknown task, camera) naming the file and key, before any worker starts."""

    def check_installed(self) -> None:
        """Raise ``MissingDependencyError`` naming the extra if the simulator cannot be imported."""

    def make_simulator(self, spec: EnvSpec) -> Simulator:
        """Build the simulator for ``spec.task``; runs in the worker process, never in the parent."""

    task_template: bool
    """Whether a task's workers fork from a template process that built its scene once (``envs/template.py``)."""

    def make_template(self, spec: EnvSpec, share_renderer: bool = False) -> Any:
        """Build what ``spec``'s workers share (in the template process); None: nothing to share.

        Without GL, unless ``share_renderer`` (``template.shares_renderer``) and the backend can make a GL context
        its forked workers may render with.
        """

    def from_template(self, built: Any, spec: EnvSpec) -> Simulator:
        """In a worker forked from the template: ``built`` made this worker's simulator (its GL context added)."""

    dataset_layout: str | None
    """The dataset file format ``--record`` writes for this backend (its simulator's ``dataset_row``), e.g. LIBERO's
    robomimic-style HDF5; None: lerobench's own layout of what the policy consumed (docs/results.md)."""

    def dataset_attrs(self, spec: EnvSpec) -> dict[str, str]:
        """The file-level attributes of ``spec.task``'s dataset file (only called when ``dataset_layout`` is set)."""




class BackendDefaults:
    """The optional facts of a ``Backend`` with their defaults: subclass it and override what differs."""

    n_init_states: int = 50
    max_episode_steps: int | None = None
    unrendered_step_ms: float | None = None
    preload_modules: tuple[str, ...] = ()
    packages: tuple[str, ...] = ("mujoco", "gymnasium")
    control_fps: float | None = None
    """The simulator's control rate (the fps of videos where a suite sets no ``control_fps``); None: unknown."""
    action_bounds: tuple[float, float] = (-1.0, 1.0)
    perturbations: tuple[str, ...] = ("obs_noise", "action_noise", "action_delay")
    """The generic perturbations; a MuJoCo backend whose simulator has ``mujoco_model()`` adds camera_shift, light."""
    experts: Mapping[str, str] = {}
    """No policies of its own."""
    camera_aliases: Mapping[str, str] = {}
    """No other names: ``observation.images.<camera>`` by lerobench's name, a single image is the first camera."""
    partial_states: tuple[int, ...] = ()

    def missing_assets(self) -> list[str]:
        """No asset folders to check (a backend whose simulator ships files overrides this)."""
        return []

    def check_suite(self, suite: Any) -> None:
        """Nothing to check beyond the TOML schema (a backend that knows its task names overrides this)."""

    task_template: bool = False
    """No template process: each worker builds its task (the backend's ``preload_modules`` in the forkserver)."""

    def make_template(self, spec: EnvSpec, share_renderer: bool = False) -> Any:
        """Nothing shared."""
        return None

    def from_template(self, built: Any, spec: EnvSpec) -> Simulator:
        """Never called without ``make_template``."""
        return built

    dataset_layout: str | None = None
    """No dataset layout of its own: ``--record`` writes lerobench's layout of what the policy consumed."""

    def dataset_attrs(self, spec: EnvSpec) -> dict[str, str]:
        """Never called without ``dataset_layout``."""
        return {}


def missing_folders(folders: Sequence[Any]) -> list[str]:
    """The folders of ``folders`` that do not exist or are empty, as strings (for ``missing_assets``)."""
    from pathlib import Path

    return [str(f) for f in map(Path, folders) if not f.is_dir() or not any(f.iterdir())]


@dataclass(frozen=True)
class EnvSpec:
    """Everything a worker needs to build one task's env; small and picklable."""

    suite: str
    backend: str
    task: TaskSpec
    protocol: EvalProtocol
    seed: int
    state_dim: int
    action_dim: int
    cameras: tuple[str, ...] = ()
    """Cameras the policy consumes; only these are rendered, at the steps whose observation is read."""
    record_camera: str | None = None
    """Camera rendered for videos, only during episodes the rollout asks to record."""
    stop_on_success: bool = True
    slot: int = 0
    """Index of this env inside its vector env (to pick its episode from reset options)."""
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    perturb: tuple[tuple[str, float], ...] = ()
    """``--perturb`` as sorted (name, value) pairs (``lerobench.envs.perturb``); empty: none."""
    video_every: int = 1
    """Steps per video frame: only steps 0, k, 2k... of a recorded episode render the video camera."""
    video_size: tuple[int, int] | None = None
    """(height, width) of frames rendered for the video alone; None: the protocol's image size."""
    privileged: bool = False
    """The policy reads the simulator's ``privileged_state()`` (``observation['privileged']``)."""
    action_bounds: tuple[float, float] = (-1.0, 1.0)
    """The backend's ``action_bounds``: the action space, what counts as clipped."""
    dataset_size: tuple[int, int] | None = None
    """(height, width) of the images in the backend's dataset rows, one row per observation of every episode
    (``--record`` on a backend with a ``dataset_layout``: ``info['dataset']``); None: no rows."""


def check_suite_names(suite: Any, offered_cameras: Sequence[str], known_tasks: Sequence[str] | None,
                      backend: str) -> None:
    """Catch a suite file's typos at load time; raise ``ConfigError`` naming the suite file and the key.

    Its ``video_camera``, its protocols' ``cameras`` and its task names must be ones the backend offers, and its
    ``backend_options.render_quality`` one of ``RENDER_QUALITIES``.
    Called by backends' ``check_suite`` (plan/planner.py runs it before any worker starts); ``known_tasks``
    None skips the task check.
    """
    from lerobench.errors import ConfigError, did_you_mean

    where = suite.source or suite.name
    if suite.video_camera is not None and suite.video_camera not in offered_cameras:
        raise ConfigError(f"{where}: field 'video_camera': {backend} has no camera {suite.video_camera!r}."
                          f"{did_you_mean(suite.video_camera, offered_cameras)}")
    for name, protocol in suite.protocols.items():
        key = "protocol.cameras" if name == "standard" else f"protocols.{name}.cameras"
        for camera in protocol.cameras:
            if camera not in offered_cameras:
                raise ConfigError(f"{where}: field {key!r}: {backend} has no camera {camera!r}."
                                  f"{did_you_mean(camera, offered_cameras)}")
    try:
        render_quality(suite.backend_options, f"{where}: field 'backend_options.{RENDER_QUALITY_OPTION}'")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if known_tasks is not None:
        for task in suite.tasks:
            if task.name not in known_tasks:
                raise ConfigError(f"{where}: field 'tasks[{task.index}]': {backend} has no task {task.name!r}."
                                  f"{did_you_mean(task.name, known_tasks)}")


RENDER_QUALITY_OPTION = "render_quality"
"""The ``backend_options`` key every MuJoCo backend accepts: ``published`` (the default) or ``draft``."""
PUBLISHED = "published"
RENDER_QUALITIES: dict[str, dict[str, int]] = {PUBLISHED: {}, "draft": {"shadowsize": 1024, "offsamples": 0}}
"""MuJoCo's ``vis.quality`` per render quality. ``draft`` trades the scene's 4096-pixel shadow maps and 4x
multisampling for 1024 and none: on a CPU renderer (Mesa llvmpipe, 2 cores) a Meta-World step and its 64x64
frame take 56 ms instead of 150, a LIBERO step rendering 128x128 136-174 instead of 198-231 (docs/suites.md,
``benchmarks/render_quality.py``). The pixels differ (soft edges,
shadow detail), so a policy trained on published frames should be evaluated on them; ``draft`` is for smoke
runs and for checks that compare runs with each other (the test suite). Recorded with the suite's options."""


def render_quality(options: Mapping[str, Any], where: str) -> dict[str, int]:
    """The ``vis.quality`` fields ``options`` asks for ({} for published); a clear error naming ``where``."""
    name = options.get(RENDER_QUALITY_OPTION, PUBLISHED)
    if name not in RENDER_QUALITIES:
        raise ValueError(f"{where}: {name!r} is not a render quality; expected one of {', '.join(RENDER_QUALITIES)}")
    return RENDER_QUALITIES[name]


def set_render_quality(model: Any, quality: Mapping[str, int]) -> None:
    """Write ``quality`` into a MuJoCo model's ``vis.quality``; takes effect in render contexts made after it."""
    for key, value in quality.items():
        setattr(model.vis.quality, key, value)


def episode_seed(run_seed: int, task_index: int, episode: int, scheme: str = "lerobench") -> int:
    """Seed of one episode: a pure function of (run seed, task, episode), never of worker or timing.

    ``scheme`` is the protocol's ``seeds``: ``lerobench`` hashes the three (tasks never share a seed); ``lerobot``
    is ``run_seed + episode``, lerobot-eval's order (it resets its vector env with S, S+1, ... in turn), so an
    episode starts where ``lerobot-eval --seed S`` starts the same episode.
    """
    if scheme == "lerobot":
        return int(run_seed) + int(episode)
    return int(np.random.SeedSequence([run_seed, task_index, episode]).generate_state(1)[0])


SIMULATOR_SETUP_LOCK = threading.Lock()
"""Held while a simulator is built or reset: Meta-World and LIBERO draw from NumPy's *global* RNG
there (MT1 seeds and restores it; LIBERO places fixtures with it). With ``--parallel-tasks`` two
threads doing that at once get each other's numbers, and episodes stop being reproducible."""

CLIP_TOLERANCE = 1e-6
"""Float32 rounding of a normalised action is not clipping worth reporting."""

NO_EPISODE = -1
"""Episode index given to a slot that has no episode left to run."""


UNREAD, READ, READ_ALWAYS = 0, 1, 2
"""``observe`` in ``env_action``: the policy does not read the observation after this step; reads it if the episode
goes on (after the step that ends an episode at its step limit no one reads it: nothing is rendered for the
policy, the video's frame still is); reads it even then (trajectory recordings and ``every_frame`` keep it). A
plain array action, gymnasium's way, is ``READ_ALWAYS``."""


def env_action(action: np.ndarray, observe: bool | int | np.ndarray, hold: bool | np.ndarray = False) -> dict[str, Any]:
    """The action ``LazyTaskEnv.step`` takes: the simulator action, who reads its observation, whether to hold.

    ``observe``: ``READ`` (or True), ``UNREAD`` (or False) or ``READ_ALWAYS``, per row.

    Batched the same way (``{"action": (B, A), "observe": (B,), "hold": (B,)}``) for a vector env's ``step``;
    the flags travel with the action through the vector env (``envs/workers.py``), so they cost no extra round trip.
    ``hold`` lets the rollout keep stepping the envs that have queued actions while the others wait for
    the policy: simulated time stands still for a held env, so waiting changes nothing about its episode.
    """
    observe = np.asarray(observe, dtype=np.int64)
    return {"action": action, "observe": observe, "hold": np.broadcast_to(np.asarray(hold, dtype=np.int64),
                                                                          observe.shape).copy()}


class LazyTaskEnv(gym.Env):
    """A gymnasium env for one benchmark task whose simulator is built on the first ``reset``.

    Why lazy: the worker vector env (``envs/workers.py``) calls the env factory once in the parent to read the
    spaces. Building a LIBERO simulator there costs seconds and ~2 GB for nothing, so the spaces are
    declared from the ``EnvSpec`` and the simulator is created inside the worker on first reset.

    Why frozen after the end: vector envs step every sub-env together. Once an episode ended
    (success or limit) further steps return the last observation without touching the simulator,
    so a finished LIBERO env never raises "executing action in terminated episode" and a finished
    episode's statistics can never change. The rollout resets the slot when it has a new episode.

    A Python exception inside the simulator ends the episode with ``error`` set instead of killing
    the worker, so one bad episode does not take down the others.

    Why the action carries an ``observe`` flag (``env_action``): a policy that returns action chunks
    reads one observation per chunk, and rendering is most of a CPU evaluation's cost. At an ``UNREAD``
    step the consumed cameras are not rendered; its observation carries the images of the last rendered
    step (stale, but nobody looks: the rollout asks the policy only after ``READ`` steps). ``READ`` at the
    step that reaches the step limit renders nothing either (the episode ends there); ``READ_ALWAYS`` does
    (recordings, ``every_frame``). The state is always fresh (it is free). The first observation of an
    episode is always rendered; settle steps render nothing. A recorded episode still gets its video
    frames. A plain array action means ``READ_ALWAYS`` (every step rendered, as gymnasium's API expects).
    """

    metadata = {"render_modes": []}

    def __init__(self, spec: EnvSpec, backend: Backend, render_threads: int | None = None):
        self.spec_ = spec
        self._backend = backend
        self._render_threads = render_threads
        """Mesa's render threads, set in the process that builds the simulator (a worker), never where the
        spaces are read (gymnasium builds one env in the parent: the driver's environment stays as it was)."""
        h, w = spec.protocol.image_size
        spaces: dict[str, gym.Space] = {
            "state": gym.spaces.Box(-np.inf, np.inf, (spec.state_dim,), np.float32),
        }
        if spec.cameras:
            spaces["images"] = gym.spaces.Dict(
                {cam: gym.spaces.Box(0, 255, (h, w, 3), np.uint8) for cam in spec.cameras}
            )
        if spec.privileged:
            spaces["privileged"] = gym.spaces.Box(-np.inf, np.inf, (PRIVILEGED_DIM,), np.float64)
        self.observation_space = gym.spaces.Dict(spaces)
        low, high = spec.action_bounds
        self.action_space = gym.spaces.Dict({
            "action": gym.spaces.Box(low, high, (spec.action_dim,), np.float32),
            "observe": gym.spaces.Discrete(3),
            "hold": gym.spaces.Discrete(2),
        })
        self._sim: Simulator | None = None
        self._raw: Simulator | None = None
        """The unperturbed simulator: settle steps and the start digest use it (``self._sim`` may wrap it)."""
        self._digest: str | None = None
        self._episode = NO_EPISODE
        self._trial = 0
        self._record = False
        self._video_frame: np.ndarray | None = None
        self._last_obs = self._zero_obs()
        self._done = True
        self._renders = 0
        self._steps = 0
        self._return = 0.0
        self._max_reward = float("-inf")
        self._clipped = 0
        """Action values of this episode outside the action space (the simulator clips them)."""
        self._success = False
        self._success_now = False
        self._started = 0.0
        self._progress: float | None = None
        self._max_progress: float | None = None

    # -- helpers ---------------------------------------------------------------------------------
    def _zero_obs(self) -> dict[str, Any]:
        return {k: np.zeros(s.shape, s.dtype) if isinstance(s, gym.spaces.Box) else
                {c: np.zeros(b.shape, b.dtype) for c, b in cast(gym.spaces.Dict, s).spaces.items()}
                for k, s in cast(gym.spaces.Dict, self.observation_space).spaces.items()}

    def _simulator(self) -> Simulator:
        if self._sim is None:
            if self._render_threads is not None:
                from lerobench import environment

                environment.set_default(environment.RENDER_THREADS, str(self._render_threads))
            with SIMULATOR_SETUP_LOCK:
                self._raw = self._backend.make_simulator(self.spec_)
                self._sim = perturb(self._raw, self.spec_.perturb, self.spec_.action_bounds)
        return self._sim

    def _render(self, camera: str, size: tuple[int, int] | None = None, native: bool = False) -> np.ndarray:
        """``camera`` as the protocol delivers it (turned where it says ``flip_images``); ``native``: unturned."""
        h, w = size or self.spec_.protocol.image_size
        img = self._simulator().render(camera, h, w)
        self._renders += 1
        if self.spec_.protocol.flip_images and not native:
            img = img[::-1, ::-1]
        return np.ascontiguousarray(img, dtype=np.uint8)

    def _cameras_read(self, observe: bool) -> tuple[str, ...]:
        """Cameras rendered after this step: all consumed ones if the policy reads it, else the video's."""
        if observe:
            return self.spec_.cameras
        cam = self.spec_.record_camera
        video_step = (self._steps + 1) % self.spec_.video_every == 0  # the step about to be taken
        return (cam,) if self._record and cam in self.spec_.cameras and video_step else ()

    def _observe(self, cameras: tuple[str, ...], read: bool = True) -> dict[str, Any]:
        """The observation after a step / reset; ``read``: the policy reads it.

        Unread, the privileged state is the last read one, like unread images: only a read step pays for it.
        """
        sim = self._simulator()
        obs: dict[str, Any] = {"state": np.asarray(sim.state(), dtype=np.float32)}
        if self.spec_.privileged:
            obs["privileged"] = privileged_state(sim, self.spec_) if read else self._last_obs["privileged"]
        if self.spec_.cameras:
            last = self._last_obs["images"]
            obs["images"] = {cam: self._render(cam) if cam in cameras else last[cam] for cam in self.spec_.cameras}
        return obs

    def _frame(self, obs: dict[str, Any]) -> np.ndarray | None:
        """The video camera's frame after this step; rendered only at video steps (0, k, 2k...).

        Between them the last frame is handed on again (the recording keeps every k-th frame it is given, so
        it drops these), as the policy's stale image is where the video camera is a policy camera.
        """
        cam = self.spec_.record_camera
        if not self._record or cam is None:
            return None
        if cam in self.spec_.cameras:
            return None  # the rollout reuses the policy's image: never render twice
        if self._steps % self.spec_.video_every == 0 or self._video_frame is None:
            self._video_frame = self._render(cam, self.spec_.video_size)
        return self._video_frame

    def _dataset_row(self) -> dict[str, np.ndarray] | None:
        """The observation's row of the backend's dataset files (``EnvSpec.dataset_size``); None: none asked.

        Called inside the step's / reset's ``try``: a row that cannot be made is that episode's error, as any
        simulator failure is (a recorded run must not quietly lose rows).
        """
        size = self.spec_.dataset_size
        row = getattr(self._simulator(), "dataset_row", None) if size is not None else None
        return None if row is None else row(lambda camera: self._render(camera, size, native=True))

    def _summary(self, error: str | None) -> dict[str, Any]:
        return {
            "episode": self._episode,
            "trial": self._trial,
            "success": bool(self._success),
            "success_at_end": bool(self._success_now),
            "steps": self._steps,
            "return": float(self._return),
            "max_reward": float(self._max_reward),
            "elapsed_s": time.perf_counter() - self._started,
            "renders": self._renders,
            "error": error,
            "start_digest": self._digest,
            "clipped": round(self._clipped / (self._steps * self.spec_.action_dim), 6) if self._steps else None,
            "progress": self._progress,
            "max_progress": self._max_progress,
        }

    def _read_progress(self, sim: Simulator) -> None:
        """Track the simulator's ``progress()`` (final and highest), where it defines one."""
        read = getattr(sim, "progress", None)
        if read is not None:
            value = float(read())
            self._progress = value
            self._max_progress = value if self._max_progress is None else max(self._max_progress, value)

    @property
    def start_digest(self) -> str | None:
        """The current episode's start digest (None before a reset or when idle); ``envs/resets.py`` compares it."""
        return self._digest

    def scene_poses(self) -> np.ndarray | None:
        """The simulator's ``scene_poses()`` now (None: it has none, or no simulator yet); the reset check's."""
        poses = getattr(self._raw, "scene_poses", None)
        return None if poses is None else np.array(poses(), dtype=np.float64)

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start the episode assigned to this slot in ``options['episodes']`` (or go idle).

        ``options['trials']`` carries the slot's trial index. Every trial of an episode starts from the
        same state: the simulator is reset to the episode's start with the episode's seed and settled
        again, so trial k+1's first observation equals trial k's bit for bit (tested on both simulators).
        """
        super().reset(seed=seed)
        options = options or {}
        episodes = options.get("episodes")
        self._episode = int(episodes[self.spec_.slot]) if episodes is not None else 0
        trials = options.get("trials")
        self._trial = int(trials[self.spec_.slot]) if trials is not None else 0
        record = options.get("record")
        self._record = bool(record[self.spec_.slot]) if record is not None else False
        self._video_frame = None
        self._steps, self._return, self._renders, self._clipped = 0, 0.0, 0, 0
        self._max_reward = float("-inf")
        self._success = self._success_now = False
        self._started = time.perf_counter()
        self._digest = None
        self._progress = self._max_progress = None
        if self._episode == NO_EPISODE:
            self._done = True
            self._last_obs = self._zero_obs()
            return self._last_obs, {"idle": True}
        try:
            sim = self._simulator()
            first = self._cameras_read(True)
            settle = np.asarray(self.spec_.protocol.settle_action, dtype=np.float32)
            settle_steps = self.spec_.protocol.settle_steps
            announce_reads(sim, first if settle_steps == 0 else ())
            with SIMULATOR_SETUP_LOCK:
                sim.reset_to(self._episode, episode_seed(self.spec_.seed, self.spec_.task.index, self._episode,
                                                         self.spec_.protocol.seeds))
            raw = self._raw if self._raw is not None else sim
            self._digest = start_digest(raw)
            for k in range(settle_steps):  # unperturbed: a perturbation never moves the episode's start
                announce_reads(raw, first if k == settle_steps - 1 else ())
                raw.step(settle)
            self._last_obs = self._observe(first)
            row = self._dataset_row()
        except Exception:  # noqa: BLE001 - contained: reported as this episode's error
            self._done = True
            self._last_obs = self._zero_obs()
            return self._last_obs, {"episode_end": self._summary(_format_error("reset"))}
        self._done = False
        info: dict[str, Any] = {} if row is None else {"dataset": row}
        frame = self._frame(self._last_obs)
        if frame is not None:
            info["frame"] = frame
        return self._last_obs, info

    def prepare(self) -> None:
        """Build the simulator now, before the first episode's clock starts (its ``elapsed_s`` then excludes it).

        Building is start-up (Meta-World ~0.5 s, LIBERO ~10 s, more on a loaded machine), not the episode. An
        error is left for the first ``reset`` to raise again and record as that episode's error, as without this.
        """
        if self._episode == NO_EPISODE and self._sim is None:
            with contextlib.suppress(Exception):  # noqa: SIM105 - re-raised and recorded by the first reset
                self._simulator()

    def step(self, action: Mapping[str, Any] | np.ndarray):
        """Advance one step (see ``env_action``); a finished, idle or held env stays frozen and reports nothing new."""
        if self._done:
            return self._last_obs, 0.0, True, False, {}
        wanted = READ_ALWAYS
        if isinstance(action, Mapping):
            if bool(action.get("hold", 0)):  # waiting for the policy: simulated time stands still
                return self._last_obs, 0.0, False, False, {}
            action, wanted = action["action"], int(action["observe"])
        observe = wanted == READ_ALWAYS or (wanted == READ and self._steps + 1 < self.spec_.protocol.max_steps)
        try:
            action = np.asarray(action, dtype=np.float32)
            sim = self._simulator()
            cameras = self._cameras_read(observe)
            announce_reads(sim, cameras)
            reward, success = sim.step(action)
            low, high = self.spec_.action_bounds
            self._clipped += int(np.count_nonzero((action < low - CLIP_TOLERANCE) | (action > high + CLIP_TOLERANCE)))
            self._steps += 1
            self._return += float(reward)
            self._max_reward = max(self._max_reward, float(reward))
            self._success_now = bool(success)
            self._success = self._success or self._success_now
            self._read_progress(sim)
            self._last_obs = self._observe(cameras, observe)
            row = self._dataset_row()
        except Exception:  # noqa: BLE001 - contained: reported as this episode's error
            self._done = True
            return self._last_obs, 0.0, True, False, {"episode_end": self._summary(_format_error("step"))}
        terminated = self._success_now and self.spec_.stop_on_success
        truncated = not terminated and self._steps >= self.spec_.protocol.max_steps
        info: dict[str, Any] = {"success": self._success_now}
        if self._progress is not None:
            info["progress"] = self._progress
        if row is not None:
            info["dataset"] = row
        frame = self._frame(self._last_obs)
        if frame is not None:
            info["frame"] = frame
        if terminated or truncated:
            self._done = True
            info["episode_end"] = self._summary(None)
        return self._last_obs, float(reward), terminated, truncated, info

    def close(self):
        """Close the simulator; safe to call twice."""
        sim, self._sim, self._raw = self._sim, None, None
        if sim is not None:
            sim.close()


PRIVILEGED_DIM = 2048
"""Floats of ``observation['privileged']`` (a backend's layout pads with zeros; LIBERO's: ``envs/libero_state``)."""


def privileged_state(sim: Any, spec: EnvSpec) -> np.ndarray:
    """The simulator's privileged state as ``PRIVILEGED_DIM`` floats; an error naming the task if it has none."""
    read = getattr(sim, "privileged_state", None)
    if read is None:
        raise RuntimeError(f"suite {spec.suite} task {spec.task.name!r}: backend {spec.backend!r} offers no "
                           "privileged state (the policy declares ObservationNeeds(privileged=True))")
    out = np.zeros(PRIVILEGED_DIM, dtype=np.float64)
    values = np.asarray(read(), dtype=np.float64).ravel()
    out[:min(len(values), PRIVILEGED_DIM)] = values[:PRIVILEGED_DIM]
    return out


def _format_error(where: str) -> str:
    lines = traceback.format_exc().strip().splitlines()
    return f"simulator {where} failed: {lines[-1] if lines else 'unknown error'}"
