"""What a user gives is checked up front: bad flags and suite typos fail before anything runs (file and key named),
--tasks by index and range with ranked suggestions, an Evaluation runs once, a setting with no effect is said; and
custom suites work end to end (merged from anywhere, videos at the backend's rate)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")
ROOT = Path(__file__).parent.parent
runner = CliRunner()


def _eval(*args):
    return runner.invoke(app, ["eval", *args])


def _suite(tmp_path, name="custom", extra="", tasks='["reach-v3"]', protocol=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
backend = "metaworld"
episodes_per_task = 1
{extra}
tasks = {tasks}

[protocol]
max_steps = 5
{protocol}
""")
    return path


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_out_of_range_seed_fails_before_anything_runs(tmp_path, seed):
    out = tmp_path / "o"
    result = _eval("--suite", "smoke", "--seed", seed, "--max-steps", "2", "--videos", "0", "--output", str(out))
    assert result.exit_code == 2 and "--seed must be between 0 and 4294967295" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_an_evaluation_runs_once_then_refuses_clearly(tmp_path):
    from lerobench.errors import RunError
    from lerobench.execution.runner import Evaluation, RunSettings
    from lerobench.suite.registry import load_suite

    suite = load_suite("smoke").select_tasks(["reach-v3"])
    evaluation = Evaluation(RunSettings(suite=suite, policy="zero", output=tmp_path / "o", max_steps=2, videos=0))
    assert evaluation.run()["overall"]["n_episodes"] == 1
    with pytest.raises(RunError, match="already run; build a new Evaluation"):
        evaluation.run()


def test_device_ignored_by_a_builtin_policy_is_said(tmp_path):
    result = _eval("--suite", "smoke", "--tasks", "reach-v3", "--policy", "zero", "--device", "cuda",
                   "--max-steps", "2", "--videos", "0", "--output", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert "warning: --device cuda has no effect" in " ".join(result.output.split())


def test_tasks_by_index_and_range_and_ranked_suggestions():
    from lerobench.errors import UnknownNameError
    from lerobench.suite.registry import load_suite

    s = load_suite("metaworld_mt10")
    assert [t.index for t in s.select_tasks(["0-2", "7"]).tasks] == [0, 1, 2, 7]
    assert [t.name for t in s.select_tasks(["push-v3", "0"]).tasks] == ["reach-v3", "push-v3"]
    with pytest.raises(UnknownNameError, match="has tasks 0-9"):
        s.select_tasks(["3-12"])
    libero = load_suite("libero_90")
    with pytest.raises(UnknownNameError) as err:
        libero.select_tasks(["KITCHEN_SCENE3_turn_on_the_stov"])
    hint = str(err.value).split("Did you mean ", 1)[1]
    assert hint.startswith("'KITCHEN_SCENE3_turn_on_the_stove'")  # the closest first, not the alphabetical first
    with pytest.raises(UnknownNameError) as err:
        libero.select_tasks(["wine_bottle"])
    assert "wine_bottle" in str(err.value).split("Did you mean ", 1)[1].split(" or ")[0]


def test_tasks_option_takes_a_range(tmp_path):
    out = tmp_path / "o"
    result = _eval("--suite", "metaworld_mt10", "--tasks", "0-1", "--policy", "zero", "--episodes", "1",
                   "--max-steps", "2", "--videos", "0", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["config"]["tasks"] == ["reach-v3", "push-v3"]


@pytest.mark.parametrize("extra, tasks, protocol, key, bad", [
    ("", '["reach-v3", "rech-v3"]', "", "tasks[1]", "rech-v3"),
    ('video_camera = "corner5"', '["reach-v3"]', "", "video_camera", "corner5"),
    ("", '["reach-v3"]', 'cameras = ["corner2", "top"]', "protocol.cameras", "top"),
])
def test_suite_typos_are_named_with_file_and_key_before_workers_start(tmp_path, extra, tasks, protocol, key, bad):
    path = _suite(tmp_path, extra=extra, tasks=tasks, protocol=protocol)
    out = tmp_path / "o"
    result = _eval("--suite", str(path), "--policy", "zero", "--executor", "processes", "--output", str(out))
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert line.startswith(f"error: {path}: field '{key}'") and repr(bad) in line
    assert not out.exists()  # refused before the run began


def test_videos_play_at_the_backends_rate_when_the_suite_sets_none(tmp_path):
    import av

    path = _suite(tmp_path, extra='video_camera = "corner2"', protocol="image_size = [64, 64]")
    out = tmp_path / "o"
    result = _eval("--suite", str(path), "--policy", "zero", "--videos", "1", "--video-fps", "80", "--output", str(out))
    assert result.exit_code == 0, result.output
    video = out / json.loads((out / "episodes.jsonl").read_text().splitlines()[0])["video"]
    with av.open(str(video)) as container:
        assert container.streams.video[0].average_rate == 80  # Meta-World's control rate, not a 20 fps default


def test_merge_uses_the_shards_own_suite_file_from_anywhere(tmp_path, monkeypatch):
    from lerobench.analysis.merge import merge

    # A custom suite named like a shipped one ("smoke"), with its own description and one task of smoke's two.
    work = tmp_path / "work"
    work.mkdir()
    (work / "smoke.toml").write_text(_suite(tmp_path, name="smoke").read_text().replace(
        'tasks = ["reach-v3"]', 'tasks = [{ name = "reach-v3", description = "My own words." }]'))
    monkeypatch.chdir(work)
    for i in range(2):
        result = _eval("--suite", "smoke.toml", "--policy", "zero", "--episodes", "2", "--shard", f"{i}/2",
                       "--videos", "0", "--output", f"s{i}")
        assert result.exit_code == 0, result.output
    monkeypatch.chdir(tmp_path)  # merge from another directory
    results = merge(tmp_path / "merged", [work / "s0", work / "s1"])
    assert [t["task"] for t in results["tasks"]] == ["reach-v3"]
    assert results["tasks"][0]["description"] == "My own words." and results["complete"]
