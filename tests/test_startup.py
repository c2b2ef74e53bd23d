"""Start-up work that must not change what a run measures (issue 46): Meta-World's task variants cached on disk."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim


def _episodes(out):
    keep = ("task", "episode", "success", "steps", "max_reward", "start_digest", "obs_digest")
    rows = [{k: r[k] for k in keep} for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())]
    return sorted(rows, key=lambda r: (r["task"], r["episode"]))


def test_cached_task_variants_are_metaworlds_own_and_give_the_same_episodes(tmp_path, monkeypatch):
    metaworld = pytest.importorskip("metaworld")
    from lerobench.envs import metaworld as backend

    monkeypatch.setenv("LEROBENCH_CACHE_DIR", str(tmp_path / "cache"))
    backend._split_tasks.cache_clear()
    reference = metaworld.MT1("push-v3", seed=11).train_tasks
    _, drawn = backend.task_variants("MT1", "train", "push-v3", 11)  # a miss: drawn, then written
    files = list((tmp_path / "cache").glob("metaworld-tasks-MT1-train-push-v3-*.json"))
    assert len(files) == 1
    backend._split_tasks.cache_clear()
    _, read = backend.task_variants("MT1", "train", "push-v3", 11)  # a hit: read back
    for tasks in (drawn, read):
        assert [(t.env_name, t.data) for t in tasks] == [(t.env_name, t.data) for t in reference]
    files[0].write_text("{not json")  # a damaged file is a miss, never an error
    backend._split_tasks.cache_clear()
    _, again = backend.task_variants("MT1", "train", "push-v3", 11)
    assert [t.data for t in again] == [t.data for t in reference]
    backend._split_tasks.cache_clear()

    runs = []
    for name in ("cold", "warm"):  # cold: an empty cache (every process draws); warm: every process reads
        if name == "cold":
            monkeypatch.setenv("LEROBENCH_CACHE_DIR", str(tmp_path / "empty"))
        out = tmp_path / name
        result = CliRunner().invoke(app, ["eval", "--suite", "metaworld_mt10", "--policy", "metaworld-expert",
                                          "--tasks", "reach-v3,push-v3", "--episodes", "3", "--max-steps", "60",
                                          "--videos", "0", "--executor", "processes", "--workers", "2",
                                          "--output", str(out)])
        assert result.exit_code == 0, result.output
        runs.append(_episodes(out))
    assert list((tmp_path / "empty").glob("metaworld-tasks-*.json"))  # the cold run filled its cache
    assert runs[0] == runs[1]
    outcomes = {r["success"] for r in runs[0]}
    assert outcomes == {True, False}, "the check needs episodes that succeed and episodes that fail"


def test_a_short_state_only_run_of_a_replicable_policy_stays_in_this_process(tmp_path):
    pytest.importorskip("metaworld")
    out = tmp_path / "short"
    result = CliRunner().invoke(app, ["eval", "--suite", "metaworld_mt10", "--policy", "metaworld-expert",
                                      "--tasks", "reach-v3", "--episodes", "2", "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["executor_used"] == "inline", results["config"]
    assert "too short to pay for starting them" in result.output
    timing = results["timing"]  # stepped in this process: the first step is measured, after the first reset
    assert 0 < timing["startup_s"] < timing["first_step_s"] < results["overall"]["eval_s"]


def _small_suite(tmp_path, name="metaworld_mt10"):
    """``name`` at 64x64 images (a camera policy's renders stay cheap)."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "suites" / f"{name}.toml").read_text()
    path = tmp_path / f"{name}_small.toml"
    path.write_text(text.replace("image_size = [480, 480]", "image_size = [64, 64]", 1))
    return path


def test_evaluate_keeps_the_last_template_and_a_kept_one_gives_a_fresh_ones_episodes(tmp_path):
    """Two ``evaluate()`` calls share one template process (the second forks from the first's), and their
    episodes, images read included, are those of a CLI run that built its own."""
    pytest.importorskip("metaworld")
    import lerobench
    from lerobench.envs import template

    suite = str(_small_suite(tmp_path))
    policy = "fixture_policies:make_camera_expert"  # Meta-World's expert reading corner2
    settings = ["--tasks", "reach-v3", "--episodes", "4", "--max-steps", "42", "--batch-size", "2",
                "--executor", "vector", "--videos", "0"]  # the expert needs 34-51 steps on these four
    kw = dict(tasks=["reach-v3"], episodes=4, max_steps=42, batch_size=2, executor="vector", videos=0)
    lerobench.evaluate(policy, suite, output=tmp_path / "first", **{**kw, "episodes": 2})  # the spec has no count
    kept = template._kept
    assert kept is not None and kept[1].server.alive()
    pid = kept[1].server._forkserver_pid
    lerobench.evaluate(policy, suite, output=tmp_path / "second", **kw)
    assert template._kept is not None and template._kept[1].server._forkserver_pid == pid, "not reused"
    result = CliRunner().invoke(app, ["eval", "--suite", suite, "--policy", policy, *settings,
                                      "--output", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert template._kept is None or template._kept[1].server._forkserver_pid != pid  # the CLI keeps nothing
    first, second, cli = (_episodes(tmp_path / n) for n in ("first", "second", "cli"))
    assert first == cli[:2] and second == cli
    assert {r["success"] for r in cli} == {True, False}, "the check needs episodes that succeed and fail"
    assert all(r["obs_digest"] for r in cli)
    lerobench.release_simulators()
    assert template._kept is None and not template._servers


def test_a_template_prewarmed_while_a_lerobot_policy_loads_is_the_one_its_workers_fork_from(tmp_path):
    """A LeRobot policy says from its config.json which cameras it reads: the run starts the task's template
    before loading it, the vector env then forks from that one, and the episodes are those of workers that
    built their own task (``--no-share-task``). The ACT always answers one action, which closes the drawer in 15
    steps on episodes 0 and 1 and in 16 on episode 2: at 15 steps a run holds successes and a failure."""
    pytest.importorskip("metaworld")
    pytest.importorskip("lerobot")
    from test_lerobot import save_tiny_act

    from lerobench.envs import template

    directory = tmp_path / "act"
    save_tiny_act(directory, image_key="observation.images.corner2", image_hw=(64, 64),
                  constant_action=(0.0, 1.0, -1.0, 0.0))
    suite = str(_small_suite(tmp_path))
    args = ["eval", "--suite", suite, "--policy", f"lerobot:{directory}", "--tasks", "drawer-close-v3",
            "--episodes", "3", "--max-steps", "15", "--batch-size", "2", "--videos", "0"]
    before = dict(template.counts)
    result = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "prewarmed")])
    assert result.exit_code == 0, result.output
    # one template started (before the policy loaded), and the vector env's lookup found it
    assert (template.counts["started"] - before["started"], template.counts["reused"] - before["reused"]) == (1, 1)
    assert template._kept is None and not template._servers  # the CLI stops what it started
    result = CliRunner().invoke(app, [*args, "--no-share-task", "--output", str(tmp_path / "own")])
    assert result.exit_code == 0, result.output
    assert _episodes(tmp_path / "prewarmed") == _episodes(tmp_path / "own")
    assert all(r["obs_digest"] for r in _episodes(tmp_path / "own"))
    outcomes = [(r["success"], r["steps"]) for r in _episodes(tmp_path / "own")]
    assert outcomes == [(True, 15), (True, 15), (False, 15)], "the check needs episodes that succeed and fail"
