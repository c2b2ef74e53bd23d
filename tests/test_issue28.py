"""Issue 28: runs a user can restart and debug (resume before results.json, unique and locked output
directories, merge of one directory twice, no empty directories, policy tracebacks, clipped actions, policy
paths, remote mismatches, empty --tasks, golden-state shape, extending a run)."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytest.importorskip("metaworld")
ROOT = Path(__file__).parent.parent
runner = CliRunner()
FAST = ("--suite", "smoke", "--tasks", "reach-v3", "--max-steps", "3", "--videos", "0")


def _eval(*args):
    return runner.invoke(app, ["eval", *args])


def _one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.parametrize("command", ["eval", "robustness"])
def test_empty_tasks_is_refused_not_every_task(tmp_path, command):
    out = tmp_path / "o"
    args = (["eval", "--suite", "smoke", "--tasks", "", "--max-steps", "2", "--videos", "0", "-o", str(out)]
            if command == "eval" else
            ["robustness", "--base", "smoke", "--tasks", " , ", "--families", "action_noise=0.1", "-o", str(out)])
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "names no task" in _one_line(result.output) and not out.exists()


@pytest.mark.parametrize(("url", "suggested"), [("http://127.0.0.1:8000", "ws://127.0.0.1:8000"),
                                                ("https://gpu-box:8000/", "wss://gpu-box:8000/")])
def test_http_policy_url_suggests_websockets(tmp_path, url, suggested):
    out = tmp_path / "o"
    result = _eval(*FAST, "--policy", url, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert f"use {suggested}" in _one_line(result.output) and "Traceback" not in result.output


def test_merge_refuses_one_directory_twice_or_a_copy(tmp_path):
    import shutil

    s0 = tmp_path / "s0"
    result = _eval("--suite", "smoke", "--policy", "zero", "--max-steps", "2", "--videos", "0", "--shard", "0/2",
                   "-o", str(s0))
    assert result.exit_code == 0, result.output
    for inputs, says in (([s0, s0], "is given twice"), ([s0, tmp_path / "." / "s0"], "is given twice"),
                         ([s0, tmp_path / "copy"], "hold the same run")):
        if inputs[1].name == "copy":
            shutil.copytree(s0, inputs[1])
        out = tmp_path / f"merged-{says[:4]}"
        result = runner.invoke(app, ["merge", *map(str, inputs), "-o", str(out)])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: cannot merge") and says in _one_line(result.output)
        assert not (out / "results.json").exists()


@pytest.fixture
def golden_copy(tmp_path, monkeypatch):
    """A private cache and a perturbable copy of the Meta-World golden file (not another MuJoCo)."""
    import shutil

    from lerobench.envs.fingerprint import golden_path

    monkeypatch.setenv("LEROBENCH_CACHE_DIR", str(tmp_path / "cache"))
    golden = tmp_path / "golden"
    shutil.copytree(golden_path("metaworld").parent, golden)
    monkeypatch.setenv("LEROBENCH_GOLDEN_DIR", str(golden))

    def perturb(change) -> None:
        doc = json.loads((golden / "metaworld.json").read_text())
        change(doc)
        (golden / "metaworld.json").write_text(json.dumps(doc))

    return perturb


def test_golden_check_names_a_state_size_that_differs_and_the_versions(golden_copy, tmp_path):
    def longer_state_recorded_elsewhere(doc):
        doc["recorded_with"]["mujoco"] = "3.2.7"
        for key in ("state", "state_after"):
            doc["cases"][0][key].append(0.0)

    golden_copy(longer_state_recorded_elsewhere)
    result = _eval(*FAST, "-o", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    line = _one_line(result.output)
    assert "reach-v3 episode 0: state size differs: expected 40, got 39" in line
    assert "versions differ from the golden file's: mujoco 3.3.0 here, recorded with 3.2.7" in line
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "o" / "results.json").exists()


def test_golden_check_that_cannot_run_names_the_case_and_phase(golden_copy):
    from lerobench.envs.fingerprint import fingerprint
    from lerobench.envs.metaworld import BACKEND

    golden_copy(lambda doc: doc["cases"][0].update(action=[0.0] * 7))  # the simulator raises inside a step
    reason = fingerprint("metaworld", BACKEND.packages)["golden"]["reason"]
    assert reason.startswith("the check could not run: RuntimeError: reach-v3 episode 0: step 1 of 5 raised "), reason


def test_eval_refuses_a_server_for_another_suite_in_one_line(tmp_path):
    import threading

    from lerobench.policies.serve import PolicyServer, suite_context

    server = PolicyServer("metaworld-expert", suite_context("smoke"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "o"
        result = _eval("--suite", "metaworld_mt10", "--tasks", "push-v3", "--policy", server.url, "--max-steps", "3",
                       "--videos", "0", "-o", str(out))
        served = _eval(*FAST, "--policy", server.url, "-o", str(tmp_path / "ok"))  # its own suite still runs
    finally:
        server.shutdown()
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "KeyError" not in result.output
    assert "serves suite 'smoke', which has no task push-v3 of suite 'metaworld_mt10'" in _one_line(result.output)
    assert served.exit_code == 0, served.output


POLICY_FILE = '''
from lerobench.policies.builtin import ZeroPolicy


def make_policy(context):
    return ZeroPolicy(context.action_dim)
'''


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_policy_from_a_file_path_runs_on_every_executor_kind(tmp_path, monkeypatch, executor):
    folder = tmp_path / "pols"
    folder.mkdir()
    (folder / "my_policy.py").write_text(POLICY_FILE)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    result = _eval(*FAST, "--policy", "./pols/my_policy.py:make_policy", "--executor", executor, "-o", str(out))
    assert result.exit_code == 0, result.output
    config = json.loads((out / "results.json").read_text())["config"]
    assert config["policy"] == f"{folder / 'my_policy.py'}:make_policy"  # absolute: workers elsewhere load it too
    assert config["executor_used"] == executor


@pytest.mark.parametrize(("source", "says"), [
    ("def make_policy(context)\n    return None\n", "SyntaxError at {path}:1: expected ':'"),
    ("import numpy\nimport no_such_package_28\n", "failed at {path}:2: ModuleNotFoundError: No module named "
                                                  "'no_such_package_28'"),
    ("x = 1\nraise RuntimeError('boom at import')\n", "failed at {path}:2: RuntimeError: boom at import"),
])
@pytest.mark.parametrize("form", ["path", "module"])
def test_broken_policy_module_is_one_line_naming_file_and_line(tmp_path, monkeypatch, source, says, form):
    path = tmp_path / "broken_policy_28.py"
    path.write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{path}:make_policy" if form == "path" else "broken_policy_28:make_policy"
    result = _eval(*FAST, "--policy", spec, "-o", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert says.format(path=path) in _one_line(result.output)
    sys.modules.pop("broken_policy_28", None)
