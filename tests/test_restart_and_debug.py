"""Runs a user can restart and debug (resume before results.json, unique and locked output
directories, merge of one directory twice, no empty directories, policy tracebacks, clipped actions, policy
paths, remote mismatches, empty --tasks, golden-state shape, extending a run)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim  # every test here drives a real simulator

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
    missing = _eval(*FAST, "--policy", "./pols/nope.py:make_policy", "-o", str(tmp_path / "missing"))
    assert missing.exit_code == 2 and f"no such file {folder / 'nope.py'}" in _one_line(missing.output)


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


# -- items 1, 2, 4, 18: the output directory ------------------------------------------------------------------
def _episodes(run: Path) -> list[tuple]:
    lines = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["task"], e["episode"], e["seed"], e["success"], e["steps"], e["return"]) for e in lines)


SLOW = ("--suite", "smoke", "--tasks", "reach-v3", "--policy", "metaworld-expert", "--episodes", "3",
        "--max-steps", "150", "--videos", "0", "--executor", "inline")


def test_resume_without_results_json_starts_the_run_then_kill_9_anywhere_ends_as_the_reference(tmp_path):
    import random
    import signal
    import time

    reference = tmp_path / "reference"
    assert _eval(*SLOW, "-o", str(reference)).exit_code == 0
    run = tmp_path / "requeued"  # a cluster job that always passes --resume, killed at random points
    command = [sys.executable, "-m", "lerobench", "eval", *SLOW, "--resume", "-o", str(run)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng, killed_before_results = random.Random(28), False
    for delay in [0.3] + [rng.uniform(0.5, 4.0) for _ in range(5)]:  # the first kill lands in start-up
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(delay)
        if proc.poll() is None:
            killed_before_results |= not (run / "results.json").exists()
            proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, out  # never "cannot resume"
    else:
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    assert killed_before_results  # start-up was hit at least once
    assert _episodes(run) == _episodes(reference)
    fresh = _eval(*FAST, "--resume", "-o", str(tmp_path / "missing" / "dir"))  # no directory at all
    assert fresh.exit_code == 0, fresh.output
    assert "nothing to resume: " in _one_line(fresh.output) and "starting the run" in _one_line(fresh.output)


def test_resume_refuses_episodes_whose_run_is_unknown(tmp_path):
    run = tmp_path / "o"
    assert _eval(*FAST, "-o", str(run)).exit_code == 0
    (run / "results.json").unlink()
    (run / "run.json").unlink()  # with it, --resume rebuilds results.json (tests/test_resume_repair.py)
    result = _eval(*FAST, "--resume", "-o", str(run))
    assert result.exit_code == 2, result.output
    assert "holds episodes but neither results.json nor run.json" in _one_line(result.output), result.output


def test_default_directories_are_unique_and_a_second_writer_is_refused(tmp_path, monkeypatch):
    from datetime import datetime, timedelta

    from lerobench.output.directory import OutputDir

    monkeypatch.chdir(tmp_path)
    now = datetime.now()
    taken = [tmp_path / "outputs" / "smoke" / (now + timedelta(seconds=s)).strftime("%Y%m%d-%H%M%S")
             for s in range(-1, 60)]  # another eval started "in the same second", whenever this one starts
    for path in taken:
        path.mkdir(parents=True, exist_ok=True)
        (path / "episodes.jsonl").write_text("another run's line\n")
    result = _eval(*FAST)
    assert result.exit_code == 0, result.output
    mine = [p for p in (tmp_path / "outputs" / "smoke").iterdir() if p not in taken]
    assert len(mine) == 1 and mine[0].name.endswith("-2") and (mine[0] / "results.json").is_file()
    assert f"-> outputs/smoke/{mine[0].name}" in _one_line(result.output)
    assert all((p / "episodes.jsonl").read_text() == "another run's line\n" for p in taken)

    first, second = OutputDir.claim(tmp_path / "race", unique=True), OutputDir.claim(tmp_path / "race", unique=True)
    assert (first.path.name, second.path.name) == ("race", "race-2")

    held = OutputDir.claim(tmp_path / "busy")  # a run writing this directory (its lock held)
    held.mark()
    refused = _eval(*FAST, "-o", str(tmp_path / "busy"))
    held.release(failed=False)
    assert refused.exit_code == 2, refused.output
    assert f"output directory {tmp_path / 'busy'} is being written by another lerobench run (PID {os.getpid()})" \
        in _one_line(refused.output)
    assert _eval(*FAST, "-o", str(tmp_path / "busy")).exit_code == 0  # released: the next writer goes ahead


def test_failed_launches_leave_no_directory(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    run_a = tmp_path / "a"
    assert _eval(*FAST, "--policy", "zero", "-o", str(run_a)).exit_code == 0
    for name, args in (("import", ("--policy", "no_such_module_28:make")),
                       ("refused", ("--policy", f"ws://127.0.0.1:{closed}")),
                       ("versus", ("--policy", "zero", "--versus", str(run_a), "--seed", "1"))):
        out = tmp_path / "runs" / name
        result = _eval(*FAST, *args, "-o", str(out))
        assert result.exit_code in (1, 2) and "Traceback" not in result.output, result.output
        assert not out.exists(), f"{name}: {list(out.iterdir())}"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_resume_with_more_episodes_extends_the_run(tmp_path):
    base = ("--suite", "smoke", "--tasks", "reach-v3", "--policy", "random", "--max-steps", "5", "--videos", "0")
    run, whole = tmp_path / "run", tmp_path / "whole"
    assert _eval(*base, "--episodes", "2", "-o", str(run)).exit_code == 0
    first = (run / "episodes.jsonl").read_text()
    extended = _eval(*base, "--episodes", "4", "--resume", "-o", str(run))
    assert extended.exit_code == 0, extended.output
    assert "2 finished episodes kept" in _one_line(extended.output)
    assert (run / "episodes.jsonl").read_text().startswith(first)  # kept as they were
    assert _eval(*base, "--episodes", "4", "-o", str(whole)).exit_code == 0
    assert _episodes(run) == _episodes(whole)  # episode i is the same start whatever the total
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] and results["config"]["episodes_per_task"] == 4

    cut = _eval(*base, "--episodes", "3", "--resume", "-o", str(run))
    assert cut.exit_code == 2 and "extended, never cut" in _one_line(cut.output)
    shard = tmp_path / "shard"
    assert _eval(*base, "--episodes", "2", "--shard", "0/2", "-o", str(shard)).exit_code == 0
    sharded = _eval(*base, "--episodes", "4", "--shard", "0/2", "--resume", "-o", str(shard))
    assert sharded.exit_code == 2 and "a shard cannot be extended" in _one_line(sharded.output)


RAISING_POLICY = '''
import numpy as np

from lerobench.policies.base import PolicyTraits


class Raising:
    traits = PolicyTraits(replicable=True)

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        if int(observation["episode"][0]) == 1:
            deep_inside_the_policy()
        return np.zeros((len(observation["state"]), 4), dtype=np.float32)


def deep_inside_the_policy():
    raise RuntimeError("boom")


def make_policy(context):
    return Raising()
'''


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_a_raising_policy_leaves_its_traceback_and_reason_in_the_run(tmp_path, executor):
    policy = tmp_path / "raising.py"
    policy.write_text(RAISING_POLICY)
    out = tmp_path / "o"
    args = ("--suite", "smoke", "--tasks", "reach-v3", "--episodes", "2", "--max-steps", "3", "--videos", "0",
            "--policy", f"{policy}:make_policy", "--executor", executor, "--workers", "1", "-o", str(out))
    result = _eval(*args)
    assert result.exit_code == 1, result.output
    line = _one_line(result.output.strip().splitlines()[-1])
    assert "episode 1: policy raised RuntimeError: boom" in line and f"(traceback in {out / 'traceback.txt'})" in line
    text = (out / "traceback.txt").read_text()
    assert "deep_inside_the_policy" in text and f'File "{policy}", line 20' in text
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"]
    assert {k: results["failure"][k] for k in ("type", "message", "task", "episode", "traceback")} == {
        "type": "RuntimeError", "message": "boom", "task": "reach-v3", "episode": 1, "traceback": "traceback.txt"}
    debug = _eval(*args[:-1], str(tmp_path / "debug"), "--debug")
    assert debug.exit_code == 1 and "Traceback (most recent call last)" in debug.output
    assert "deep_inside_the_policy" in debug.output


UNNORMALISED_POLICY = '''
import numpy as np


class Unnormalised:
    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        actions = np.zeros((len(observation["state"]), 4), dtype=np.float32)
        actions[:, 0] = 5.0  # one of four dimensions far outside [-1, 1]
        return actions


def make_policy(context):
    return Unnormalised()
'''


def test_clipped_actions_are_warned_once_and_recorded(tmp_path):
    policy = tmp_path / "unnormalised.py"
    policy.write_text(UNNORMALISED_POLICY)
    out = tmp_path / "o"
    result = _eval("--suite", "smoke", "--episodes", "2", "--max-steps", "4", "--videos", "0",
                   "--policy", f"{policy}:make_policy", "-o", str(out))
    assert result.exit_code == 0, result.output
    text = _one_line(result.output)
    assert text.count("were outside the action space [-1, 1] and were clipped") == 1
    assert "warning: 25% of the action values of" in text
    results = json.loads((out / "results.json").read_text())
    assert results["overall"]["clipped_action_fraction"] == 0.25
    assert [t["clipped_action_fraction"] for t in results["tasks"]] == [0.25, 0.25]
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [e["clipped"] for e in lines] == [0.25] * 4

    expert = _eval(*FAST, "--policy", "metaworld-expert", "--max-steps", "30", "-o", str(tmp_path / "expert"))
    assert expert.exit_code == 0 and "outside the action space" not in expert.output  # the expert clips its own gains
    overall = json.loads((tmp_path / "expert" / "results.json").read_text())["overall"]
    assert overall["clipped_action_fraction"] == 0.0


def test_resume_extends_an_until_run_that_stopped_at_its_cap(tmp_path):
    base = ("--suite", "smoke", "--tasks", "reach-v3", "--policy", "metaworld-expert", "--max-steps", "150",
            "--videos", "0", "--until", "halfwidth=0.3")
    run = tmp_path / "u"
    assert _eval(*base, "--episodes", "2", "-o", str(run)).exit_code == 0
    stop = json.loads((run / "results.json").read_text())["stopping"]["tasks"]["reach-v3"]
    assert (stop["episodes"], stop["reason"]) == (2, "cap")
    result = _eval(*base, "--episodes", "40", "--resume", "-o", str(run))
    assert result.exit_code == 0, result.output
    stopping = json.loads((run / "results.json").read_text())["stopping"]
    stop = stopping["tasks"]["reach-v3"]  # anytime-valid: going on past the old cap, the rule decides as before
    assert stopping["cap"] == 40 and stop["reason"] == "target" and 2 < stop["episodes"] < 40
