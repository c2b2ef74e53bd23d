"""``--record`` on LIBERO writes LIBERO's own demo files: read back with h5py the way LIBERO's and robomimic's
loaders read them (robomimic's ``SequenceDataset``, its filter keys too), rebuilt with LIBERO's own env class from the
file's attributes, and replayed from each demo's first state to the recorded outcome (real LIBERO, privileged expert
episodes that succeed and fail); images as LIBERO's files hold them, the policy's view one stated turn away."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.sim
pytest.importorskip("libero.libero")
h5py = pytest.importorskip("h5py")

SUITE, TASK = "libero_object", 0
OBS_KEYS = {"agentview_rgb", "eye_in_hand_rgb", "gripper_states", "joint_states", "ee_pos", "ee_ori", "ee_states"}
DEMO_KEYS = {"actions", "states", "robot_states", "rewards", "dones", "obs"}
CAMERAS = {"agentview_rgb": "agentview", "eye_in_hand_rgb": "robot0_eye_in_hand"}


def _record(out, *args):
    """``lerobench eval --record all`` in a process of its own (robosuite imported afresh, as a user's run does);
    returns the demo file, the episode lines and what the run printed."""
    result = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--suite", SUITE, "--tasks", str(TASK),
                             "--videos", "0", "--record", "all", "--output", str(out), *args],
                            capture_output=True, text=True, timeout=600)
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    (path,) = (out / "recordings").glob("*_demo.hdf5")
    assert path.name == f"{lines[0]['task']}_demo.hdf5"
    return path, lines, printed


def _demos(data):
    """The demos as a loader iterating ``range(num_demos)`` takes them: ``demo_0 ... demo_{n-1}``, none missing."""
    n = int(data.attrs["num_demos"])
    assert sorted(data.keys()) == sorted(f"demo_{i}" for i in range(n))
    return [data[f"demo_{i}"] for i in range(n)]


def _line(lines, demo):
    """The ``episodes.jsonl`` line of a demo: by the episode and trial it keeps as attributes."""
    (line,) = [x for x in lines if (x["episode"], x["trial"]) == (demo.attrs["episode"], demo.attrs["trial"])]
    return line


def _libero_env(data, **overrides):
    from libero.libero.envs import OffScreenRenderEnv

    from lerobench.envs.libero import resolve_bddl

    kwargs = json.loads(data.attrs["env_args"])["env_kwargs"]
    return OffScreenRenderEnv(**{**kwargs, "bddl_file_name": resolve_bddl(kwargs["bddl_file_name"]), **overrides})


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
        # LIBERO's published files' form, relative to LIBERO's source tree: nothing of this machine's paths
        bddl = data.attrs["bddl_file_name"]
        assert bddl == f"libero/libero/bddl_files/{SUITE}/{lines[0]['task']}.bddl"
        assert bddl == env_args["env_kwargs"]["bddl_file_name"] == env_args["bddl_file"]
        from lerobench.envs.libero import resolve_bddl

        with open(resolve_bddl(bddl), encoding="utf-8") as source:
            assert source.read() == data.attrs["bddl_file_content"]
        assert "(:goal" in data.attrs["bddl_file_content"]
        assert data.attrs["macros_image_convention"] == "opengl"
        assert data.attrs["lerobench_policy_image_rotation"] == "180"
        demos = _demos(data)
        assert len(demos) == 2
        assert int(data.attrs["total"]) == sum(int(d.attrs["num_samples"]) for d in demos)
        env = _libero_env(data, has_offscreen_renderer=False, use_camera_obs=False)
        try:
            for demo in demos:
                line = _line(lines, demo)
                steps = int(demo.attrs["num_samples"])
                assert set(demo.keys()) == DEMO_KEYS and set(demo["obs"].keys()) == OBS_KEYS
                assert steps == line["steps"] and bool(demo.attrs["success"]) == line["success"]
                assert demo.attrs["seed"] == line["seed"]
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


def test_robomimic_loads_the_recording_and_its_filter_keys_select_the_successes_and_the_failures(libero_demos):
    """As LIBERO's ``lifelong/datasets.py`` loads its files: robomimic's ``SequenceDataset`` over LIBERO's default
    observation keys, without next observations (LIBERO's files have none), low-dim keys cached."""
    pytest.importorskip("robomimic")
    import robomimic.utils.obs_utils as obs_utils
    from robomimic.utils.dataset import SequenceDataset

    run, lines = libero_demos
    (path,) = (run / "recordings").glob("*_demo.hdf5")
    rgb, low_dim = ["agentview_rgb", "eye_in_hand_rgb"], ["gripper_states", "joint_states"]
    obs_utils.initialize_obs_utils_with_obs_specs({"obs": {"rgb": rgb, "low_dim": low_dim}})

    def load(key):
        return SequenceDataset(hdf5_path=str(path), obs_keys=rgb + low_dim, dataset_keys=["actions"],
                               load_next_obs=False, frame_stack=1, seq_length=1, pad_frame_stack=True,
                               pad_seq_length=True, get_pad_mask=False, goal_mode=None, hdf5_cache_mode="low_dim",
                               hdf5_use_swmr=False, hdf5_normalize_obs=False, filter_by_attribute=key)

    with h5py.File(path, "r") as f:
        by_outcome = {outcome: [name for name, demo in f["data"].items() if bool(demo.attrs["success"]) == outcome]
                      for outcome in (True, False)}
        rows = {name: int(demo.attrs["num_samples"]) for name, demo in f["data"].items()}
        first = {name: (f[f"data/{name}/obs/agentview_rgb"][0], f[f"data/{name}/actions"][0]) for name in rows}
    assert [len(names) for names in by_outcome.values()] == [1, 1]  # the fixture: one success, one failure
    everything = load(None)
    assert sorted(everything.demos) == sorted(rows) and len(everything) == sum(rows.values())
    for key, outcome in (("successful", True), ("failed", False)):
        dataset = load(key)
        assert dataset.demos == by_outcome[outcome], key
        assert len(dataset) == sum(rows[name] for name in by_outcome[outcome])
        (name,) = dataset.demos
        assert rows[name] == [x["steps"] for x in lines if x["success"] == outcome][0]
        item = dataset[0]  # the demo's first row, as robomimic hands it to a training loop
        np.testing.assert_array_equal(item["obs"]["agentview_rgb"][0], first[name][0])
        np.testing.assert_array_equal(item["actions"][0], first[name][1])
        dataset.close_and_delete_hdf5_handle()
    everything.close_and_delete_hdf5_handle()


POLICY = """
import numpy as np
from lerobench.policies.base import ObservationNeeds


class Seen:
    \"\"\"Zero actions; saves every image it is given (the policy's view) as <episode>_<call>_<camera>.npy.\"\"\"

    def __init__(self, context):
        self.context = context
        self.observation_needs = ObservationNeeds(cameras=tuple(context.cameras))

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        for camera, images in observation["images"].items():
            for i, image in enumerate(images):
                episode, call = int(observation["episode"][i]), int(observation["call"][i])
                np.save(f"{FOLDER}/{episode}_{call}_{camera}.npy", image)
        return np.zeros((len(images), self.context.action_dim), dtype=np.float32)


def make(context):
    return Seen(context)
"""


@pytest.mark.usefixtures("published_rendering")
def test_recorded_images_are_liberos_own_renders_and_the_policys_view_is_them_turned_as_the_file_says(tmp_path):
    """LIBERO's ``create_dataset.py`` stores robosuite's ``agentview_image`` as its env returns it (``opengl``, upside
    down); lerobench's file holds the same pixels, and the image the policy was given at each recorded step is the
    stored one turned by ``lerobench_policy_image_rotation``. Shard 1/2 of 4 episodes: episodes 1 and 3 only, which
    are still ``demo_0`` and ``demo_1``. Two episodes: the vector executor, whose driver imports robosuite only to
    write the file's attributes."""
    seen = tmp_path / "seen"
    seen.mkdir()
    policy = tmp_path / "seen_policy.py"
    policy.write_text(POLICY.replace("{FOLDER}", str(seen)))
    path, lines, printed = _record(tmp_path / "run", "--policy", f"{policy}:make", "--episodes", "4", "--shard",
                                   "1/2", "--max-steps", "2", "--record-size", "256")
    assert sorted(x["episode"] for x in lines) == [1, 3] and not any(x["success"] for x in lines)
    # the driver writes the file's attributes (LIBERO's bddl_utils imports robosuite there): no warnings mid-run
    assert "robosuite" not in printed and "macro" not in printed, printed
    with h5py.File(path, "r") as f:
        data = f["data"]
        assert data.attrs["macros_image_convention"] == "opengl"
        assert data.attrs["lerobench_policy_image_rotation"] == "180"
        demos = _demos(data)
        assert sorted(int(d.attrs["episode"]) for d in demos) == [1, 3]
        assert list(f["mask/failed"][()]) == [b"demo_0", b"demo_1"] and len(f["mask/successful"]) == 0
        for demo in demos:
            episode = int(demo.attrs["episode"])
            for key, camera in CAMERAS.items():
                stored = demo["obs"][key][()]
                assert stored.shape == (2, 256, 256, 3), key
                for step in range(2):  # single actions: the policy was given every recorded observation
                    given = np.load(seen / f"{episode}_{step}_{camera}.npy")
                    np.testing.assert_array_equal(stored[step][::-1, ::-1], given, err_msg=f"{key} {step}")
        (demo, *_) = demos
        env = _libero_env(data)
        try:
            env.reset()
            obs = env.set_init_state(demo["states"][0])
            for key, camera in CAMERAS.items():
                stored, own = demo["obs"][key][0], obs[f"{camera}_image"]
                assert stored.shape == own.shape == (256, 256, 3)
                # The same up to a few pixels (measured: 99.9% of agentview's, 96-98% of the wrist camera's, on
                # the moving hand): the run's images are robosuite's samples on the step's first physics substep (the
                # policy's, as in LIBERO's own datasets), its states the step's end, from which set_init_state renders.
                # Turned either way, 1-3% of the pixels agree.
                assert np.mean(stored == own) > 0.95, key
                assert np.abs(stored.astype(int) - own).mean() < 0.2, key
                assert np.mean(stored == own[::-1, ::-1]) < 0.5 and np.mean(stored == own[::-1]) < 0.5, key
        finally:
            env.close()
