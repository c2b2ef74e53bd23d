"""Videos render only the frames they encode (``--video-fps``, ``--video-size``); the policy's images never change."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator

os.environ.setdefault("MUJOCO_GL", "egl")

from fixture_policies import ImageChunkPolicy  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from lerobench.cli import app  # noqa: E402
from lerobench.core.task_run import TaskRun  # noqa: E402
from lerobench.envs.base import EnvSpec  # noqa: E402
from lerobench.envs.vector import make_vector_env  # noqa: E402
from lerobench.output.video_recorder import EpisodeRecording  # noqa: E402
from lerobench.policies.base import PolicyContext  # noqa: E402
from lerobench.rollout.loop import run_episodes  # noqa: E402
from lerobench.suite.registry import get_backend, load_suite  # noqa: E402

pytest.importorskip("metaworld")


def _video(path: Path) -> tuple[int, Fraction, tuple[int, int]]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(video=0))
        return frames, stream.average_rate, (stream.height, stream.width)


def _eval(out: Path, *extra: str) -> tuple[dict, tuple[int, Fraction, tuple[int, int]], dict]:
    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--tasks", "reach-v3", "--policy", "random",
                                      "--episodes", "1", "--videos", "1", "--max-steps", "16", "--output", str(out),
                                      *extra])
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    config = json.loads((out / "results.json").read_text())["config"]
    return line, _video(out / line["video"]), config


def test_default_videos_render_only_the_frames_they_encode(tmp_path):
    """80 Hz Meta-World at the default 10 fps: steps 0, 8, 16 of a 16-step episode, 256x256 (not 17 at 480x480)."""
    line, (frames, fps, size), config = _eval(tmp_path / "default")
    assert line["steps"] == 16 and (frames, fps, size) == (3, Fraction(10), (256, 256))
    assert line["renders"] == 3  # a state-only policy: only the video camera, only at video steps
    assert config["video_fps"] == 10 and config["video_size"] == [256, 256]
    line, (frames, fps, size), config = _eval(tmp_path / "every", "--video-fps", "80", "--video-size", "0")
    assert (frames, fps, size, line["renders"]) == (17, Fraction(80), (480, 480), 17)  # the old default, on request


def test_bad_video_settings_are_refused(tmp_path):
    for flag, value in (("--video-fps", "0"), ("--video-size", "8"), ("--video-size", "-1")):
        result = CliRunner().invoke(app, ["eval", "--suite", "smoke", flag, value, "--output", str(tmp_path / "o")])
        assert result.exit_code == 2 and flag in result.output, result.output


class _Frames:
    """An encoder handle that keeps what it is given (the real ``EpisodeRecording`` decides what that is)."""

    def __init__(self):
        self.frames: list[np.ndarray] = []

    def add(self, frame):
        self.frames.append(np.array(frame, copy=True))

    def finish(self, final_path=None):
        return None

    abort = finish


class _Recorder:
    def __init__(self, camera, every):
        self.camera, self.every, self.videos = camera, every, {}

    def wants(self, episode):
        return True

    def start(self, task, episode, trial=None):
        handle = self.videos.setdefault(episode, _Frames())
        return EpisodeRecording(handle, Path("."), task, episode, trial, every=self.every)


def _rollout(every: int, videos: bool, max_steps: int = 20):
    suite = load_suite("smoke")
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), max_steps=max_steps, image_size=(48, 48))
    task = suite.tasks[0]
    context = PolicyContext(suite=suite.name, backend=suite.backend, tasks=(task,), action_dim=backend.action_dim,
                            state_dim=backend.state_dim, cameras=protocol.cameras, image_size=(48, 48))
    policy = ImageChunkPolicy(context, chunk=6, every_frame=False, cameras=protocol.cameras[:2])  # corner2 first
    recorder = _Recorder(suite.video_camera, every) if videos else None
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=task, protocol=protocol, seed=3,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=policy.observation_needs.cameras,
                   record_camera=suite.video_camera if videos else None, video_every=every)
    run = TaskRun(suite=suite.name, task=task, seed=3, action_dim=backend.action_dim, replan_steps=6)
    records = []
    venv = make_vector_env(spec, 1)
    try:
        run_episodes(venv, policy, run, [0], records.append, recorder=recorder)
    finally:
        venv.close()
    return records[0], policy, recorder


def test_a_policy_cameras_video_every_kth_step_keeps_the_policys_images_and_the_per_step_frames():
    """The video camera is a policy camera here: its images at read steps are untouched, the video keeps 0, k, 2k."""
    plain, plain_policy, _ = _rollout(1, videos=False)
    every, _, all_frames = _rollout(1, videos=True)
    sparse, sparse_policy, kept = _rollout(4, videos=True)
    assert sparse_policy.digests == plain_policy.digests and plain_policy.digests  # what the policy saw
    assert (sparse.steps, sparse.return_) == (plain.steps, plain.return_) == (every.steps, every.return_)
    frames = all_frames.videos[0].frames
    assert len(frames) == plain.steps + 1 == 21
    np.testing.assert_array_equal(np.stack(kept.videos[0].frames), np.stack(frames[::4]))  # fresh, not stale
    # corner2 at the 4 read steps (0, 6, 12, 18) plus the video steps among the others (4, 8, 16, 20); the
    # second camera at the read steps only. Every-step videos rendered corner2 at all 21 steps.
    assert sparse.renders == 4 + 4 + 4 and every.renders == 21 + 4


def test_a_given_video_size_scales_a_suites_own_size_even_when_it_is_256(tmp_path):
    """A new user's ``--video-size 256`` on ALOHA was silently 480x640: 256 was the flag's default, so a given 256
    could not be told from none. Not given, a suite's own size holds (ALOHA 480x640, PushT 384x384); given, it
    scales it, 256 included; elsewhere the default is 256 (Meta-World's 480x480 images)."""
    from lerobench.plan.planner import RunSettings, make_plan
    from lerobench.suite.registry import load_suite

    def size(suite, **given):
        settings = RunSettings(suite=load_suite(suite), policy="zero", output=tmp_path / suite, **given)
        return make_plan(settings).video_size

    assert size("aloha_transfer_cube") == (480, 640)
    assert size("aloha_transfer_cube", video_size=256) == (192, 256)
    assert size("aloha_transfer_cube", video_size=320) == (240, 320)
    assert size("pusht") == (384, 384) and size("pusht", video_size=256) == (256, 256)
    assert size("pusht", video_size=384) == size("pusht", video_size=512) == (384, 384)  # never its 96x96 images
    assert size("smoke") == (256, 256) and size("smoke", video_size=0) is None
