"""``--rerun``: one Rerun recording (``.rrd``) per recorded episode, written off the rollout loop, renamed when whole.

An episode's recording is fed from two seams the rollout already has: the video recorder (the video camera's
frames, as they arrive) and the trajectory recorder (state, the policy's camera images, actions, rewards and
per-step success, handed over when the episode ends). Both go through one background thread; the rollout only
copies a frame into a bounded queue. The file is written to a hidden ``.<name>.partial.rrd`` and renamed when the
episode ends normally, so an interrupted run never leaves a recording that looks whole; an episode that ends in
an error has its partial file deleted, like its video.

Timeline ``step``: step 0 is the first observation, step t the observation after t actions. At step t the
recording holds that observation (``state``, ``camera/<name>`` for the policy's cameras), the action chosen from it
(``action``) and the reward and success of the step that led to it (``reward``, ``success``; from step 1).

Every image is logged at the step it was rendered, never again under a later step: the policy's cameras at every
step (``--rerun`` renders them at every step), the video camera at the video's frames only (steps 0, k, 2k... with
k = ``RunPlan.video_every``, the steps the env renders it at; the MP4 holds the same frames). Between two video
frames the viewer shows the last one, at its own step on the timeline. Logging the frame the rollout hands on at
every step (the env repeats its last render between video steps) put a stale image under up to k-1 later steps.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lerobench.errors import RunError
from lerobench.output.background import put_while_alive
from lerobench.output.trajectories import Trajectory, TrajectoryFilter
from lerobench.output.video_recorder import TaskVideos, video_stem

FOLDER = "rerun"
PARTIAL_GLOB = f"{FOLDER}/*/.*.partial.rrd"
JPEG_QUALITY = 85
"""Images are stored as JPEG: a raw 480x480 frame per step would make a 500-step episode 350 MB."""
_STOP = object()


def rrd_path(task: str, episode: int, trial: int | None) -> str:
    """``rerun/<task>/episode_<i>.rrd`` (``episode_<i>_trial_<k>.rrd`` with several trials), run-relative."""
    return f"{FOLDER}/{task}/{video_stem(episode, trial)}.rrd"


class RrdEpisode:
    """One episode's recording; its methods only queue work for the writer thread."""

    def __init__(self, writer: RrdWriter, path: Path, camera: str | None, name: str, every: int = 1):
        self.path = path
        self.partial = path.with_name(f".{path.stem}.partial.rrd")
        self._writer = writer
        self._camera = camera or "camera"
        self._name = name
        self._stream: Any = None
        self._every = every
        self._seen = 0

    def add(self, frame: np.ndarray) -> None:
        """Take the video camera's frame of the next step; queue it (a copy: the env reuses its buffer) if rendered.

        The rollout hands one frame per step; only steps 0, k, 2k... (``every``) were rendered at that step, the
        others repeat the last render and are dropped here, as the MP4 drops them.
        """
        step, self._seen = self._seen, self._seen + 1
        if step % self._every == 0:
            self._writer.put((self, "frame", (step, np.array(frame, copy=True))))

    def complete(self, trajectory: Trajectory, summary: dict[str, Any]) -> None:
        """Queue the episode's per-step data; the file is finished and renamed after it."""
        self._writer.put((self, "end", (trajectory, summary)))

    def abort(self) -> None:
        """Drop the recording and its partial file."""
        self._writer.put((self, "abort", None))

    # -- on the writer thread --------------------------------------------------------------------------------
    def _open(self) -> Any:
        if self._stream is None:
            import rerun as rr

            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self._stream = rr.RecordingStream("lerobench", recording_id=self._name)
            self._stream.save(str(self.partial))
        return self._stream

    def _frame(self, step: int, frame: np.ndarray) -> None:
        import rerun as rr

        stream = self._open()
        stream.set_time("step", sequence=step)
        stream.log(f"video/{self._camera}", rr.Image(frame).compress(jpeg_quality=JPEG_QUALITY))

    def _end(self, trajectory: Trajectory, summary: dict[str, Any]) -> None:
        import rerun as rr

        stream = self._open()
        stream.log("episode", rr.TextDocument("\n".join(f"{k}: {v}" for k, v in summary.items())), static=True)
        for t, state in enumerate(trajectory.states):
            stream.set_time("step", sequence=t)
            stream.log("state", rr.Scalars(np.asarray(state, dtype=np.float64).ravel()))
            for cam, frames in trajectory.images.items():
                stream.log(f"camera/{cam}", rr.Image(frames[t]).compress(jpeg_quality=JPEG_QUALITY))
            if t < len(trajectory.actions):
                stream.log("action", rr.Scalars(np.asarray(trajectory.actions[t], dtype=np.float64).ravel()))
            if t > 0:
                stream.log("reward", rr.Scalars(trajectory.rewards[t - 1]))
                stream.log("success", rr.Scalars(float(trajectory.successes[t - 1])))
        self._close()
        os.replace(self.partial, self.path)

    def _close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.flush()
            stream.disconnect()

    def _discard(self) -> None:
        with contextlib.suppress(Exception):
            self._close()
        with contextlib.suppress(OSError):
            self.partial.unlink(missing_ok=True)


class RrdWriter:
    """The thread that writes every recording of a run, with a bounded queue (backpressure, capped memory)."""

    def __init__(self, output: Path, max_pending: int = 256):
        self.output = output
        self._queue: queue.Queue[Any] = queue.Queue(max_pending)
        self._parked: dict[tuple[str, int, int], RrdEpisode] = {}
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="lerobench-rerun", daemon=True)
        self._thread.start()

    def put(self, item: Any) -> None:
        """Queue work; blocks while the queue is full (a dead writer thread raises instead)."""
        put_while_alive(self._queue, item, self._thread, "Rerun writer")

    def start(self, task: str, episode: int, trial: int | None, camera: str | None, every: int = 1) -> RrdEpisode:
        """Open the recording of (task, episode, trial); its video camera is rendered every ``every`` steps."""
        path = self.output / rrd_path(task, episode, trial)
        return RrdEpisode(self, path, camera, f"{task}/{path.stem}", every)

    def park(self, task: str, episode: int, trial: int, recording: RrdEpisode) -> None:
        """Hold a recording whose frames are done until its trajectory arrives (``take``)."""
        with self._lock:
            self._parked[(task, episode, trial)] = recording

    def take(self, task: str, episode: int, trial: int) -> RrdEpisode | None:
        """The parked recording of (task, episode, trial), if it was recorded."""
        with self._lock:
            return self._parked.pop((task, episode, trial), None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            recording, op, payload = item
            try:
                if op == "frame":
                    recording._frame(*payload)
                elif op == "end":
                    recording._end(*payload)
                else:
                    recording._discard()
            except Exception as exc:  # reported by close(); the episode's partial file is removed
                recording._discard()
                if self._error is None:
                    self._error = RunError(f"could not write Rerun recording {recording.path}: {exc}")

    def close(self, abort: bool = False) -> None:
        """Finish queued work (or, aborting, drop unfinished recordings); raise the first write error once."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            left, self._parked = list(self._parked.values()), {}
        for recording in left:  # frames done but no trajectory came (an aborted run): never a half file
            self.put((recording, "abort", None))
        self.put(_STOP)
        self._thread.join()
        for path in self.output.glob(PARTIAL_GLOB) if abort else ():
            with contextlib.suppress(OSError):
                path.unlink()
        if self._error is not None and not abort:
            raise self._error


class _TeeRecording:
    """The video recording of an episode plus its Rerun recording: every frame goes to both."""

    def __init__(self, video: Any, rrd: RrdEpisode, writer: RrdWriter, key: tuple[str, int, int]):
        self._video, self._rrd, self._writer, self._key = video, rrd, writer, key

    def add(self, frame: np.ndarray) -> None:
        self._video.add(frame)
        self._rrd.add(frame)

    def finish(self, success: bool) -> str | None:
        self._writer.park(*self._key, self._rrd)  # completed by RrdTrajectories.finish with the step data
        return self._video.finish(success)

    def abort(self) -> None:
        self._video.abort()
        self._rrd.abort()


class RrdTaskVideos:
    """A task's video recorder that also opens a Rerun recording for each recorded episode (same episodes)."""

    def __init__(self, videos: TaskVideos, writer: RrdWriter):
        self._videos = videos
        self._writer = writer
        self.camera = videos.camera

    def wants(self, episode: int) -> bool:
        """The episodes ``--videos`` records."""
        return self._videos.wants(episode)

    def start(self, task: str, episode: int, trial: int | None = None) -> _TeeRecording:
        """Open the episode's video and its recording."""
        rrd = self._writer.start(task, episode, trial, self.camera, self._videos.every)
        return _TeeRecording(self._videos.start(task, episode, trial), rrd, self._writer, (task, episode, trial or 0))


class RrdTrajectories:
    """The run's ``--record`` recorder, also completing the Rerun recordings with each episode's step data."""

    def __init__(self, inner: TrajectoryFilter, writer: RrdWriter, wants: Callable[[int], bool]):
        self._inner = inner
        self._writer = writer
        self._wants = wants
        self.mode = inner.mode

    @property
    def enabled(self) -> bool:
        """Always: recorded episodes need their steps (the rollout then also renders the policy's cameras)."""
        return True

    def start(self, episode: int | None = None) -> Trajectory | None:
        """A buffer for episodes that are recorded (or saved by ``--record``), else None (nothing buffered)."""
        wanted = self._inner.enabled or episode is None or self._wants(episode)
        return Trajectory() if wanted else None

    def finish(self, task: str, record: Any, trajectory: Trajectory | None) -> None:
        """Save for ``--record`` as before; complete (or drop, after an error) the episode's recording."""
        self._inner.finish(task, record, trajectory)
        recording = self._writer.take(task, record.episode, record.trial)
        if recording is None:
            return
        if trajectory is None or record.error is not None:
            recording.abort()
        else:
            recording.complete(trajectory, {"task": task, "episode": record.episode, "trial": record.trial,
                                            "seed": record.seed, "success": record.success, "steps": record.steps,
                                            "return": round(record.return_, 6)})
