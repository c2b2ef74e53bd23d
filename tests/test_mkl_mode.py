"""API and CLI in different MKL modes (issue 61 item 7): recorded, warned once by ``evaluate``, named by ``compare``.

MKL reads ``MKL_CBWR`` once, when it starts, so each side runs in its own process: the ``lerobench`` command
(strict: it sets ``MKL_CBWR=AUTO,STRICT`` at its start) and a training-loop script calling ``evaluate`` without it
(MKL's default mode). The policy is a torch MLP whose actions move by 1e-6 outside strict mode, what the plain
MLP's products do on this kind of CPU, made certain so the test does not hope for the hardware's difference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
POLICY = "fixture_policies:make_mkl_mode_dependent"
RUN = ["--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3", "--episodes", "2", "--max-steps", "40",
       "--videos", "0"]

TRAINING_LOOP = """
import json, sys, warnings
import lerobench
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for output in sys.argv[1:]:  # a training loop's evaluations: the warning comes once
        lerobench.evaluate(POLICY, "metaworld_mt10", tasks=["reach-v3", "push-v3"], episodes=2,
                           max_steps=40, videos=0, output=output)
print(json.dumps([{"category": w.category.__name__, "message": str(w.message), "file": w.filename}
                  for w in seen if issubclass(w.category, lerobench.NumericsWarning)]))
""".replace("POLICY", repr(POLICY))

pytestmark = [pytest.mark.sim]


def _env(strict: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}  # conftest.py sets it for CliRunner commands
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if strict:
        env["MKL_CBWR"] = "AUTO,STRICT"
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Run A by the lerobench command (strict MKL), runs B and B2 by ``evaluate`` in a process without MKL_CBWR."""
    pytest.importorskip("metaworld")
    torch = pytest.importorskip("torch")
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL: no MKL mode to differ")
    root = tmp_path_factory.mktemp("mkl")
    cli = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--policy", POLICY, *RUN,
                          "--output", str(root / "cli")], capture_output=True, text=True, env=_env(False),
                         timeout=600, cwd=root)
    assert cli.returncode == 0, cli.stderr[-3000:]
    script = root / "train.py"
    script.write_text(TRAINING_LOOP)
    api = subprocess.run([sys.executable, str(script), str(root / "api"), str(root / "api2")], capture_output=True,
                         text=True, env=_env(False), timeout=600, cwd=root)
    assert api.returncode == 0, api.stderr[-3000:]
    return {"root": root, "warnings": json.loads(api.stdout.strip().splitlines()[-1]), "script": str(script)}


def _config(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())["config"]


def test_evaluate_outside_strict_mkl_records_the_mode_and_warns_once_how_to_match(runs):
    root = runs["root"]
    assert _config(root / "cli")["numerics"]["mkl"] == "strict"
    assert _config(root / "api")["numerics"]["mkl"] == "default"
    assert _config(root / "api2")["numerics"]["mkl"] == "default"
    warned = runs["warnings"]
    assert len(warned) == 1, warned  # two evaluations, one warning
    message = warned[0]["message"]
    assert "'default'" in message and "'strict'" in message and "config.numerics.mkl" in message
    assert "MKL_CBWR=AUTO,STRICT" in message and "before Python starts" in message
    assert warned[0]["file"] == runs["script"]  # pointed at the caller's line, not lerobench's


def test_evaluate_in_strict_mkl_does_not_warn(tmp_path):
    pytest.importorskip("metaworld")
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(TRAINING_LOOP)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                         env=_env(True), timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert _config(tmp_path / "run")["numerics"]["mkl"] == "strict"


def test_compare_names_the_mkl_mode_when_the_same_inputs_gave_other_actions(runs):
    from typer.testing import CliRunner

    from lerobench.analysis.compare import compare_runs, load_run
    from lerobench.cli import app

    root = runs["root"]
    a, b = load_run(root / "cli"), load_run(root / "api")
    comparison = compare_runs(a, b)
    assert comparison["differences"] == [] and comparison["treatment"] == []  # the same run but for MKL's mode
    inputs = comparison["same_observations_throughout"]
    assert inputs["different"] > 0 and inputs["first"]["call"] > 0  # same start, then other actions
    assert inputs["cause"] == "mkl"
    assert comparison["a"]["mkl"] == "strict" and comparison["b"]["mkl"] == "default"
    cause = [n for n in comparison["notes"] if n.startswith("cause:")]
    assert len(cause) == 1 and "'strict'" in cause[0] and "'default'" in cause[0], comparison["notes"]
    assert "MKL_CBWR=AUTO,STRICT" in cause[0]
    printed = CliRunner().invoke(app, ["compare", str(root / "cli"), str(root / "api")])
    assert printed.exit_code == 0, printed.output
    assert "different MKL modes" in " ".join(printed.output.split())

    # Two runs in one mode with the same inputs throughout: nothing to explain.
    same = compare_runs(load_run(root / "api"), load_run(root / "api2"))
    assert same["same_observations_throughout"]["different"] == 0
    assert "cause" not in same["same_observations_throughout"]
    assert not [n for n in same["notes"] if n.startswith("cause:")]
