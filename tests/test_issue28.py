"""Issue 28: runs a user can restart and debug (resume before results.json, unique and locked output
directories, merge of one directory twice, no empty directories, policy tracebacks, clipped actions, policy
paths, remote mismatches, empty --tasks, golden-state shape, extending a run)."""

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
