"""Log a finished run to experiment trackers (``--log-to``, and ``log_to=`` in the Python API).

The numbers come from the run's results.json document (so a tracker shows exactly what the file says), the
videos from its ``videos/`` folder. Every library is imported only here, only when asked for: ``lerobench
--help`` never pays for them. A missing library is found by ``check_trackers`` before the run starts.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from lerobench.errors import MissingDependencyError, RunError, unknown
from lerobench.trackers.scalars import flatten, identity, scalars, videos


class Tracker(NamedTuple):
    """A tracker lerobench logs to: the module it needs and the function that writes one run."""

    module: str
    writer: str
    """Name of the function in ``lerobench.trackers.sinks``."""
    extra: str = "trackers"
    """The lerobench extra that installs ``module``."""
    hint: str = ""
    """Said after the ``pip install`` of a missing or broken library."""
    import_check: bool = False
    """Import ``module`` in ``check_trackers`` (not only find it): an installed copy can fail on its own imports."""


TRACKIO_HINT = ("into an environment without LeRobot's huggingface-hub<0.36 pin: trackio needs huggingface-hub>=1.10 "
                "(docs/trackers.md)")

TRACKERS: dict[str, Tracker] = {
    "wandb": Tracker("wandb", "log_wandb"),
    "trackio": Tracker("trackio", "log_trackio", extra="trackio", hint=TRACKIO_HINT, import_check=True),
    "mlflow": Tracker("mlflow", "log_mlflow"),
    "tensorboard": Tracker("tensorboardX", "log_tensorboard"),
}
"""Values of ``--log-to``. trackio has an extra of its own: every release since 0.24 imports ``huggingface_hub.Volume``
(huggingface-hub>=1.x) and needs pillow<13, which the pinned LeRobot stack (huggingface-hub<0.36) rules out, so it
cannot share ``dev``'s environment."""


def install_hint(name: str) -> str:
    """``pip install 'lerobench[<extra>]'`` for tracker ``name``, and what to know about that environment."""
    tracker = TRACKERS[name]
    return " ".join(filter(None, [f"pip install 'lerobench[{tracker.extra}]'", tracker.hint]))


def parse_log_to(values: Iterable[str]) -> tuple[str, ...]:
    """``--log-to a,b --log-to c`` -> ("a", "b", "c"), without blanks or repeats, in the order given."""
    names = [n.strip() for v in values for n in v.split(",")]
    return tuple(dict.fromkeys(n for n in names if n))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module blocked in sys.modules
        return False


def check_trackers(log_to: Sequence[str], flag: str = "--log-to") -> None:
    """Raise an ``UnknownNameError``/``MissingDependencyError`` (one line) before a run starts.

    Why up front: a run of hours that fails to log at its end because of a typo or a missing ``pip install``
    would have to be run again or logged by hand. ``flag`` is how the caller names the list (``log_to=`` in the
    Python API).
    """
    for name in log_to:
        if name not in TRACKERS:
            raise unknown("tracker", name, TRACKERS, f"({flag})")
        tracker = TRACKERS[name]
        if not _installed(tracker.module):
            raise MissingDependencyError(f"{flag} {name} needs {tracker.module}: {install_hint(name)}")
        if tracker.import_check:
            try:
                importlib.import_module(tracker.module)
            except ImportError as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise MissingDependencyError(f"{flag} {name}: {tracker.module} is installed but does not import "
                                             f"({first}): {install_hint(name)}") from exc


def log_run(results: dict[str, Any], run_dir: Path, log_to: Sequence[str], *, step: int | None = None,
            project: str = "lerobench", run_name: str | None = None, store: Path | None = None) -> dict[str, Any]:
    """Log a finished run's results.json document to each tracker; return {tracker: where it was written}.

    ``store`` is where the offline stores go (default ``run_dir``): pass a lasting directory when the run
    directory is temporary (an evaluation that writes no files), or to gather a training run's evaluations in one
    place. ``WANDB_DIR``, ``TRACKIO_DIR`` and ``MLFLOW_TRACKING_URI`` take precedence, and a wandb / trackio / MLflow
    run already open in this process is logged into.

    Every tracker is tried even if one fails; then one ``RunError`` names those that failed (the results are
    on disk already, so nothing is lost).
    """
    written, failed = log_each(results, run_dir, log_to, step=step, project=project, run_name=run_name, store=store)
    if failed:
        raise RunError(f"could not log the run in {run_dir} to {'; '.join(f'{k}: {v}' for k, v in failed.items())}")
    return written


def log_each(results: dict[str, Any], run_dir: Path, log_to: Sequence[str], *, step: int | None = None,
             project: str = "lerobench", run_name: str | None = None, store: Path | None = None,
             temporary: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """``log_run`` without raising: ({tracker: where it was written}, {tracker: why it failed}).

    For ``lerobench.evaluate``, which must hand its results back whatever a tracker does. ``temporary``: the run
    directory is deleted after logging, so media are logged only as copies the store keeps (TensorBoard's video
    list names copies under its own folder, not files about to be removed).
    """
    check_trackers(log_to)
    from lerobench.trackers import sinks

    run_dir = Path(run_dir)
    ident = identity(results)
    log = sinks.RunLog(results=results, run_dir=run_dir, store=Path(store) if store else run_dir,
                       step=int(step or 0), project=project,
                       run_name=run_name or run_dir.name, scalars=scalars(results), identity=ident,
                       flat=flatten(ident), videos=tuple(videos(run_dir)), temporary=temporary)
    written: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name in log_to:
        writer: Callable[[sinks.RunLog], str] = getattr(sinks, TRACKERS[name].writer)
        try:
            written[name] = writer(log)
        except ImportError as exc:
            failed[name] = f"{exc} ({install_hint(name)})"
        except Exception as exc:  # noqa: BLE001 - a tracker's own error, reported by name, the others still logged
            failed[name] = f"{type(exc).__name__}: {exc}"
    return written, failed
