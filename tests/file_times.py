"""Each test file's time, recorded by the controller of a run (``LEROBENCH_RECORD_DURATIONS=PATH``; CI sets it).

Where CI's minutes go, per file: the 20 slowest are printed at the end and all are written to PATH. Measured
2026-12-02 on a quiet 2-core box: 4,016 s of tests in three workers that ended within 23 s of 4,016 / 3 (the
load scheduling leaves no long tail: ordering files longest-first would gain nothing), so a shorter CI comes only
from cheaper tests.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

_measured: defaultdict[str, float] = defaultdict(float)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_runtest_logreport(report) -> None:
    """Add each phase's time to its file (in the controller only: xdist replays its workers' reports there)."""
    if os.environ.get("LEROBENCH_RECORD_DURATIONS") and not os.environ.get("PYTEST_XDIST_WORKER"):
        _measured[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session) -> None:
    target = os.environ.get("LEROBENCH_RECORD_DURATIONS")
    if not target or os.environ.get("PYTEST_XDIST_WORKER") or not _measured:
        return
    files = {name: round(seconds, 1) for name, seconds in sorted(_measured.items(), key=lambda kv: -kv[1])}
    Path(target).write_text(json.dumps({"note": "seconds per test file (tests/file_times.py)", "files": files},
                                       indent=1) + "\n")
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.write_line("")
        total = sum(files.values())
        terminal.write_line(f"test files by time ({total:.0f} s of tests in all; all of them in {target}):")
        for name, seconds in list(files.items())[:20]:
            terminal.write_line(f"  {seconds:7.1f} s  {name}")
