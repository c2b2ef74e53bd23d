"""Rendering only the observations a policy reads: same pixels, same outcomes, fewer frames.

Reference frames in ``tests/data/render_reference.npz`` were rendered by the code before this feature
(every step rendered, LIBERO rendered during settle steps); see ``tests/data/make_render_reference.py``.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator

os.environ.setdefault("MUJOCO_GL", "egl")

from fixture_policies import ImageChunkPolicy  # noqa: E402

from lerobench.core.task_run import TaskRun  # noqa: E402
from lerobench.envs.base import READ, READ_ALWAYS, UNREAD, EnvSpec, env_action  # noqa: E402
from lerobench.envs.vector import make_vector_env  # noqa: E402
from lerobench.policies.base import ObservationNeeds, PolicyContext  # noqa: E402
from lerobench.rollout.loop import run_episodes  # noqa: E402
from lerobench.suite.registry import get_backend, load_suite  # noqa: E402

DATA = Path(__file__).parent / "data"
_spec = importlib.util.spec_from_file_location("make_render_reference", DATA / "make_render_reference.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

SIMULATORS = {"metaworld": "metaworld", "libero": "libero.libero"}


def _needs(case: str) -> None:
    pytest.importorskip(SIMULATORS[case])


class CountingRenders:
    """Counts every frame the simulator's renderer draws, wherever it is called from (LIBERO: robosuite)."""

    def __init__(self, env):
        sim = env._simulator()
        self.calls = 0
        target = sim._live().sim if hasattr(sim, "_live") else sim
        original = target.render

        def render(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        target.render = render


@pytest.mark.parametrize("case", ["metaworld", "libero"])
def test_read_frames_are_the_earlier_codes_frames_and_nothing_else_renders(case):
    """Observe only at the stored steps: their images are today's bytes, and only they were rendered."""
    _needs(case)
    stored = np.load(DATA / "render_reference.npz")
    env, action_dim = reference.make_env(case, max_steps=reference.STEPS)
    cameras = env.spec_.cameras
    env._simulator()  # build it first, so the counter sees the settle steps of the reset below
    counter = CountingRenders(env)
    obs, _ = env.reset(options={"episodes": [reference.EPISODE]})
    assert counter.calls == len(cameras), "settle steps and the reset itself must render nothing"
    seen = {0: obs["images"]}
    for k, action in enumerate(reference.reference_actions(action_dim), start=1):
        # READ_ALWAYS: the stored steps include the last one, which a rollout's READ would leave unrendered
        obs, _, _, truncated, info = env.step(env_action(action, READ_ALWAYS if k in reference.KEPT else UNREAD))
        if k in reference.KEPT:
            seen[k] = obs["images"]
    env.close()
    for cam in cameras:
        got = np.stack([seen[k][cam] for k in reference.KEPT])
        np.testing.assert_array_equal(got, stored[f"{case}/{cam}"], err_msg=f"{case} {cam}")
    assert truncated and info["episode_end"]["renders"] == len(reference.KEPT) * len(cameras)
    assert counter.calls == len(reference.KEPT) * len(cameras)


@pytest.mark.parametrize("wanted", ["READ", "READ_ALWAYS", "plain array"])
def test_after_the_step_limit_only_a_reader_who_asks_for_it_gets_a_rendered_observation(wanted):
    """No policy reads the observation after an episode's last step: asked with ``READ``, nothing renders there
    (the observation keeps the last images); ``READ_ALWAYS`` and a plain gymnasium action render it (real
    Meta-World, 3 steps, every observation asked for)."""
    _needs("metaworld")
    env, action_dim = reference.make_env("metaworld", max_steps=3)
    cameras = env.spec_.cameras
    obs, _ = env.reset(options={"episodes": [reference.EPISODE]})
    seen = [obs["images"]]
    for k, action in enumerate(reference.reference_actions(action_dim)[:3], start=1):
        last = k == 3
        flag = READ_ALWAYS if wanted == "READ_ALWAYS" else READ
        obs, _, _, truncated, info = env.step(action if wanted == "plain array" else env_action(action, flag))
        seen.append(obs["images"])
    env.close()
    fresh = wanted != "READ"
    assert last and truncated and info["episode_end"]["renders"] == len(cameras) * (4 if fresh else 3)
    for cam in cameras:
        assert not np.array_equal(seen[1][cam], seen[2][cam])  # the arm moves: a rendered image differs
        assert np.array_equal(seen[3][cam], seen[2][cam]) != fresh


class FrameCollector:
    """A real ``VideoCapture``: keeps every episode's frames in memory instead of encoding them."""

    def __init__(self, camera):
        self.camera = camera
        self.videos: dict[int, list[np.ndarray]] = {}

    def wants(self, episode):
        return True

    def start(self, task, episode, trial=None):
        frames = self.videos.setdefault(episode, [])

        class Recording:
            def add(self, frame):
                frames.append(np.array(frame, copy=True))

            def finish(self, success):
                return f"{episode}.mp4"

            def abort(self):
                return None

        return Recording()


def _rollout(case, every_frame, batch, episodes, max_steps, chunk=10, videos=False):
    suite = load_suite("smoke" if case == "metaworld" else "smoke_libero")
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), max_steps=max_steps, image_size=(64, 64))
    task = suite.tasks[0]
    context = PolicyContext(suite=suite.name, backend=suite.backend, tasks=(task,), action_dim=backend.action_dim,
                            state_dim=backend.state_dim, cameras=protocol.cameras, image_size=(64, 64))
    policy = ImageChunkPolicy(context, chunk=chunk, every_frame=every_frame, cameras=protocol.cameras[:2])
    recorder = FrameCollector(suite.video_camera) if videos else None
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=task, protocol=protocol, seed=3,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=policy.observation_needs.cameras,
                   record_camera=recorder.camera if recorder else None,
                   backend_options={**suite.backend_options, "render_quality": "draft"})  # compared with itself
    run = TaskRun(suite=suite.name, task=task, seed=3, action_dim=backend.action_dim, replan_steps=chunk,
                  every_frame=every_frame)
    records = []
    venv = make_vector_env(spec, batch)
    try:
        run_episodes(venv, policy, run, episodes, records.append, recorder=recorder)
    finally:
        venv.close()
    return sorted(records, key=lambda r: r.episode), policy, recorder


@pytest.mark.slow
@pytest.mark.parametrize("case, batch, episodes, max_steps", [("metaworld", 2, [0, 1, 2], 25),
                                                                ("libero", 1, [0], 20)])
def test_chunk_10_renders_once_per_chunk_with_outcomes_of_per_step_rendering(case, batch, episodes, max_steps):
    _needs(case)
    every, every_policy, _ = _rollout(case, True, batch, episodes, max_steps)
    chunked, policy, _ = _rollout(case, False, batch, episodes, max_steps)
    cameras = len(policy.observation_needs.cameras)
    assert cameras == 2
    assert policy.digests == every_policy.digests and policy.digests  # the same images read at the same calls
    for a, b in zip(every, chunked, strict=True):
        assert (a.episode, a.success, a.steps, a.return_, a.max_reward) == (b.episode, b.success, b.steps,
                                                                           b.return_, b.max_reward)
        assert a.error is None and a.renders == cameras * (a.steps + 1)
        # the first observation, then one per chunk; none after a last step at the step limit (no one reads it)
        unread_end = b.steps == max_steps and b.steps % 10 == 0
        assert b.renders <= cameras * (math.ceil(b.steps / 10) + 1), b
        assert b.renders == cameras * (b.steps // 10 + 1 - unread_end)


@pytest.mark.parametrize("case", ["metaworld", "libero"])
def test_videos_get_every_frame_and_the_same_frames_as_per_step_rendering(case):
    _needs(case)
    every, every_policy, every_videos = _rollout(case, True, 1, [0], 12, videos=True)
    chunked, policy, videos = _rollout(case, False, 1, [0], 12, videos=True)
    (a,), (b,) = every, chunked
    assert policy.digests == every_policy.digests and policy.digests
    assert a.return_ == b.return_ and len(videos.videos[0]) == b.steps + 1 == 13
    np.testing.assert_array_equal(np.stack(videos.videos[0]), np.stack(every_videos.videos[0]))
    # the video camera (a policy camera: corner2 / agentview) every step, the second camera at the 2 read steps
    assert b.renders == 13 + 2


def test_replan_steps_declared_by_the_policy():
    from lerobench.errors import ConfigError

    assert ObservationNeeds().executed_steps(5) == 5
    assert ObservationNeeds(replan_steps=10).executed_steps(1) == 10
    assert ObservationNeeds(replan_steps=10).executed_steps(10) == 10
    with pytest.raises(ConfigError, match="--replan-steps 5 conflicts"):
        ObservationNeeds(replan_steps=10).executed_steps(5)
