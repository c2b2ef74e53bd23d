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
