"""One writer per tracker, each through the tracker's own library into its local store (offline by default).

Each writer joins a run the calling process already has open (``wandb.run``, ``mlflow.active_run()``: a training
loop's run) and otherwise opens its own in the run directory and closes it. Values are logged at the training
step; videos go where the tracker shows them (wandb: ``wandb.Video``; trackio: ``trackio.Video``; MLflow:
artifacts; TensorBoard: their paths as text, since its video summaries are GIFs that would need moviepy to encode).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from lerobench import environment


@dataclass(frozen=True)
class RunLog:
    """Everything a writer logs about one finished run."""

    results: dict[str, Any]
    """The results.json document."""
    run_dir: Path
    store: Path
    """Where the offline stores go (``wandb/``, ``trackio/``, ``mlruns/``, ``tensorboard/``): the run directory by
    default."""
    step: int
    """The training step every value is logged at."""
    project: str
    """wandb / trackio project, MLflow experiment."""
    run_name: str
    scalars: dict[str, float]
    identity: dict[str, Any]
    """results["config"] plus provenance (nested)."""
    flat: dict[str, str]
    """``identity`` flattened to dotted keys and string values."""
    videos: tuple[Path, ...]
    temporary: bool = False
    """The run directory is removed after logging: a writer keeps only media copied into its store."""


def log_wandb(log: RunLog) -> str:
    """Offline unless ``WANDB_MODE`` says otherwise; files under ``WANDB_DIR`` or the run directory."""
    import wandb

    own = wandb.run is None
    if own:
        where = Path(environment.get("WANDB_DIR") or log.store)
        where.mkdir(parents=True, exist_ok=True)
        # disable_git: wandb looks for a git repository at its `dir` and warns "git root ... does not exist" for a
        # store not made yet; the run's provenance (results.json) already says what ran.
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True)
        run = wandb.init(project=log.project, name=log.run_name, dir=str(where), config=log.identity,
                         mode=cast(Any, environment.get("WANDB_MODE", "offline")), settings=settings,
                         reinit="create_new")
    else:
        run = cast(Any, wandb.run)
        run.config.update({"lerobench": log.identity}, allow_val_change=True)
    try:
        media = {f"eval/videos/{p.parent.name}/{p.stem}": wandb.Video(str(p), format="mp4") for p in log.videos}
        run.log({**log.scalars, **media}, step=log.step)
        location = str(Path(run.dir).parent)  # .../wandb/offline-run-<time>-<id>: what `wandb sync` takes
    finally:
        if own:
            run.finish()
    return location


@contextlib.contextmanager
def _trackio_store(folder: Path) -> Iterator[None]:
    """Point trackio at ``folder`` for one log, then back where it was.

    trackio reads ``TRACKIO_DIR`` once, when it is imported, into module constants (``trackio.utils.TRACKIO_DIR``,
    ``MEDIA_DIR``, ``ARTIFACTS_DIR``) that its modules copy by name (``from trackio.utils import MEDIA_DIR``). A
    process that logs to several stores (the Python API, one run directory after another) would write every one
    into the first; so each copy is set while lerobench logs and restored after.
    """
    paths = {"TRACKIO_DIR": folder, "MEDIA_DIR": folder / "media", "ARTIFACTS_DIR": folder / "artifacts"}
    saved = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "trackio" or name.startswith("trackio.")):
            continue
        for attr, path in paths.items():
            before = vars(module).get(attr)
            if isinstance(before, Path):
                saved.append((module, attr, before))
                setattr(module, attr, path)
    try:
        yield
    finally:
        for module, attr, before in reversed(saved):
            setattr(module, attr, before)


def log_trackio(log: RunLog) -> str:
    """A local SQLite store in ``<store>/trackio`` (``TRACKIO_DIR`` takes precedence); returns it, project and run.

    Evaluations logged under one run name into one store continue that run (``resume="allow"``): a training loop's
    evaluations make one curve. A trackio run already open in this process is logged into and left open.
    """
    import trackio
    from trackio import context_vars

    joined = context_vars.current_run.get()
    env = environment.get("TRACKIO_DIR")
    where = Path(env) if env else log.store / "trackio"
    store = _trackio_store(where) if joined is None and not env else contextlib.nullcontext()
    # trackio prints its progress ("* Trackio project initialized ...") to stdout: kept out of the CLI's output.
    with store, contextlib.redirect_stdout(io.StringIO()):
        run = joined if joined is not None else trackio.init(
            project=log.project, name=log.run_name, config=log.identity, resume="allow", embed=False,
            auto_log_cpu=False, auto_log_gpu=False)
        try:
            media = {f"eval/videos/{p.parent.name}/{p.stem}": trackio.Video(p, format="mp4") for p in log.videos}
            run.log({**log.scalars, **media}, step=log.step)
        finally:
            if joined is None:
                trackio.finish()
    if joined is not None:
        return f"the open trackio run {run.name} (project {run.project})"
    return f"{where} (project {log.project}, run {run.name})"


@contextlib.contextmanager
def _file_store_allowed() -> Iterator[None]:
    """MLflow 3.x refuses its ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE`` is set: set it while opening ours.

    The file store needs nothing beyond mlflow-skinny and opens in milliseconds (a fresh SQLite store runs its
    migrations for seconds and needs SQLAlchemy); the check happens only when the store is built.
    """
    with environment.scoped("MLFLOW_ALLOW_FILE_STORE", "true"):
        yield


def log_mlflow(log: RunLog) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else a file store in ``<store>/mlruns``; returns the URI and run id."""
    import mlflow
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    active = mlflow.active_run()
    uri = mlflow.get_tracking_uri() if active or environment.get("MLFLOW_TRACKING_URI") else \
        (log.store / "mlruns").resolve().as_uri()
    with _file_store_allowed():
        client = MlflowClient(tracking_uri=uri)
    if active is not None:
        run_id = active.info.run_id
    else:
        experiment = client.get_experiment_by_name(log.project)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(log.project)
        run_id = client.create_run(experiment_id, run_name=log.run_name).info.run_id
    ok = False
    try:
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, log.step) for k, v in log.scalars.items()]
        for i in range(0, len(metrics), 1000):  # MLflow's per-request limit
            client.log_batch(run_id, metrics=metrics[i:i + 1000])
        if active is None:  # params of a joined run are immutable: its config goes in as an artifact only
            params = [Param(k[:250], v[:6000]) for k, v in log.flat.items()]  # MLflow's key / value limits
            for i in range(0, len(params), 100):
                client.log_batch(run_id, params=params[i:i + 100])
        folder = f"lerobench/step_{log.step}"
        client.log_dict(run_id, log.results, f"{folder}/results.json")
        for video in log.videos:
            client.log_artifact(run_id, str(video), f"{folder}/videos/{video.parent.name}")
        ok = True
    finally:
        if active is None:
            client.set_terminated(run_id, "FINISHED" if ok else "FAILED")
    return f"{uri} (run {run_id})"


def log_tensorboard(log: RunLog) -> str:
    """Event files in ``<store>/tensorboard`` (tensorboardX's writer); config and video paths as text.

    A temporary run's videos are copied to ``<store>/tensorboard/videos/step_<k>/`` first, and the text names them
    there: the run directory is gone when anyone reads the text.

    Evaluations logged into one store at different steps read as one TensorBoard run (one curve per scalar).
    """
    from tensorboardX import SummaryWriter

    folder = log.store / "tensorboard"
    # tensorboardX names a file after the second and the host: two logs in one second would share a file name.
    # The nanoseconds keep them apart, and in the order written (TensorBoard reads a folder's files sorted by name).
    writer = SummaryWriter(logdir=str(folder), filename_suffix=f".{time.time_ns()}")
    try:
        for key, value in log.scalars.items():
            writer.add_scalar(key, value, log.step)
        table = "\n".join(["| key | value |", "|---|---|"] + [f"| {k} | `{v}` |" for k, v in log.flat.items()])
        writer.add_text("lerobench/config", table, log.step)
        if log.videos:
            where = _kept_videos(log, folder) if log.temporary else log.run_dir
            names = [f"{p.parent.name}/{p.name}" if log.temporary else p.relative_to(log.run_dir).as_posix()
                     for p in log.videos]
            paths = "\n".join(f"- {name}" for name in names)
            writer.add_text("lerobench/videos", f"Videos in {where}:\n{paths}", log.step)
        writer.add_text("lerobench/results", f"```json\n{json.dumps(log.results['overall'], indent=1)}\n```",
                        log.step)
    finally:
        writer.close()
    return str(folder)


def _kept_videos(log: RunLog, folder: Path) -> Path:
    """Copy a temporary run's videos to ``<folder>/videos/step_<k>/<task>/`` (TensorBoard's text names them there).

    Why copies: the list used to name files in the run directory, which ``evaluate(output=None)`` removes on return.
    """
    import shutil

    kept = folder / "videos" / f"step_{log.step}"
    for video in log.videos:
        (kept / video.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(video, kept / video.parent.name / video.name)
    return kept
