"""--log-to: a real short eval logged to wandb (offline), MLflow (file store) and TensorBoard, and one to trackio
(its SQLite store, from a side environment: see below), read back from each tracker's own local store and compared
with results.json; unknown names and missing libraries fail up front."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim  # every test here drives a real simulator

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


def reading_back_blocks() -> dict[str, str]:
    """docs/trackers.md's "Reading the stores back" code blocks, by the package each imports first."""
    text = (_REPO / "docs" / "trackers.md").read_text()
    section = text[text.index("### Reading the stores back"):text.index("MLflow 3 keeps its file store")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return {name: next(b for b in blocks if name in b) for name in ("tensorboard", "mlflow", "sqlite3")}


def run_reading_block(code: str, run_dir: Path, project: str, capsys) -> list:
    """Run a docs block as written, on ``run_dir``; what it printed, parsed."""
    first, rest = code.split("\n", 1)
    assert first.startswith(("run_dir = ", "run_dir, project = ")), first
    capsys.readouterr()
    exec(rest, {"run_dir": str(run_dir), "project": project})  # noqa: S102 - the documented snippet itself
    return eval(capsys.readouterr().out)  # noqa: S307 - a printed list of (step, value)


def test_the_documented_reading_back_blocks_read_the_stores(logged_run, capsys, monkeypatch):
    """docs/trackers.md says how to read each store back (41dfc68 did not: mlflow.search_runs needs pandas,
    the file store MLFLOW_ALLOW_FILE_STORE); its TensorBoard and MLflow blocks, as written, give the logged rate."""
    out, results = logged_run
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # the block sets it; undone after the test
    blocks = reading_back_blocks()
    rate = results["overall"]["success_rate"]
    assert run_reading_block(blocks["tensorboard"], out, "lerobench-test", capsys) == [(STEP, pytest.approx(rate))]
    assert run_reading_block(blocks["mlflow"], out, "lerobench-test", capsys) == [(STEP, pytest.approx(rate))]
    assert "import pandas" not in blocks["mlflow"] and "search_runs(" in blocks["mlflow"]


def test_wandb_into_a_store_not_made_yet_prints_no_git_noise(logged_run, tmp_path, capfd):
    """41dfc68: "wandb: WARNING git root <store> does not exist" on stderr when the store did not exist yet."""
    from lerobench.trackers import log_run

    out, results = logged_run
    store = tmp_path / "new" / "store"
    written = log_run(results, out, ["wandb"], step=STEP, store=store)
    captured = capfd.readouterr()
    assert "git root" not in captured.out + captured.err and "wandb:" not in captured.err
    assert written["wandb"].startswith(str(store / "wandb" / "offline-run-"))


def test_unknown_tracker_is_one_line_before_the_run(tmp_path):
    from typer.testing import CliRunner

    from lerobench.cli import app

    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--log-to", "wandb,tensorbord",
                                      "--output", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "unknown tracker 'tensorbord'" in result.output and "'tensorboard'" in result.output
    assert not (tmp_path / "run").exists()


def blocked(module: str) -> str:
    """A ``python -c`` script running the CLI with ``module`` unimportable (as if its extra were not installed)."""
    return f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == {module!r} or name.startswith({module + "."!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}")
sys.meta_path.insert(0, Block())
from lerobench.cli import main
main()
"""


def test_missing_library_names_the_extra(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", blocked("mlflow"), "eval", "--suite", "smoke", "--log-to", "mlflow",
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
    heavy = ("wandb", "trackio", "mlflow", "tensorboardX", "tensorboard", "rerun")
    code = (f"import sys, lerobench.cli, lerobench.output.sink; "
            f"sys.exit(', '.join(m for m in {heavy!r} if m in sys.modules) or None)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# -- trackio: a real run in a side environment --------------------------------------------------------------------
# Every trackio release conflicts with LeRobot's pins (0.24+ import huggingface_hub.Volume: huggingface-hub>=1.x,
# against lerobot's <0.36; all need pillow<13), so it cannot be installed here. The tests install it with
# `pip install --target` into an overlay directory (built once, kept in pytest's cache) and run lerobench as a
# subprocess with PYTHONPATH=overlay:repo: trackio and huggingface-hub 1.x shadow the environment's, every other
# package is the environment's own (pinned to its versions, then the identical copies removed from the overlay).

TRACKIO_VERSION = "0.43.0"
SHADOWED = {"huggingface_hub", "PIL"}
"""The environment's packages the overlay may replace: the reason it exists (huggingface-hub>=1.10, pillow<13)."""
_OFFLINE = ("(from versions: none)", "NewConnectionError", "Failed to establish a new connection",
            "Temporary failure in name resolution", "Network is unreachable", "ProxyError", "ConnectTimeout")
_REPO = Path(__file__).resolve().parent.parent


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _environment_versions() -> dict[str, str]:
    from importlib.metadata import distributions

    versions: dict[str, str] = {}
    for dist in distributions():
        if dist.metadata["Name"]:
            versions.setdefault(_canonical(dist.metadata["Name"]), dist.version)
    return versions


def _prune_identical(target: Path, versions: dict[str, str]) -> list[str]:
    """Remove from ``target`` every distribution the environment has at the same version; return their names."""
    pruned = []
    for info in sorted(target.glob("*.dist-info")):
        meta = dict(line.split(": ", 1) for line in (info / "METADATA").read_text().splitlines()[:3] if ": " in line)
        name = _canonical(meta.get("Name", ""))
        if versions.get(name) != meta.get("Version"):
            continue
        for row in csv.reader((info / "RECORD").read_text().splitlines()):
            path = (target / row[0]).resolve() if row else target
            if path.is_relative_to(target.resolve()) and path.is_file():
                path.unlink()
        shutil.rmtree(info, ignore_errors=True)
        pruned.append(name)
    for folder in sorted((p for p in target.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return pruned


def _top_level(target: Path) -> set[str]:
    """The importable top-level names in ``target``."""
    names = set()
    for entry in target.iterdir():
        if entry.name.endswith((".dist-info", ".libs")) or entry.name in ("bin", "__pycache__"):
            continue
        names.add(entry.name.split(".")[0] if entry.is_file() else entry.name)
    return names - {""}


@pytest.fixture(scope="session")
def trackio_overlay(request, tmp_path_factory) -> Path:
    """``pip install --target`` of trackio (pinned), built once per environment and cached under .pytest_cache."""
    pytest.importorskip("metaworld")
    import numpy

    key = (f"trackio-{TRACKIO_VERSION}-py{sys.version_info[0]}{sys.version_info[1]}-numpy{numpy.__version__}")
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("trackio-overlay")) if cache is not None else tmp_path_factory.mktemp("trackio-overlay")
    side = root / key
    if (side / "overlay.json").exists():
        return side
    versions = _environment_versions()
    constraints = root / "constraints.txt"  # everything at the environment's version but what trackio must replace
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items())
                                   if n not in ("huggingface-hub", "pillow")))
    build = root / f".build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--retries", "1",
                           "--timeout", "30", "--disable-pip-version-check", "--target", str(build),
                           f"trackio=={TRACKIO_VERSION}", "-c", str(constraints)],
                          capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        shutil.rmtree(build, ignore_errors=True)
        text = proc.stdout + proc.stderr
        if any(marker in text for marker in _OFFLINE):
            pytest.skip(f"PyPI is not reachable: the trackio {TRACKIO_VERSION} overlay could not be installed")
        pytest.fail(f"pip install --target trackio=={TRACKIO_VERSION} failed:\n{text[-3000:]}")
    pruned = _prune_identical(build, versions)
    size = sum(p.stat().st_size for p in build.rglob("*") if p.is_file())
    (build / "overlay.json").write_text(json.dumps({"trackio": TRACKIO_VERSION, "install_s": round(seconds, 1),
                                                    "size_mb": round(size / 2**20, 1), "pruned": pruned}))
    if side.exists() and not (side / "overlay.json").exists():
        shutil.rmtree(side, ignore_errors=True)  # a partial one a killed run left (a finished one has overlay.json)
    try:
        build.rename(side)
    except OSError:  # another pytest-xdist worker finished the same overlay first, and may be importing from it
        shutil.rmtree(build, ignore_errors=True)  # (replacing it under that worker failed CI once: keep it)
        assert (side / "overlay.json").exists(), side
        return side
    print(f"trackio overlay: {side} ({size / 2**20:.0f} MB, pip install {seconds:.1f} s)")
    return side


def _overlay_env(side: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACKIO_DIR"}
    return {**env, "PYTHONPATH": f"{side}{os.pathsep}{_REPO}", "PYTHONNOUSERSITE": "1",
            "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


PROBE = """
import json, sys
import huggingface_hub, numpy, trackio
print(json.dumps({"trackio": trackio.__file__, "hub": huggingface_hub.__version__, "numpy": numpy.__file__,
                  "lerobot": any(m == "lerobot" or m.startswith("lerobot.") for m in sys.modules)}))
"""


def _probe_overlay(out: str, side: Path) -> None:
    """The subprocess took trackio and huggingface-hub 1.x from the overlay, numpy from the environment."""
    probe = json.loads(out.strip().splitlines()[-1])
    assert Path(probe["trackio"]).is_relative_to(side), probe
    assert int(probe["hub"].split(".")[0]) >= 1, probe
    assert not Path(probe["numpy"]).is_relative_to(side) and not probe["lerobot"], probe


def trackio_rows(db: Path, run: str) -> list[tuple[int, dict]]:
    """(step, metrics) of every row trackio wrote for ``run``, read with the standard library."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        return [(step, json.loads(metrics)) for step, metrics in
                con.execute("SELECT step, metrics FROM metrics WHERE run_name = ? ORDER BY id", (run,))]


def trackio_config(db: Path, run: str) -> dict:
    with contextlib.closing(sqlite3.connect(db)) as con:
        [(config,)] = con.execute("SELECT config FROM configs WHERE run_name = ?", (run,)).fetchall()
    return json.loads(config)


def test_trackio_overlay_shadows_only_what_trackio_needs(trackio_overlay):
    import importlib.util

    names = _top_level(trackio_overlay)
    assert "trackio" in names and "huggingface_hub" in names
    shadowed = {n for n in names if importlib.util.find_spec(n) is not None}
    assert shadowed <= SHADOWED, shadowed
    assert not names & {"numpy", "torch", "mujoco", "metaworld", "gymnasium", "lerobot", "lerobench", "av", "scipy"}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env=_overlay_env(trackio_overlay))
    assert proc.returncode == 0, proc.stderr
    _probe_overlay(proc.stdout, trackio_overlay)


@pytest.fixture(scope="module")
def trackio_run(trackio_overlay, tmp_path_factory):
    """A real eval (expert on smoke, 1 episode a task, a 64 px video each) logged to trackio at step 3."""
    out = tmp_path_factory.mktemp("trackio") / "run"
    proc = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--episodes", "1",
                           "--max-steps", "60", "--videos", "1", "--video-size", "64", "--log-to", "trackio",
                           "--log-step", "3", "--log-project", "lerobench-test", "--output", str(out)],
                          capture_output=True, text=True, timeout=600, env=_overlay_env(trackio_overlay), cwd=_REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"logged to trackio: {out / 'trackio'} (project lerobench-test, run run)" in proc.stdout
    return out, json.loads((out / "results.json").read_text())


def test_the_documented_trackio_block_reads_its_store(trackio_run, capsys):
    out, results = trackio_run
    rows = run_reading_block(reading_back_blocks()["sqlite3"], out, "lerobench-test", capsys)
    assert rows == [(3, pytest.approx(results["overall"]["success_rate"]))]


def test_trackio_store_holds_results(trackio_run):
    out, results = trackio_run
    db = out / "trackio" / "lerobench-test.db"
    [(step, metrics)] = trackio_rows(db, out.name)
    assert step == 3
    for key, value in expected_scalars(results).items():
        assert metrics[key] == pytest.approx(value), key
    for task in results["tasks"]:
        assert metrics[f"eval/{task['task']}/success_rate"] == task["success_rate"]
        assert [metrics[f"eval/{task['task']}/ci_low"], metrics[f"eval/{task['task']}/ci_high"]] == task["ci95"]
    assert metrics["eval/success_rate"] == results["overall"]["success_rate"]
    assert [metrics["eval/ci_low"], metrics["eval/ci_high"]] == results["overall"]["ci95"]
    videos = [e for e in map(json.loads, (out / "episodes.jsonl").read_text().splitlines()) if e["video"]]
    assert len(videos) == len(results["tasks"])
    for episode in videos:
        media = metrics[f"eval/videos/{episode['task']}/{Path(episode['video']).stem}"]
        assert media["_type"] == "trackio.video"
        assert (out / "trackio" / "media" / media["file_path"]).stat().st_size > 0
    config = trackio_config(db, out.name)
    assert (config["suite"], config["seed"], config["tasks"]) == ("smoke", 0, ["reach-v3", "button-press-v3"])
    assert config["simulator"] == results["config"]["simulator"]
    assert config["provenance"]["versions"]["mujoco"] == results["provenance"]["versions"]["mujoco"]


API_LOOP = """
import json, sys
from pathlib import Path
import lerobench
from lerobench.trackers import log_run
results = [lerobench.evaluate("metaworld-expert", "smoke", episodes=1, videos=0, max_steps=20, log_to=["trackio"],
                              log_step=step) for step in (10, 20)]
run = Path(sys.argv[1])
written = log_run(json.loads((run / "results.json").read_text()), run, ["trackio"], step=30, store=Path(sys.argv[2]))
print(json.dumps({"results": [[r.success_rate, list(r.ci95), r.logged] for r in results], "written": written}))
""" + PROBE


def test_trackio_from_the_python_api_gathers_a_training_loops_evaluations(trackio_run, trackio_overlay, tmp_path):
    """``evaluate(output=None, log_to=["trackio"])`` twice: one run in ./lerobench-logs over both steps; a later
    ``log_run(store=)`` in the same process writes to its own store, not to the first one trackio opened."""
    out, _ = trackio_run
    other = tmp_path / "other"
    proc = subprocess.run([sys.executable, "-c", API_LOOP, str(out), str(other)], capture_output=True, text=True,
                          timeout=600, env=_overlay_env(trackio_overlay), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    _probe_overlay(lines[-1], trackio_overlay)
    report = json.loads(lines[-2])
    logs = tmp_path / "lerobench-logs" / "trackio"
    rows = trackio_rows(logs / "lerobench.db", "smoke")
    assert [step for step, _ in rows] == [10, 20]
    for (_, metrics), (rate, ci95, logged) in zip(rows, report["results"], strict=True):
        assert (metrics["eval/success_rate"], [metrics["eval/ci_low"], metrics["eval/ci_high"]]) == (rate, ci95)
        assert logged == {"trackio": f"{logs} (project lerobench, run smoke)"}
    assert report["written"] == {"trackio": f"{other / 'trackio'} (project lerobench, run run)"}
    assert [step for step, _ in trackio_rows(other / "trackio" / "lerobench.db", "run")] == [30]
    assert [step for step, _ in trackio_rows(out / "trackio" / "lerobench-test.db", "run")] == [3]


JOINED = """
import json, sys
from pathlib import Path
import trackio
from trackio import context_vars
from lerobench.trackers import log_run
run = trackio.init(project="training", name="loop", config={"lr": 0.1}, auto_log_cpu=False, auto_log_gpu=False)
run.log({"loss": 1.0}, step=1)
out = Path(sys.argv[1])
written = log_run(json.loads((out / "results.json").read_text()), out, ["trackio"], step=2)
assert context_vars.current_run.get() is run
run.log({"loss": 0.5}, step=3)
trackio.finish()
print(json.dumps(written))
"""


def test_trackio_open_run_of_a_training_loop_is_joined(trackio_run, trackio_overlay, tmp_path):
    """A training loop's own trackio run (its store from ``TRACKIO_DIR``) receives the values at its step and
    stays open."""
    out, results = trackio_run
    env = {**_overlay_env(trackio_overlay), "TRACKIO_DIR": str(tmp_path / "store")}
    proc = subprocess.run([sys.executable, "-c", JOINED, str(out)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "trackio": "the open trackio run loop (project training)"}
    rows = trackio_rows(tmp_path / "store" / "training.db", "loop")
    assert [step for step, _ in rows] == [1, 2, 3]
    assert rows[1][1]["eval/success_rate"] == results["overall"]["success_rate"]
    assert trackio_config(tmp_path / "store" / "training.db", "loop")["lr"] == 0.1
    assert not (out / "trackio" / "training.db").exists()




@pytest.mark.parametrize("case", ["missing", "broken"])
def test_trackio_missing_or_unimportable_is_one_line(case, tmp_path):
    """Not installed, or installed next to huggingface-hub<1 (its own import fails): one line, exit 2, before the
    run, naming the extra and the conflict."""
    env = dict(os.environ)
    if case == "broken":  # what trackio>=0.24 does beside LeRobot's huggingface-hub 0.35
        (tmp_path / "fake" / "trackio").mkdir(parents=True)
        (tmp_path / "fake" / "trackio" / "__init__.py").write_text(
            "raise ImportError(\"cannot import name 'Volume' from 'huggingface_hub'\")\n")
        env["PYTHONPATH"] = f"{tmp_path / 'fake'}{os.pathsep}{_REPO}"
        code = ["-m", "lerobench"]
    else:
        code = ["-c", blocked("trackio")]
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, *code, "eval", "--suite", "smoke", "--log-to", "trackio",
                           "--output", str(out)], capture_output=True, text=True, timeout=120, env=env, cwd=_REPO)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "pip install 'lerobench[trackio]'" in lines[0] and "huggingface-hub<0.36" in lines[0]
    assert ("Volume" in lines[0]) == (case == "broken")
    assert not out.exists()


def test_evaluate_without_output_keeps_its_logs(tmp_path, monkeypatch):
    """``evaluate(output=None, log_to=...)``: the run directory is temporary, the logs go to ./lerobench-logs (one
    TensorBoard curve over the calls); ``log_dir=`` puts them elsewhere."""
    pytest.importorskip("metaworld")
    pytest.importorskip("tensorboardX")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import lerobench

    monkeypatch.chdir(tmp_path)
    calls = [lerobench.evaluate("metaworld-expert", "smoke", episodes=1, videos=0, max_steps=20,
                                log_to=["tensorboard"], log_step=step) for step in (1, 2)]
    logs = tmp_path / "lerobench-logs" / "tensorboard"
    assert [r.logged for r in calls] == [{"tensorboard": str(logs)}] * 2 and calls[0].run_dir is None
    events = EventAccumulator(str(logs))
    events.Reload()
    assert [(p.step, p.value) for p in events.Scalars("eval/success_rate")] == \
        [(1, pytest.approx(calls[0].success_rate)), (2, pytest.approx(calls[1].success_rate))]
    elsewhere = lerobench.evaluate("metaworld-expert", "smoke", episodes=1, videos=0, max_steps=20,
                                   log_to=["tensorboard"], log_step=3, log_dir=tmp_path / "mine")
    assert elsewhere.logged == {"tensorboard": str(tmp_path / "mine" / "tensorboard")}


TRAINING_LOOP = '''
"""The issue's training loop: a torch MLP trained on Meta-World state, evaluated every few steps."""
import ctypes, gc, json, os
import torch
import lerobench


def resident_mb():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap pages glibc still maps are not held memory
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(39, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4), torch.nn.Tanh())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    report = []
    for k in range(5):
        for _ in range(10):  # a few training steps: regress towards a fixed push on random states
            state = torch.randn(32, 39)
            loss = (model(state) - torch.tensor([0.0, 1.0, 0.0, 0.0])).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results = lerobench.evaluate(model, "smoke", episodes=2, log_to=["tensorboard", "mlflow", "trackio"],
                                     log_step=k, videos=0, max_steps=50)  # videos cost 20 s an evaluation here
        report.append({"step": k, "memory_mb": resident_mb(), "success_rate": results.success_rate,
                       "ci95": list(results.ci95), "tasks": {t.task: t.success_rate for t in results.tasks}})
    print(json.dumps(report))
'''


@pytest.mark.slow
def test_a_training_loop_logs_five_evaluations_to_three_trackers(trackio_overlay, tmp_path, monkeypatch):
    """Issue 29's check: 5 evaluations in one process, flat memory, every logged success value read back from
    TensorBoard's event files, MLflow's file store and trackio's database equals the returned results."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    script = tmp_path / "train.py"
    script.write_text(TRAINING_LOOP)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900,
                          env=_overlay_env(trackio_overlay), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    memory = [r["memory_mb"] for r in report]
    assert max(memory[1:]) <= memory[0] * 1.05, memory  # flat after the first evaluation
    logs = tmp_path / "lerobench-logs"
    expected = {r["step"]: r for r in report}

    rows = trackio_rows(logs / "trackio" / "lerobench.db", "smoke")
    assert [step for step, _ in rows] == list(range(5))
    for step, metrics in rows:
        assert metrics["eval/success_rate"] == expected[step]["success_rate"]
        assert [metrics["eval/ci_low"], metrics["eval/ci_high"]] == expected[step]["ci95"]
        for task, rate in expected[step]["tasks"].items():
            assert metrics[f"eval/{task}/success_rate"] == rate

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(logs / "mlruns").resolve().as_uri())
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    history = [p for run in runs for p in client.get_metric_history(run.info.run_id, "eval/success_rate")]
    assert sorted((p.step, p.value) for p in history) == [(k, expected[k]["success_rate"]) for k in range(5)]

    events = EventAccumulator(str(logs / "tensorboard"))
    events.Reload()
    points = events.Scalars("eval/success_rate")
    assert sorted((p.step, p.value) for p in points) == \
        [(k, pytest.approx(expected[k]["success_rate"], rel=1e-6)) for k in range(5)]
