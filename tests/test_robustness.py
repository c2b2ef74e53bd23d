"""Nothing lost: contained worker crashes, kill-and-resume, Ctrl-C; all on the real Meta-World sim."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import crash_suite, kill_after_lines, session_processes, subprocess_env, wait_for_lines
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.core.call_stats import CALL_STATS_KEYS as CALL_STATS

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")
TESTS = Path(__file__).parent
runner = CliRunner()


def episodes(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("mode", ["exit", "kill", "hang", "raise"])
def test_crashed_or_hung_worker_costs_only_its_episode(tmp_path, mode):
    out = tmp_path / "o"
    args = ["eval", "--suite", str(crash_suite(tmp_path, mode)), "--policy", "random", "--batch-size", "2",
            "--videos", "0", "--output", str(out)]
    if mode == "hang":
        args += ["--episode-timeout", "3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    eps = {e["episode"]: e for e in episodes(out)}
    assert sorted(eps) == [0, 1, 2, 3]  # every episode recorded exactly once
    assert eps[1]["error"] and not eps[1]["success"]
    assert all(eps[i]["error"] is None and eps[i]["steps"] == 8 for i in (0, 2, 3))
    results = json.loads((out / "results.json").read_text())
    assert results["overall"]["n_errors"] == 1 and results["tasks"][0]["n_errors"] == 1
    assert results["overall"]["n_episodes"] == 4


def _cmd(out, *extra):
    return [sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--policy", "random", "--episodes", "6",
            "--max-steps", "60", "--batch-size", "2", "--videos", "0", "--seed", "5", "--output", str(out), *extra]


def _outcomes(out):
    return sorted((e["task"], e["episode"], e["seed"], e["success"], e["steps"], round(e["return"], 6))
                  for e in episodes(out))


def _aggregates(out):
    r = json.loads((out / "results.json").read_text())
    timing = ("eval_s", "episodes_per_s", "env_steps_per_s", *CALL_STATS)
    strip = lambda d: {k: v for k, v in d.items() if k not in timing}  # noqa: E731
    return [strip(t) for t in r["tasks"]], strip(r["overall"]), r["complete"]


def test_kill_and_resume_equals_uninterrupted_run(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert subprocess.run(_cmd(full), env=subprocess_env(), capture_output=True).returncode == 0
    kill_after_lines(_cmd(cut), cut / "episodes.jsonl", 3)
    with open(cut / "episodes.jsonl", "a") as f:
        f.write('{"task": "button-press-v3", "epis')  # a line cut off mid-write by the kill
    partial = episodes_before = len((cut / "episodes.jsonl").read_text().splitlines()) - 1
    assert 3 <= partial < 12
    resumed = subprocess.run(_cmd(cut, "--resume"), env=subprocess_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert _outcomes(cut) == _outcomes(full)
    assert len(episodes(cut)) == 12 and episodes_before < 12
    assert _aggregates(cut) == _aggregates(full)


def test_resume_refuses_a_different_config(tmp_path):
    out = tmp_path / "o"
    assert subprocess.run(_cmd(out), env=subprocess_env(), capture_output=True).returncode == 0
    other = _cmd(out, "--resume")
    other[other.index("--seed") + 1] = "6"
    result = subprocess.run(other, env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 2 and "episodes.seed: previous 5, now 6" in result.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_saves_results_and_leaves_no_processes(tmp_path, sig, code):
    out = tmp_path / "o"
    cmd = _cmd(out)
    cmd[cmd.index("--max-steps") + 1] = "400"
    cmd[cmd.index("--episodes") + 1] = "40"
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_for_lines(out / "episodes.jsonl", 2, proc)
    os.killpg(proc.pid, sig)  # like a terminal: the whole process group gets the signal
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "--resume" in stderr and "Traceback" not in stderr
    time.sleep(1.0)
    assert session_processes(proc.pid) == []
    saved = episodes(out)
    assert len(saved) >= 2
    results = json.loads((out / "results.json").read_text())
    assert results["overall"]["n_episodes"] == len(saved) and not results["complete"]
