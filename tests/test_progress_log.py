"""Progress of a run whose stdout is a log file (nohup, SLURM, CI): plain lines while it runs, not only at the end."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
