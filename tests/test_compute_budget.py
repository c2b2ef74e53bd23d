"""The compute budget (issue 47): decided once, recorded in results.json, and what each process really used.

The rules are checked at a 16-core machine's numbers (no simulator); the hand-down on the real Meta-World
simulator with a policy that writes, in the process it runs in, the call cores and render threads it was given.
"""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.execution.compute import budget_for
from lerobench.policies.width import call_cores
from lerobench.system import usable_cores

runner = CliRunner()


@pytest.fixture
def no_user_values(monkeypatch):
    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LEROBENCH_CALL_CORES", raising=False)


def test_the_shares_at_16_cores(no_user_values):
    processes = budget_for("processes", 1, 4, True, 16)
    assert (processes.env_processes, processes.render_threads, processes.worker_call_cores,
            processes.driver_call_cores) == (4, 4, 4, None)
    ray = budget_for("ray", 1, 0, True, 16)
    assert (ray.render_threads, ray.worker_call_cores, ray.driver_call_cores) == (None, 1, None)
    vector = budget_for("vector", 8, 0, False, 16)
    assert (vector.env_processes, vector.render_threads, vector.driver_call_cores, vector.worker_call_cores) == \
        (8, 2, 16, None)
    for one_process in (budget_for("inline", 4, 0, False, 16), budget_for("vector", 1, 0, False, 16)):
        assert (one_process.env_processes, one_process.render_threads, one_process.driver_call_cores) == (0, None, 16)
    assert budget_for("processes", 1, 32, True, 16).worker_call_cores == 1  # never zero


def test_values_the_user_set_win_and_are_recorded(monkeypatch):
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    monkeypatch.setenv("LEROBENCH_CALL_CORES", "5")
    budget = budget_for("processes", 1, 4, True, 16)
    assert (budget.render_threads, budget.worker_call_cores) == (3, 5)
    assert budget.record()["user_set"] == {"LP_NUM_THREADS": "3", "LEROBENCH_CALL_CORES": "5"}
    assert budget_for("vector", 4, 0, False, 16).driver_call_cores == 5


@pytest.mark.sim
@pytest.mark.parametrize("executor, extra", [("processes", ["--workers", "2"]), ("vector", ["--batch-size", "2"])])
def test_each_process_uses_the_recorded_budget_and_the_driver_is_left_as_it_was(tmp_path, monkeypatch,
                                                                                 no_user_values, executor, extra):
    pytest.importorskip("metaworld")
    probes = tmp_path / "probes"
    probes.mkdir()
    monkeypatch.setenv("BUDGET_PROBE_DIR", str(probes))
    environ, cores_before = dict(os.environ), call_cores()
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3",
                                 "--policy", "fixture_policies:make_budget_reporter", "--episodes", "2",
                                 "--max-steps", "60", "--videos", "0", "--executor", executor, *extra,
                                 "--output", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "results.json").read_text())
    compute = document["config"]["compute"]
    cores = usable_cores()
    workers = 2 if executor == "processes" else 0
    assert compute == budget_for(executor, 1 if workers else 2, workers, bool(workers), cores).record()
    successes = [t["successes"] for t in document["tasks"]]
    assert sum(successes) >= 1 and sum(successes) < 4, successes  # the run has both outcomes
    seen = {p.stem: json.loads(p.read_text()) for p in probes.glob("*.json")}
    if executor == "processes":  # each worker ran its own policy with its share
        assert str(os.getpid()) not in seen and len(seen) >= 1
        for probe in seen.values():
            assert probe == {"call_cores": compute["worker_call_cores"], "render": str(compute["render_threads"])}
    else:  # the driver runs the policy with the budget's cores; its environment is not the workers'
        assert seen == {str(os.getpid()): {"call_cores": compute["driver_call_cores"], "render": None}}
    assert dict(os.environ) == environ and call_cores() == cores_before  # put back after the run
