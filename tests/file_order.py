"""The slowest test files first, for pytest-xdist's ``--dist loadfile`` (``scripts/test.sh``).

xdist hands out whole files in collection order; a file of several minutes handed out last keeps one worker busy
while the others idle. Ordering files by their measured time (``tests/durations.json``, written by a run with
``LEROBENCH_RECORD_DURATIONS=tests/durations.json``) is longest-first scheduling: the long ones start first and the
short ones fill the gaps at the end. A file missing from the table (a new one) counts as quick; only the order
changes, never which tests run.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).with_name("durations.json")
_measured: defaultdict[str, float] = defaultdict(float)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def file_costs(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests) from the last recorded run; {} if none."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text())["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def slowest_files_first(items: list) -> None:
    """Reorder ``items`` in place: files by measured cost, longest first; tests within a file keep their order."""
    costs = file_costs()
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(_file_of(item.nodeid), []).append(item)
    order = sorted(groups, key=lambda name: -costs.get(name, 0.0))  # stable: unmeasured files keep theirs
    items[:] = [item for name in order for item in groups[name]]


def pytest_runtest_logreport(report) -> None:
    """Add each phase's time to its file (in the controller only: xdist replays its workers' reports there)."""
    if os.environ.get("LEROBENCH_RECORD_DURATIONS") and not os.environ.get("PYTEST_XDIST_WORKER"):
        _measured[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session) -> None:
    target = os.environ.get("LEROBENCH_RECORD_DURATIONS")
    if not target or os.environ.get("PYTEST_XDIST_WORKER") or not _measured:
        return
    files = {name: round(seconds, 1) for name, seconds in sorted(_measured.items(), key=lambda kv: -kv[1])}
    Path(target).write_text(json.dumps({"note": "seconds per test file (tests/file_order.py)", "files": files},
                                       indent=1) + "\n")
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.ensure_newline()
        total = sum(files.values())
        terminal.write_line(f"test files by time ({total:.0f} s of tests in all; all of them in {target}):")
        for name, seconds in list(files.items())[:20]:
            terminal.write_line(f"  {seconds:7.1f} s  {name}")
