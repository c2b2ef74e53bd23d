"""Watching a long run: progress lines in a log file while it runs; start-up reported apart from throughput."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\d\d:\d\d:\d\d progress smoke: (\d+)/(\d+) episodes \(\d+%\), (\d+) solved.*, elapsed "
                  r"\d+:\d\d:\d\d, ETA (\S+)$")


def test_a_run_logged_to_a_file_shows_progress_lines_while_it_runs(tmp_path):
    pytest.importorskip("metaworld")
    log = tmp_path / "run.log"
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--episodes", "8",
                                 "--videos", "0", "--progress-interval", "0.5", "--output", str(tmp_path / "run")],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            seen_running = False
            deadline = time.monotonic() + 240
            while proc.poll() is None and time.monotonic() < deadline:
                if any(LINE.match(line) for line in log.read_text().splitlines()):
                    seen_running = proc.poll() is None
                    break
                time.sleep(0.1)
            assert proc.wait(timeout=240) == 0, log.read_text()
        finally:
            proc.kill()
    text = log.read_text()
    assert seen_running, f"no progress line before the run ended:\n{text}"  # in the file while it ran
    progress = [LINE.match(line) for line in text.splitlines() if LINE.match(line)]
    assert len(progress) >= 2 and all(int(m.group(2)) == 16 for m in progress)
    done = [int(m.group(1)) for m in progress]
    assert done == sorted(done) and done[-1] == 16 and progress[-1].group(3) == "16" and progress[-1].group(4) != "-"
    for task in ("reach-v3", "button-press-v3"):  # a line when each task finishes
        assert re.search(rf"^\d\d:\d\d:\d\d task {task} finished: 8 episodes, 100.0% success$", text, re.M), text


def test_start_up_is_reported_apart_from_steady_throughput(tmp_path):
    """A short run's wall time is mostly start-up: results.json and the summary give it apart (item 6)."""
    pytest.importorskip("metaworld")
    out = tmp_path / "run"
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--episodes", "2",
                           "--videos", "0", "--executor", "processes", "--workers", "2", "--output", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    timing, overall = results["timing"], results["overall"]
    assert 0 < timing["startup_s"] and timing["startup_s"] + timing["steady_s"] <= overall["eval_s"] + 0.01
    assert timing["steady_env_steps_per_s"] > overall["env_steps_per_s"]
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    steps = sum(line["steps"] for line in lines)
    assert abs(timing["steady_env_steps_per_s"] * timing["steady_s"] - steps) <= 0.02 * steps
    # an episode's time is its own: the worker's start-up and the simulator's build are not in it
    assert max(line["elapsed_s"] for line in lines) <= timing["steady_s"] < timing["startup_s"]
    assert f"start-up {timing['startup_s']:.1f} s" in done.stdout
    assert timing["first_step_s"] is None  # workers step on their own clocks: not measured, never guessed
