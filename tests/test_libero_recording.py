"""``--record`` on LIBERO writes LIBERO's own demo files: read back with h5py the way LIBERO's and robomimic's
loaders read them, rebuilt with LIBERO's own env class from the file's attributes, and replayed from each demo's
first state to the recorded outcome (real LIBERO, privileged expert episodes that succeed and fail)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim
pytest.importorskip("libero.libero")
h5py = pytest.importorskip("h5py")

runner = CliRunner()
SUITE, TASK = "libero_object", 0
OBS_KEYS = {"agentview_rgb", "eye_in_hand_rgb", "gripper_states", "joint_states", "ee_pos", "ee_ori", "ee_states"}
DEMO_KEYS = {"actions", "states", "robot_states", "rewards", "dones", "obs"}


def _record(out, *args):
    result = runner.invoke(app, ["eval", "--suite", SUITE, "--tasks", str(TASK), "--videos", "0", "--record", "all",
                                 "--output", str(out), *args])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    (path,) = (out / "recordings").glob("*_demo.hdf5")
    assert path.name == f"{lines[0]['task']}_demo.hdf5"
    return path, lines


def _demos(data):
    """The demos in the order robomimic's SequenceDataset takes them: ``demo_<i>`` sorted by i."""
    return [data[name] for name in sorted(data.keys(), key=lambda name: int(name[5:]))]


def _libero_env(data, **overrides):
    from libero.libero.envs import OffScreenRenderEnv

    kwargs = json.loads(data.attrs["env_args"])["env_kwargs"]
    return OffScreenRenderEnv(**{**kwargs, **overrides})


def test_recordings_open_under_liberos_keys_and_replay_to_the_recorded_outcome(libero_demos):
    run, lines = libero_demos  # conftest: libero_object task 0, a success and a failure, 32x32, --record all
    (path,) = (run / "recordings").glob("*_demo.hdf5")
    assert path.name == f"{lines[0]['task']}_demo.hdf5"
    with h5py.File(path, "r") as f:
        data = f["data"]
        env_args = json.loads(data.attrs["env_args"])
        problem = json.loads(data.attrs["problem_info"])
        assert env_args["type"] == 1 and env_args["problem_name"] == problem["problem_name"] == data.attrs["env_name"]
        assert f"(:language {problem['language_instruction']})" in data.attrs["bddl_file_content"].lower()
        assert data.attrs["bddl_file_name"] == env_args["env_kwargs"]["bddl_file_name"] == env_args["bddl_file"]
        assert "(:goal" in data.attrs["bddl_file_content"]
        assert data.attrs["macros_image_convention"] == "opengl" and data.attrs["lerobench_image_rotation"] == "180"
        demos = _demos(data)
        assert int(data.attrs["num_demos"]) == len(demos) == 2
        assert int(data.attrs["total"]) == sum(int(d.attrs["num_samples"]) for d in demos)
        env = _libero_env(data, has_offscreen_renderer=False, use_camera_obs=False)
        try:
            for demo, line in zip(demos, lines, strict=True):
                steps = int(demo.attrs["num_samples"])
                assert set(demo.keys()) == DEMO_KEYS and set(demo["obs"].keys()) == OBS_KEYS
                assert steps == line["steps"] and bool(demo.attrs["success"]) == line["success"]
                assert demo.attrs["episode"] == line["episode"] and demo.attrs["seed"] == line["seed"]
                assert demo["obs/agentview_rgb"].shape == demo["obs/eye_in_hand_rgb"].shape == (steps, 32, 32, 3)
                assert demo["obs/agentview_rgb"].dtype == np.uint8
                assert demo["actions"].shape == (steps, 7) and demo["robot_states"].shape == (steps, 9)
                assert demo["obs/gripper_states"].shape == (steps, 2) and demo["obs/joint_states"].shape == (steps, 7)
                states = demo["states"][()]
                np.testing.assert_array_equal(demo.attrs["init_state"], states[0])
                ee = demo["obs/ee_states"][()]
                np.testing.assert_array_equal(ee, np.hstack([demo["obs/ee_pos"][()], demo["obs/ee_ori"][()]]))
                np.testing.assert_array_equal(demo["robot_states"][:, :5],
                                              np.hstack([demo["obs/gripper_states"][()], demo["obs/ee_pos"][()]]))
                assert list(demo["dones"][()]) == [0] * (steps - 1) + [1]
                assert list(demo["rewards"][()]) == [0] * (steps - 1) + [int(line["success"])]
                # LIBERO's replay: its own env, reset, the first state, then the actions
                env.reset()
                env.set_init_state(states[0])
                np.testing.assert_array_equal(env.sim.get_state().flatten(), states[0])
                ends = [env.step(action)[2] for action in demo["actions"][()]]
                assert ends == [False] * (steps - 1) + [line["success"]]
        finally:
            env.close()


@pytest.mark.usefixtures("published_rendering")
def test_recorded_images_are_liberos_own_renders_turned_as_the_protocol_turns_them(tmp_path):
    path, lines = _record(tmp_path / "run", "--episodes", "1", "--max-steps", "2", "--record-size", "48")
    with h5py.File(path, "r") as f:
        data = f["data"]
        (demo,) = _demos(data)
        env = _libero_env(data)
        try:
            env.reset()
            obs = env.set_init_state(demo["states"][0])
            for key, camera in (("agentview_rgb", "agentview_image"), ("eye_in_hand_rgb", "robot0_eye_in_hand_image")):
                recorded, own = demo["obs"][key][0], obs[camera]
                assert recorded.shape == own.shape == (48, 48, 3)
                # The same up to a few pixels: the run rendered after a physics step, whose body poses are those
                # before its integration; LIBERO's set_init_state recomputes them from the state (mj_forward).
                assert np.mean(recorded == own[::-1, ::-1]) > 0.99, key
                assert np.abs(recorded.astype(int) - own[::-1, ::-1]).mean() < 0.1, key
                assert np.mean(recorded == own) < 0.5 and np.mean(recorded == own[::-1]) < 0.5, key
        finally:
            env.close()
