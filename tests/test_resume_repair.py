"""``--resume`` trusts the episode lines, not the summary: a missing or damaged ``results.json`` is rebuilt from the
run's identity file and ``episodes.jsonl``, a torn last line is run again, and a run killed at random points ends
with the uninterrupted run's episodes. On the real PushT simulator, with a camera-reading expert whose episodes
succeed and fail."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import subprocess_env
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = [pytest.mark.sim, pytest.mark.slow]
runner = CliRunner()
POLICY = f"{Path(__file__).parent / 'pusht_policies.py'}:make_looking_expert"
ARGS = ["--suite", "pusht", "--policy", POLICY, "--episodes", "8", "--max-steps", "40", "--batch-size", "2",
        "--videos", "0"]


def outcomes(out):
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["episode"], e["success"], e["steps"], e["return"], e["obs_digest"], e["progress"]) for e in lines)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    result = runner.invoke(app, ["eval", *ARGS, "--output", str(out)])
    assert result.exit_code == 0, result.output
    found = outcomes(out)
    assert len(found) == 8 and any(o[1] for o in found) and not all(o[1] for o in found)  # successes and failures
    return out


def _copy_first(whole, out, keep):
    """A run directory holding ``whole``'s identity and first ``keep`` episode lines (a run cut short)."""
    out.mkdir()
    (out / "run.json").write_bytes((whole / "run.json").read_bytes())
    (out / "results.json").write_bytes((whole / "results.json").read_bytes())
    lines = (whole / "episodes.jsonl").read_text().splitlines(keepends=True)
    (out / "episodes.jsonl").write_text("".join(lines[:keep]))
    return out


@pytest.mark.parametrize("damage", ["truncated", "missing", "not a run"])
def test_a_damaged_or_missing_results_json_is_rebuilt_from_the_episode_lines(whole, tmp_path, damage):
    out = _copy_first(whole, tmp_path / "cut", keep=5)
    results = out / "results.json"
    if damage == "truncated":
        results.write_bytes(results.read_bytes()[: len(results.read_bytes()) // 2])
    elif damage == "missing":
        results.unlink()
    else:
        results.write_text("[1, 2, 3]\n")
    result = runner.invoke(app, ["eval", *ARGS, "--output", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert "rebuilt from run.json and episodes.jsonl" in " ".join(result.output.split())
    assert outcomes(out) == outcomes(whole)
    assert json.loads(results.read_text())["overall"]["n_episodes"] == 8


def test_a_torn_last_line_is_dropped_and_that_episode_run_again(whole, tmp_path):
    out = _copy_first(whole, tmp_path / "torn", keep=4)
    torn = (whole / "episodes.jsonl").read_text().splitlines()[4]
    with (out / "episodes.jsonl").open("a") as f:
        f.write(torn[: len(torn) // 2])  # killed mid-write: no newline
    result = runner.invoke(app, ["eval", *ARGS, "--output", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert "unterminated last line" in " ".join(result.output.split())
    assert outcomes(out) == outcomes(whole)


def test_another_runs_identity_is_still_refused(whole, tmp_path):
    out = _copy_first(whole, tmp_path / "other", keep=3)
    (out / "results.json").unlink()
    result = runner.invoke(app, ["eval", *ARGS[:-4], "--seed", "7", "--videos", "0", "--batch-size", "2",
                                 "--output", str(out), "--resume"])
    assert result.exit_code != 0 and "another run" in result.output


def test_kill_9_at_random_points_then_resume_gives_the_uninterrupted_episodes(whole, tmp_path):
    rng = random.Random(int(os.environ.get("LEROBENCH_KILL_SEED", "0")))
    command = [sys.executable, "-m", "lerobench", "eval", *ARGS]
    for attempt in range(3):
        out = tmp_path / f"kill{attempt}"
        proc = subprocess.Popen([*command, "--output", str(out)], env=subprocess_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(1.5, 6.0))  # start-up, then anywhere in the episodes' writes
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        resumed = subprocess.run([*command, "--output", str(out), "--resume"], env=subprocess_env(),
                                 capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert outcomes(out) == outcomes(whole), f"attempt {attempt}"
