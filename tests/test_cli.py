"""The command line as scripts and CI see it: exit codes, one-line usage errors, JSON output, whole names."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from lerobench.cli import EXIT_TOO_MANY_ERRORS, app
from lerobench.errors import did_you_mean
from lerobench.suite.registry import list_suites

TESTS = Path(__file__).parent


def lerobench(*args, columns=80):
    """The real console entry point in a subprocess, output piped (as in CI or `| grep`)."""
    env = {**os.environ, "COLUMNS": str(columns), "MUJOCO_GL": "egl",
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    return subprocess.run([sys.executable, "-c", "from lerobench.cli import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def command_names():
    return sorted(typer.main.get_command(app).commands)


@pytest.mark.parametrize("args", [
    ["eval", "--suite", "smoke", "--batch-size", "abc"],  # bad value
    ["eval", "--suite", "smoke", "--no-such-flag"],  # unknown option
    ["eval"],  # missing option
    ["eval", "--suite", "smoke", "--max-errors", "-1"],  # out of range
    ["show"],  # missing argument
    ["no-such-command"],
])
def test_usage_errors_are_one_error_line_and_exit_2(args):
    result = lerobench(*args)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", command_names())
def test_every_command_reports_unknown_options_in_one_line(command):
    result = lerobench(command, "--no-such-option")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: No such option: --no-such-option (see lerobench {command} --help)"]


@pytest.mark.parametrize("executor,flag", [("processes", "--parallel-tasks"), ("ray", "--batch-size"),
                                           ("inline", "--parallel-tasks")])
def test_vector_only_flags_are_refused_with_other_executors(executor, flag):
    result = lerobench("eval", "--suite", "smoke", "--executor", executor, flag, "2", "--videos", "0")
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{flag} 2 applies to the vector" in lines[0], result.stderr


def test_bad_value_names_the_option():
    result = lerobench("eval", "--suite", "smoke", "--batch-size", "abc")
    assert "--batch-size" in result.stderr and result.returncode == 2


def test_bare_command_prints_help_and_exits_0():
    result = lerobench()
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout and all(c in result.stdout for c in command_names())


def test_list_piped_in_80_columns_keeps_every_name_whole():
    result = lerobench("list", columns=80)
    assert result.returncode == 0
    for suite in list_suites():
        # `lerobench list | grep NAME` finds it, whole, in the name column (a suite may share its backend's name)
        matching = [line for line in result.stdout.splitlines() if line.split()[:1] == [suite.name]]
        assert len(matching) == 1, (suite.name, result.stdout)


def test_show_keeps_long_task_names_whole_in_80_columns():
    result = lerobench("show", "libero_spatial", columns=80)
    assert result.returncode == 0
    suite = next(s for s in list_suites() if s.name == "libero_spatial")
    words = result.stdout.split()
    assert all(t.name in words for t in suite.tasks)


def test_list_and_show_json():
    listed = json.loads(lerobench("list", "--json").stdout)
    assert {s["name"] for s in listed} == {s.name for s in list_suites()}
    mt10 = next(s for s in listed if s["name"] == "metaworld_mt10")
    assert mt10 == {"name": "metaworld_mt10", "backend": "metaworld", "tasks": 10, "episodes_per_task": 50,
                    "max_steps": 500, "description": mt10["description"]}
    shown = json.loads(lerobench("show", "smoke", "--json").stdout)
    assert [t["name"] for t in shown["task_list"]] == ["reach-v3", "button-press-v3"]
    assert shown["protocols"]["standard"]["max_steps"] == 150


def test_unknown_suite_lists_every_valid_name():
    result = lerobench("show", "nosuch")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert all(s.name in result.stderr for s in list_suites())


def test_long_did_you_mean_lists_say_how_many_more():
    names = [f"task_{i:02d}" for i in range(30)]
    hint = did_you_mean("zzz", names)
    assert "task_19" in hint and "task_20" not in hint and hint.endswith(", and 10 more.")
    assert did_you_mean("zzz", names[:3]) == " Valid names: task_00, task_01, task_02."


def crash_suite(tmp_path):
    path = tmp_path / "crash.toml"
    path.write_text("""
name = "crash"
backend = "crash_backend:BACKEND"
episodes_per_task = 2
control_fps = 80
worker_memory_mb = 400
backend_options = { crash_episode = 1, crash_step = 3, mode = "raise" }
tasks = ["reach-v3"]

[protocol]
max_steps = 8
""")
    return path


@pytest.mark.slow
@pytest.mark.sim
def test_max_errors_fails_a_run_with_a_simulator_error(tmp_path):
    pytest.importorskip("metaworld")
    suite = crash_suite(tmp_path)
    common = ["eval", "--suite", str(suite), "--policy", "random", "--videos", "0", "--batch-size", "2"]
    strict = lerobench(*common, "--max-errors", "0", "--output", str(tmp_path / "strict"))
    assert strict.returncode == EXIT_TOO_MANY_ERRORS == 3, strict.stderr
    assert "1 episode ended with an error" in strict.stderr and "--max-errors 0" in strict.stderr
    results = json.loads((tmp_path / "strict" / "results.json").read_text())  # results are still written
    assert results["overall"]["n_errors"] == 1 and results["complete"]
    tolerant = lerobench(*common, "--max-errors", "1", "--output", str(tmp_path / "tolerant"))
    assert tolerant.returncode == 0, tolerant.stderr
    default = lerobench(*common, "--output", str(tmp_path / "default"))
    assert default.returncode == 0, default.stderr  # no limit unless asked for


@pytest.mark.sim
def test_max_errors_0_passes_a_clean_smoke_run_and_plurals_are_right(tmp_path, published_rendering):
    pytest.importorskip("metaworld")
    result = lerobench("eval", "--suite", "smoke", "--tasks", "reach-v3", "--max-steps", "20", "--videos", "0",
                       "--max-errors", "0", "--output", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    assert "(1 task x 1 episode, protocol standard, modified: max_steps 20 (published 150))" in result.stdout
    assert json.loads((tmp_path / "o" / "results.json").read_text())["overall"]["n_errors"] == 0


def test_error_messages_keep_their_brackets():
    """Rich must not eat ``[...]`` in a message (``pip install 'lerobench[ray]'``, a name with brackets)."""
    result = lerobench("show", "smoke[x]")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown suite 'smoke[x]'."), result.stderr


def test_eval_help_names_every_built_in_policy():
    from lerobench.policies.builtin import BUILTIN
    from lerobench.suite.registry import backend_experts

    result = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "400"})
    text = "".join(c for c in result.output if c.isalnum() or c == "-")  # rich may wrap a name at its hyphen
    assert [name for name in [*BUILTIN, *backend_experts()] if name not in text] == []


@pytest.mark.sim
def test_a_finished_run_leaves_no_lock_and_says_how_its_protocol_was_changed(tmp_path, published_rendering):
    pytest.importorskip("metaworld")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--policy", "metaworld-expert-chunks",
                                      "--episodes", "1", "--max-steps", "30", "--videos", "0", "--delay-steps", "3",
                                      "--replan-steps", "8", "--output", str(out)])
    assert result.exit_code == 0, result.output
    header = " ".join(result.output.split())
    assert "modified: max_steps 30 (published 150)" in header and "delay 3 steps, replan every 8 steps" in header
    assert json.loads((out / "results.json").read_text())["config"]["protocol_changes"] == {"max_steps": [150, 30]}
    assert not (out / ".lerobench.lock").exists()
    refused = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--policy", "metaworld-expert-chunks",
                                       "--max-steps", "30", "--videos", "0", "--delay-steps", "50",
                                       "--replan-steps", "8", "--output", str(tmp_path / "no")])
    assert refused.exit_code == 2 and "lower --delay-steps to at most 8" in refused.output
    assert "raise --replan-steps" not in refused.output


def test_list_into_a_pipe_keeps_each_suite_on_one_line():
    """``lerobench list | grep -i aloha`` showed fragments: the descriptions folded at 80 columns in a pipe."""
    from lerobench.suite.registry import load_suite

    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    for name in ("aloha_transfer_cube", "libero_spatial", "pusht"):
        (row,) = [line for line in result.output.splitlines() if line.split()[:1] == [name]]
        assert load_suite(name).description.strip() in row, row
    assert any(line.startswith("More: ") and line.rstrip().endswith("docs/perturbations.md)")
               for line in result.output.splitlines())
