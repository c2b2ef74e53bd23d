from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from lerobench.errors import RunError
from lerobench.output.videos import NullVideoEncoder, VideoEncoder


def _frames(n: int, h: int = 32, w: int = 32):
    for i in range(n):
        yield np.full((h, w, 3), (i * 5) % 256, dtype=np.uint8)


def _probe(path: Path) -> tuple[int, Fraction, int, int, list[float]]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        means = [float(f.to_ndarray(format="rgb24").mean()) for f in container.decode(stream)]
        return len(means), stream.average_rate, stream.width, stream.height, means


@pytest.mark.parametrize(
    ("fps", "size", "expected_size"), [(20, (32, 48), (48, 32)), (80, (33, 47), (48, 34))]
)
def test_mp4_roundtrip_has_frames_fps_and_even_size(tmp_path, fps, size, expected_size):
    encoder = VideoEncoder()
    handle = encoder.start(tmp_path / "episode_0.mp4", fps=fps)
    for frame in _frames(12, *size):
        handle.add(frame)
    final = handle.finish(tmp_path / "episode_0_success.mp4").result(timeout=10)
    encoder.close()
    assert final == tmp_path / "episode_0_success.mp4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episode_0_success.mp4"]
    count, rate, width, height, _ = _probe(final)
    assert (count, rate, (width, height)) == (12, Fraction(fps), expected_size)


def test_non_integer_fps_is_exact(tmp_path):
    encoder = VideoEncoder()
    handle = encoder.start(tmp_path / "v.mp4", fps=12.5)
    for frame in _frames(3):
        handle.add(frame)
    path = handle.finish().result(timeout=10)
    encoder.close()
    assert _probe(path)[1] == Fraction(25, 2)


def test_backpressure_tiny_queue_keeps_every_frame_and_copies_buffer(tmp_path):
    encoder = VideoEncoder(max_pending_frames=2)
    handle = encoder.start(tmp_path / "v.mp4", fps=20)
    buffer = np.zeros((32, 32, 3), dtype=np.uint8)
    for i in range(50):
        buffer[:] = (i * 5) % 256  # the caller reuses one buffer; the encoder must have copied it
        handle.add(buffer)
        assert encoder._workers[0].queue.qsize() <= 2
    path = handle.finish().result(timeout=10)
    encoder.close()
    count, _, _, _, means = _probe(path)
    assert count == 50
    assert np.allclose(means, [(i * 5) % 256 for i in range(50)], atol=4)


def test_abort_removes_partial_file(tmp_path):
    encoder = VideoEncoder()
    handle = encoder.start(tmp_path / "v.mp4", fps=20)
    for frame in _frames(5):
        handle.add(frame)
    assert handle.abort().result(timeout=10) is None
    encoder.close()
    assert list(tmp_path.iterdir()) == []


def test_close_abort_drops_pending_videos(tmp_path):
    encoder = VideoEncoder(workers=2)
    for name in ("a.mp4", "b.mp4"):
        handle = encoder.start(tmp_path / name, fps=20)
        for frame in _frames(5):
            handle.add(frame)
    encoder.close(abort=True)
    encoder.close(abort=True)  # idempotent
    assert list(tmp_path.iterdir()) == []


def test_close_waits_for_pending_and_unfinished_videos(tmp_path):
    encoder = VideoEncoder()
    finished = encoder.start(tmp_path / "a.mp4", fps=20)
    unfinished = encoder.start(tmp_path / "b.mp4", fps=20)
    for frame in _frames(20):
        finished.add(frame)
        unfinished.add(frame)
    future = finished.finish()
    encoder.close()
    encoder.close()
    assert future.done() and unfinished.future.done()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4", "b.mp4"]
    assert _probe(tmp_path / "b.mp4")[0] == 20
    with pytest.raises(RuntimeError):
        encoder.start(tmp_path / "c.mp4", fps=20)


def test_unwritable_directory_surfaces_error(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # a file where the directory should be: unwritable even as root
    encoder = VideoEncoder()
    handle = encoder.start(blocker / "v.mp4", fps=20)
    handle.add(next(_frames(1)))
    with pytest.raises(RunError, match="could not write video"):
        handle.finish().result(timeout=10)
    with pytest.raises(RunError):
        encoder.close()
    encoder.close()  # reported once; a second close is quiet
    assert [p.name for p in tmp_path.iterdir()] == ["not_a_dir"]


def test_bad_frames_are_rejected_in_the_caller(tmp_path):
    encoder = VideoEncoder()
    handle = encoder.start(tmp_path / "v.mp4", fps=20)
    with pytest.raises(ValueError):
        handle.add(np.zeros((8, 8, 3), dtype=np.float32))
    handle.add(np.zeros((8, 8, 3), dtype=np.uint8))
    with pytest.raises(ValueError):
        handle.add(np.zeros((8, 10, 3), dtype=np.uint8))
    encoder.close()


def test_null_encoder_writes_nothing(tmp_path):
    encoder = NullVideoEncoder()
    handle = encoder.start(tmp_path / "v.mp4", fps=20)
    handle.add(np.zeros((8, 8, 3), dtype=np.uint8))
    assert handle.finish(tmp_path / "x.mp4").result() is None
    assert handle.abort().result() is None
    encoder.close(abort=True)
    assert list(tmp_path.iterdir()) == []
