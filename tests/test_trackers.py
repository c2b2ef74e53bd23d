"""--log-to: a real short eval logged to wandb (offline), MLflow (file store) and TensorBoard, read back from each
tracker's own local store and compared with results.json; unknown names and missing libraries fail up front."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

_MT10 = Path(__file__).resolve().parent.parent / "suites" / "metaworld_mt10.toml"
STEP = 5


def expected_scalars(results: dict) -> dict[str, float]:
    """What the trackers must hold, written from results.json independently of lerobench.trackers."""
    out = {}
    for prefix, block in [(f"eval/{t['task']}", t) for t in results["tasks"]] + [("eval", results["overall"])]:
        out[f"{prefix}/success_rate"] = block["success_rate"]
        out[f"{prefix}/ci_low"], out[f"{prefix}/ci_high"] = block["ci95"]
        out[f"{prefix}/n_episodes"] = block["n_episodes"]
        out[f"{prefix}/n_errors"] = block["n_errors"]
    for key in ("env_steps_per_s", "eval_s"):
        out[f"eval/{key}"] = results["overall"][key]
    return out


def wandb_records(path: Path):
    """The protobuf records of a ``.wandb`` file (wandb's LevelDB-log layout: 32 KiB blocks of chunks)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, buf = path.read_bytes(), 7, 32768, b""  # 7: the ":W&B" header
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL, FIRST / MIDDLE, LAST
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            yield record


def wandb_run_records(path: Path, timeout: float = 30.0) -> list:
    """The records of a finished run's file, once wandb's service has written its last (``exit``) record.

    ``run.finish()`` can return a moment before the service process has flushed the file.
    """
    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def wandb_history(path: Path) -> dict:
    """Every history item of a run file, later rows overriding earlier ones."""
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for record in wandb_run_records(path) if record.WhichOneof("record_type") == "history"
            for item in record.history.item}


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """One real eval (expert on reach-v3, 2 episodes, 1 small video) logged to the three trackers at STEP."""
    pytest.importorskip("metaworld")
    for module in ("wandb", "mlflow", "tensorboardX", "tensorboard"):
        pytest.importorskip(module)
    from typer.testing import CliRunner

    from lerobench.cli import app

    base = tmp_path_factory.mktemp("trackers")
    suite = base / "metaworld_mt10.toml"
    suite.write_text(_MT10.read_text().replace("image_size = [480, 480]", "image_size = [64, 64]"))
    out = base / "run"
    env = {"WANDB_MODE": None, "WANDB_DIR": None, "MLFLOW_TRACKING_URI": None}
    result = CliRunner().invoke(app, ["eval", "--suite", str(suite), "--tasks", "reach-v3", "--episodes", "2",
                                      "--max-steps", "60", "--videos", "1", "--output", str(out),
                                      "--log-to", "wandb,mlflow", "--log-to", "tensorboard",
                                      "--log-step", str(STEP), "--log-project", "lerobench-test"], env=env)
    assert result.exit_code == 0, result.output
    for name in ("wandb", "mlflow", "tensorboard"):
        assert f"logged to {name}:" in result.output
    return out, json.loads((out / "results.json").read_text())


def test_wandb_offline_run_holds_results(logged_run):
    out, results = logged_run
    [run_file] = (out / "wandb").glob("offline-run-*/run-*.wandb")
    history = wandb_history(run_file)
    [run] = [r.run for r in wandb_run_records(run_file) if r.WhichOneof("record_type") == "run"]
    project, config = run.project, {item.key: json.loads(item.value_json) for item in run.config.update}
    assert project == "lerobench-test"
    assert history["_step"] == STEP
    for key, value in expected_scalars(results).items():
        assert history[key] == pytest.approx(value), key
    assert history["eval/reach-v3/success_rate"] == results["tasks"][0]["success_rate"]
    assert (config["suite"], config["seed"], config["tasks"]) == ("metaworld_mt10", 0, ["reach-v3"])
    assert config["simulator"] == results["config"]["simulator"]
    assert config["provenance"]["versions"]["mujoco"] == results["provenance"]["versions"]["mujoco"]
    stem = Path(next(e for e in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())
                     if e["video"])["video"]).stem
    assert history[f"eval/videos/reach-v3/{stem}/_type"] == "video-file"
    assert (run_file.parent / "files" / history[f"eval/videos/reach-v3/{stem}/path"]).stat().st_size > 0


def test_mlflow_file_store_holds_results(logged_run, monkeypatch):
    from mlflow.tracking import MlflowClient

    out, results = logged_run
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("lerobench-test").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == out.name
    for key, value in expected_scalars(results).items():
        [point] = client.get_metric_history(run.info.run_id, key)
        assert (point.value, point.step) == (pytest.approx(value), STEP), key
    params = run.data.params
    assert (params["suite"], params["seed"], params["tasks"]) == ("metaworld_mt10", "0", '["reach-v3"]')
    assert params["simulator.versions.mujoco"] == results["config"]["simulator"]["versions"]["mujoco"]
    assert params["simulator.golden.status"] == results["config"]["simulator"]["golden"]["status"]
    assert params["provenance.versions.metaworld"] == "3.1.1"
    folder = f"lerobench/step_{STEP}"
    assert [a.path for a in client.list_artifacts(run.info.run_id, f"{folder}/videos/reach-v3")] == \
        [f"{folder}/videos/reach-v3/{p.name}" for p in (out / "videos" / "reach-v3").glob("*.mp4")]
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, f"{folder}/results.json")).read_text())
    assert logged == results


def test_tensorboard_events_hold_results(logged_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, results = logged_run
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    for key, value in expected_scalars(results).items():
        [point] = events.Scalars(key)
        assert (point.value, point.step) == (pytest.approx(value, rel=1e-6), STEP), key  # stored as float32
    assert "lerobench/config/text_summary" in events.Tags()["tensors"]


def test_unknown_tracker_is_one_line_before_the_run(tmp_path):
    from typer.testing import CliRunner

    from lerobench.cli import app

    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--log-to", "wandb,tensorbord",
                                      "--output", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "unknown tracker 'tensorbord'" in result.output and "'tensorboard'" in result.output
    assert not (tmp_path / "run").exists()


BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "mlflow" or name.startswith("mlflow."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Block())
from lerobench.cli import main
main()
"""


def test_missing_library_names_the_extra(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", BLOCK, "eval", "--suite", "smoke", "--log-to", "mlflow",
                           "--output", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'lerobench[trackers]'" in lines[0] and "mlflow" in lines[0]
    assert not out.exists()  # said before the run started


def test_open_runs_of_a_training_loop_are_joined(logged_run, tmp_path, monkeypatch):
    """A training loop's own wandb / MLflow run receives the values at its step and stays open."""
    import mlflow
    import wandb

    from lerobench.trackers import log_run

    out, results = logged_run
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    run = wandb.init(project="training", dir=str(tmp_path), mode="offline", settings=wandb.Settings(silent=True))
    try:
        with mlflow.start_run() as active:
            written = log_run(results, out, ["wandb", "mlflow"], step=STEP + 1)
            assert wandb.run is run and mlflow.active_run().info.run_id == active.info.run_id
        assert active.info.run_id in written["mlflow"]
    finally:
        run.finish()
    client = mlflow.tracking.MlflowClient()
    [point] = client.get_metric_history(active.info.run_id, "eval/success_rate")
    assert (point.value, point.step) == (results["overall"]["success_rate"], STEP + 1)
    history = wandb_history(next((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")))
    assert history["_step"] == STEP + 1
    assert history["eval/success_rate"] == results["overall"]["success_rate"]


def test_evaluations_gather_in_one_store(logged_run, tmp_path):
    """``store=``: several evaluations (a training loop's) in one lasting place, one TensorBoard curve."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lerobench.trackers import log_run

    out, results = logged_run
    for step in (10, 20):
        written = log_run(results, out, ["tensorboard"], step=step, store=tmp_path)
        assert written == {"tensorboard": str(tmp_path / "tensorboard")}
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    rate = pytest.approx(results["overall"]["success_rate"])
    assert [(p.step, p.value) for p in events.Scalars("eval/success_rate")] == [(10, rate), (20, rate)]


def test_cli_imports_no_tracker_library():
    """``lerobench --help`` stays instant: the trackers and rerun are imported only when a run asks for them."""
    heavy = ("wandb", "mlflow", "tensorboardX", "tensorboard", "rerun")
    code = (f"import sys, lerobench.cli, lerobench.sink; "
            f"sys.exit(', '.join(m for m in {heavy!r} if m in sys.modules) or None)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
