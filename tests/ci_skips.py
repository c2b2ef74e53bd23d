"""Under CI, a skipped test is a failed test (a pytest plugin; tests/conftest.py registers its hooks).

A test that skips because its simulator, extra or browser is missing passes silently: uninstall LIBERO and every
LIBERO test "passes". Where ``CI`` is ``true`` or ``1`` (what CI services set), a skip - in a test, in a fixture,
or a whole module's ``pytest.importorskip`` - fails instead, saying why it skipped. Two ways out, both visible:

- ``LEROBENCH_CI_ALLOW_SKIPS=<why>`` allows every skip for one run; the pytest header prints it.
- ``@pytest.mark.may_skip("reason", ...)`` on a test whose skip depends on the machine, not on what CI installs
  (OSMesa works here, the machine has CUDA): it may skip under CI too, but only with a reason that starts with one
  of those given; a skip for any other reason (an ``importorskip`` in the same test) still fails.

A module skipped as a whole fails as a collection error, which stops the run before any test: CI fails in its
first minute rather than after the rest. Rejected: replacing ``pytest.importorskip`` (a monkeypatch of pytest that
misses ``pytest.skip`` and ``skipif``, and whose module-level calls run before any hook could swap it in).
"""

from __future__ import annotations

import os

import pytest

OPT_OUT = "LEROBENCH_CI_ALLOW_SKIPS"


def strict() -> bool:
    """Whether a skip fails this run: under CI, unless the opt-out variable is set."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1") and not os.environ.get(OPT_OUT, "").strip()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "may_skip(*reasons): a skip the machine decides (not what CI installs); allowed under CI only "
                   "with a reason starting with one of `reasons` (tests/ci_skips.py)")


def pytest_report_header(config: pytest.Config) -> str:
    ci = os.environ.get("CI", "")
    if ci.strip().lower() not in ("true", "1"):
        return f"skips: allowed (CI={ci!r}; under CI=true a skipped test fails: tests/ci_skips.py)"
    if not strict():
        return f"skips: ALLOWED under CI by {OPT_OUT}={os.environ[OPT_OUT]!r}"
    return f"skips: a skipped test FAILS (CI={ci}; {OPT_OUT}=<why> allows skips)"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The skip policy again at the end: ``-q`` (scripts/test.sh) leaves the header out."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1"):
        terminalreporter.write_line(pytest_report_header(config))


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The skip's own message (``longrepr`` is ``(path, line, "Skipped: why")`` for a skip)."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _failed(report, reason: str, where: str) -> None:
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI ({where}), which fails the run: {reason}\n(install what it needs; "
                       f"{OPT_OUT}=<why> allows skips for one run; a skip the machine decides takes "
                       f"@pytest.mark.may_skip: tests/ci_skips.py)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and strict():
        reason = _reason(report)
        allowed = [r for mark in item.iter_markers("may_skip") for r in mark.args]
        if not any(reason.startswith(r) for r in allowed):
            _failed(report, reason, f"in {report.when}")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if report.skipped and strict():
        _failed(report, _reason(report), "the whole module")
    return report
