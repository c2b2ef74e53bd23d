"""A run's identity (lerobench/core/identity.py) and the one run-directory reader (core/rundir.py), on real runs.

The runs are real Meta-World ML1 reach runs from one suite file whose ``backend_options.split`` is edited between
them (train vs test goals): the case where resume used to mix two splits in one result and compare used to pair
episodes that started from different goals.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.core.identity import diff, identity_of
from lerobench.core.rundir import RunDir, RunDirError

pytestmark = pytest.mark.sim  # every test here drives a real simulator

ML1 = Path(__file__).resolve().parent.parent / "suites" / "metaworld_ml1_reach.toml"
runner = CliRunner()


def _suite(path: Path, split: str) -> Path:
    text = ML1.read_text().replace('split = "test"', f'split = "{split}"').replace("[480, 480]", "[64, 64]")
    path.write_text(text)
    return path


def _eval(suite: Path, out: Path, *extra: str):
    return runner.invoke(app, ["eval", "--suite", str(suite), "--policy", "zero", "--episodes", "2", "--trials", "1",
                               "--max-steps", "5", "--videos", "0", "--output", str(out), *extra])


def _one_error_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in output, output
    return lines[0]


def _snapshot(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """``train``: a run on ML1's train goals; ``test``: the same suite file edited to the test goals."""
    pytest.importorskip("metaworld")
    root = tmp_path_factory.mktemp("identity")
    suite = root / "ml1.toml"
    _suite(suite, "train")
    assert _eval(suite, root / "train").exit_code == 0
    _suite(suite, "test")
    assert _eval(suite, root / "test").exit_code == 0
    return {"root": root, "suite": suite, "train": root / "train", "test": root / "test"}


def test_results_record_the_identity_fields(runs):
    config = json.loads((runs["train"] / "results.json").read_text())["config"]
    assert config["backend"] == "metaworld" and config["backend_options"] == {"benchmark": "ML1", "split": "train",
                                                                           "render_quality": "draft"}  # conftest
    identity = identity_of(config)
    assert identity.episodes["backend_options"]["split"] == "train" and identity.treatment["policy"] == "zero"


def test_resume_after_editing_backend_options_is_refused_naming_the_field(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["train"], run)
    before = _snapshot(run)
    result = _eval(runs["suite"], run, "--resume")  # the suite file now says split = "test"
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert "episodes.backend_options.split: previous 'train', now 'test'" in line
    assert _snapshot(run) == before


def test_compare_of_train_and_test_split_is_refused_unless_allowed(runs):
    result = runner.invoke(app, ["compare", str(runs["train"]), str(runs["test"])])
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert "episodes.backend_options.split: 'train' vs 'test'" in line and "--allow-different" in line
    allowed = runner.invoke(app, ["compare", str(runs["train"]), str(runs["test"]), "--allow-different"])
    assert allowed.exit_code == 0, allowed.output
    differs = allowed.output.index("differs: episodes.backend_options.split")
    assert differs < allowed.output.index("B − A")  # printed above the table


def test_report_refuses_different_episodes_unless_allowed(runs, tmp_path):
    pytest.importorskip("matplotlib")
    html = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(runs["train"]), str(runs["test"]), "--output", str(html)])
    assert result.exit_code == 2 and "episodes.backend_options.split" in _one_error_line(result.output)
    assert not html.exists()
    allowed = runner.invoke(app, ["report", str(runs["train"]), str(runs["test"]), "--output", str(html),
                                  "--allow-different"])
    assert allowed.exit_code == 0, allowed.output
    assert "episodes.backend_options.split: &#x27;train&#x27; vs &#x27;test&#x27;" in html.read_text()


# -- damaged inputs: one line naming the file (and line), exit 2, nothing touched -------------------------------
def _damage(runs, tmp_path, kind: str) -> Path:
    run = tmp_path / kind
    shutil.copytree(runs["train"], run)
    if kind == "results":
        (run / "results.json").write_text('{"config": {"suite": ')  # cut mid-write by another tool
        (run / "run.json").unlink()  # a run from before identity files: nothing says which run its lines are
        # (with run.json, --resume rebuilds results.json: tests/test_resume_repair.py)
    else:
        lines = (run / "episodes.jsonl").read_text().splitlines()
        record = json.loads(lines[1])
        record["success"] = "yes"
        lines[1] = json.dumps(record)
        (run / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_resume_with_an_invalid_results_json_is_one_line_and_touches_nothing(runs, tmp_path):
    run = _damage(runs, tmp_path, "results")
    before = _snapshot(run)
    _suite(runs["suite"], "train")
    try:
        result = _eval(runs["suite"], run, "--resume")
    finally:
        _suite(runs["suite"], "test")
    assert result.exit_code == 2
    assert f"{run / 'results.json'} is not readable JSON" in _one_error_line(result.output)
    assert _snapshot(run) == before


def test_success_yes_in_episodes_is_one_line_everywhere_and_touches_nothing(runs, tmp_path):
    run = _damage(runs, tmp_path, "episodes")
    before = _snapshot(run)
    expected = f"{run / 'episodes.jsonl'}: line 2: field 'success' must be a boolean, got 'yes'"
    _suite(runs["suite"], "train")
    try:
        resumed = _eval(runs["suite"], run, "--resume")
    finally:
        _suite(runs["suite"], "test")
    commands = {"resume": resumed,
                "compare": runner.invoke(app, ["compare", str(runs["train"]), str(run)]),
                "merge": runner.invoke(app, ["merge", str(run), "--output", str(tmp_path / "merged")])}
    for name, result in commands.items():
        assert result.exit_code == 2, name
        assert expected in _one_error_line(result.output), name
    assert _snapshot(run) == before and not (tmp_path / "merged").exists()


# -- the identity and the reader, on synthetic inputs -------------------------------------------------------------
def test_diff_names_the_innermost_field_and_both_values():
    a = {"suite": "s", "seed": 0, "policy": "p", "protocol_settings": {"max_steps": 20, "settle_steps": 0},
         "simulator": {"versions": {"mujoco": "3.3.0"}, "golden": {"reference": "abc", "status": "pass"}}}
    b = {**a, "seed": 1, "policy": "q", "protocol_settings": {"max_steps": 30, "settle_steps": 0},
         "simulator": {"versions": {"mujoco": "3.4.0"}, "golden": {"reference": "abc", "status": "pass"}}}
    assert diff(a, b) == ["episodes.protocol_settings.max_steps: 20 vs 30", "episodes.seed: 0 vs 1",
                          "episodes.simulator.versions.mujoco: '3.3.0' vs '3.4.0'", "treatment.policy: 'p' vs 'q'"]
    assert diff(a, b, parts=("treatment",), labels=("previous", "now")) == ["treatment.policy: previous 'p', now 'q'"]
    assert diff(a, {**a, "trials": 1, "backend_options": {}}) == []  # older files: one trial, no options


def _write_run(path: Path, lines: list[str], **results) -> Path:
    path.mkdir()
    config = {"suite": "s", "policy": "p", "tasks": ["t"], "episodes_per_task": 2, "seed": 0}
    (path / "results.json").write_text(json.dumps({"config": config, **results}))
    (path / "episodes.jsonl").write_text("".join(line + "\n" for line in lines))
    return path


def _line(episode: int, success: bool = True) -> str:
    return json.dumps({"task": "t", "episode": episode, "trial": 0, "seed": 1, "init_state": episode,
                       "success": success, "success_at_end": success, "steps": 3, "return": 1.0, "elapsed_s": 0.1})


def test_rundir_validates_and_names_what_is_wrong(tmp_path):
    ok = RunDir.load(_write_run(tmp_path / "ok", [_line(0), _line(0)]))
    assert len(ok.records) == 1 and ok.notes and ok.missing() == [("t", 1)]
    cases = {
        "newer": ([_line(0)], {"schema_version": 99}, "schema_version 99 was written by a newer lerobench"),
        "conflict": ([_line(0), _line(0, success=False)], {}, "line 2: task 't' episode 0 trial 0 is also on line 1"),
        "unknown": ([_line(0)[:-1] + ', "sucess": true}'], {}, "line 1: unknown field 'sucess'"),
        "missing": ([json.dumps({"task": "t"})], {}, "line 1: field 'episode' is missing"),
        "negative": ([_line(-1)], {}, "line 1: field 'episode' must be >= 0"),
    }
    for name, (lines, results, message) in cases.items():
        with pytest.raises(RunDirError, match=message):
            RunDir.load(_write_run(tmp_path / name, lines, **results))
    (tmp_path / "noconfig").mkdir()
    (tmp_path / "noconfig" / "results.json").write_text("[]")
    with pytest.raises(RunDirError, match="expected a JSON object, got list"):
        RunDir.load(tmp_path / "noconfig")
