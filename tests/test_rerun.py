"""--rerun: real short runs whose .rrd recordings are loaded back with Rerun's own reader and checked step by step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator

_MT10 = Path(__file__).resolve().parent.parent / "suites" / "metaworld_mt10.toml"


def _eval(tmp_path: Path, *args: str):
    from typer.testing import CliRunner

    from lerobench.cli import app

    suite = tmp_path / "metaworld_mt10.toml"
    suite.write_text(_MT10.read_text().replace("image_size = [480, 480]", "image_size = [64, 64]"))
    return CliRunner().invoke(app, ["eval", "--suite", str(suite), "--tasks", "reach-v3", *args])


def _table(path: Path):
    import rerun.dataframe as rdf

    recording = rdf.load_recording(str(path))
    entities = {c.entity_path for c in recording.schema().component_columns()}
    return entities, recording.view(index="step", contents="/**").select().read_all()


@pytest.fixture(scope="module")
def camera_run(tmp_path_factory):
    """The expert declaring a camera (so the recording holds policy images), 3 episodes, the first 2 recorded."""
    pytest.importorskip("metaworld")
    pytest.importorskip("rerun")
    base = tmp_path_factory.mktemp("rerun")
    out = base / "run"
    result = _eval(base, "--episodes", "3", "--max-steps", "60", "--videos", "2", "--rerun",
                   "--policy", "fixture_policies:make_camera_expert", "--output", str(out))
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return out, {r["episode"]: r for r in records}


def test_recordings_hold_every_step(camera_run):
    out, records = camera_run
    assert sorted(p.name for p in (out / "rerun" / "reach-v3").iterdir()) == ["episode_0.rrd", "episode_1.rrd"]
    assert not list(out.glob("rerun/*/.*"))  # no partial file left
    for episode in (0, 1):
        record = records[episode]
        entities, table = _table(out / "rerun" / "reach-v3" / f"episode_{episode}.rrd")
        assert {"/state", "/action", "/reward", "/success", "/video/corner2", "/camera/corner2",
                "/episode"} <= entities
        steps = table.column("step").to_pylist()
        assert steps == list(range(record["steps"] + 1))  # the first observation, then one per action
        column = {name.split(":")[0]: table.column(name).to_pylist() for name in table.column_names
                  if name.endswith((":scalars", ":blob"))}
        video_steps = [s for s, v in zip(steps, column["/video/corner2"], strict=True) if v is not None]
        assert video_steps == list(range(0, record["steps"] + 1, 8))  # the MP4's frames: 80 Hz / 10 fps
        assert sum(v is not None for v in column["/camera/corner2"]) == record["steps"] + 1
        assert sum(v is not None for v in column["/action"]) == record["steps"]
        assert all(len(s) == 39 for s in column["/state"])
        assert column["/success"][0] is None and column["/success"][-1] == [float(record["success"])]
        rewards = [v[0] for v in column["/reward"][1:]]
        assert sum(rewards) == pytest.approx(record["return"], rel=1e-5)
        assert np.isfinite(rewards).all()


def test_video_frames_logged_at_the_step_they_were_rendered(tmp_path):
    """The expert reads no camera: the video camera renders at steps 0, 8, 16... only, and each image is logged
    once, at its own step (41dfc68 logged the repeated last render under every step: 7 distinct of 41)."""
    pytest.importorskip("metaworld")
    pytest.importorskip("rerun")
    out = tmp_path / "run"
    result = _eval(tmp_path, "--episodes", "1", "--max-steps", "40", "--videos", "1", "--rerun", "--output", str(out))
    assert result.exit_code == 0, result.output
    record = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    entities, table = _table(out / "rerun" / "reach-v3" / "episode_0.rrd")
    assert "/camera/corner2" not in entities  # no policy camera
    steps = table.column("step").to_pylist()
    blobs = table.column("/video/corner2:EncodedImage:blob").to_pylist()
    logged = [(s, bytes(b[0])) for s, b in zip(steps, blobs, strict=True) if b is not None]
    assert [s for s, _ in logged] == list(range(0, record["steps"] + 1, 8))
    assert len({b for _, b in logged}) == len(logged)  # every logged image is a fresh render, none repeated


def test_report_links_the_recordings(camera_run, tmp_path):
    pytest.importorskip("matplotlib")
    from typer.testing import CliRunner

    from lerobench.cli import app

    out, _ = camera_run
    report = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(out), "-o", str(report)])
    assert result.exit_code == 0, result.output
    html = report.read_text()
    for episode in (0, 1):
        target = (out / "rerun" / "reach-v3" / f"episode_{episode}.rrd").resolve()
        href = Path(__import__("os").path.relpath(target, tmp_path.resolve())).as_posix()
        assert f"href='{href}'" in html


def test_rerun_needs_recorded_episodes(tmp_path):
    result = _eval(tmp_path, "--videos", "0", "--rerun", "--output", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "--rerun records the episodes --videos records" in result.output
    result = _eval(tmp_path, "--videos", "1", "--rerun", "--executor", "processes", "--output", str(tmp_path / "r2"))
    assert result.exit_code == 2 and "--executor vector or inline" in result.output


def test_aborted_recording_leaves_no_file(tmp_path):
    pytest.importorskip("rerun")
    from lerobench.output.rerun import RrdWriter

    writer = RrdWriter(tmp_path)
    dropped = writer.start("reach-v3", 0, None, "corner2")
    parked = writer.start("reach-v3", 1, None, "corner2")
    for recording in (dropped, parked):
        for _ in range(3):
            recording.add(np.zeros((8, 8, 3), np.uint8))
    dropped.abort()
    writer.park("reach-v3", 1, 0, parked)  # frames done, but the run stops before its steps arrive
    writer.close(abort=True)
    assert list(tmp_path.rglob("*.rrd")) == []
