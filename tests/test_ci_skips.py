"""tests/ci_skips.py: under CI a skip fails the run, unless the opt-out says why; a machine-decided skip may pass.

Real pytest runs of a small test file in a subprocess, with and without ``CI=true``.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # three pytest runs in subprocesses

TESTS = '''
import pytest

def test_runs():
    pass

def test_skips_in_its_body():
    pytest.skip("no simulator here")

@pytest.fixture
def extra():
    pytest.importorskip("a_module_nobody_installed")

def test_skips_in_a_fixture(extra):
    pass

@pytest.mark.skipif(True, reason="chromium is not installed")
def test_skipif():
    pass

@pytest.mark.may_skip("the machine has CUDA")
def test_skip_the_machine_decides():
    pytest.skip("the machine has CUDA")

@pytest.mark.skipif(True, reason="OSMesa works on this machine")
@pytest.mark.may_skip("OSMesa works")
def test_skipif_the_machine_decides():
    pass

@pytest.mark.may_skip("the machine has CUDA")
def test_another_skip_in_a_may_skip_test():
    pytest.importorskip("a_module_nobody_installed")
'''
MODULE_SKIP = '''
import pytest

pytest.importorskip("a_module_nobody_installed")

def test_never_collected():
    pass
'''


def _pytest(tmp_path: Path, **env: str) -> tuple[int, dict[str, str], str]:
    """Run the two files with tests/ci_skips.py: (exit code, outcome per test or module, output)."""
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CI", "LEROBENCH_CI_ALLOW_SKIPS", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    report = tmp_path / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_skips", "-p", "no:cacheprovider", "-p",
                           "no:xdist", "--continue-on-collection-errors", f"--junitxml={report}", str(tmp_path)],
                          cwd=tmp_path,
                          env={**clean, "PYTHONPATH": str(Path(__file__).parent), **env}, capture_output=True,
                          text=True, timeout=120)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name") or case.get("classname")] = kinds[0] if kinds else "passed"
    return done.returncode, outcomes, done.stdout + done.stderr


def test_without_ci_a_skip_is_a_skip(tmp_path):
    code, outcomes, output = _pytest(tmp_path)
    assert code == 0, output
    assert outcomes == {"test_runs": "passed", "test_skips_in_its_body": "skipped",
                        "test_skips_in_a_fixture": "skipped", "test_skipif": "skipped",
                        "test_skip_the_machine_decides": "skipped", "test_skipif_the_machine_decides": "skipped",
                        "test_another_skip_in_a_may_skip_test": "skipped", "test_module_skip": "skipped"}, output
    assert "skips: allowed (CI=''" in output


def test_under_ci_a_skip_fails_unless_the_machine_decides_it(tmp_path):
    code, outcomes, output = _pytest(tmp_path, CI="true")
    assert code != 0, output
    assert outcomes == {"test_runs": "passed", "test_skips_in_its_body": "failure",
                        "test_skips_in_a_fixture": "error", "test_skipif": "error",
                        "test_skip_the_machine_decides": "skipped", "test_skipif_the_machine_decides": "skipped",
                        "test_another_skip_in_a_may_skip_test": "failure", "test_module_skip": "error"}, output
    assert "skipped under CI (in call), which fails the run: no simulator here" in output
    assert "skipped under CI (the whole module), which fails the run: could not import 'a_module_nobody_installed'" \
        in output
    assert "skips: a skipped test FAILS (CI=true; LEROBENCH_CI_ALLOW_SKIPS=<why> allows skips)" in output


def test_under_ci_the_opt_out_allows_skips_and_says_so(tmp_path):
    code, outcomes, output = _pytest(tmp_path, CI="1", LEROBENCH_CI_ALLOW_SKIPS="no LIBERO on this runner")
    assert code == 0, output
    assert sorted(k for k, v in outcomes.items() if v != "skipped") == ["test_runs"], output
    assert "skips: ALLOWED under CI by LEROBENCH_CI_ALLOW_SKIPS='no LIBERO on this runner'" in output
