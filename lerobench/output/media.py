"""``RunMedia``: what a run records beside its episode lines (videos, ``--record`` trajectories, ``--rerun`` files).

Why apart from the sink: the sink writes records and results; making recorders is another job, and the
executors that step envs in this process (inline, vector) are handed this factory by the runner
(``execution/base.RunIO``). Episode workers (processes, Ray) encode their own videos (docs/scaling.md).
"""

from __future__ import annotations

from lerobench.output.rerun import RrdTaskVideos, RrdTrajectories, RrdWriter
from lerobench.output.trajectories import TrajectoryFilter, TrajectorySink
from lerobench.output.video_recorder import TaskVideos
from lerobench.output.videos import NullVideoEncoder, VideoEncoder
from lerobench.plan.planner import RunPlan
from lerobench.policies.base import ObservationNeeds
from lerobench.suite.config import TaskSpec


class RunMedia:
    """The driver's video encoder and Rerun writer, and the recorders made from them per task."""

    def __init__(self, plan: RunPlan, put_trajectory: TrajectorySink):
        """``put_trajectory``: the sink's writer of ``--record`` rollouts (``EpisodeSink.put_trajectory``)."""
        self.plan = plan
        self._put_trajectory = put_trajectory
        self._file_attrs: dict[str, dict[str, str]] = {}
        self.encoder: VideoEncoder | NullVideoEncoder = NullVideoEncoder()
        self.rrd: RrdWriter | None = None
        """``--rerun``: the writer of the recorded episodes' ``.rrd`` files (lerobench.output.rerun)."""

    def open(self) -> None:
        """Start the encoder (videos requested and a camera to film) and the Rerun writer (``--rerun``)."""
        if self.plan.settings.videos > 0 and self.plan.suite.video_camera:
            self.encoder = VideoEncoder()
        if self.plan.settings.rerun:
            self.rrd = RrdWriter(self.plan.output)

    def close(self, ok: bool) -> None:
        """Finish the videos and recordings (``ok``), or delete the unfinished ones."""
        try:
            self.encoder.close(abort=not ok)
        finally:
            if self.rrd is not None:
                self.rrd.close(abort=not ok)

    def recorder(self, task: TaskSpec) -> TaskVideos | RrdTaskVideos:
        """Which of ``task``'s episodes get videos, encoded by the driver's encoder (and, ``--rerun``, .rrd files)."""
        s = self.plan.settings
        videos = TaskVideos(self.encoder, s.output, s.videos, s.suite.video_camera, self.plan.video_fps, task.name,
                            self.plan.video_every)
        return videos if self.rrd is None else RrdTaskVideos(videos, self.rrd)

    def trajectories(self) -> TrajectoryFilter | RrdTrajectories:
        """``--record`` HDF5 rollouts, written by the sink's writer (and, ``--rerun``, the recordings' steps)."""
        saved = TrajectoryFilter(self.plan.settings.record, self._put_trajectory,
                                 self.dataset_attrs if self.plan.dataset_size else None)
        videos = self.plan.settings.videos
        return saved if self.rrd is None else RrdTrajectories(saved, self.rrd, lambda episode: episode < videos)

    def dataset_attrs(self, task: str) -> dict[str, str]:
        """The backend's attributes of ``task``'s dataset file (LIBERO's ``data`` group), read once per task."""
        if task not in self._file_attrs:
            from lerobench.suite.registry import get_backend

            spec = self.plan.env_spec(next(t for t in self.plan.suite.tasks if t.name == task), ObservationNeeds(),
                                      None)
            self._file_attrs[task] = get_backend(self.plan.suite.backend).dataset_attrs(spec)
        return self._file_attrs[task]
