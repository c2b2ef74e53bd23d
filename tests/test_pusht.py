"""PushT (gym-pusht) as a backend: LeRobot's seeds, the privileged expert, and lerobench's promises on episodes that
both succeed and fail (the expert at a short step limit: its episodes take 48-94 steps)."""

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

pytestmark = pytest.mark.sim  # every test here drives the real gym-pusht simulator
runner = CliRunner()
SUITE = load_suite("pusht")
LOOKING = f"{Path(__file__).parent / 'pusht_policies.py'}:make_looking_expert"
"""By file: Ray's workers, which do not share pytest's ``sys.path``, load it too."""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """``--max-steps`` at which the camera-reading expert's episodes 0-5 both succeed and fail: the third shortest
    episode's length, measured now (not a number tuned to today's expert)."""
    out = tmp_path_factory.mktemp("lengths")
    result = runner.invoke(app, ["eval", "--suite", "pusht", "--policy", LOOKING, "--episodes", "6", "--videos", "0",
                                 "--output", str(out)])
    assert result.exit_code == 0, result.output
    steps = sorted(e["steps"] for e in episodes(out) if e["success"])
    assert len(steps) == 6 and steps[2] < steps[3], steps  # the expert solves them all, in different lengths
    return ("--max-steps", str(steps[2]))


def make_env(seed=0, cameras=(), max_steps=300, privileged=False):
    backend = get_backend("pusht")
    protocol = replace(SUITE.protocol(), max_steps=max_steps)
    spec = EnvSpec(suite=SUITE.name, backend="pusht", task=SUITE.tasks[0], protocol=protocol, seed=seed,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   privileged=privileged, action_bounds=backend.action_bounds)
    return LazyTaskEnv(spec, backend)


def episodes(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def outcomes(out, *keys):
    keys = keys or ("episode", "seed", "success", "steps", "return", "obs_digest", "start_digest", "progress")
    return sorted(tuple(e.get(k) for k in keys) for e in episodes(out))


def run(*args):
    return runner.invoke(app, ["eval", "--suite", "pusht", "--videos", "0", *map(str, args)])


def test_episode_i_starts_where_gym_pushts_reset_with_seed_s_plus_i_does():
    import gym_pusht  # noqa: F401  (registers the env)
    import gymnasium as gym

    reference = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    env = make_env(seed=1000, cameras=("top",))
    for episode in (3, 0, 7):  # out of order: a start never depends on the episode before it
        obs, _ = env.reset(options={"episodes": [episode]})
        want, _ = reference.reset(seed=1000 + episode)
        assert np.array_equal(obs["images"]["top"], want["pixels"])
        assert np.array_equal(obs["state"], want["agent_pos"].astype(np.float32))
        for _ in range(3):
            env.step(np.array([100.0, 100.0], dtype=np.float32))
    env.close()


def test_a_state_only_episode_renders_nothing_and_records_gym_pushts_coverage():
    env = make_env(max_steps=5, privileged=True)
    obs, _ = env.reset(options={"episodes": [0]})
    assert obs["privileged"][10:13].tolist() == pytest.approx([256, 256, np.pi / 4])  # the goal pose
    for _ in range(5):
        _, reward, terminated, truncated, info = env.step(obs["state"])  # target the agent's own position
    end = info["episode_end"]
    assert truncated and not terminated and end["renders"] == 0 and end["steps"] == 5
    assert 0.0 <= end["progress"] <= end["max_progress"] <= 1.0 and end["max_reward"] == pytest.approx(
        min(end["max_progress"] / 0.95, 1.0))
    env.close()


def test_the_default_policy_is_the_privileged_expert_and_it_solves_pusht(tmp_path):
    result = run("--episodes", "3", "--output", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert "Evaluating pusht-expert" in result.output and "privileged expert" in result.output
    eps = episodes(tmp_path / "o")
    assert [e["seed"] for e in sorted(eps, key=lambda e: e["episode"])] == [0, 1, 2]  # LeRobot's seeds
    assert all(e["success"] and e["progress"] > 0.95 for e in eps)
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert results["config"]["protocol_settings"]["seeds"] == "lerobot"


def test_same_episodes_at_batch_1_3_8_and_on_every_executor_with_a_policy_that_reads_the_camera(tmp_path, mixed):
    runs = {}
    for name, extra in (("b1", ["--batch-size", "1"]), ("b3", ["--batch-size", "3", "--executor", "vector"]),
                        ("b8", ["--batch-size", "8", "--executor", "vector"]),
                        ("proc", ["--executor", "processes", "--workers", "2"]), ("ray", ["--executor", "ray"])):
        result = run("--policy", LOOKING, "--episodes", "6", *mixed, *extra, "--output", tmp_path / name)
        assert result.exit_code == 0, result.output
        runs[name] = outcomes(tmp_path / name)
    assert runs["b1"] == runs["b3"] == runs["b8"] == runs["proc"] == runs["ray"]
    successes = [row[2] for row in runs["b1"]]
    assert any(successes) and not all(successes)  # a comparison of episodes that succeed and fail


def test_a_setting_pusht_cannot_honour_is_refused_before_the_run(tmp_path):
    light = run("--perturb", "light=0.5", "--output", tmp_path / "a")
    assert light.exit_code == 2 and "--perturb light" in light.output and "pusht" in light.output
    assert not (tmp_path / "a").exists()
    other = run("--policy", "libero-expert", "--output", tmp_path / "b")
    assert other.exit_code == 2 and "only runs on libero suites" in other.output


def test_trials_until_and_a_designed_versus_between_the_expert_and_its_noisy_variant(tmp_path, mixed):
    trials = run("--policy", LOOKING, "--episodes", "6", *mixed, "--trials", "2", "--output", tmp_path / "t")
    assert trials.exit_code == 0, trials.output
    results = json.loads((tmp_path / "t" / "results.json").read_text())
    assert [t["successes"] for t in results["overall"]["per_trial"]] == [3, 3]  # a stateless expert: same twice
    noisy = run("--policy", "pusht-expert-noisy", "--episodes", "16", "--max-steps", "120", "--output", tmp_path / "a")
    assert noisy.exit_code == 0, noisy.output
    versus = run("--policy", "pusht-expert", "--versus", tmp_path / "a", "--until", "decided", "--max-steps", "120",
                 "--output", tmp_path / "b")
    assert versus.exit_code == 0, versus.output
    a, b = outcomes(tmp_path / "a", "episode", "success"), outcomes(tmp_path / "b", "episode", "success")
    assert any(s for _, s in a) and not all(s for _, s in a)
    compared = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert compared.exit_code == 0, compared.output
    report = runner.invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0 and "pusht" in (tmp_path / "r.html").read_text()
    assert len(b) <= len(a)


def test_robustness_with_the_generic_perturbations_pairs_every_arm_on_the_same_starts(tmp_path):
    result = runner.invoke(app, ["robustness", "--base", "pusht", "--families",
                                 "obs_noise=2,action_noise=0.1,delay_steps=2", "--policy", "pusht-expert-chunks",
                                 "--episodes", "4", "--max-steps", "90", "-o", str(tmp_path / "rob"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "rob" / "robustness.json").read_text())
    assert len(data["families"]) == 3
    digests = {frozenset(outcomes(d, "episode", "start_digest")) for d in (tmp_path / "rob").iterdir()
               if (d / "episodes.jsonl").exists()}
    assert len(digests) == 1  # every arm (and its control) started each episode from the same state


def test_record_writes_the_episodes_the_policy_saw(tmp_path, mixed):
    result = run("--policy", LOOKING, "--episodes", "2", *mixed, "--record", "all", "--output", tmp_path / "o")
    assert result.exit_code == 0, result.output
    import gym_pusht  # noqa: F401
    import gymnasium as gym
    import h5py

    steps = {e["episode"]: e["steps"] for e in episodes(tmp_path / "o")}
    with h5py.File(tmp_path / "o" / "recordings" / "PushT-v0.h5") as f:
        for episode in (0, 1):
            group = f[f"episode_{episode}"]
            assert group["actions"].shape == (steps[episode], 2)
            assert group["observations/images/top"].shape == (steps[episode] + 1, 96, 96, 3)
            first, _ = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos").reset(seed=episode)
            assert np.array_equal(group["observations/images/top"][0], first["pixels"])
            progress = group["progress"][()]  # gym-pusht's coverage after every step
            assert progress.shape == (steps[episode],) and progress[-1] == pytest.approx(
                next(e["progress"] for e in episodes(tmp_path / "o") if e["episode"] == episode))
            assert np.allclose(group["rewards"][()], np.minimum(progress / 0.95, 1.0), atol=1e-6)


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_episodes(tmp_path, mixed):
    base = [sys.executable, "-m", "lerobench", "eval", "--suite", "pusht", "--policy", LOOKING, "--episodes", "8",
            *mixed, "--batch-size", "2", "--videos", "0"]
    whole = subprocess.run([*base, "--output", str(tmp_path / "whole")], env=subprocess_env(), capture_output=True,
                           text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "cut"
    kill_after_lines([*base, "--output", str(out)], out / "episodes.jsonl", 2)
    resumed = subprocess.run([*base, "--output", str(out), "--resume"], env=subprocess_env(), capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert outcomes(out) == outcomes(tmp_path / "whole")


def test_coverage_is_gym_pushts_formula_taken_in_one_order():
    from gym_pusht.envs.pusht import PushTEnv

    from lerobench.envs.pusht import ordered_coverage

    env = PushTEnv(obs_type="state")
    for seed in range(20):
        env.reset(seed=seed)
        for _ in range(seed % 5):
            env.step(np.array([256.0, 256.0]))
        assert ordered_coverage(env) == pytest.approx(env._get_coverage(), abs=1e-12)  # equal up to sum order
