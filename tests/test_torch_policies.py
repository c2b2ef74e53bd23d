"""Torch policies: shallow copies per task thread share weights but not per-episode state (lerobot#4327)."""

import copy
import json

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.policies.base import PolicyContext
from lerobench.policies.loading import load_policy
from lerobench.suite.registry import load_suite

pytestmark = pytest.mark.sim  # every test here drives a real simulator

torch = pytest.importorskip("torch")
pytest.importorskip("metaworld")
runner = CliRunner()


def context(device="cpu"):
    suite = load_suite("metaworld_mt10")
    return PolicyContext(suite=suite.name, backend="metaworld", tasks=suite.tasks, action_dim=4, state_dim=39,
                         cameras=(), image_size=(64, 64), device=device)


def test_shallow_copy_shares_parameters_not_state():
    policy = load_policy("fixture_policies:make_queue_policy", context())
    clone = copy.copy(policy)
    clone.reset()
    originals = [p.data_ptr() for p in policy.module.parameters()]
    assert originals and [p.data_ptr() for p in clone.module.parameters()] == originals
    assert clone.module is not policy.module and clone.module._queues is not policy.module._queues
    assert not policy.module.training  # eval mode


@pytest.mark.may_skip("machine has CUDA")  # a CPU-only machine checks the message
def test_device_errors_are_clear():
    if torch.cuda.is_available():
        pytest.skip("machine has CUDA")
    with pytest.raises(Exception, match="CUDA is not available"):
        load_policy("fixture_policies:make_queue_policy", context(device="cuda"))
    assert load_policy("fixture_policies:make_queue_policy", context(device="auto")).device.type == "cpu"


def _outcomes(out):
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["task"], e["episode"], e["success"], e["steps"], round(e["return"], 5)) for e in lines)


def test_stateful_policy_same_results_with_parallel_tasks(tmp_path):
    common = ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3,drawer-close-v3,window-open-v3",
              "--policy", "fixture_policies:make_queue_policy", "--episodes", "2", "--max-steps", "40",
              "--videos", "0", "--seed", "1"]
    one = runner.invoke(app, [*common, "--parallel-tasks", "1", "--output", str(tmp_path / "p1")])
    three = runner.invoke(app, [*common, "--parallel-tasks", "3", "--output", str(tmp_path / "p3")])
    assert one.exit_code == 0 and three.exit_code == 0, one.output + three.output
    assert "3 tasks in parallel" in three.output
    assert _outcomes(tmp_path / "p1") == _outcomes(tmp_path / "p3")
    assert len(_outcomes(tmp_path / "p3")) == 8


def test_copy_unsafe_policy_runs_sequentially(tmp_path):
    result = runner.invoke(app, ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3", "--policy",
                                 "fixture_policies:make_unsafe_copy", "--episodes", "1", "--max-steps", "5",
                                 "--videos", "0", "--parallel-tasks", "2", "--output", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "copy_safe = False" in result.output
