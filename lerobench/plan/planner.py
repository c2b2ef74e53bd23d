"""The run plan: every validated setting of one evaluation, and the work units it splits into.

A plan goes down to executors (and, pickled, to worker processes and Ray tasks); records come up.
Everything here is a pure function of the settings and the backend's declared facts, so a worker on
another node rebuilds exactly the episodes the driver asked for.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from lerobench import environment
from lerobench.core.delay import MEASURED, Delay, parse_delay
from lerobench.core.executors import CHOICES
from lerobench.core.executors import EXECUTORS as EXECUTOR_ENTRIES
from lerobench.core.records import EpisodeRecord
from lerobench.core.shards import Shard, shard_episodes
from lerobench.core.task_run import CheckedPolicies, ScheduleRules, TaskRun
from lerobench.envs.base import PUBLISHED, RENDER_QUALITIES, RENDER_QUALITY_OPTION, EnvSpec, episode_seed
from lerobench.errors import ConfigError, LerobenchError, MissingDependencyError, unknown
from lerobench.plan.options import DEFAULT_VIDEO_SIZE, check_record_mode, default
from lerobench.plan.stopping import METRICS, Until, parse_until
from lerobench.policies.base import ObservationNeeds, PolicyContext
from lerobench.suite.config import DEFAULT_PROTOCOL, Protocol, Suite, TaskSpec

FORMATS = ("lerobot",)
"""Result formats written besides lerobench's own files."""

EXECUTORS = CHOICES
"""Values of ``--executor`` (see docs/scaling.md; the executors are ``core/executors.py``'s entries)."""

EXTENT = ("episodes_per_task", "shard")
"""Config keys that say how much of a run a directory holds: ``--resume`` requires them equal besides the run's
identity (``lerobench/core/identity.py``)."""

MAX_SEED = 2**32 - 1
"""Largest ``--seed``: simulators seed NumPy's legacy global RNG, which takes 32-bit unsigned seeds."""


@dataclass(frozen=True)
class RunSettings:
    """Every setting of one evaluation as the user gave it (validated into a ``RunPlan``)."""

    suite: Suite
    """The suite, already narrowed to ``--tasks``."""
    policy: str
    """Policy spec: built-in name or ``module.path:factory``."""
    output: Path
    protocol: str = default("protocol")
    unique_output: bool = False
    schedule: ScheduleRules = ScheduleRules()
    """The rollout's scheduling rules (Python callers only: a benchmark's baseline, a test); not a flag."""
    """``output`` is a default name (``outputs/<suite>/<timestamp>``): when taken, ``output-2``, ... is used."""
    episodes: int | None = default("episodes")
    """Episodes per task; None = the suite's default."""
    batch_size: int = default("batch_size")
    """Envs per task for the vector executor; 0 = auto from usable cores and memory."""
    seed: int = default("seed")
    max_steps: int | None = default("max_steps")
    """Override of the protocol's step limit (for smoke runs)."""
    stop_on_success: bool = default("stop_on_success")
    resume: bool = default("resume")
    videos: int = default("videos")
    """Record the first N episodes of each task."""
    video_fps: float = default("video_fps")
    """Frames per second of videos, at most the control rate: every k-th step is rendered and encoded."""
    video_size: int | None = default("video_size")
    """Largest side of video frames rendered for the video alone (0: the protocol's image size)."""
    render_quality: str | None = default("render_quality")
    """``published`` or ``draft`` (``envs/base.RENDER_QUALITIES``); None: the environment's, else the suite's."""
    episode_timeout: float | None = default("episode_timeout")
    policy_timeout: float | None = default("policy_timeout")
    """Seconds one vector step may take before its worker is declared hung."""
    replan_steps: int = default("replan_steps")
    """Actions executed from each returned action chunk before asking the policy again."""
    delay_steps: int | str = default("delay_steps")
    """``--delay-steps``: control steps each policy call covers (``lerobench.rollout.delay``), or ``measured``.
    Part of the treatment identity."""
    record: str = default("record")
    """Rollout recording to HDF5: none, success or all."""
    record_size: int = default("record_size")
    """Side of the camera images in a backend's own dataset files (``--record`` on LIBERO)."""
    rerun: bool = default("rerun")
    """``--rerun``: a Rerun recording (``.rrd``) of each episode ``videos`` records (lerobench.output.rerun)."""
    formats: tuple[str, ...] = default("formats")
    """Extra result formats: ``lerobot`` also writes LeRobot's ``eval_info.json``."""
    parallel_tasks: int = default("parallel_tasks")
    trials: int | None = default("trials")
    """Trials (attempts at the same start) per episode; None = the suite's default."""
    device: str = default("device")
    call_width: int | None = default("call_width")
    share_task: bool = default("share_task")
    """Vector workers fork from one built scene per task (``envs/template.py``); LEROBENCH_SHARE_TASK overrides."""
    """``--call-width``: rows per call of a batched torch policy, padded (0: unpadded); None = the device's
    default (``lerobench.policies.width``). Part of the treatment identity."""
    shard: Shard | None = default("shard")
    """``--shard I/N``: evaluate only this shard's (task, episode) units (lerobench.core.shards)."""
    executor: str = default("executor")
    """How episodes are run: auto, inline, vector, processes or ray (docs/scaling.md)."""
    workers: int = default("workers")
    """Worker processes (processes executor) or concurrent Ray tasks; 0 = auto."""
    ray_address: str | None = default("ray_address")
    """Ray cluster to join (``auto``, ``ray://host:port``); None starts a local Ray."""
    ray_gpus_per_worker: float = default("ray_gpus_per_worker")
    """GPUs Ray reserves for each work unit (for GPU policies)."""
    allow_sim_drift: bool = default("allow_sim_drift")
    """Run even when the simulator fails its golden-state check (the run is marked drifted)."""
    perturb: tuple[tuple[str, float], ...] = default("perturb")
    """``--perturb``: sorted (name, value) pairs applied to every env (``lerobench.envs.perturb``); starts and
    seeds stay those of the unperturbed run, so the two pair episode by episode."""
    until: str | None = default("until")
    """``--until``: stop once a rule is met: ``halfwidth=H``, ``suite-halfwidth=H`` or ``decided`` (stopping.py)."""
    versus: Path | None = default("versus")
    """``--versus RUN_DIR``: the recorded run A that this policy (B) is compared with, pair by pair."""
    alpha: float = default("alpha")
    """Error level of the ``--until`` rule's confidence sequences and test."""
    margin: float = default("margin")
    """``--margin``: ``--versus`` calls A and B equivalent once rate(B) - rate(A) is inside +-margin."""
    effect: float | None = default("effect")
    """``--effect``: the smallest rate(B) - rate(A) worth detecting; ``--versus`` then runs the designed test."""
    power: float = default("power")
    """``--power``: the designed test's power at ``effect``."""
    metric: str = default("metric")
    """``--metric``: what ``--versus --until decided`` decides about: ``success`` or ``progress`` (mean highest
    progress, the paired betting e-process of ``stats/paired_progress.py``)."""
    command: tuple[str, ...] = field(default_factory=lambda: tuple(sys.argv))

    @property
    def episodes_per_task(self) -> int:
        """Effective number of episodes per task."""
        return self.episodes or self.suite.episodes_per_task

    @property
    def trials_per_episode(self) -> int:
        """Effective number of trials per episode."""
        return self.trials or self.suite.trials


@dataclass(frozen=True)
class WorkUnit:
    """Some episodes of one task: what one executor call (one worker, one Ray task) runs."""

    task: TaskSpec
    episodes: tuple[int, ...]


@dataclass(frozen=True)
class RunPlan:
    """Validated settings plus the backend facts workers need; small and picklable."""

    settings: RunSettings
    protocol: Protocol
    """The named protocol with ``--max-steps`` applied."""
    action_dim: int
    state_dim: int
    n_init_states: int
    unrendered_step_ms: float | None
    """The backend's declared cost of a step without rendering (None: unknown)."""
    simulator: dict[str, Any] | None = None
    """The simulator fingerprint checked at start (``lerobench/envs/fingerprint.py``); part of the identity."""
    policy_facts: dict[str, Any] | None = None
    """What the loaded policy makes of the run (``runner.policy_config``: executed replan steps, traits); in config."""
    control_fps: float = 20.0
    """The suite's ``control_fps`` or its backend's control rate (steps per simulated second)."""
    dataset_layout: str | None = None
    """The backend's own dataset file format, which ``--record`` writes (None: lerobench's layout)."""
    action_bounds: tuple[float, float] = (-1.0, 1.0)
    """The backend's action space per dimension (``Backend.action_bounds``)."""
    camera_aliases: dict[str, str] = field(default_factory=dict)
    """The backend's other names for its cameras (``Backend.camera_aliases``), for policies saved by other tools."""
    partial_states: tuple[int, ...] = ()
    """The backend's ``partial_states``."""
    checked: CheckedPolicies = field(default_factory=CheckedPolicies, repr=False, compare=False)
    """The run's batch-invariance bookkeeping: each policy object checked once, at its first call."""

    @property
    def video_every(self) -> int:
        """Steps per video frame: the control rate over ``--video-fps``, rounded (at least 1)."""
        return max(1, round(self.control_fps / self.settings.video_fps))

    @property
    def video_fps(self) -> float:
        """Frames per second of the video files: real time at ``video_every`` steps per frame."""
        return self.control_fps / self.video_every

    @property
    def video_size(self) -> tuple[int, int] | None:
        """(height, width) of frames rendered for the video alone: the image size scaled to ``--video-size``.

        A suite with a published visualisation size (``video_size``, PushT's 384x384) gets it as it is when
        ``--video-size`` is not given; a given ``--video-size`` (256 too) scales it as it scales an image size.
        """
        h, w = self.settings.suite.video_size or self.protocol.image_size
        side = self.settings.video_size
        own = self.settings.suite.video_size is not None
        if side is None:
            side = max(h, w) if own else DEFAULT_VIDEO_SIZE
        if own and side >= max(h, w):  # never above the suite's own size, and never below it either
            return h, w
        if side <= 0 or max(h, w) <= side:
            return None
        return max(2, round(h * side / max(h, w))), max(2, round(w * side / max(h, w)))

    @property
    def suite(self) -> Suite:
        """The suite narrowed to ``--tasks``."""
        return self.settings.suite

    @property
    def backend_options(self) -> dict[str, Any]:
        """The suite's ``backend_options`` with the run's render quality (absent when published, as before it)."""
        options = dict(self.settings.suite.backend_options)
        options.pop(RENDER_QUALITY_OPTION, None)
        quality = self.settings.render_quality
        return options if quality in (None, PUBLISHED) else {**options, RENDER_QUALITY_OPTION: quality}

    @property
    def episodes_per_task(self) -> int:
        """Episodes per task."""
        return self.settings.episodes_per_task

    @property
    def output(self) -> Path:
        """Output directory."""
        return self.settings.output

    @property
    def until(self) -> Until | None:
        """The parsed ``--until`` rule (``--versus`` alone means ``decided``); None: a fixed-n run."""
        s = self.settings
        if s.until is None:
            return Until("decided") if s.versus is not None else None
        return parse_until(s.until)

    @property
    def interleaved(self) -> bool:
        """Whether episodes run round by round across tasks (the suite and ``--versus`` rules)."""
        return self.until is not None and self.until.interleaved

    def context(self) -> PolicyContext:
        """What the policy factory is told (the same in the driver and in every worker)."""
        s = self.settings
        return PolicyContext(
            suite=s.suite.name, backend=s.suite.backend, tasks=s.suite.tasks, action_dim=self.action_dim,
            state_dim=self.state_dim, cameras=self.protocol.cameras, image_size=self.protocol.image_size,
            seed=s.seed, device=s.device, call_width=s.call_width, backend_options=self.backend_options,
            replan_steps=s.replan_steps, delay_steps=s.delay_steps, action_bounds=self.action_bounds,
            camera_aliases=self.camera_aliases, partial_states=self.partial_states,
        )

    def env_spec(self, task: TaskSpec, needs: ObservationNeeds, record_camera: str | None) -> EnvSpec:
        """The lazy env of one task for a policy with ``needs``: only its cameras rendered, at ``image_size_for``.

        ``record_camera``: rendered too when recording, for the video alone at ``video_size`` (the protocol's
        image size scaled to ``--video-size``), whatever size the policy's cameras are. Its observations carry
        the simulator's privileged state when the policy declared it.
        """
        s = self.settings
        size = self.image_size_for(needs)
        protocol = self.protocol if size == self.protocol.image_size else replace(self.protocol, image_size=size)
        video = self.video_size or (self.protocol.image_size if protocol is not self.protocol else None)
        return EnvSpec(
            suite=s.suite.name, backend=s.suite.backend, task=task, protocol=protocol, seed=s.seed,
            state_dim=self.state_dim, action_dim=self.action_dim, cameras=needs.cameras, record_camera=record_camera,
            stop_on_success=s.stop_on_success, backend_options=self.backend_options, perturb=s.perturb,
            video_every=self.video_every, video_size=video, privileged=needs.privileged,
            dataset_size=self.dataset_size, action_bounds=self.action_bounds,
        )

    def image_size_for(self, needs: ObservationNeeds) -> tuple[int, int]:
        """(height, width) the policy's cameras are rendered at (``config.image_size``); ``ConfigError`` if none fits.

        The size its cameras declare (``ObservationNeeds.image_sizes``: what a LeRobot policy was trained on) under
        the suite's default protocol; the protocol's under a protocol picked with ``--protocol`` (its size is its
        point: ``lerobot`` is lerobot-eval's 360x360 on LIBERO), and wherever the cameras declare no size or several.
        A policy that fails on any other size (``exact_image_sizes``) is refused, before the run, where the size
        it gets would not be its own: naming the suite, both sizes and the flag.
        """
        return image_size_for(self.protocol.image_size, needs, self.settings.suite.name, self.settings.protocol)

    @property
    def dataset_size(self) -> tuple[int, int] | None:
        """(height, width) of the images of the backend's dataset rows: only when ``--record`` writes them."""
        if self.dataset_layout is None or self.settings.record == "none":
            return None
        return self.settings.record_size, self.settings.record_size

    def task_run(self, task: TaskSpec, needs: ObservationNeeds, stop: Any = None, wants: Any = None) -> TaskRun:
        """The rollout's fixed facts for ``task`` under a policy with ``needs``.

        ``stop`` cancels the rollout; ``wants`` says which episodes a stopping rule still wants started.

        A policy that declares its chunking (``needs.replan_steps``) executes that many actions per
        chunk, and its cameras are rendered only where it reads them unless it needs every frame.
        """
        s = self.settings
        return TaskRun(suite=s.suite.name, task=task, seed=s.seed, action_dim=self.action_dim,
                       replan_steps=needs.executed_steps(s.replan_steps), every_frame=needs.every_frame,
                       trials=s.trials_per_episode, n_init_states=self.n_init_states,
                       step_timeout_s=s.episode_timeout, policy_timeout_s=s.policy_timeout, stop=stop, wants=wants,
                       delay=self.delay,
                       schedule=s.schedule, checked=self.checked, seeds=self.protocol.seeds)

    @property
    def delay(self) -> Delay:
        """The run's inference delay (``--delay-steps``) at the suite's control rate."""
        d = self.settings.delay_steps
        return Delay(steps=0, measured=True, control_fps=self.control_fps) if d == MEASURED else \
            Delay(steps=int(d), control_fps=self.control_fps)

    @property
    def video_camera(self) -> str | None:
        """The camera videos are recorded from; None when the run records none."""
        return self.suite.video_camera if self.settings.videos > 0 else None

    def renders(self, cameras: tuple[str, ...]) -> bool:
        """Whether steps render: the policy consumes cameras, or videos are recorded."""
        return bool(cameras) or self.video_camera is not None

    def work_units(self, done: Iterable[tuple[str, int]] = (), size: int | None = None) -> list[WorkUnit]:
        """The episodes still to run, per task in suite order; ``size`` splits a task into units of that many.

        ``size=None`` gives one unit per task (the vector executor's unit). With ``--shard`` only the
        shard's episodes are listed. An interleaved plan (``interleaved``) lists them round by round: the
        units holding episode k of every task come before those with k+1 of any.
        """
        finished = set(done)
        names = [t.name for t in self.suite.tasks]
        units = []
        for task in self.suite.tasks:
            assigned = shard_episodes(names, task.name, self.episodes_per_task, self.settings.shard)
            todo = [e for e in assigned if (task.name, e) not in finished]
            step = size or max(1, len(todo))
            units += [WorkUnit(task, tuple(todo[i:i + step])) for i in range(0, len(todo), step)]
        if self.interleaved:
            order = {name: i for i, name in enumerate(names)}
            units.sort(key=lambda u: (u.episodes[0], order[u.task.name]))
        return units

    def error_record(self, task: TaskSpec, episode: int, error: str, trial: int = 0) -> EpisodeRecord:
        """The line of an episode lost to a dead worker at ``trial``: a failure with the reason; it ends the episode."""
        return EpisodeRecord(
            task=task.name, episode=episode, trial=trial,
            seed=episode_seed(self.settings.seed, task.index, episode, self.protocol.seeds),
            init_state=episode % self.n_init_states, success=False, success_at_end=False, steps=0,
            return_=0.0, elapsed_s=0.0, error=error,
        )

    @property
    def protocol_changes(self) -> dict[str, list[Any]]:
        """Fields of the named protocol this run changed (``--max-steps``): name -> [published, used]; {} if none.

        Why: a run cut short by ``--max-steps`` is not the published protocol; its label says so (console and
        ``config.protocol_changes``) instead of claiming ``protocol standard``.
        """
        published = asdict(self.settings.suite.protocol(self.settings.protocol))
        used = asdict(self.protocol)
        changes = {k: [published[k], v] for k, v in used.items() if published.get(k) != v}
        own = self.settings.suite.backend_options.get(RENDER_QUALITY_OPTION, PUBLISHED)
        quality = self.settings.render_quality or PUBLISHED
        if quality != own:  # other pixels than the suite's: said beside the protocol, like --max-steps
            changes[RENDER_QUALITY_OPTION] = [own, quality]
        return changes

    def protocol_label(self) -> str:
        """``standard``, or ``standard, modified: max_steps 50 (published 500)``."""
        return protocol_label(self.settings.protocol, self.protocol_changes)

    def config(self) -> dict[str, Any]:
        """Every effective setting, JSON-ready (the sink adds what the executor chose)."""
        s = self.settings
        return {
            "suite": s.suite.name, "suite_file": str(s.suite.source.resolve()) if s.suite.source else None,
            "backend": s.suite.backend, "backend_options": self.backend_options,
            "policy": s.policy, "protocol": s.protocol, "protocol_settings": asdict(self.protocol),
            "protocol_changes": self.protocol_changes or None,
            "tasks": [t.name for t in s.suite.tasks], "episodes_per_task": s.episodes_per_task,
            "seed": s.seed, "stop_on_success": s.stop_on_success, "replan_steps": s.replan_steps,
            "delay_steps": s.delay_steps, "control_fps": self.control_fps,
            "trials": s.trials_per_episode, "record": s.record, "rerun": s.rerun, "formats": list(s.formats),
            "record_layout": (self.dataset_layout or "lerobench") if s.record != "none" else None,
            "record_size": s.record_size if self.dataset_size else None,
            "batch_size": s.batch_size,
            "parallel_tasks": s.parallel_tasks, "videos": s.videos, "video_fps": self.video_fps,
            "video_size": list(self.video_size or self.protocol.image_size), "executor": s.executor,
            "workers": s.workers, "ray_address": s.ray_address, "ray_gpus_per_worker": s.ray_gpus_per_worker,
            "episode_timeout": s.episode_timeout, "policy_timeout": s.policy_timeout,
            "device": s.device, "call_width_requested": s.call_width,
            "output": str(s.output),
            "shard": str(s.shard) if s.shard else None, "allow_sim_drift": s.allow_sim_drift,
            "simulator": self.simulator, **(self.policy_facts or {}),
            "perturb": dict(s.perturb) or None,
            "until": str(self.until) if self.until else None,
            "versus": str(s.versus) if s.versus else None, "alpha": s.alpha, "margin": s.margin,
            "effect": s.effect, "power": s.power if s.effect is not None else None,
            **({"metric": s.metric} if s.metric != "success" else {}),  # success: as every run before --metric
        }


def image_size_for(protocol_size: tuple[int, int], needs: ObservationNeeds, suite: str,
                   protocol: str) -> tuple[int, int]:
    """``RunPlan.image_size_for``: the render size of a policy's cameras under ``protocol`` of ``suite``.

    Why one size for all: every camera of a run is rendered at one size (LIBERO builds its cameras at it), so a
    policy declaring different sizes per camera gets the protocol's, unless it needs each exactly (refused).
    """
    declared = {camera: tuple(needs.image_sizes[camera]) for camera in needs.cameras if camera in needs.image_sizes}
    sizes = set(declared.values())
    fixed = protocol != DEFAULT_PROTOCOL
    if len(sizes) == 1 and not fixed:
        (size,) = sizes
        return int(size[0]), int(size[1])
    if not needs.exact_image_sizes or sizes <= {tuple(protocol_size)}:
        return protocol_size
    said = " and ".join(f"{camera} at {_size(size)}" for camera, size in declared.items())
    if len(sizes) > 1:
        raise ConfigError(f"the policy reads {said} and takes no other sizes, but suite {suite!r} renders every "
                          f"camera of a run at one size")
    raise ConfigError(f"suite {suite!r} protocol {protocol!r} renders images at {_size(protocol_size)}, but the "
                      f"policy reads {said} (its declared input shape) and takes no other size: leave out "
                      f"--protocol {protocol} to render at {_size(next(iter(sizes)))}")


def _size(size: tuple[int, ...]) -> str:
    return f"{size[0]}x{size[1]}"


def protocol_label(name: str, changes: dict[str, list[Any]] | None) -> str:
    """A protocol's name and what a run changed of it (``config.protocol_changes``: field -> [published, used])."""
    if not changes:
        return name
    said = ", ".join(f"{used} rendering" if k == RENDER_QUALITY_OPTION else f"{k} {used} (published {published})"
                     for k, (published, used) in changes.items())
    return f"{name}, modified: {said}"


def check_importable(backend: Any) -> None:
    """``backend.check_installed()``, any import failure turned into one line that says what to check.

    A broken ``MUJOCO_GL`` (a renderer whose library is missing) makes ``import mujoco`` itself raise.
    """
    try:
        backend.check_installed()
    except (ImportError, LerobenchError):
        raise
    except Exception as exc:  # noqa: BLE001 - mujoco raises AttributeError/RuntimeError at import for a bad GL
        gl = environment.get(environment.MUJOCO_GL)
        raise MissingDependencyError(
            f"cannot import the {backend.name} simulator ({type(exc).__name__}: {exc})"
            + (f"; MUJOCO_GL={gl}: does it name a working renderer? Run `lerobench doctor`" if gl else "")) from exc


def make_plan(settings: RunSettings) -> RunPlan:
    """Validate every flag against the suite and backend; raise ``ConfigError`` naming the bad one."""
    from lerobench.suite.registry import control_fps, get_backend

    s = settings
    if s.versus is not None:  # run A's episode count is the cap: resolved before anything counts episodes
        from lerobench.plan.versus import with_recorded_extent

        s = with_recorded_extent(s)
    backend = get_backend(s.suite.backend)
    check_importable(backend)
    backend.check_suite(s.suite)  # typos in a suite file, named before any work
    protocol = s.suite.protocol(s.protocol)
    if s.max_steps is not None:
        if s.max_steps < 1:
            raise ConfigError(f"--max-steps must be >= 1, got {s.max_steps}")
        protocol = replace(protocol, max_steps=s.max_steps)
    limit = backend.max_episode_steps
    if limit is not None and protocol.max_steps > limit:
        raise ConfigError(f"suite {s.suite.name!r}: {s.suite.backend} episodes are limited to "
                          f"{limit} steps, but max_steps is {protocol.max_steps}")
    for fmt in s.formats:
        if fmt not in FORMATS:
            raise unknown("--format", fmt, FORMATS)
    if s.executor not in EXECUTORS:
        raise unknown("--executor", s.executor, EXECUTORS)
    entry = EXECUTOR_ENTRIES.get(s.executor)  # None: auto, which only picks what the flags allow
    _check_record(s, entry)
    if s.rerun:
        _check_rerun(s, entry)
    if entry is not None:  # flags the chosen executor would ignore: say so instead
        for name, value, applies in (("--batch-size", s.batch_size, entry.batched),
                                     ("--parallel-tasks", s.parallel_tasks, entry.task_threads)):
            if value > 1 and not applies:
                where = ("the vector and inline executors (envs" if name == "--batch-size"
                         else "the vector executor (task threads")
                raise ConfigError(f"{name} {value} applies to {where} sharing one policy), not --executor {s.executor}"
                                  + ("; use --workers for episode workers" if entry.own_policy else ""))
    if entry is not None and s.episode_timeout is not None and not entry.step_timeouts:
        raise ConfigError(f"--episode-timeout needs steps in worker processes (a step in this process cannot be "
                          f"interrupted): use --executor vector or processes, not {s.executor}")
    if entry is not None and entry.requires and importlib.util.find_spec(entry.requires) is None:
        raise MissingDependencyError(f"--executor {s.executor} needs {entry.requires}: "
                                     f"pip install 'lerobench[{entry.extra}]'")
    bounds: tuple[tuple[str, float | None, float], ...] = (
        ("--episodes", s.episodes, 1), ("--replan-steps", s.replan_steps, 1), ("--trials", s.trials, 1),
        ("--parallel-tasks", s.parallel_tasks, 1), ("--batch-size", s.batch_size, 0), ("--videos", s.videos, 0),
        ("--workers", s.workers, 0), ("--ray-gpus-per-worker", s.ray_gpus_per_worker, 0))
    for name, given, least in bounds:
        if given is not None and given < least:
            raise ConfigError(f"{name} must be >= {least}, got {given}")
    if not 0 <= s.seed <= MAX_SEED:  # NumPy's SeedSequence and the simulators' seeding take 32-bit unsigned seeds
        raise ConfigError(f"--seed must be between 0 and {MAX_SEED}, got {s.seed}")
    if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", s.device):
        raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {s.device!r}")
    fps = control_fps(s.suite)
    if fps is None and s.videos > 0 and s.suite.video_camera is not None:
        raise ConfigError(f"{s.suite.source or s.suite.name}: field 'control_fps': missing, and backend "
                          f"{s.suite.backend!r} does not declare its control rate (needed for the videos' fps)")
    if not s.video_fps > 0:
        raise ConfigError(f"--video-fps must be > 0, got {s.video_fps:g}")
    if s.video_size is not None and (s.video_size < 0 or 0 < s.video_size < 16):
        raise ConfigError(f"--video-size must be 0 (the protocol's image size) or at least 16, got {s.video_size}")
    if s.episode_timeout is not None and s.episode_timeout <= 0:
        raise ConfigError(f"--episode-timeout must be > 0 seconds, got {s.episode_timeout}")
    if s.policy_timeout is not None and s.policy_timeout <= 0:
        raise ConfigError(f"--policy-timeout must be > 0 seconds, got {s.policy_timeout}")
    _check_stopping(s)
    _check_perturbations(s, backend)
    s = replace(s, delay_steps=parse_delay(s.delay_steps), render_quality=_render_quality(s))
    if s.delay_steps == MEASURED and fps is None:
        raise ConfigError(f"--delay-steps measured needs the suite's control rate: {s.suite.source or s.suite.name} "
                          f"has no 'control_fps' and backend {s.suite.backend!r} declares none")
    return RunPlan(settings=s, protocol=protocol, action_dim=backend.action_dim, state_dim=backend.state_dim,
                   n_init_states=s.suite.init_states or backend.n_init_states,
                   unrendered_step_ms=backend.unrendered_step_ms, control_fps=fps or 20.0,
                   dataset_layout=backend.dataset_layout,
                   action_bounds=(float(backend.action_bounds[0]), float(backend.action_bounds[1])),
                   camera_aliases=dict(backend.camera_aliases), partial_states=tuple(backend.partial_states))


def _check_perturbations(s: RunSettings, backend: Any) -> None:
    """Refuse a ``--perturb`` the suite's backend cannot honour (a light without MuJoCo), before any work."""
    refused = [name for name, _ in s.perturb if name not in backend.perturbations]
    if refused:
        raise ConfigError(f"--perturb {', '.join(refused)}: suite {s.suite.name!r} ({backend.name}) cannot apply "
                          f"{'it' if len(refused) == 1 else 'them'}; it offers {', '.join(backend.perturbations)}")


def _render_quality(s: RunSettings) -> str:
    """``--render-quality``, else ``LEROBENCH_RENDER_QUALITY``, else the suite's, else published; checked."""
    given = s.render_quality or environment.get(environment.RENDER_QUALITY) or None
    if given is not None and given not in RENDER_QUALITIES:
        where = "--render-quality" if s.render_quality else environment.RENDER_QUALITY
        raise ConfigError(f"{where} must be one of {', '.join(RENDER_QUALITIES)}, got {given!r}")
    return str(given or s.suite.backend_options.get(RENDER_QUALITY_OPTION, PUBLISHED))


def _check_record(s: RunSettings, entry: Any) -> None:
    """``--record``: h5py installed, an executor whose driver writes, and an image size of at least 8."""
    if check_record_mode(s.record) == "none":
        return
    if importlib.util.find_spec("h5py") is None:
        raise MissingDependencyError("--record needs h5py, which the README's set-up does not install: "
                                     "pip install 'lerobench[record]'")
    if entry is not None and entry.own_policy:
        raise ConfigError(f"--record is written by the driver's writer: use --executor vector or inline, "
                          f"not {s.executor}")
    if s.record_size < 8:
        raise ConfigError(f"--record-size must be at least 8 (pixels), got {s.record_size}")


def _check_rerun(s: RunSettings, entry: Any) -> None:
    """``--rerun`` records the episodes ``--videos`` records, through the driver's writer (like ``--record``)."""
    if importlib.util.find_spec("rerun") is None:
        raise MissingDependencyError("--rerun needs rerun-sdk: pip install 'lerobench[rerun]'")
    if s.videos < 1 or s.suite.video_camera is None:
        raise ConfigError("--rerun records the episodes --videos records: give --videos N >= 1"
                          + ("" if s.suite.video_camera else f" (suite {s.suite.name!r} has no video_camera)"))
    if entry is not None and entry.own_policy:
        raise ConfigError(f"--rerun is written by the driver's writer: use --executor vector or inline, "
                          f"not {s.executor}")


def _check_stopping(s: RunSettings) -> None:
    """Validate ``--until``, ``--versus``, ``--alpha`` and ``--margin`` together."""
    until = parse_until(s.until) if s.until is not None else None
    if s.versus is not None and until is not None and until.kind != "decided":
        raise ConfigError(f"--versus runs until the comparison is decided: use --until decided (or leave --until "
                          f"out), not --until {until}")
    if until is not None and until.kind == "decided" and s.versus is None:
        raise ConfigError("--until decided needs --versus RUN_DIR (the recorded run to compare with)")
    if (until is not None or s.versus is not None) and s.shard is not None:
        raise ConfigError("--until stops on outcomes in episode order across a whole task: it cannot run on a "
                          "--shard (run it unsharded)")
    if not 0 < s.alpha < 1:
        raise ConfigError(f"--alpha must lie in (0, 1), got {s.alpha:g}")
    if not 0 < s.margin < 1:
        raise ConfigError(f"--margin must lie in (0, 1), got {s.margin:g}")
    if s.effect is not None and s.versus is None:
        raise ConfigError("--effect plans a paired comparison: it needs --versus RUN_DIR")
    if s.effect is not None and not 0 < abs(s.effect) < 1:
        raise ConfigError(f"--effect must be a non-zero difference in (-1, 1) (of rates, or with --metric progress "
                          f"of mean progress), got {s.effect:g}")
    if not 0 < s.power < 1:
        raise ConfigError(f"--power must lie in (0, 1), got {s.power:g}")
    if s.metric not in METRICS:
        raise unknown("--metric", s.metric, METRICS)
    if s.metric == "progress" and s.versus is None:  # --versus implies --until decided (refused otherwise above)
        raise ConfigError("--metric progress is what a paired A/B decides about: it needs --versus RUN_DIR "
                          "(--until decided)")
