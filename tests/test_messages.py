"""Messages that say what was checked (issue 37): check-policy and eval at a call width that moves rows by position,
``--task`` named as given."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator


def _cli(*args: str):
    from typer.testing import CliRunner

    from lerobench.cli import app

    return CliRunner().invoke(app, list(args))


def test_check_policy_at_width_3_names_the_measured_position_dependence():
    """41dfc68 advised "--call-width >= 1, the default" to a run at width 3. The check now measures the row in
    every position of a call and says that, with advice that fits (8 or 1); at width 8 the same policy passes."""
    pytest.importorskip("metaworld")
    pytest.importorskip("torch")
    policy = "fixture_policies:make_position_dependent"
    result = _cli("check-policy", "--policy", policy, "--suite", "smoke", "--call-width", "3", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    [failed] = [c for c in report["checks"] if c["status"] == "fail"]
    assert failed["name"] == "batch-invariant"
    assert "the same row in all 3 positions of a call gives outputs up to" in failed["detail"]
    assert "at --call-width 3 a row's bits depend on its position" in failed["detail"]
    assert "use --call-width 1 (the cpu default) or 8" in failed["detail"]
    assert ">= 1, the default" not in failed["detail"]
    assert _cli("check-policy", "--policy", policy, "--suite", "smoke", "--call-width", "8").exit_code == 0


def test_eval_warning_at_width_3_gives_the_cause_not_width_0(tmp_path):
    """41dfc68's warning at --call-width 3 asked "--call-width 0?"."""
    pytest.importorskip("metaworld")
    pytest.importorskip("torch")
    result = _cli("eval", "--suite", "smoke", "--tasks", "reach-v3", "--policy",
                  "fixture_policies:make_position_dependent", "--call-width", "3", "--episodes", "3",
                  "--batch-size", "3", "--executor", "vector", "--max-steps", "5", "--videos", "0",
                  "-o", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.output.splitlines() if "batch invariance failed" in line]
    assert "at --call-width 3 a row's bits depend on its position" in warning
    assert "--call-width 0" not in warning and "run `lerobench check-policy --call-width 3`" in warning


def test_check_policy_names_task_as_given():
    result = _cli("check-policy", "--policy", "zero", "--suite", "smoke", "--task", "5")
    assert result.exit_code == 2
    assert "--task 5: suite 'smoke' has tasks 0-1" in result.output and "--tasks" not in result.output


def test_a_policy_needing_an_extra_the_set_up_did_not_install_names_the_extra(tmp_path):
    """torch missing (the README's set-up installs only the simulators): the error says which extra installs it."""
    import subprocess
    import sys

    from helpers import subprocess_env

    fake = tmp_path / "without" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path / 'without'}:{env['PYTHONPATH']}"
    done = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--policy",
                           "fixture_policies:make_mlp", "--episodes", "1", "--max-steps", "2", "--videos", "0",
                           "--output", str(tmp_path / "o")], env=env, capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    assert done.returncode != 0 and "No module named 'torch'" in text, text
    assert "pip install 'lerobench[torch]' installs it" in text and "Traceback" not in text, text


def test_every_extra_a_message_names_exists_in_pyproject():
    """An install hint that names an extra pyproject.toml does not define sends the user to a pip error."""
    import re
    from pathlib import Path

    import tomllib

    from lerobench.extras import EXTRAS

    root = Path(__file__).resolve().parent.parent
    defined = set(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = {m.group(1): path.name for path in (root / "lerobench").rglob("*.py")
             for m in re.finditer(r"lerobench\[([a-z_-]+)\]", path.read_text())}
    assert set(EXTRAS.values()) <= defined
    placeholder = {"extra"}  # "lerobench[extra]" in docstrings
    assert {extra: where for extra, where in named.items() if extra not in defined | placeholder} == {}
    assert len(named) >= 8  # the scan found the messages
