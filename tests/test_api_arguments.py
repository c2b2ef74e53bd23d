"""``lerobench.evaluate`` checks every argument before it runs and never loses a finished evaluation (issue 37)."""

from __future__ import annotations

import pytest

import lerobench
from lerobench.errors import ConfigError


@pytest.fixture
def afile(tmp_path):
    path = tmp_path / "afile"
    path.write_text("not a directory")
    return path


BAD = [
    ({"episodes": "2"}, "episodes must be an int or None, got '2' (str)"),
    ({"episodes": True}, "episodes must be an int or None, got True (bool)"),
    ({"log_step": "abc"}, "log_step must be an int, got 'abc' (str)"),
    ({"log_step": 1.5}, "log_step must be an int, got 1.5 (float)"),
    ({"log_step": -1}, "log_step must be >= 0, got -1"),
    ({"batch_size": "x"}, "batch_size must be an int, got 'x' (str)"),
    ({"seed": 1.5}, "seed must be an int, got 1.5 (float)"),
    ({"seed": 2**32}, "seed must be between 0 and 4294967295"),
    ({"videos": -1}, "videos must be >= 0, got -1"),
    ({"call_width": -1}, "call_width must be >= 0, got -1"),
    ({"video_fps": "10"}, "video_fps must be a number > 0"),
    ({"resume": 1}, "resume must be True or False"),
    ({"log_project": 3}, "log_project must be a string, got 3 (int)"),
    ({"alpha": 1.5}, "alpha must lie in (0, 1), got 1.5"),
    ({"effect": 0}, "effect must lie in [-1, 1], not 0, got 0"),
    ({"episode_timeout": -1}, "episode_timeout must lie in (0, inf), got -1"),
    ({"max_errors": -1}, "max_errors must be >= 0, got -1"),
    ({"delay_steps": "abc"}, "delay_steps must be a whole number of control steps >= 0 or 'measured', got 'abc'"),
    ({"shard": "x"}, "shard must be I/N"),
    ({"until": "decided"}, "until decided needs versus"),
    ({"tasks": 1.0}, "tasks must be a string or a list of names or indices"),
    ({"log_to": ["tensorboard", 3]}, "log_to holds 3 (int)"),
    ({"record": "bad"}, "record must be one of 'none', 'success', 'all', got 'bad'"),
    ({"device": "gpu"}, "device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'gpu'"),
    ({"video_size": 3}, "video_size must be 0 (the protocol's image size) or at least 16, got 3"),
    ({"resume": True}, "resume=True needs output= (the run directory to continue)"),
    ({"output": "{afile}"}, "output {afile} is a file, not a run directory"),
    ({"log_to": "tensorboard", "log_dir": "{afile}"}, "log_dir {afile} is a file, not a directory"),
    ({"log_to": "tensorboard", "log_dir": "{afile}/sub"}, "log_dir {afile}/sub is under {afile}, a file"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD, ids=[next(iter(k)) + "-" + str(i) for i, (k, _) in enumerate(BAD)])
def test_a_bad_argument_is_named_before_anything_runs(kwargs, message, afile, tmp_path, monkeypatch):
    """41dfc68: TypeErrors from the planner, a bare int() ValueError after the run, 1.5 and -1 logged as steps, a
    log_dir that is a file found only after the evaluation. Now one ``ConfigError`` naming the argument, first."""
    monkeypatch.chdir(tmp_path)
    kwargs = {k: v.format(afile=afile) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(ConfigError) as caught:
        lerobench.evaluate("metaworld-expert", "smoke", **kwargs)
    assert str(caught.value).startswith(f"lerobench.evaluate: {message.format(afile=afile)}")
    assert "--" not in str(caught.value)  # the API's words, not the CLI's flags
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing was written


def test_an_unknown_tracker_names_log_to(tmp_path):
    from lerobench.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match=r"unknown tracker 'tensorbord' \(log_to\)\. Did you mean"):
        lerobench.evaluate("metaworld-expert", "smoke", log_to="tensorbord", output=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_output_holding_a_run_is_refused_in_the_apis_words(tmp_path):
    """41dfc68: "pass --resume to continue that run, or choose another --output" from the Python API."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").write_text('{"task": "reach-v3", "episode": 0}\n')
    with pytest.raises(ConfigError, match=r"already holds episodes: pass resume=True to continue that run, or "
                                          r"another output=$"):
        lerobench.evaluate("metaworld-expert", "smoke", output=run)


def test_an_unknown_executor_names_executor(tmp_path):
    from lerobench.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match=r"unknown executor 'vectr' \(lerobench.evaluate: executor=\)\. Did"):
        lerobench.evaluate("metaworld-expert", "smoke", executor="vectr", output=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_cli_log_step_must_not_be_negative(tmp_path):
    from typer.testing import CliRunner

    from lerobench.cli import app

    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--log-step", "-1", "-o", str(tmp_path / "r")])
    assert result.exit_code == 2 and "--log-step" in result.output
    assert not (tmp_path / "r").exists()


def _text(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return [(t.step, t.tensor_proto.string_val[0].decode()) for t in events.Tensors(f"{tag}/text_summary")]


@pytest.mark.sim
def test_log_to_as_a_string_and_tensorboard_videos_that_outlive_the_call(tmp_path):
    """``log_to="tensorboard"`` (41dfc68: "unknown tracker 't'"); with ``output=None`` the video list names copies
    in the store, not files of the deleted temporary run directory."""
    pytest.importorskip("metaworld")
    pytest.importorskip("tensorboard")
    results = lerobench.evaluate("metaworld-expert", "smoke", tasks="reach-v3", episodes=1, videos=1, max_steps=10,
                                 log_to="tensorboard", log_step=7, log_dir=tmp_path / "logs")
    folder = tmp_path / "logs" / "tensorboard"
    assert results.logged == {"tensorboard": str(folder)} and results.log_errors == {}
    [(step, text)] = _text(folder, "lerobench/videos")
    where, *items = text.splitlines()
    assert step == 7 and where == f"Videos in {folder / 'videos' / 'step_7'}:"
    assert items == ["- reach-v3/episode_0_failure.mp4"]
    assert (folder / "videos" / "step_7" / "reach-v3" / "episode_0_failure.mp4").stat().st_size > 0


@pytest.mark.sim
def test_a_tracker_failing_after_the_evaluation_returns_the_results(tmp_path, monkeypatch):
    """MLflow pointed at a store it cannot open fails after the evaluation: the results come back whole, with
    the failure in ``log_errors`` and a ``TrackerWarning``; the other tracker is still logged (41dfc68 raised)."""
    pytest.importorskip("metaworld")
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboardX")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://nowhere")
    with pytest.warns(lerobench.TrackerWarning, match="could not be logged to mlflow"):
        results = lerobench.evaluate("metaworld-expert", "smoke", tasks="reach-v3", episodes=2, videos=0,
                                     max_steps=10, log_to="tensorboard,mlflow", log_dir=tmp_path / "logs")
    assert results.n_episodes == 2 and len(results.episodes) == 2
    assert set(results.log_errors) == {"mlflow"} and "nosuchscheme" in results.log_errors["mlflow"]
    assert set(results.logged) == {"tensorboard"}
