"""Runs one task's episodes on one vector env. No file I/O, no printing: results go to callbacks.

Slots of the vector env take episodes from an ``EpisodeSource`` (by default the task's episodes in index
order); when an episode ends its slot is reset to the next one, in the background (``venv.reset_one``: a
worker resets its env while the others keep stepping; the slot is held until its first observation
lands). The very first reset of all slots is one blocking call (it builds the simulators). With
``trials`` > 1 an episode is that
many attempts at the same start on the same slot, in order: when a trial ends and trials remain, the
slot is reset to the same episode's start (the policy is not reset; lerobench's pending actions are
dropped). An episode's trial records are reported together once the episode is over, so a consumer only
ever sees whole episodes.

Episode outcomes cannot depend on batch size, finish order or call timing because each episode's
start state and seed are pure functions of (run seed, task, episode), a policy sees only the rows it
acts on, and built-in policies key their randomness on (episode seed, trial, call index).

Each env keeps its own queue of actions from the policy's last chunk. The policy reads an env's
observation only when that queue runs dry, so every step tells its env whether the next observation
will be read (``env_action``); envs render the policy's cameras only then (see ``LazyTaskEnv``).

Continuous batching: the policy is asked only for the rows whose queue ran dry. While a call is in
flight (on a helper thread, ``inference.PolicyCaller``) the envs with queued actions keep stepping and
the waiting ones are held (``env_action(..., hold=...)``: their simulated time stands still); rows that
run dry meanwhile join the next call. ``inference.should_call`` decides when to send. When the policy's calls
may overlap (``PolicyTraits.concurrent_calls`` > 1) and a call costs about a round of simulation
(``inference.worth_spreading``), a step runs only as many rows as the vector env steps in parallel
(``step_width``: its cores), those nearest to running dry: each env runs its chunk out and goes to the
policy while the others still have actions, so envs fall out of phase and some always step while others
wait (``run_dry_first``). Only the stepped envs are stepped (``step_within``), so a step costs what its rows
cost. When the policy dominates, envs stay in phase and the calls stay full.
"""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from lerobench.analysis.results import EpisodeRecord
from lerobench.envs.base import IDLE, env_action, episode_seed
from lerobench.errors import STOP_REQUESTED, PolicyError
from lerobench.output.trajectories import NULL_TRAJECTORIES, Trajectory, TrajectoryRecorder
from lerobench.policies.base import policy_traits
from lerobench.rollout.inference import (
    CallStats,
    EpisodeQueue,
    EpisodeSource,
    PolicyCaller,
    should_call,
    worth_spreading,
)
from lerobench.suite.config import TaskSpec

STOP_GRACE_S = 1.0
"""How long a worker failure seen after Ctrl-C/SIGTERM (``STOP_REQUESTED``) waits for the driver's stop to land."""

RUN_DRY_FIRST = True
"""With overlapping calls, step only the ``step_width`` rows nearest to running dry (``run_dry_first``)."""


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
    calls: int = 0
    """Policy calls made for this trial so far (the ``call`` key of the observation batch)."""
    next_trial: bool = False
    """Set when a trial ended and the episode has trials left: the next reset restarts the same episode."""
    finished: list[tuple[EpisodeRecord, Trajectory | None]] = field(default_factory=list)
    """This episode's finished trials, held back until the episode is over."""

    @property
    def active(self) -> bool:
        return self.episode != IDLE

    def begin(self, source: EpisodeSource) -> None:
        """Move to the episode's next trial, or to the source's next episode (or idle) at trial 0."""
        if self.next_trial:
            self.trial += 1
        else:
            episode = source.next()
            self.episode = IDLE if episode is None else episode
            self.trial = 0
            self.finished = []
        self.next_trial = False
        self.calls = 0


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

    def fill(self, batch: dict[str, Any], rows: np.ndarray, slots: list[_Slot]) -> None:
        batch["episode_start"] = self.episode_start[rows]
        batch["trial"] = np.array([slots[i].trial for i in rows], dtype=np.int64)
        batch["trial_start"] = self.trial_start[rows]
        batch["reward"] = self.reward[rows]
        batch["success"] = self.success[rows]
        self.episode_start[rows] = False
        self.trial_start[rows] = False


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
    episodes: Sequence[int] | EpisodeSource,
    on_episode: Callable[[EpisodeRecord], None],
    on_steps: Callable[[int], None] = lambda n: None,
    recorder: Recorder | None = None,
    trajectories: TrajectoryRecorder = NULL_TRAJECTORIES,
    stats: CallStats | None = None,
) -> None:
    """Run ``episodes`` of ``run.task`` on ``venv`` until each is recorded through ``on_episode``.

    ``episodes`` is a list (run in order) or an ``EpisodeSource`` asked for each slot's next episode.
    ``stats`` counts the policy calls. Raises ``PolicyError`` for an invalid action (naming suite, task and
    episode) and ``WorkerFailure`` if the vector env breaks; episodes finished before either are reported.
    """
    recorder = recorder or NullRecorder()
    source = EpisodeQueue(episodes, run.wants) if not hasattr(episodes, "next") else episodes
    seed_of = functools.lru_cache(maxsize=None)(lambda e: episode_seed(run.seed, run.task.index, max(e, 0)))
    n = venv.num_envs
    slots = [_Slot() for _ in range(n)]
    queues: list[deque[np.ndarray]] = [deque() for _ in range(n)]
    waiting = np.zeros(n, dtype=bool)
    """Rows in the policy call in flight: held (not stepped) until their chunk arrives."""
    dry_since = np.full(n, np.nan)
    """When each dry row not yet sent ran dry (``perf_counter``; NaN otherwise): how long it has waited."""
    feedback = _PolicyFeedback(n)
    caller = PolicyCaller(policy, stats, concurrency=policy_traits(policy).concurrent_calls)
    width = max(1, int(getattr(venv, "step_width", n)))

    resets: dict[int, Future] = {}
    """Slots whose reset runs in the background (``venv.reset_one``): held until their first observation lands."""

    def begin(mask: np.ndarray) -> dict[str, Any]:
        """Move the slots in ``mask`` to their next trial, episode or idleness; return the reset options."""
        for i in np.flatnonzero(mask):
            slot = slots[i]
            slot.begin(source)
            slot.started = time.perf_counter()
            queues[i].clear()  # actions planned for the previous attempt never leak into this one
            feedback.started(i, slot)
            if slot.active and recorder.wants(slot.episode):
                slot.recording = recorder.start(run.task.name, slot.episode, slot.trial if run.trials > 1 else None)
            slot.trajectory = trajectories.start(slot.episode) if slot.active else None
        return {
            "episodes": [s.episode for s in slots],
            "trials": [s.trial for s in slots],
            "record": [s.recording is not None for s in slots],
        }

    def assign(mask: np.ndarray) -> tuple[dict[str, Any], dict[str, Any]]:
        """Begin the slots in ``mask`` and reset them now, together (the first reset builds the simulators)."""
        options = begin(mask)
        if not mask.all():
            options["reset_mask"] = mask
        seeds = [seed_of(s.episode) for s in slots]
        return _call(venv.reset, seed=seeds, options=options)

    def restart(mask: np.ndarray) -> None:
        """Begin the slots in ``mask`` and start their resets in the background; the others keep stepping."""
        options = begin(mask)
        for i in np.flatnonzero(mask).tolist():
            resets[i] = _call(venv.reset_one, i, seed_of(slots[i].episode), options)

    def landed() -> bool:
        """Take the finished background resets (first observations; a failed reset ends its episode). True if any."""
        done = [i for i, future in resets.items() if future.done()]
        for i in done:
            result = _call(resets.pop(i).result)
            again = collect(*venv.reset_landed(i, result), np.arange(n) == i)
            if again.any():
                restart(again)
        return bool(done)

    def finish(i: int, summary: dict[str, Any] | None, error: str | None = None) -> bool:
        """Record slot ``i``'s trial; True: the slot must be reset (next trial, next episode, or idle)."""
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
            start_digest=summary.get("start_digest"),
            clipped=summary.get("clipped"),
        )
        slot.finished.append((record, slot.trajectory))
        slot.trajectory = None
        if error is None and slot.trial + 1 < run.trials:
            slot.next_trial = True
            return True
        for done, trajectory in slot.finished:  # an episode is reported whole (an error ends it early)
            check = caller.take_check()
            on_episode(done if check is None else replace(done, policy_check=check))
            trajectories.finish(run.task.name, done, trajectory)
        slot.finished = []
        slot.episode = IDLE
        return True

    def collect(obs: dict[str, Any], infos: dict[str, Any], which: np.ndarray) -> np.ndarray:
        """Take frames of the slots in ``which``, record finished episodes; return slots needing a reset.

        ``which`` is the stepped slots after a step (held ones did not move), and the reset slots after a
        partial reset (the others' observations did not change, and must not be recorded twice).
        """
        ended = _mask(infos, "episode_end")
        frames = _mask(infos, "frame")
        needs_reset = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(which).tolist():
            slot = slots[i]
            if not slot.active:
                continue
            if ended is None and slot.trajectory is None and slot.recording is None:
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

    def answer(rows: np.ndarray, raw: Any, exc: BaseException | None) -> None:
        """A finished call: queue each row's chunk (``replan_steps`` actions of it)."""
        waiting[rows] = False
        first = slots[int(rows[0])].episode
        if exc is not None:
            raise PolicyError(_where(run, first, f"policy raised {type(exc).__name__}: {exc}"),
                              failure={"type": type(exc).__name__, "message": str(exc), "task": run.task.name,
                                       "episode": first},
                              traceback_text="".join(traceback.format_exception(exc))) from exc
        chunk = _validate(raw, rows, run, slots)
        for k, i in enumerate(rows.tolist()):
            queues[i].extend(chunk[k, : run.replan_steps])

    try:
        everyone = np.ones(n, dtype=bool)
        obs, infos = assign(everyone)
        needs_reset = collect(obs, infos, everyone)
        actions = np.zeros((n, run.action_dim), dtype=np.float32)
        observe_all = run.every_frame or trajectories.enabled
        active = np.zeros(n, dtype=bool)
        changed = True
        while True:
            if needs_reset.any():
                restart(needs_reset)
                needs_reset[:] = False
                changed = True
            if resets and landed():
                changed = True
            if changed:  # slots change episodes (or go idle) only above
                active = np.fromiter((s.active for s in slots), dtype=bool, count=n)
                active[list(resets)] = False
                changed = False
            if not active.any() and not resets:
                return
            if run.stop is not None and run.stop.is_set():
                raise Cancelled(f"task {run.task.name!r} cancelled")
            caller.collect(answer)
            ready = active & np.fromiter(map(bool, queues), dtype=bool, count=n)
            dry = active & ~ready & ~waiting
            now = time.perf_counter()
            dry_since[dry & np.isnan(dry_since)] = now
            spread = RUN_DRY_FIRST and caller.concurrency > 1 and worth_spreading(
                caller.call_s.value, caller.wave_s.value, -(-int(active.sum()) // width), run.replan_steps)
            if spread and ready.sum() > width:
                ready = run_dry_first(ready, queues, width)
            if dry.any() and caller.slots_free(caller.concurrency if spread else 1):
                rows = np.flatnonzero(dry)
                next_dry = min((len(queues[i]) for i in np.flatnonzero(ready)), default=None)
                if not ready.any() and not caller.busy:  # nothing can step meanwhile: no thread hop
                    dry_since[rows] = np.nan
                    caller.call(rows, _sub_batch(obs, rows, slots, feedback, run, seed_of), _descriptions(run, rows),
                                answer)
                    continue
                waited = now - float(dry_since[rows].min())
                if spread or should_call(next_dry, caller.step_s.value, caller.budget_s, waited):
                    waiting[rows] = True
                    dry_since[rows] = np.nan
                    caller.submit(rows, _sub_batch(obs, rows, slots, feedback, run, seed_of),
                                  _descriptions(run, rows))
            if not ready.any():
                caller.collect(answer, block=True, also=list(resets.values()))
                continue
            stepping = np.flatnonzero(ready)
            for i in stepping:
                actions[i] = queues[i].popleft()
            observe = ready if observe_all else ready & ~np.fromiter(map(bool, queues), dtype=bool, count=n)
            started = time.perf_counter()
            obs, rewards, _, _, infos = _call(venv.step_within, env_action(actions, observe, hold=~ready),
                                              run.step_timeout_s, timeout=run.step_timeout_s)
            took, stepped = time.perf_counter() - started, len(stepping)
            caller.step_s.add(took)
            caller.wave_s.add(took / -(-stepped // width))
            on_steps(stepped)
            feedback.stepped(rewards, infos, ready)
            if trajectories.enabled:
                reported = _mask(infos, "success")
                for i in stepping:
                    slot = slots[i]
                    if slot.trajectory is not None:
                        success = bool(infos["success"][i]) if reported is not None and reported[i] else False
                        slot.trajectory.act(actions[i], float(rewards[i]), success)
            needs_reset = collect(obs, infos, ready)
    except WorkerFailure as failure:
        caller.close()
        settle(resets)
        if STOP_REQUESTED.is_set():  # Ctrl-C / SIGTERM stopped the workers too: the driver's own stop (its
            time.sleep(STOP_GRACE_S)  # exception) lands here, before episodes are recorded as failures
        culprits = venv.failed_slots([i for i, s in enumerate(slots) if s.active], failure.hung)
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
        caller.close()
        settle(resets)
        for slot in slots:
            if slot.recording is not None:
                slot.recording.abort()
                slot.recording = None
        raise
    finally:
        caller.close()


def settle(resets: dict[int, Future], timeout: float = 30.0) -> None:
    """Wait (bounded) for background resets still running, so none touches an env being closed."""
    if resets:
        wait(list(resets.values()), timeout=timeout)


def run_dry_first(ready: np.ndarray, queues: Sequence[deque[np.ndarray]], width: int) -> np.ndarray:
    """The ``width`` ready rows with the fewest queued actions (ties: lower slot), to step now; the rest wait.

    Why: stepping every ready row together keeps envs in phase, so they all run dry at once and nothing
    steps while their calls are in flight. Running a few envs' chunks out first sends them to the policy
    while the others still step, and the phases stay apart. A held env's simulated time stands still, so
    no outcome changes; only when calls may overlap is it worth it (one call at a time would serve
    the rows one by one).
    """
    rows = np.flatnonzero(ready)
    order = sorted(rows.tolist(), key=lambda i: (len(queues[i]), i))
    chosen = np.zeros_like(ready)
    chosen[order[:width]] = True
    return chosen


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
    """Call a vector env method (``lerobench.envs.vector``); turn a dead or hung worker into ``WorkerFailure``.

    ``timeout`` only names the limit in the message: ``step_within`` enforces it.
    """
    try:
        return method(*args, **kwargs)
    except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
        raise WorkerFailure(f"a simulator worker died ({type(exc).__name__})") from exc
    except multiprocessing.TimeoutError as exc:
        raise WorkerFailure(f"a simulator step took longer than --episode-timeout {timeout} s",
                            hung=True) from exc


def _descriptions(run: TaskRun, rows: np.ndarray) -> list[str]:
    return [run.task.description] * len(rows)


def _sub_batch(obs: dict[str, Any], rows: np.ndarray, slots: list[_Slot], feedback: _PolicyFeedback, run: TaskRun,
               seed_of: Callable[[int], int]) -> dict[str, Any]:
    """The observation batch of ``rows`` only (copied: the vector env's buffers change while the policy runs)."""
    batch = _take(obs, rows)
    batch["slot"] = rows.astype(np.int64)
    batch["task"] = [run.task.name] * len(rows)
    batch["episode"] = np.array([slots[i].episode for i in rows], dtype=np.int64)
    batch["episode_seed"] = np.array([seed_of(slots[i].episode) for i in rows], dtype=np.int64)
    batch["call"] = np.array([slots[i].calls for i in rows], dtype=np.int64)
    for i in rows:
        slots[i].calls += 1
    feedback.fill(batch, rows, slots)
    batch["active"] = np.ones(len(rows), dtype=bool)
    return batch


def _take(tree: Any, rows: np.ndarray) -> Any:
    if isinstance(tree, dict):
        return {k: _take(v, rows) for k, v in tree.items()}
    return np.asarray(tree)[rows]


def _where(run: TaskRun, episode: int, message: str) -> str:
    return f"suite {run.suite!r}, task {run.task.name!r}, episode {episode}: {message}"


def _validate(raw: Any, rows: np.ndarray, run: TaskRun, slots: list[_Slot]) -> np.ndarray:
    """Check the policy output's shape and values for the call's ``rows``; return it as a (B, T, A) float32 chunk."""
    n = len(rows)
    first = slots[int(rows[0])].episode
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
    bad = ~np.isfinite(actions).all(axis=(1, 2))
    if bad.any():
        i = int(rows[np.flatnonzero(bad)[0]])
        raise PolicyError(_where(run, slots[i].episode, "action contains NaN or infinity"))
    return actions
