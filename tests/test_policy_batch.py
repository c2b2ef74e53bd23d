"""The typed policy batch (issue 47): every key a policy is handed is documented by a type, in a real run.

On Meta-World with a camera, delayed chunks and two trials, so the rollout's bookkeeping keys all appear.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.policies import Observation, PolicyBatch, RowInfo
from lerobench.policies.batch import OBSERVATION_KEYS, ROW_KEYS, as_batch

runner = CliRunner()


def test_the_two_views_split_the_batch_and_the_dict_is_unchanged():
    batch = as_batch({"state": np.zeros((2, 3), np.float32), "slot": np.array([0, 1]), "trial": np.zeros(2)})
    assert isinstance(batch, PolicyBatch) and isinstance(batch, dict) and batch.size == 2
    assert set(batch.observation) == {"state"} and set(batch.rows) == {"slot", "trial"}
    assert batch.observation["state"] is batch["state"]  # views share the arrays
    assert as_batch(batch) is batch
    assert OBSERVATION_KEYS.isdisjoint(ROW_KEYS)
    assert OBSERVATION_KEYS == set(Observation.__annotations__) and ROW_KEYS == set(RowInfo.__annotations__)


@pytest.mark.sim
def test_every_key_of_a_real_runs_batches_is_typed(tmp_path, monkeypatch):
    pytest.importorskip("metaworld")
    audit = tmp_path / "audit"
    audit.mkdir()
    monkeypatch.setenv("KEY_AUDIT_DIR", str(audit))
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3",
                                 "--policy", "fixture_policies:make_key_auditor", "--episodes", "2", "--trials", "2",
                                 "--max-steps", "12", "--delay-steps", "2", "--replan-steps", "4", "--batch-size", "2",
                                 "--executor", "inline", "--videos", "0",
                                 "--output", str(out)])
    assert result.exit_code == 0, result.output
    seen = [json.loads(p.read_text()) for p in audit.glob("*.json")]
    assert len(seen) == 1
    seen = seen[0]
    assert seen["types"] == ["PolicyBatch"]
    assert set(seen["keys"]) <= OBSERVATION_KEYS | ROW_KEYS, set(seen["keys"]) - OBSERVATION_KEYS - ROW_KEYS
    assert set(seen["observation"]) == set(seen["keys"]) & OBSERVATION_KEYS
    assert set(seen["rows"]) == set(seen["keys"]) & ROW_KEYS
    assert {"state", "images", "slot", "episode_seed", "trial", "delay_steps", "committed_actions"} <= set(seen["keys"])
    assert all(seen["row_slots"])
