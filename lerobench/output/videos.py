"""Episode videos encoded to H.264 MP4 off the rollout loop, with bounded memory and atomic files."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from concurrent.futures import Future
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from lerobench.errors import RunError
from lerobench.output.background import put_while_alive

_STOP = object()
_X264 = {"crf": "23", "preset": "veryfast"}  # small files, cheap enough to keep up with a rollout


class VideoHandle:
    """One episode's video, fed from one thread; its frames go through one worker's queue, in order."""

    def __init__(self, worker: _Worker, path: Path, fps: float) -> None:
        self.path = path
        self.partial = path.with_name(f".{path.stem}.partial.mp4")
        # A Fraction time base makes the file report exactly ``fps`` (20, 80, 12.5, 30000/1001 ...).
        self.rate = Fraction(fps).limit_denominator(1001)
        self.future: Future[Path | None] = Future()
        self._worker = worker
        self._shape: tuple[int, ...] | None = None
        self._ended = False
        self._container: Any = None
        self._stream: Any = None
        self._frames = 0

    def add(self, frame: np.ndarray) -> None:
        """Copy ``frame`` (so the caller may reuse its buffer) and queue it for encoding.

        When the queue is full this blocks instead of dropping: every frame reaches the video and memory
        stays capped at ``max_pending_frames``; the rollout only slows down if encoding is the bottleneck.

        Raises:
            ValueError: The frame is not uint8 HxWx3, or its size changed mid-episode.
            RuntimeError: The handle was already finished or aborted.
            RunError: Encoding this video already failed (fail fast instead of rendering into the void).

        """
        if self._ended:
            raise RuntimeError(f"video {self.path.name} was already finished or aborted")
        if self.future.done() and (error := self.future.exception()) is not None:
            raise error
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(f"video frames must be uint8 HxWx3, got {frame.dtype} {frame.shape}")
        if self._shape is None:
            self._shape = frame.shape
        elif frame.shape != self._shape:
            raise ValueError(f"frame size changed from {self._shape} to {frame.shape} in {self.path.name}")
        self._worker.put((self, "frame", frame.copy()))

    def finish(self, final_path: Path | None = None) -> Future[Path | None]:
        """Flush the video and atomically rename it to ``final_path`` (default: the path given to start).

        The name can depend on the outcome (``episode_3_success.mp4``), hence it is accepted here. Keep it
        in the same directory so the rename stays atomic. The future resolves to the written path, to None
        if the episode had no frames, or raises :class:`RunError` if encoding failed.
        """
        if not self._ended:
            self._ended = True
            self._worker.put((self, "finish", Path(final_path) if final_path else self.path))
        return self.future

    def abort(self) -> Future[Path | None]:
        """Drop the video and delete its partial file; no-op after finish(). The future resolves to None."""
        if not self._ended:
            self._ended = True
            self._worker.put((self, "abort", None))
        return self.future

    # The methods below run only on the handle's worker thread (or after it has been joined).
    def _write(self, frame: np.ndarray) -> None:
        import av  # (here, not at the top: a run without videos never loads PyAV, 35 ms)

        h, w = frame.shape[:2]
        if self._container is None:
            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self._container = av.open(str(self.partial), "w", format="mp4")
            self._stream = self._container.add_stream("libx264", rate=self.rate, options=_X264)
            # yuv420p subsamples chroma 2x2, so H.264 needs even sizes: pad the odd edge by replication.
            self._stream.width, self._stream.height = w + w % 2, h + h % 2
            self._stream.pix_fmt = "yuv420p"
            # Parallelism comes from ``workers``; x264's own threads would fight the simulators for cores.
            self._stream.codec_context.thread_count = 1
        if h % 2 or w % 2:
            frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
        video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
        video_frame.pts, video_frame.time_base = self._frames, 1 / self.rate
        self._frames += 1
        self._container.mux(self._stream.encode(video_frame))

    def _finalize(self, final_path: Path) -> None:
        if self._container is None:
            self.future.set_result(None)
            return
        self._container.mux(self._stream.encode(None))
        self._container.close()
        self._container = None
        os.replace(self.partial, final_path)
        self.future.set_result(final_path)

    def _discard(self, error: BaseException | None = None) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.close()
            self._container = None
        with contextlib.suppress(OSError):
            self.partial.unlink(missing_ok=True)
        if self.future.done():
            return
        if error is None:
            self.future.set_result(None)
        else:
            wrapped = RunError(f"could not write video {self.path}: {error}")
            wrapped.__cause__ = error
            self.future.set_exception(wrapped)


class _Worker:
    """A thread draining one bounded queue of ``(handle, op, payload)`` items."""

    def __init__(self, maxsize: int, aborting: threading.Event) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize)
        self._aborting = aborting
        # Daemon: a hard exit must not hang on an idle encoder; partial files are hidden dotfiles.
        self.thread = threading.Thread(target=self._run, name="lerobench-video", daemon=True)
        self.thread.start()

    def put(self, item: Any) -> None:
        """Block until there is room (backpressure); a dead encoder thread raises instead."""
        put_while_alive(self.queue, item, self.thread, "video encoder")

    def _run(self) -> None:
        while (item := self.queue.get()) is not _STOP:
            handle, op, payload = item
            if handle.future.done():
                continue  # failed or discarded: drop its leftover frames
            try:
                if self._aborting.is_set() or op == "abort":
                    handle._discard()
                elif op == "frame":
                    handle._write(payload)
                else:
                    handle._finalize(payload)
            except Exception as exc:  # surfaced through the handle's future, never lost
                handle._discard(exc)


class VideoEncoder:
    """Encodes episode videos on background threads so the rollout loop never waits on x264.

    Args:
        workers: Encoder threads; each video is pinned to the least busy one.
        max_pending_frames: Frames queued across all workers before ``add`` blocks (caps memory).

    """

    def __init__(self, workers: int = 1, max_pending_frames: int = 512) -> None:
        if workers < 1 or max_pending_frames < 1:
            raise ValueError("workers and max_pending_frames must be >= 1")
        self._aborting = threading.Event()
        per_worker = max(1, max_pending_frames // workers)
        self._workers = [_Worker(per_worker, self._aborting) for _ in range(workers)]
        self._live: set[VideoHandle] = set()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = self._reported = False

    def start(self, path: Path, fps: float) -> VideoHandle:
        """Open the video of one episode; it is written to a hidden partial file until finished."""
        if self._closed:
            raise RuntimeError("VideoEncoder is closed")
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        path = Path(path)
        with self._lock:
            if any(h.path == path for h in self._live):
                raise ValueError(f"a video is already being written to {path}")
            worker = min(self._workers, key=lambda w: sum(h._worker is w for h in self._live))
            handle = VideoHandle(worker, path, fps)
            self._live.add(handle)
        handle.future.add_done_callback(lambda fut: self._done(handle, fut))
        return handle

    def _done(self, handle: VideoHandle, fut: Future[Path | None]) -> None:
        with self._lock:
            self._live.discard(handle)
            if self._error is None and fut.exception() is not None:
                self._error = fut.exception()

    def close(self, abort: bool = False) -> None:
        """Wait for every video (unfinished ones are finished at their start path), then stop the threads.

        With ``abort=True`` (e.g. on Ctrl-C) pending videos are dropped and their partial files deleted,
        so no truncated MP4 is left behind. Idempotent; a second call may upgrade to an abort.

        Raises:
            RunError: Some video failed to encode (even if its future already reported it, so a run that
                lost a video never looks clean). Raised once, and never when aborting.

        """
        if abort:
            self._aborting.set()
        if not self._closed:
            self._closed = True
            if not abort:
                with self._lock:  # workers discard finished handles concurrently
                    unfinished = list(self._live)
                for handle in unfinished:
                    handle.finish()
            for worker in self._workers:
                worker.put(_STOP)
        for worker in self._workers:
            worker.thread.join()
        for handle in list(self._live):  # never reached a worker before it stopped
            handle._discard()
        if not abort and self._error is not None and not self._reported:
            self._reported = True
            raise self._error


class NullVideoHandle:
    """Handle of :class:`NullVideoEncoder`: accepts frames and writes nothing."""

    def __init__(self) -> None:
        self.future: Future[Path | None] = Future()
        self.future.set_result(None)

    def add(self, frame: np.ndarray) -> None:
        """Ignore the frame."""

    def finish(self, final_path: Path | None = None) -> Future[Path | None]:
        """Return a resolved future: None, no file was written."""
        return self.future

    abort = finish


class NullVideoEncoder:
    """Stand-in when videos are off, so callers never branch on ``if videos:``."""

    def start(self, path: Path, fps: float) -> NullVideoHandle:
        """Return a handle that ignores frames."""
        return NullVideoHandle()

    def close(self, abort: bool = False) -> None:
        """Nothing to wait for."""
