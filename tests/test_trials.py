"""Multi-trial episodes (--trials): identical starts on both simulators, rollout semantics, aggregation, ML suites."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lerobench.core.records import EpisodeRecord
from lerobench.core.results import summarize
from lerobench.core.trials import outcomes, trial_summary, whole_episodes
from lerobench.envs.base import EnvSpec, LazyTaskEnv
from lerobench.execution.runner import Evaluation, RunSettings
from lerobench.stats.binomial import compare_paired
from lerobench.suite.registry import load_suite

pytestmark = pytest.mark.sim  # every test here drives a real simulator

os.environ.setdefault("MUJOCO_GL", "egl")


def _spec(suite_name: str, backend_name: str, cameras: tuple[str, ...], max_steps: int) -> tuple[EnvSpec, object]:
    from lerobench.suite.registry import get_backend

    suite = load_suite(suite_name)
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), max_steps=max_steps, image_size=(64, 64))
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=protocol, seed=3,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   backend_options=suite.backend_options)
    return spec, backend


def _trials_start_identically(spec: EnvSpec, backend: object, episode: int) -> None:
    """Reset to (episode, trial 0), act, reset to (episode, trial 1): the first observations match bit for bit."""
    env = LazyTaskEnv(spec, backend)
    try:
        rng = np.random.default_rng(0)
        first = None
        for trial in range(3):
            obs, info = env.reset(options={"episodes": [episode], "trials": [trial]})
            assert "episode_end" not in info
            snapshot = {"state": obs["state"].copy(), **{c: im.copy() for c, im in obs.get("images", {}).items()}}
            if first is None:
                first = snapshot
            else:
                assert snapshot.keys() == first.keys()
                for key, value in snapshot.items():
                    assert value.dtype == first[key].dtype
                    assert np.array_equal(value, first[key]), f"trial {trial}: {key} differs from trial 0"
            moved = obs["state"].copy()
            for _ in range(spec.protocol.max_steps):  # a different attempt each trial, then back to the start
                obs, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, spec.action_dim))
                if terminated or truncated:
                    assert info["episode_end"]["trial"] == trial
                    break
            assert not np.array_equal(obs["state"], moved), "the trial did not move the robot"
    finally:
        env.close()


def test_metaworld_trials_start_identically_state_and_images():
    pytest.importorskip("metaworld")
    spec, backend = _spec("metaworld_ml1_reach", "metaworld", ("corner2", "topview"), max_steps=15)
    _trials_start_identically(spec, backend, episode=4)


def test_libero_trials_start_identically_state_and_images():
    pytest.importorskip("libero.libero")
    spec, backend = _spec("smoke_libero", "libero", ("agentview", "robot0_eye_in_hand"), max_steps=5)
    _trials_start_identically(spec, backend, episode=2)


# -- rollout: markers, memory kept, pending actions dropped ------------------------------------------------
class MarkerSpy:
    """Returns 4-step chunks of a fixed push; remembers what it saw at every call (so it has memory)."""

    observation_needs = __import__("lerobench.policies.base", fromlist=["ObservationNeeds"]).ObservationNeeds()

    def __init__(self):
        self.calls = []
        self.resets = 0

    def reset(self):
        self.resets += 1

    def select_action(self, observation, descriptions):
        n = len(observation["state"])
        if "probe" not in observation:  # not the run's batch-invariance check calls
            self.calls.append({k: np.array(observation[k], copy=True) for k in
                               ("episode", "trial", "episode_start", "trial_start", "reward", "success", "active",
                                "state")})
        chunk = np.zeros((n, 4, 4), dtype=np.float32)
        chunk[:, :, 1] = 1.0  # push the hand forward: every trial moves away from the start
        return chunk


def _rollout(policy, trials: int, episodes: list[int], batch: int, max_steps: int, replan: int = 4):
    from lerobench.core.task_run import TaskRun
    from lerobench.envs.vector import make_vector_env
    from lerobench.rollout.loop import run_episodes
    from lerobench.suite.registry import get_backend

    suite = load_suite("metaworld_ml1_reach")
    backend = get_backend("metaworld")
    protocol = replace(suite.protocol(), max_steps=max_steps)
    spec = EnvSpec(suite=suite.name, backend="metaworld", task=suite.tasks[0], protocol=protocol, seed=1,
                   state_dim=39, action_dim=4, backend_options=suite.backend_options)
    run = TaskRun(suite=suite.name, task=suite.tasks[0], seed=1, action_dim=4, replan_steps=replan, trials=trials)
    records = []
    venv = make_vector_env(spec, batch, in_process=batch == 1)
    try:
        run_episodes(venv, policy, run, episodes, records.append)
    finally:
        venv.close()
    assert backend.name == "metaworld"
    return records


def test_rollout_runs_trials_in_order_with_markers_and_drops_pending_actions():
    pytest.importorskip("metaworld")
    spy = MarkerSpy()
    records = _rollout(spy, trials=3, episodes=[0, 1], batch=1, max_steps=10)  # 10 = 4 + 4 + 2: a chunk is cut
    assert [(r.episode, r.trial) for r in records] == [(e, k) for e in (0, 1) for k in range(3)]
    for r in records:
        assert r.steps == 10 and r.error is None
        assert r.seed == records[3 * r.episode].seed and r.init_state == r.episode
    assert spy.resets == 0  # the rollout never resets the policy: only the runner does, once per run
    starts = [c for c in spy.calls if c["trial_start"][0]]
    assert [(int(c["episode"][0]), int(c["trial"][0])) for c in starts] == [(e, k) for e in (0, 1) for k in range(3)]
    for c in starts:
        assert bool(c["episode_start"][0]) == (c["trial"][0] == 0)
        assert c["reward"][0] == 0.0 and not c["success"][0]
        first = next(s for s in starts if s["episode"][0] == c["episode"][0])
        # Asked at the trial's very first observation (the old attempt's queued actions were dropped),
        # and that observation is the episode's start state.
        assert np.array_equal(c["state"][0], first["state"][0])
    # 3 calls per trial (steps 0, 4, 8): a leaked chunk would have saved a call at each trial start
    assert len(spy.calls) == 2 * 3 * 3
    later = [c for c in spy.calls if not c["trial_start"][0]]
    assert all(c["reward"][0] > 0 for c in later)  # the previous step's dense reward reaches the policy


def _crash_at_trial_1(tmp_path, mode):
    """A one-task Meta-World suite whose simulator fails (``mode``) at step 3 of episode 1's trial 1."""
    from helpers import crash_suite

    suite = crash_suite(tmp_path, mode, crash_episode=1, crash_step=3)
    suite.write_text(suite.read_text().replace("crash_step = 3,", "crash_step = 3, crash_trial = 1,"))
    return suite


@pytest.mark.parametrize("mode, batch", [("raise", 1), ("kill", 2)])
def test_an_error_ends_the_episode_and_later_trials_have_no_line(tmp_path, mode, batch):
    pytest.importorskip("metaworld")
    from typer.testing import CliRunner

    from lerobench.cli import app

    suite = _crash_at_trial_1(tmp_path, mode)
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["eval", "--suite", str(suite), "--policy", "random", "--batch-size", str(batch),
                                      "--videos", "0", "--episodes", "3", "--trials", "3", "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = [(d["episode"], d["trial"], d["error"] is not None) for d in
             (json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines())]
    assert sorted(lines) == [(0, 0, False), (0, 1, False), (0, 2, False), (1, 0, False), (1, 1, True),
                             (2, 0, False), (2, 1, False), (2, 2, False)]
    overall = json.loads((out / "results.json").read_text())["overall"]
    assert [row["n"] for row in overall["per_trial"]] == [3, 3, 3]


def test_max_errors_counts_an_episode_that_errored_after_trial_0(tmp_path):
    """results' n_errors describes trial 0; --max-errors must still see an error in a later trial."""
    pytest.importorskip("metaworld")
    from typer.testing import CliRunner

    from lerobench.cli import EXIT_TOO_MANY_ERRORS, app

    suite = _crash_at_trial_1(tmp_path, "raise")
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["eval", "--suite", str(suite), "--policy", "random", "--batch-size", "1",
                                      "--videos", "0", "--episodes", "2", "--trials", "2", "--max-errors", "0",
                                      "--output", str(out)])
    assert result.exit_code == EXIT_TOO_MANY_ERRORS, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["overall"]["n_errors"] == 0  # trial 0 of both episodes ran clean


def test_a_dead_episode_worker_ends_its_episode_under_the_processes_executor(tmp_path):
    pytest.importorskip("metaworld")
    from typer.testing import CliRunner

    from lerobench.cli import app

    suite = _crash_at_trial_1(tmp_path, "kill")
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["eval", "--suite", str(suite), "--policy", "random", "--executor", "processes",
                                      "--workers", "2", "--videos", "0", "--episodes", "3", "--trials", "2",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = sorted((d["episode"], d["trial"], d["error"] is not None) for d in
                   (json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()))
    # the worker died in trial 1 of episode 1, taking trial 0's unsent line with it: the episode ends in an error
    assert lines == [(0, 0, False), (0, 1, False), (1, 0, True), (2, 0, False), (2, 1, False)]
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and [row["n"] for row in results["overall"]["per_trial"]] == [3, 3]
    assert results["tasks"][0]["n_episodes"] == 3


# -- aggregation ----------------------------------------------------------------------------------------
def _rec(episode: int, trial: int, success: bool, error: str | None = None, task: str = "reach-v3") -> EpisodeRecord:
    return EpisodeRecord(task=task, episode=episode, trial=trial, seed=episode, init_state=episode,
                         success=success and error is None, success_at_end=success, steps=5, return_=1.0,
                         elapsed_s=0.1, error=error)


def test_trial_summary_counts_errors_as_failures_from_the_erroring_trial_on():
    records = [_rec(0, 0, False), _rec(0, 1, True), _rec(0, 2, True),
               _rec(1, 0, True), _rec(1, 1, False, error="simulator step failed"),  # no trial 2 line
               _rec(2, 0, False), _rec(2, 1, False), _rec(2, 2, True),
               _rec(3, 0, True), _rec(3, 1, True), _rec(3, 2, True)]
    assert outcomes(records[3:5], 3) == [True, False, False]
    s = trial_summary(records, 3)
    assert s["trials"] == 3
    assert [(r["trial"], r["n"], r["successes"]) for r in s["per_trial"]] == [(0, 4, 2), (1, 4, 2), (2, 4, 3)]
    assert [r["successes"] for r in s["success_within_k"]] == [2, 3, 4]
    a1, a2 = s["adaptation"]
    c1 = compare_paired([False, True, False, True], [True, False, False, True])
    assert (a1["delta"], a1["gained"], a1["lost"], a1["ci95"], a1["p_value"]) == (0.0, 1, 1, c1.ci95, c1.p_value)
    assert a2["trial"] == 2 and a2["delta"] == 0.25 and a2["n"] == 4 and (a2["gained"], a2["lost"]) == (2, 1)
    for row in s["per_trial"] + s["success_within_k"]:
        assert set(row) == {"trial", "n", "successes", "success_rate", "ci95", "ci95_method"}
    assert set(a1) == {"trial", "delta", "ci95", "p_value", "n", "gained", "lost"}


def test_summarize_keeps_todays_shape_for_one_trial_and_adds_trial_keys_for_more():
    suite = load_suite("metaworld_ml1_reach")
    one = summarize(suite, [_rec(e, 0, e % 2 == 0) for e in range(4)])
    assert "per_trial" not in one["overall"] and "trials" not in one["tasks"][0]
    records = [_rec(e, k, (e + k) % 2 == 0) for e in range(4) for k in range(2)]
    two = summarize(suite, records, trials=2)
    for block in (two["overall"], two["tasks"][0]):
        assert set(one["overall"]) < set(block)
        assert block["n_episodes"] == 4 and block["successes"] == 2  # today's keys describe trial 0
        assert block["trials"] == 2 and len(block["per_trial"]) == 2 and len(block["adaptation"]) == 1


def test_whole_episodes_drops_half_episodes_and_duplicates():
    records = [_rec(0, 0, True), _rec(0, 1, True), _rec(1, 0, False), _rec(2, 0, False, error="x"),
               _rec(0, 1, False), _rec(3, 1, True)]
    kept = whole_episodes(records, 2)
    assert [(r.episode, r.trial) for r in kept] == [(0, 0), (0, 1), (2, 0)]
    assert kept[1].success  # the first line of a duplicated trial wins


# -- end to end: the adaptive policy, memoryless control, batch size, kill + resume -------------------------
def _evaluate(tmp_path, name: str, suite: str, policy: str, trials: int, episodes: int, max_steps: int,
              batch: int = 1, **extra):
    settings = RunSettings(suite=load_suite(suite).select_tasks(extra.pop("tasks", None)), policy=policy,
                           output=tmp_path / name, episodes=episodes, batch_size=batch, seed=2, max_steps=max_steps,
                           trials=trials, **{"videos": 0, **extra})
    return Evaluation(settings).run()


def _trial_lines(out: Path):
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((d["task"], d["episode"], d["trial"], d["seed"], d["success"], d["steps"], round(d["return"], 6))
                  for d in lines)


def test_adaptive_policy_improves_after_its_first_trial_and_the_expert_does_not_change(tmp_path):
    pytest.importorskip("metaworld")
    results = _evaluate(tmp_path, "adaptive", "metaworld_ml1_reach", "metaworld-adaptive-reach", 2, 6, 200)
    (adapt,) = results["overall"]["adaptation"]
    assert adapt["lost"] == 0 and adapt["gained"] >= 2 and adapt["delta"] > 0
    assert results["overall"]["per_trial"][1]["successes"] == 6
    expert = _evaluate(tmp_path, "expert", "metaworld_mt10", "metaworld-expert", 2, 3, 150,
                       tasks=["reach-v3", "push-v3"])
    assert expert["overall"]["adaptation"][0] == {**expert["overall"]["adaptation"][0], "delta": 0.0, "gained": 0,
                                                  "lost": 0, "p_value": 1.0}
    by_episode = {}
    for task, episode, _trial, *outcome in _trial_lines(tmp_path / "expert"):
        by_episode.setdefault((task, episode), []).append(tuple(outcome))
    assert all(len(v) == 2 and v[0] == v[1] for v in by_episode.values())  # memoryless: identical trials


def test_per_trial_results_identical_at_batch_1_and_2(tmp_path):
    pytest.importorskip("metaworld")
    one = _evaluate(tmp_path, "b1", "metaworld_ml1_reach", "metaworld-adaptive-reach", 3, 3, 120, batch=1,
                    formats=("lerobot",))
    two = _evaluate(tmp_path, "b2", "metaworld_ml1_reach", "metaworld-adaptive-reach", 3, 3, 120, batch=2)
    assert _trial_lines(tmp_path / "b1") == _trial_lines(tmp_path / "b2")
    assert len(_trial_lines(tmp_path / "b1")) == 9
    assert one["overall"]["per_trial"] == two["overall"]["per_trial"]
    assert one["config"]["trials"] == 3 and "trial" not in one["config"]
    info = json.loads((tmp_path / "b1" / "eval_info.json").read_text())
    assert info["overall"]["n_episodes"] == 3  # LeRobot's episode is trial 0


@pytest.mark.slow
def test_kill_and_resume_reruns_half_episodes_from_trial_0_and_equals_an_uninterrupted_run(tmp_path):
    pytest.importorskip("metaworld")
    import subprocess
    import sys

    from helpers import kill_after_lines
    from helpers import subprocess_env as _env

    def cmd(out, *extra):
        return [sys.executable, "-m", "lerobench", "eval", "--suite", "metaworld_ml1_reach", "--policy",
                "metaworld-adaptive-reach", "--episodes", "8", "--trials", "3", "--max-steps", "150",
                "--batch-size", "2", "--videos", "0", "--seed", "4", "--output", str(out), *extra]

    full, cut = tmp_path / "full", tmp_path / "cut"
    assert subprocess.run(cmd(full), env=_env(), capture_output=True).returncode == 0
    kill_after_lines(cmd(cut), cut / "episodes.jsonl", 3)
    lines = (cut / "episodes.jsonl").read_text().splitlines()
    done = {json.loads(line)["episode"] for line in lines}
    # each trial is its own line, flushed as it comes: a kill can land between an episode's trials (resume reruns it)
    assert 3 <= len(lines) < 24 and len(done) < 8
    half = json.loads(lines[0]) | {"episode": max(set(range(8)) - done), "trial": 0}
    with open(cut / "episodes.jsonl", "a") as f:  # an episode cut between its trials, then a torn line
        f.write(json.dumps(half) + '\n{"task": "reach-v3", "epis')
    resumed = subprocess.run(cmd(cut, "--resume"), env=_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert _trial_lines(cut) == _trial_lines(full) and len(_trial_lines(cut)) == 24  # no duplicate, no half
    from lerobench.core.call_stats import CALL_STATS_KEYS

    timing = ("eval_s", "episodes_per_s", "env_steps_per_s", *CALL_STATS_KEYS)
    cut_results, full_results = (json.loads((d / "results.json").read_text())["overall"] for d in (cut, full))
    assert {k: v for k, v in cut_results.items() if k not in timing} == {
        k: v for k, v in full_results.items() if k not in timing}


# -- Meta-World meta-learning suites ----------------------------------------------------------------------
@pytest.mark.parametrize("suite_name, task, benchmark", [("metaworld_ml1_push", "push-v3", "ML1"),
                                                         ("metaworld_ml10", "lever-pull-v3", "ML10")])
def test_ml_suites_run_metaworlds_test_variants_with_the_goal_hidden(suite_name, task, benchmark):
    metaworld = pytest.importorskip("metaworld")
    from lerobench.envs.metaworld import BACKEND, task_variants

    suite = load_suite(suite_name)
    assert suite.trials == 3 and suite.backend_options == {"benchmark": benchmark, "split": "test"}
    spec = EnvSpec(suite=suite.name, backend="metaworld", task=suite.select_tasks([task]).tasks[0],
                   protocol=replace(suite.protocol(), max_steps=3), seed=0, state_dim=39, action_dim=4,
                   backend_options=suite.backend_options)
    sim = BACKEND.make_simulator(spec)
    try:
        reference = (metaworld.ML1(task, seed=0) if benchmark == "ML1" else metaworld.ML10(seed=0)).test_tasks
        expected = [t for t in reference if t.env_name == task]
        _, variants = task_variants(benchmark, "test", task, 0)
        assert len(variants) == len(expected) == 50
        assert all(a.data == b.data for a, b in zip(variants, expected, strict=True))  # Meta-World's own tasks
        goals = []
        for episode in (0, 1, 51):
            sim.reset_to(episode, seed=episode)
            assert np.all(sim.state()[36:39] == 0), "the goal must be hidden, as in Meta-World's ML benchmarks"
            goals.append(sim._env._target_pos.copy())
        assert not np.allclose(goals[0], goals[1]) and np.allclose(goals[1], goals[2])  # episode i -> variant i % 50
    finally:
        sim.close()


def test_trial_videos_are_one_file_per_trial(tmp_path):
    pytest.importorskip("metaworld")
    pytest.importorskip("av")
    _evaluate(tmp_path, "v", "metaworld_ml1_reach", "random", 2, 1, 4, videos=1)
    names = sorted(p.name for p in (tmp_path / "v" / "videos" / "reach-v3").iterdir())
    assert names == ["episode_0_trial_0_failure.mp4", "episode_0_trial_1_failure.mp4"]
    videos = [json.loads(x)["video"] for x in (tmp_path / "v" / "episodes.jsonl").read_text().splitlines()]
    assert videos == [f"videos/reach-v3/episode_0_trial_{k}_failure.mp4" for k in (0, 1)]


def test_a_served_policy_sees_the_trial_keys_and_adapts_the_same_remotely(tmp_path):
    pytest.importorskip("metaworld")
    pytest.importorskip("websockets")
    import threading

    from lerobench.policies.serve import PolicyServer, suite_context

    server = PolicyServer("metaworld-adaptive-reach", suite_context("metaworld_ml1_reach", seed=2), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = _evaluate(tmp_path, "remote", "metaworld_ml1_reach", server.url, 2, 3, 120, batch=2)
    finally:
        server.shutdown()
    local = _evaluate(tmp_path, "local", "metaworld_ml1_reach", "metaworld-adaptive-reach", 2, 3, 120, batch=2)
    assert _trial_lines(tmp_path / "remote") == _trial_lines(tmp_path / "local")
    assert remote["overall"]["per_trial"] == local["overall"]["per_trial"]


def test_one_trial_runs_keep_todays_files_and_resume_runs_written_before_trials_existed(tmp_path):
    pytest.importorskip("metaworld")
    results = _evaluate(tmp_path, "k1", "metaworld_mt10", "metaworld-expert", None, 2, 30, tasks=["reach-v3"])
    assert results["config"]["trials"] == 1 and "trial" not in results["config"]
    assert not {"trials", "per_trial", "success_within_k", "adaptation"} & set(results["overall"])
    assert [line[2] for line in _trial_lines(tmp_path / "k1")] == [0, 0]
    path = tmp_path / "k1" / "results.json"
    old = json.loads(path.read_text())
    old["config"] = {("trial" if k == "trials" else k): (0 if k == "trials" else v) for k, v in old["config"].items()}
    path.write_text(json.dumps(old))  # as lerobench wrote it before --trials existed
    resumed = _evaluate(tmp_path, "k1", "metaworld_mt10", "metaworld-expert", None, 2, 30, tasks=["reach-v3"],
                        resume=True)
    assert resumed["overall"]["n_episodes"] == 2 and len(_trial_lines(tmp_path / "k1")) == 2
