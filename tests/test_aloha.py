"""ALOHA (gym-aloha) as a backend: LeRobot's seeds against gym-aloha's own API, the 480x640 camera (height x width,
the first camera that is not square) in observations and videos, the staged reward as progress, rendering only
when read, resets that forget."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import kill_after_lines, subprocess_env
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.envs.base import EnvSpec, LazyTaskEnv
from lerobench.suite.registry import get_backend, load_suite

pytestmark = pytest.mark.sim  # every test here drives the real gym-aloha simulator
runner = CliRunner()
SUITE = load_suite("aloha")
GYM_IDS = {"AlohaTransferCube-v0": "gym_aloha/AlohaTransferCube-v0", "AlohaInsertion-v0": "gym_aloha/AlohaInsertion-v0"}
LOOKING = f"{Path(__file__).parent / 'aloha_policies.py'}:make_looking_hold"
"""By file: the processes executor's workers load it too."""
LATE = f"{Path(__file__).parent / 'aloha_policies.py'}:make_late_expert"
MIXED = ("--max-steps", "215")
"""A step limit inside the expert's transfer-cube lengths (203-234 over seeds 0-99): of episodes 0-3 it solves some
in time and not others (asserted where used, so a changed expert fails loudly rather than testing nothing)."""


def gym_aloha(task):
    import gym_aloha  # noqa: F401  (registers the envs)
    import gymnasium as gym

    return gym.make(GYM_IDS[task], obs_type="pixels_agent_pos")


def make_env(task=0, seed=0, cameras=(), max_steps=400, privileged=False):
    backend = get_backend("aloha")
    protocol = replace(SUITE.protocol(), max_steps=max_steps)
    spec = EnvSpec(suite=SUITE.name, backend="aloha", task=SUITE.tasks[task], protocol=protocol, seed=seed,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   privileged=privileged, action_bounds=backend.action_bounds)
    return LazyTaskEnv(spec, backend)


def episodes(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def first_read_digest(obs):
    """The ``obs_digest`` of an episode whose policy read only ``obs`` (its state, then its ``top`` image)."""
    from lerobench.rollout.observation_digest import ReadDigests

    digests = ReadDigests(1)
    digests.read({"state": obs["agent_pos"].astype(np.float32)[None], "images": {"top": obs["pixels"]["top"][None]}},
                 np.array([0]))
    return digests.summary(0)["obs_digest"]


@pytest.mark.parametrize("task", [0, 1], ids=["transfer_cube", "insertion"])
def test_episode_i_starts_where_gym_alohas_reset_with_seed_s_plus_i_does(task):
    reference = gym_aloha(SUITE.tasks[task].name)
    env = make_env(task, seed=1000, cameras=("top",), privileged=True)
    for episode in (3, 0):  # out of order: a start never depends on the episode before it
        obs, _ = env.reset(options={"episodes": [episode]})
        want, _ = reference.reset(seed=1000 + episode)
        assert obs["images"]["top"].shape == (480, 640, 3)
        assert np.array_equal(obs["images"]["top"], want["pixels"]["top"])
        assert np.array_equal(obs["state"], want["agent_pos"].astype(np.float32))
        objects = reference.unwrapped._env.physics.data.qpos[16:]  # the cube, or the peg and the socket
        assert np.array_equal(obs["privileged"][16:16 + len(objects)], objects)
        for _ in range(3):
            env.step(np.ones(14, dtype=np.float32) * 0.3)
    env.close()


def test_first_observations_match_gym_aloha_at_batch_1_3_and_on_the_processes_executor(tmp_path, published_rendering):
    reference = gym_aloha("AlohaTransferCube-v0")
    want = {i: first_read_digest(reference.reset(seed=1000 + i)[0]) for i in range(3)}
    for name, extra in (("b1", ["--batch-size", "1"]), ("b3", ["--batch-size", "3", "--executor", "vector"]),
                        ("proc", ["--executor", "processes", "--workers", "2"])):
        result = runner.invoke(app, ["eval", "--suite", "aloha_transfer_cube", "--policy", LOOKING, "--seed", "1000",
                                     "--episodes", "3", "--max-steps", "1", "--videos", "0", *extra,
                                     "--output", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        seen = {e["episode"]: (e["seed"], e["obs_reads"], e["obs_digest"]) for e in episodes(tmp_path / name)}
        assert seen == {i: (1000 + i, 1, want[i]) for i in range(3)}, name


def test_a_state_only_episode_renders_nothing_and_records_the_stage_as_progress():
    env = make_env(max_steps=5)
    obs, _ = env.reset(options={"episodes": [0]})
    for _ in range(5):
        _, reward, terminated, truncated, info = env.step(obs["state"])  # hold the arms where they are
        assert info["progress"] == reward / 4
    end = info["episode_end"]
    assert truncated and not terminated and end["renders"] == 0 and end["steps"] == 5
    assert end["progress"] == 0.0 and end["max_progress"] == end["max_reward"] / 4 == 0.0  # nothing touched
    env.close()


def test_random_runs_both_tasks_end_to_end_with_480x640_videos_thumbnails_and_the_golden_check(tmp_path):
    import base64
    import io
    import re

    import av
    from matplotlib.image import imread

    result = runner.invoke(app, ["eval", "--suite", "aloha", "--policy", "random", "--episodes", "1",
                                 "--max-steps", "4", "--videos", "1", "--output", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    eps = episodes(tmp_path / "o")
    assert sorted(e["task"] for e in eps) == ["AlohaInsertion-v0", "AlohaTransferCube-v0"]
    assert all(e["steps"] == 4 and 0.0 <= e["progress"] <= e["max_progress"] <= 1.0 for e in eps)
    config = json.loads((tmp_path / "o" / "results.json").read_text())["config"]
    assert config["simulator"]["golden"]["status"] == "pass" and config["simulator"]["versions"]["gym-aloha"] == "0.1.5"
    assert config["protocol_settings"]["image_size"] == [480, 640] and config["video_size"] == [480, 640]
    for e in eps:
        with av.open(str(tmp_path / "o" / e["video"])) as container:
            frame = next(container.decode(video=0)).to_ndarray(format="rgb24")
        assert frame.shape == (480, 640, 3)  # height x width, as the camera renders it: not squashed
        first = gym_aloha(e["task"]).reset(seed=0)[0]["pixels"]["top"]
        assert np.abs(frame.astype(float) - first).mean() < 4.0  # the episode's first frame, through the codec
    report = runner.invoke(app, ["report", str(tmp_path / "o"), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    thumbnails = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", (tmp_path / "r.html").read_text())
    assert len(thumbnails) == 2 and all(imread(io.BytesIO(base64.b64decode(t))).shape[:2] == (120, 160)
                                        for t in thumbnails)  # 4:3 as the video, not squashed
    smaller = runner.invoke(app, ["eval", "--suite", "aloha_transfer_cube", "--policy", "random", "--episodes", "1",
                                  "--max-steps", "2", "--videos", "1", "--video-size", "320",
                                  "--output", str(tmp_path / "s")])
    assert smaller.exit_code == 0, smaller.output
    with av.open(str(tmp_path / "s" / episodes(tmp_path / "s")[0]["video"])) as container:
        assert next(container.decode(video=0)).to_ndarray(format="rgb24").shape == (240, 320, 3)  # scaled, same aspect


def test_resets_forget_the_episodes_before_on_both_tasks():
    result = runner.invoke(app, ["check-resets", "aloha", "--json"])
    assert result.exit_code == 0, result.output
    decoder, text, checked = json.JSONDecoder(), result.output.strip(), []
    while text:  # one indented JSON object per task
        found, end = decoder.raw_decode(text)
        checked.append(found)
        text = text[end:].strip()
    assert len(checked) == 2 and all(c["ok"] for c in checked), checked


def test_a_setting_aloha_cannot_honour_is_refused_before_the_run(tmp_path):
    light = runner.invoke(app, ["eval", "--suite", "aloha", "--policy", "random", "--perturb", "light=0.5",
                                "--output", str(tmp_path / "a")])
    assert light.exit_code == 2 and "--perturb light" in light.output and "aloha" in light.output
    assert not (tmp_path / "a").exists()
    other = runner.invoke(app, ["eval", "--suite", "aloha", "--policy", "pusht-expert",
                                "--output", str(tmp_path / "b")])
    assert other.exit_code == 2 and "only runs on pusht suites" in other.output
    libero = runner.invoke(app, ["eval", "--suite", "aloha", "--protocol", "lerobot", "--output", str(tmp_path / "c")])
    assert libero.exit_code == 2 and "has no protocol 'lerobot'" in libero.output  # LIBERO's protocol name
    shift = runner.invoke(app, ["eval", "--suite", "aloha_insertion", "--perturb", "camera_shift=0.1",
                                "--output", str(tmp_path / "d")])
    assert shift.exit_code == 2 and "cannot apply it" in shift.output
    for result in (light, other, libero, shift):
        assert len(result.output.strip().splitlines()) == 1, result.output  # one line
    assert not any((tmp_path / name).exists() for name in "abcd")  # refused before the run


def test_the_default_policy_is_the_privileged_expert_and_it_transfers_the_cube(tmp_path):
    result = runner.invoke(app, ["eval", "--suite", "aloha_transfer_cube", "--episodes", "3", "--videos", "0",
                                 "--output", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "Evaluating aloha-expert" in result.output and "privileged expert" in result.output
    eps = sorted(episodes(tmp_path / "o"), key=lambda e: e["episode"])
    assert [e["seed"] for e in eps] == [0, 1, 2]  # LeRobot's seeds
    assert all(e["success"] and e["max_progress"] == 1.0 and e["steps"] < 400 for e in eps), eps  # 100/100 measured
    assert all(e["clipped"] == 0.0 for e in eps)  # joint targets inside the action space


def test_the_expert_never_writes_the_simulator_it_reads():
    from lerobench.policies.experts.aloha import plan_action

    env = make_env(privileged=True)
    obs, _ = env.reset(options={"episodes": [0]})
    physics = env._raw._physics
    before = (physics.data.qpos.copy(), physics.data.qvel.copy(), physics.data.ctrl.copy())
    action = plan_action(50, obs["privileged"])  # mid-approach: the solve moves both arms
    assert action.shape == (14,) and not np.allclose(action, obs["state"])
    assert all(np.array_equal(a, b) for a, b in zip(before, (physics.data.qpos, physics.data.qvel,
                                                                physics.data.ctrl), strict=True))
    env.close()


def test_the_expert_puts_the_peg_in_the_socket_with_the_same_episodes_at_batch_1_and_3(tmp_path):
    runs = {}
    for name, extra in (("b1", ["--batch-size", "1", "--executor", "inline"]),
                        ("b3", ["--batch-size", "3", "--executor", "vector"])):
        result = runner.invoke(app, ["eval", "--suite", "aloha_insertion", "--seed", "40", "--episodes", "3",
                                     "--videos", "0", *extra, "--output", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert "Evaluating aloha-expert" in result.output  # the suite's default policy
        runs[name] = outcomes(tmp_path / name, "episode", "success", "steps", "obs_digest")
    assert runs["b1"] == runs["b3"]  # every observation the expert read, equal: the same actions, row by row
    assert all(success and steps < 400 for _, success, steps, _ in runs["b1"]), runs["b1"]  # 100/100 measured


def outcomes(out, *keys):
    keys = keys or ("episode", "trial", "seed", "success", "steps", "obs_digest", "start_digest", "max_progress")
    return sorted(tuple(e.get(k) for k in keys) for e in episodes(out))


def run(*args):
    return runner.invoke(app, ["eval", "--suite", "aloha_transfer_cube", "--videos", "0", *map(str, args)])


def test_trials_a_designed_versus_until_decided_record_compare_and_report_on_episodes_that_succeed_and_fail(tmp_path):
    a = run("--episodes", "2", *MIXED, "--trials", "2", "--output", tmp_path / "a")
    assert a.exit_code == 0, a.output
    per_trial = json.loads((tmp_path / "a" / "results.json").read_text())["overall"]["per_trial"]
    assert [t["successes"] for t in per_trial] == [1, 1]  # mixed, and a stateless expert does the same twice
    b = run("--policy", LATE, "--versus", tmp_path / "a", "--until", "decided", *MIXED, "--record", "all",
            "--output", tmp_path / "b")
    assert b.exit_code == 0, b.output
    late = episodes(tmp_path / "b")
    assert late and not any(e["success"] for e in late)  # 40 steps late: past the limit
    import h5py

    with h5py.File(tmp_path / "b" / "recordings" / "AlohaTransferCube-v0.h5") as f:
        group = f[f"episode_{late[0]['episode']}"]
        assert group["actions"].shape == (late[0]["steps"], 14)
        assert group["observations/state"].shape == (late[0]["steps"] + 1, 14)  # what the policy read: no camera
        assert np.array_equal(group["actions"][0], group["observations/state"][0])  # the late start holds the arms
    compared = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert compared.exit_code == 0, compared.output
    report = runner.invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0 and "AlohaTransferCube-v0" in (tmp_path / "r.html").read_text()


CHUNKS_MIXED = ("--max-steps", "230")
"""``aloha-expert-chunks`` solves transfer cube's episode 0 in 225 steps and episode 1 in 235."""


def test_robustness_with_a_delay_then_a_run_killed_mid_way_resumes_to_the_same_episodes(tmp_path):
    result = runner.invoke(app, ["robustness", "--base", "aloha_transfer_cube", "--families",
                                 "action_noise=0.02,delay_steps=2", "--policy", "aloha-expert-chunks", "--episodes",
                                 "2", *CHUNKS_MIXED, "-o", str(tmp_path / "rob"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "rob" / "robustness.json").read_text())
    assert len(data["families"]) == 2
    arms = {d.name: d for d in (tmp_path / "rob").iterdir() if (d / "episodes.jsonl").exists()}
    assert len(arms) == 3 and len({frozenset(outcomes(d, "episode", "start_digest")) for d in arms.values()}) == 1
    control = next(d for name, d in arms.items() if "=" not in name)
    successes = [row[3] for row in outcomes(control)]
    assert successes == [True, False], successes  # the unperturbed arm: one in time, one not

    base = [sys.executable, "-m", "lerobench", "eval", "--suite", "aloha_transfer_cube", "--policy",
            "aloha-expert-chunks", "--episodes", "2", *CHUNKS_MIXED, "--batch-size", "1", "--videos", "0"]
    out = tmp_path / "cut"
    kill_after_lines([*base, "--output", str(out)], out / "episodes.jsonl", 1)
    resumed = subprocess.run([*base, "--output", str(out), "--resume"], env=subprocess_env(), capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert outcomes(out) == outcomes(control)  # the control arm ran the same episodes uninterrupted
