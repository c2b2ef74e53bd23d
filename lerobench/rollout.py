"""Runs one task's episodes on one vector env. No file I/O, no printing: results go to callbacks.

Slots of the vector env take episodes from a queue in index order; when an episode ends its slot is
reset to the next one. With ``trials`` > 1 an episode is that many attempts at the same start on the
same slot, in order: when a trial ends and trials remain, the slot is reset to the same episode's start
(the policy is not reset; lerobench's pending actions are dropped). An episode's trial records are
reported together once the episode is over, so a consumer only ever sees whole episodes.

Episode outcomes cannot depend on batch size or finish order because each
episode's start state and seed are pure functions of (run seed, task, episode), and built-in
policies key their randomness on the episode seed too.

Each env keeps its own queue of actions from the policy's last chunk. The policy reads an env's
observation only when that queue runs dry, so every step tells its env whether the next observation
will be read (``env_action``); envs render the policy's cameras only then (see ``LazyTaskEnv``).
"""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from lerobench.analysis.results import EpisodeRecord
from lerobench.config import TaskSpec
from lerobench.envs.base import IDLE, env_action, episode_seed
from lerobench.errors import PolicyError
from lerobench.trajectories import NULL_TRAJECTORIES, Trajectory, TrajectoryRecorder


class Recording(Protocol):
    """Frames of one episode on their way to a video file."""

    def add(self, frame: np.ndarray) -> None:
        """Hand one frame over (copied by the receiver)."""

    def finish(self, success: bool) -> str | None:
        """Finalize; return the video path relative to the output directory."""

    def abort(self) -> None:
        """Drop the partial video."""


class Recorder(Protocol):
    """Decides which episodes are recorded and opens their recordings."""

    camera: str | None

    def wants(self, episode: int) -> bool:
        """True if this episode should be recorded."""

    def start(self, task: str, episode: int, trial: int | None = None) -> Recording:
        """Open a recording for (task, episode), or for one trial of it when ``trial`` is given."""


class NullRecorder:
    """Records nothing (``--videos 0``), so the rollout never branches on 'are videos on?'."""

    camera = None

    def wants(self, episode: int) -> bool:
        """Never."""
        return False

    def start(self, task: str, episode: int, trial: int | None = None) -> Recording:  # pragma: no cover
        """Unreachable: ``wants`` is always False."""
        raise AssertionError("NullRecorder.start called")


class Cancelled(Exception):
    """Another task thread failed or the run was interrupted: stop stepping, keep what finished."""


class WorkerFailure(Exception):
    """A simulator worker died or hung; ``in_flight`` episodes were lost and must be recorded as errors."""

    def __init__(self, message: str, hung: bool = False):
        super().__init__(message)
        self.in_flight: list[int] = []
        self.hung = hung


def _failed_slots(venv: Any, active: list[int], failure: WorkerFailure) -> list[int]:
    """Which active slots' workers are dead (or, after a timeout, have not answered).

    Only those episodes become errors; if the culprit cannot be told apart, every active one does.
    """
    processes = getattr(venv, "processes", None)
    pipes = getattr(venv, "parent_pipes", None)
    if not processes:
        return active
    for i in active:
        processes[i].join(timeout=0.5 if not failure.hung else 0)
    dead = [i for i in active if not processes[i].is_alive()]
    if not dead and failure.hung and pipes:
        dead = [i for i in active if not pipes[i].poll()]
    return dead or active


@dataclass
class TaskRun:
    """The fixed facts of one task's rollout."""

    suite: str
    task: TaskSpec
    seed: int
    action_dim: int
    replan_steps: int = 1
    trials: int = 1
    """Attempts per episode at the same start (``--trials``); the policy keeps its memory between them."""
    every_frame: bool = False
    """Render the policy's cameras at every step, also those whose observation the policy never reads."""
    n_init_states: int = 50
    step_timeout_s: float | None = None
    stop: threading.Event | None = None
    """Set by the vector executor to make a task thread stop at its next step (Ctrl-C, another task failed)."""
    wants: Callable[[int], bool] | None = None
    """``--until``: False for an episode no longer worth starting (its task is decided); running ones finish."""


@dataclass
class _Slot:
    episode: int = IDLE
    started: float = 0.0
    recording: Recording | None = None
    trajectory: Trajectory | None = None
    trial: int = 0
    next_trial: bool = False
    """Set when a trial ended and the episode has trials left: the next reset restarts the same episode."""
    finished: list[tuple[EpisodeRecord, Trajectory | None]] = field(default_factory=list)
    """This episode's finished trials, held back until the episode is over."""

    @property
    def active(self) -> bool:
        return self.episode != IDLE

    def begin(self, pending: deque[int], wants: Callable[[int], bool] | None = None) -> None:
        """Move to the episode's next trial, or to the next pending episode (or idle) at trial 0."""
        if self.next_trial:
            self.trial += 1
        else:
            _drop_unwanted(pending, wants)
            self.episode = pending.popleft() if pending else IDLE
            self.trial = 0
            self.finished = []
        self.next_trial = False


def _drop_unwanted(pending: deque[int], wants: Callable[[int], bool] | None) -> None:
    """Drop pending episodes a stopping rule no longer wants (a decided task's: all of them at once)."""
    while wants is not None and pending and not wants(pending[0]):
        pending.popleft()


class _PolicyFeedback:
    """What the policy batch says about each slot besides the observation (see ``policies/base.py``).

    ``episode_start``/``trial_start`` mark the first observation of an episode / of any trial;
    ``reward``/``success`` are those of the step that produced the observation (0 and False on a
    trial's first observation): meta-RL agents adapt from them, and the goal may be hidden.
    """

    def __init__(self, n: int):
        self.episode_start = np.zeros(n, dtype=bool)
        self.trial_start = np.zeros(n, dtype=bool)
        self.reward = np.zeros(n, dtype=np.float32)
        self.success = np.zeros(n, dtype=bool)

    def started(self, i: int, slot: _Slot) -> None:
        self.episode_start[i] = slot.active and slot.trial == 0
        self.trial_start[i] = slot.active
        self.reward[i], self.success[i] = 0.0, False

    def stepped(self, rewards: np.ndarray, infos: dict[str, Any], active: np.ndarray) -> None:
        self.reward[active] = np.asarray(rewards, dtype=np.float32)[active]
        stepped = _mask(infos, "success")
        now = np.asarray(infos["success"], dtype=bool) if stepped is not None else np.zeros(len(active), bool)
        self.success[active] = (now & (stepped if stepped is not None else False))[active]

    def fill(self, batch: dict[str, Any], slots: list[_Slot]) -> None:
        batch["episode_start"] = self.episode_start.copy()
        batch["trial"] = np.array([s.trial if s.active else 0 for s in slots], dtype=np.int64)
        batch["trial_start"] = self.trial_start.copy()
        batch["reward"] = self.reward.copy()
        batch["success"] = self.success.copy()
        self.episode_start[:] = False
        self.trial_start[:] = False


def _mask(infos: dict[str, Any], key: str) -> np.ndarray | None:
    mask = infos.get(f"_{key}")
    return None if mask is None or not np.any(mask) else np.asarray(mask, dtype=bool)


def _field(infos: dict[str, Any], key: str, name: str, i: int) -> Any:
    value = infos[key][name][i]
    return value.item() if isinstance(value, np.generic) else value


def run_episodes(
    venv: Any,
    policy: Any,
    run: TaskRun,
    episodes: Sequence[int],
    on_episode: Callable[[EpisodeRecord], None],
    on_steps: Callable[[int], None] = lambda n: None,
    recorder: Recorder | None = None,
    trajectories: TrajectoryRecorder = NULL_TRAJECTORIES,
) -> None:
    """Run ``episodes`` of ``run.task`` on ``venv`` until each is recorded through ``on_episode``.

    Raises ``PolicyError`` for an invalid action (naming suite, task and episode) and
    ``WorkerFailure`` if the vector env breaks; episodes finished before either are already reported.
    """
    recorder = recorder or NullRecorder()
    seed_of = functools.lru_cache(maxsize=None)(lambda e: episode_seed(run.seed, run.task.index, max(e, 0)))
    n = venv.num_envs
    pending = deque(episodes)
    slots = [_Slot() for _ in range(n)]
    queues: list[deque[np.ndarray]] = [deque() for _ in range(n)]
    feedback = _PolicyFeedback(n)

    def assign(mask: np.ndarray) -> tuple[dict[str, Any], dict[str, Any]]:
        for i in np.flatnonzero(mask):
            slot = slots[i]
            slot.begin(pending, run.wants)
            slot.started = time.perf_counter()
            queues[i].clear()  # actions planned for the previous attempt never leak into this one
            feedback.started(i, slot)
            if slot.active and recorder.wants(slot.episode):
                slot.recording = recorder.start(run.task.name, slot.episode, slot.trial if run.trials > 1 else None)
            slot.trajectory = trajectories.start() if slot.active else None
        options = {
            "episodes": [s.episode for s in slots],
            "trials": [s.trial for s in slots],
            "record": [s.recording is not None for s in slots],
        }
        if not mask.all():
            options["reset_mask"] = mask
        seeds = [seed_of(s.episode) for s in slots]
        return _call(venv.reset, seed=seeds, options=options)

    def finish(i: int, summary: dict[str, Any] | None, error: str | None = None) -> bool:
        """Record slot ``i``'s trial; True if the slot must be reset (next trial or next episode)."""
        slot = slots[i]
        summary = summary or {}
        error = error if error is not None else summary.get("error")
        success = bool(summary.get("success", False)) and error is None
        video = None
        if slot.recording is not None:
            video = slot.recording.finish(success) if error is None else slot.recording.abort()
            slot.recording = None
        record = EpisodeRecord(
            task=run.task.name,
            episode=slot.episode,
            trial=slot.trial,
            seed=seed_of(slot.episode),
            init_state=slot.episode % run.n_init_states,
            success=success,
            success_at_end=bool(summary.get("success_at_end", False)) and error is None,
            steps=int(summary.get("steps", 0)),
            return_=float(summary.get("return", 0.0)),
            elapsed_s=round(time.perf_counter() - slot.started, 4),
            error=error,
            video=video,
            renders=int(summary.get("renders", 0)),
            max_reward=_finite(summary.get("max_reward")),
        )
        slot.finished.append((record, slot.trajectory))
        slot.trajectory = None
        if error is None and slot.trial + 1 < run.trials:
            slot.next_trial = True
            return True
        for done, trajectory in slot.finished:  # an episode is reported whole (an error ends it early)
            on_episode(done)
            trajectories.finish(run.task.name, done, trajectory)
        slot.finished = []
        slot.episode = IDLE
        _drop_unwanted(pending, run.wants)
        return bool(pending)

    def collect(obs: dict[str, Any], infos: dict[str, Any], which: np.ndarray) -> np.ndarray:
        """Take frames of the slots in ``which``, record finished episodes; return slots needing a reset.

        ``which`` is every slot after a step, but only the reset slots after a partial reset (the
        others' observations did not change, and must not be recorded twice).
        """
        ended = _mask(infos, "episode_end")
        frames = _mask(infos, "frame")
        needs_reset = np.zeros(n, dtype=bool)
        for i, slot in enumerate(slots):
            if not slot.active or not which[i]:
                continue
            if slot.trajectory is not None:
                slot.trajectory.observe(obs, i)
            if slot.recording is not None:
                frame = _frame_for(obs, infos, frames, recorder.camera, i)
                if frame is not None:
                    slot.recording.add(frame)
            if ended is not None and ended[i]:
                summary = {k: _field(infos, "episode_end", k, i) for k in infos["episode_end"]
                           if not k.startswith("_")}
                needs_reset[i] = finish(i, summary)
        return needs_reset

    try:
        everyone = np.ones(n, dtype=bool)
        obs, infos = assign(everyone)
        needs_reset = collect(obs, infos, everyone)
        while True:
            while needs_reset.any():
                obs, infos = assign(needs_reset)
                needs_reset = collect(obs, infos, needs_reset.copy())
            active = np.array([s.active for s in slots])
            if not active.any():
                return
            if run.stop is not None and run.stop.is_set():
                raise Cancelled(f"task {run.task.name!r} cancelled")
            actions = _next_actions(policy, obs, slots, queues, feedback, active, run, seed_of)
            observe = _observed(queues, active, run.every_frame or trajectories.enabled)
            obs, rewards, _, _, infos = _call(venv.step, env_action(actions, observe), timeout=run.step_timeout_s)
            on_steps(int(active.sum()))
            feedback.stepped(rewards, infos, active)
            if trajectories.enabled:
                stepped = _mask(infos, "success")
                for i, slot in enumerate(slots):
                    if slot.trajectory is not None and active[i]:
                        success = bool(infos["success"][i]) if stepped is not None and stepped[i] else False
                        slot.trajectory.act(actions[i], float(rewards[i]), success)
            needs_reset = collect(obs, infos, everyone)
    except WorkerFailure as failure:
        culprits = _failed_slots(venv, [i for i, s in enumerate(slots) if s.active], failure)
        failure.in_flight = [slots[i].episode for i in culprits]
        for i in culprits:
            finish(i, None, error=f"worker failure: {failure}")
        for slot in slots:
            if slot.active:  # innocent bystanders of the broken vector env: rerun them from trial 0
                if slot.recording is not None:
                    slot.recording.abort()
                    slot.recording = None
                slot.episode = IDLE
                slot.finished = []
        raise
    except BaseException:
        for slot in slots:
            if slot.recording is not None:
                slot.recording.abort()
                slot.recording = None
        raise


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


def _frame_for(obs: dict[str, Any], infos: dict[str, Any], frames: np.ndarray | None,
               camera: str | None, i: int) -> np.ndarray | None:
    images = obs.get("images")
    if camera is not None and images is not None and camera in images:
        return images[camera][i]
    if frames is not None and frames[i]:
        return infos["frame"][i]
    return None


def _call(method: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
    """Call a vector env method; turn a dead or hung worker into ``WorkerFailure``."""
    try:
        if timeout is not None and method.__name__ == "step" and hasattr(method.__self__, "step_wait"):
            env = method.__self__
            env.step_async(*args)
            return env.step_wait(timeout=timeout)
        return method(*args, **kwargs)
    except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
        raise WorkerFailure(f"a simulator worker died ({type(exc).__name__})") from exc
    except multiprocessing.TimeoutError as exc:
        raise WorkerFailure(f"a simulator step took longer than --episode-timeout {timeout} s",
                            hung=True) from exc


def _next_actions(policy: Any, obs: dict[str, Any], slots: list[_Slot], queues: list[deque[np.ndarray]],
                  feedback: _PolicyFeedback, active: np.ndarray, run: TaskRun,
                  seed_of: Callable[[int], int]) -> np.ndarray:
    """Pop each env's next queued action, asking the policy (whole batch) when a queue runs dry."""
    n = len(slots)
    if any(active[i] and not queues[i] for i in range(n)):
        batch = dict(obs)
        batch["task"] = [run.task.name] * n
        batch["episode"] = np.array([s.episode for s in slots], dtype=np.int64)
        batch["episode_seed"] = np.array([seed_of(s.episode) for s in slots], dtype=np.int64)
        feedback.fill(batch, slots)
        batch["active"] = active.copy()
        episode = next(s.episode for s in slots if s.active)
        try:
            raw = policy.select_action(batch, [run.task.description] * n)
        except Exception as exc:
            raise PolicyError(_where(run, episode, f"policy raised {type(exc).__name__}: {exc}")) from exc
        chunk = _validate(raw, n, run, slots, active)
        for i in range(n):
            if active[i] and not queues[i]:
                queues[i].extend(chunk[i, : run.replan_steps])
    actions = np.zeros((n, run.action_dim), dtype=np.float32)
    for i in range(n):
        if active[i]:
            actions[i] = queues[i].popleft()
    return actions


def _observed(queues: list[deque[np.ndarray]], active: np.ndarray, every_frame: bool) -> np.ndarray:
    """Which envs' next observation will be read: those whose queue is now empty (the policy refills it)."""
    return np.array([bool(a) and (every_frame or not q) for q, a in zip(queues, active, strict=True)])


def _where(run: TaskRun, episode: int, message: str) -> str:
    return f"suite {run.suite!r}, task {run.task.name!r}, episode {episode}: {message}"


def _validate(raw: Any, n: int, run: TaskRun, slots: list[_Slot], active: np.ndarray) -> np.ndarray:
    """Check the policy output's shape and values; return it as a (B, T, A) float32 chunk."""
    first = next(s.episode for s in slots if s.active)
    try:
        if hasattr(raw, "detach"):
            raw = raw.detach().cpu().numpy()
        actions = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise PolicyError(_where(run, first, f"action is not numeric ({exc})")) from exc
    if actions.ndim == 2:
        actions = actions[:, None, :]
    if actions.ndim != 3 or actions.shape[0] != n or actions.shape[2] != run.action_dim or actions.shape[1] < 1:
        raise PolicyError(_where(
            run, first,
            f"expected actions of shape ({n}, {run.action_dim}) or a chunk ({n}, T, {run.action_dim}), "
            f"got {tuple(np.shape(raw))}"))
    bad = ~np.isfinite(actions).all(axis=(1, 2)) & active
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PolicyError(_where(run, slots[i].episode, "action contains NaN or infinity"))
    return actions
