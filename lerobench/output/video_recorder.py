"""Connects the rollout's per-episode frames to the video encoder and names the files."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from lerobench.core.records import EpisodeRecord




class EpisodeRecording:
    """One episode's video: frames go to the encoder as they arrive, the name is fixed at the end."""

    def __init__(self, handle: Any, output: Path, task: str, episode: int, trial: int | None = None,
                 every: int = 1):
        self._handle = handle
        self._output = output
        self._task = task
        self._stem = video_stem(episode, trial)
        self._every = every
        self._seen = 0

    def add(self, frame: np.ndarray) -> None:
        """Hand every ``every``-th frame (0, k, 2k... of the episode) to the encoder; it copies.

        The rollout gives one frame per step; the env rendered only these (``EnvSpec.video_every``).
        """
        if self._seen % self._every == 0:
            self._handle.add(frame)
        self._seen += 1

    def finish(self, success: bool) -> str:
        """Name the file by outcome and let the encoder finish it in the background."""
        relative = Path("videos") / self._task / f"{self._stem}_{'success' if success else 'failure'}.mp4"
        self._handle.finish(self._output / relative)
        return relative.as_posix()

    def abort(self) -> None:
        """Drop the partial video (the episode did not finish normally)."""
        self._handle.abort()


class TaskVideos:
    """Records the first ``count`` episodes of one task from ``camera`` (a null recorder when count is 0).

    ``fps`` is the files' frame rate and ``every`` the steps per frame (``RunPlan.video_fps``, ``video_every``).
    """

    def __init__(self, encoder: Any, output: Path, count: int, camera: str | None, fps: float, task: str,
                 every: int = 1):
        self.camera = camera if count > 0 else None
        self._encoder = encoder
        self._output = output
        self._count = count
        self._fps = fps
        self._task = task
        self.every = every

    def wants(self, episode: int) -> bool:
        """Only the first ``count`` episodes of the task are recorded."""
        return self.camera is not None and episode < self._count

    def start(self, task: str, episode: int, trial: int | None = None) -> EpisodeRecording:
        """Open the episode's (with ``--trials`` > 1: the trial's) stream in a temp file under ``videos/<task>/``."""
        folder = self._output / "videos" / task
        folder.mkdir(parents=True, exist_ok=True)
        handle = self._encoder.start(folder / f"{video_stem(episode, trial)}.mp4", self._fps)
        return EpisodeRecording(handle, self._output, task, episode, trial, self.every)


def video_stem(episode: int, trial: int | None) -> str:
    """``episode_<i>``, or ``episode_<i>_trial_<k>`` when a run has several trials per episode (one file each)."""
    return f"episode_{episode}" if trial is None else f"episode_{episode}_trial_{trial}"


PARTIAL_GLOB = "videos/*/.*.partial.mp4"
"""Videos being encoded (``VideoHandle.partial``); renamed to their final name when the episode's video is done."""


def remove_partial_videos(output: Path) -> int:
    """Delete the partial videos under ``output`` (call only when nothing is encoding there); return how many.

    A process killed mid-episode (SIGKILL, the OOM killer, a terminated worker) cannot delete its own.
    """
    removed = 0
    for path in output.glob(PARTIAL_GLOB):
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    return removed


def with_videos_on_disk(output: Path, records: Iterable[EpisodeRecord]) -> list[EpisodeRecord]:
    """The records of episodes whose every named video is on disk, in order (for ``--resume``).

    A worker sends an episode's line when the episode ends and encodes its video after: a run stopped in
    between has the line but not the video. Resume drops such an episode so it runs again (same seed, same
    outcome) and its video is recorded, instead of keeping a line that names a file that does not exist.
    Stale partial files are deleted here too.
    """
    records = list(records)
    remove_partial_videos(output)
    lost = {(r.task, r.episode) for r in records if r.video and not (output / r.video).is_file()}
    return [r for r in records if (r.task, r.episode) not in lost]
