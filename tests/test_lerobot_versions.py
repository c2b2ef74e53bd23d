"""LeRobot policies as trained on PushT (diffusion, ACT) run through ``lerobot:<dir>`` with the same episodes at
batch 1, 4 and in worker processes: saved by the installed LeRobot, and by another release where
``LEROBENCH_LEROBOT_SAVED`` names a folder of them (``scripts/test-lerobot-current.sh`` runs this file under the
current LeRobot on Python 3.12 with the policies 0.4.4 saved)."""

import json
import os
from importlib.metadata import version
from pathlib import Path

import pytest
from lerobot_pusht_fixtures import SAVERS
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim
runner = CliRunner()
ELSEWHERE = os.environ.get("LEROBENCH_LEROBOT_SAVED")
CASES = [("installed", kind) for kind in SAVERS] + ([("elsewhere", kind) for kind in SAVERS] if ELSEWHERE else [])


@pytest.mark.parametrize(("saved_by", "kind"), CASES)
def test_a_lerobot_policy_gives_the_same_episodes_at_batch_1_4_and_in_processes(tmp_path, saved_by, kind):
    policy = SAVERS[kind](tmp_path / kind) if saved_by == "installed" else Path(ELSEWHERE) / kind
    runs = {}
    for name, extra in (("b1", ["--batch-size", "1"]), ("b4", ["--batch-size", "4", "--executor", "vector"]),
                        ("proc", ["--executor", "processes", "--workers", "2"])):
        out = tmp_path / name
        result = runner.invoke(app, ["eval", "--suite", "pusht", "--policy", f"lerobot:{policy}", "--episodes", "4",
                                     "--max-steps", "10", "--videos", "0", *extra, "--output", str(out)])
        assert result.exit_code == 0, result.output
        lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
        assert all(e["obs_parts"] == ["state", "top"] and e["error"] is None for e in lines)
        runs[name] = sorted((e["episode"], e["steps"], e["return"], e["obs_digest"], e["progress"]) for e in lines)
        config = json.loads((out / "results.json").read_text())["config"]
        assert config["batch_invariant"] == "verified"
    assert runs["b1"] == runs["b4"] == runs["proc"]
    assert len({e[2] for e in runs["b1"]}) > 1  # the policy acts: episodes differ (not a constant agent)
    print(f"lerobot {version('lerobot')}: {kind} saved by {saved_by} ({policy})")
