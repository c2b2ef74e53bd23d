"""Episode bookkeeping of one task's rollout: which episode and trial each slot runs, its frames, its records.

Why apart from the state machine (``lerobench.rollout.slots``): when a slot steps or waits is scheduling; which
episode it runs, what gets recorded and when a record is reported is bookkeeping, and each is simpler
alone. The rollout tells the book when a slot begins (``begin``), what it observed (``observe``) and did
(``stepped``); the book says which slots' trials ended and reports whole episodes through ``on_episode``.

Trials of an episode are reported together: with ``trials`` > 1 a finished trial's record is held back
until the episode's last trial ends (or an error ends the episode early), so a consumer (the sink,
``--resume``) only ever sees whole episodes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from lerobench.core.records import EpisodeRecord
from lerobench.core.task_run import TaskRun
from lerobench.envs.base import NO_EPISODE, episode_seed
from lerobench.output.trajectories import Trajectories, Trajectory
from lerobench.rollout.inference import EpisodeSource
from lerobench.rollout.observation_digest import ReadDigests


class Recording(Protocol):
    """Frames of one episode on their way to a video file."""

    def add(self, frame: np.ndarray) -> None:
        """Hand one frame over (copied by the receiver)."""

    def finish(self, success: bool) -> str | None:
        """Finalize; return the video path relative to the output directory."""

    def abort(self) -> None:
        """Drop the partial video."""


class VideoCapture(Protocol):
    """Decides which episodes are recorded and opens their recordings."""

    camera: str | None

    def wants(self, episode: int) -> bool:
        """True if this episode should be recorded."""

    def start(self, task: str, episode: int, trial: int | None = None) -> Recording:
        """Open a recording for (task, episode), or for one trial of it when ``trial`` is given."""


class NoVideos:
    """Records nothing (``--videos 0``), so the rollout never branches on 'are videos on?'."""

    camera: str | None = None

    def wants(self, episode: int) -> bool:
        """Never."""
        return False

    def start(self, task: str, episode: int, trial: int | None = None) -> Recording:  # pragma: no cover
        """Unreachable: ``wants`` is always False."""
        raise AssertionError("NoVideos.start called")


class PolicyFeedback:
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

    def started(self, i: int, active: bool, trial: int) -> None:
        """Slot ``i`` begins a trial (``active``) or goes idle."""
        self.episode_start[i] = active and trial == 0
        self.trial_start[i] = active
        self.reward[i], self.success[i] = 0.0, False

    def stepped(self, rewards: np.ndarray, infos: dict[str, Any], stepped: np.ndarray) -> None:
        """The ``stepped`` rows' rewards and (reported) successes."""
        self.reward[stepped] = np.asarray(rewards, dtype=np.float32)[stepped]
        reported = info_mask(infos, "success")
        now = np.asarray(infos["success"], dtype=bool) if reported is not None else np.zeros(len(stepped), bool)
        self.success[stepped] = (now & (reported if reported is not None else False))[stepped]

    def fill(self, batch: dict[str, Any], rows: np.ndarray, trial: np.ndarray) -> None:
        """Add ``rows``' feedback (and their ``trial``) to the policy batch; the start flags are said once."""
        batch["episode_start"] = self.episode_start[rows]
        batch["trial"] = trial
        batch["trial_start"] = self.trial_start[rows]
        batch["reward"] = self.reward[rows]
        batch["success"] = self.success[rows]
        self.episode_start[rows] = False
        self.trial_start[rows] = False


class EpisodeBook:
    """Per slot: its episode, trial, policy calls, recording, trajectory and held-back trial records.

    ``on_episode`` receives each record of a whole episode; ``take_check`` (``PolicyCaller.take_check``)
    gives the policy's batch-invariance check once, stamped on the next record reported.
    """

    def __init__(self, n: int, run: TaskRun, source: EpisodeSource, on_episode: Callable[[EpisodeRecord], None],
                 recorder: VideoCapture, trajectories: Trajectories,
                 take_check: Callable[[], dict[str, Any] | None] = lambda: None):
        self.run, self.source, self.on_episode = run, source, on_episode
        self.recorder, self.trajectories, self.take_check = recorder, trajectories, take_check
        self.episode = np.full(n, NO_EPISODE, dtype=np.int64)
        self.trial = np.zeros(n, dtype=np.int64)
        self.calls = np.zeros(n, dtype=np.int64)
        """Policy calls made for each slot's trial so far (the ``call`` key of the observation batch)."""
        self.delays: list[list[int]] = [[] for _ in range(n)]
        """``--delay-steps measured``: the delay applied to each call of the slot's trial (record ``call_delays``)."""
        self.next_trial = np.zeros(n, dtype=bool)
        """Set when a trial ended and the episode has trials left: the next ``begin`` restarts the same episode."""
        self.started = np.zeros(n)
        self.recording: list[Recording | None] = [None] * n
        self.trajectory: list[Trajectory | None] = [None] * n
        self.finished: list[list[tuple[EpisodeRecord, Trajectory | None]]] = [[] for _ in range(n)]
        """Each slot's finished trials, held back until the episode is over."""
        self.feedback = PolicyFeedback(n)
        self.digests = ReadDigests(n)
        """Each slot's chain over the observations its policy read this trial (``rollout.observation_digest``)."""
        self.seed_of = functools.lru_cache(maxsize=None)(
            lambda e: episode_seed(run.seed, run.task.index, max(e, 0), run.seeds))

    def running(self) -> list[int]:
        """Slots with an episode (stepping, waiting or resetting for it)."""
        return np.flatnonzero(self.episode != NO_EPISODE).tolist()

    def begin(self, rows: np.ndarray) -> dict[str, Any]:
        """Move ``rows`` to their next trial, next episode, or idleness; return the reset options of every slot."""
        for i in rows.tolist():
            if self.next_trial[i]:
                self.trial[i] += 1
            else:
                episode = self.source.next()
                self.episode[i] = NO_EPISODE if episode is None else episode
                self.trial[i] = 0
                self.finished[i] = []
            self.next_trial[i] = False
            self.calls[i] = 0
            self.delays[i] = []
            self.digests.begin(i)
            self.started[i] = time.perf_counter()
            active = self.episode[i] != NO_EPISODE
            self.feedback.started(i, active, int(self.trial[i]))
            episode = int(self.episode[i])
            if active and self.recorder.wants(episode):
                trial = int(self.trial[i]) if self.run.trials > 1 else None
                self.recording[i] = self.recorder.start(self.run.task.name, episode, trial)
            self.trajectory[i] = self.trajectories.start(episode) if active else None
        return {"episodes": self.episode.tolist(), "trials": self.trial.tolist(),
                "record": [r is not None for r in self.recording]}

    def seeds(self) -> list[int]:
        """Every slot's episode seed (an idle slot's is episode 0's: it is never used)."""
        return [self.seed_of(e) for e in self.episode.tolist()]

    def observe(self, obs: dict[str, Any], infos: dict[str, Any], rows: np.ndarray) -> np.ndarray:
        """Take ``rows``' frames and record the trials that ended; return the mask of slots whose trial ended.

        ``rows`` is the stepped slots after a step (held ones did not move), and the reset slot after a
        reset (the others' observations did not change, and must not be recorded twice).
        """
        ended, frames = info_mask(infos, "episode_end"), info_mask(infos, "frame")
        rows_made = info_mask(infos, "dataset")
        done = np.zeros(len(self.episode), dtype=bool)
        for i in rows.tolist():
            recording, trajectory = self.recording[i], self.trajectory[i]
            if self.episode[i] == NO_EPISODE or (ended is None and trajectory is None and recording is None):
                continue
            if trajectory is not None:
                row = None if rows_made is None or not rows_made[i] else \
                    {k: v[i] for k, v in infos["dataset"].items() if not k.startswith("_")}
                trajectory.observe(obs, i, row)
            if recording is not None:
                frame = _frame_for(obs, infos, frames, self.recorder.camera, i)
                if frame is not None:
                    recording.add(frame)
            if ended is not None and ended[i]:
                end = infos["episode_end"]
                self.end(i, {k: _item(end[k][i]) for k in end if not k.startswith("_")})
                done[i] = True
        return done

    def stepped(self, rows: np.ndarray, actions: np.ndarray, rewards: np.ndarray, infos: dict[str, Any]) -> None:
        """The ``rows`` (mask) took ``actions``: the policy's feedback, and each trajectory's step."""
        self.feedback.stepped(rewards, infos, rows)
        if not self.trajectories.enabled:
            return
        reported, progressed = info_mask(infos, "success"), info_mask(infos, "progress")
        for i in np.flatnonzero(rows).tolist():
            trajectory = self.trajectory[i]
            if trajectory is not None:
                success = bool(infos["success"][i]) if reported is not None and reported[i] else False
                progress = float(infos["progress"][i]) if progressed is not None and progressed[i] else None
                trajectory.act(actions[i], float(rewards[i]), success, progress)

    def batch(self, obs: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
        """The policy's observation batch of ``rows`` only (copied: the env's buffers change while it runs)."""
        batch = _take(obs, rows)
        batch["slot"] = rows.astype(np.int64)
        batch["task"] = [self.run.task.name] * len(rows)
        batch["episode"] = self.episode[rows]
        batch["episode_seed"] = np.array([self.seed_of(e) for e in self.episode[rows].tolist()], dtype=np.int64)
        batch["call"] = self.calls[rows]
        self.calls[rows] += 1
        self.feedback.fill(batch, rows, self.trial[rows])
        batch["active"] = np.ones(len(rows), dtype=bool)
        self.digests.read(batch, rows)
        return batch

    def note_delay(self, i: int, steps: int) -> None:
        """Slot ``i``'s last call covered ``steps`` control steps (``--delay-steps measured``)."""
        self.delays[i].append(steps)

    def end(self, i: int, summary: dict[str, Any] | None, error: str | None = None) -> None:
        """Record slot ``i``'s trial; report the episode once its last trial (or an error) ended it."""
        summary = summary or {}
        error = error if error is not None else summary.get("error")
        success = bool(summary.get("success", False)) and error is None
        record = self._record(i, summary, error, success, self._close_recording(i, success, error))
        self.finished[i].append((record, self.trajectory[i]))
        self.trajectory[i] = None
        if error is None and self.trial[i] + 1 < self.run.trials:
            self.next_trial[i] = True
            return
        for done, trajectory in self.finished[i]:  # an episode is reported whole (an error ends it early)
            check = self.take_check()
            self.on_episode(done if check is None else replace(done, policy_check=check))
            self.trajectories.finish(self.run.task.name, done, trajectory)
        self.finished[i] = []
        self.episode[i] = NO_EPISODE

    def fail(self, rows: list[int], error: str) -> None:
        """Record the episodes of ``rows`` as ended by ``error`` (a worker failure: their env is lost)."""
        for i in rows:
            self.end(i, None, error=error)

    def drop_running(self) -> None:
        """Forget every running episode without a record (bystanders of a failure are rerun from trial 0)."""
        self.abort_recordings()
        for i in self.running():
            self.episode[i] = NO_EPISODE
            self.finished[i] = []

    def abort_recordings(self) -> None:
        """Drop every partial video (the run stops)."""
        for i, recording in enumerate(self.recording):
            if recording is not None:
                recording.abort()
                self.recording[i] = None

    def _close_recording(self, i: int, success: bool, error: str | None) -> str | None:
        recording, self.recording[i] = self.recording[i], None
        if recording is None:
            return None
        if error is not None:
            recording.abort()  # a failed episode leaves no video
            return None
        return recording.finish(success)

    def _record(self, i: int, summary: dict[str, Any], error: str | None, success: bool,
                video: str | None) -> EpisodeRecord:
        episode = int(self.episode[i])
        return EpisodeRecord(
            task=self.run.task.name,
            episode=episode,
            trial=int(self.trial[i]),
            seed=self.seed_of(episode),
            init_state=episode % self.run.n_init_states,
            success=success,
            success_at_end=bool(summary.get("success_at_end", False)) and error is None,
            steps=int(summary.get("steps", 0)),
            return_=float(summary.get("return", 0.0)),
            elapsed_s=round(time.perf_counter() - float(self.started[i]), 4),
            error=error,
            video=video,
            renders=int(summary.get("renders", 0)),
            max_reward=_finite(summary.get("max_reward")),
            start_digest=summary.get("start_digest"),
            clipped=summary.get("clipped"),
            progress=_finite(summary.get("progress")) if error is None else None,
            max_progress=_finite(summary.get("max_progress")) if error is None else None,
            call_delays=list(self.delays[i]) if self.run.delay.measured else None,
            **self.digests.summary(i),
        )


def info_mask(infos: dict[str, Any], key: str) -> np.ndarray | None:
    """Which rows' ``infos`` carry ``key`` (gymnasium's ``_key`` mask); None when none does."""
    mask = infos.get(f"_{key}")
    return None if mask is None or not np.any(mask) else np.asarray(mask, dtype=bool)


def _item(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


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


def _take(tree: Any, rows: np.ndarray) -> Any:
    if isinstance(tree, dict):
        return {k: _take(v, rows) for k, v in tree.items()}
    return np.asarray(tree)[rows]
