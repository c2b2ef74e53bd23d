"""``lerobench.evaluate``: evaluate a policy from Python (a training loop), with the CLI's defaults.

Why a function and not only the CLI: checkpoints are evaluated *during* training, every N steps, from inside
the training process, with the numbers landing in the tracker already in use. So the policy is the object in
memory (a ``torch.nn.Module``, a LeRobot policy with its processors, anything following the ``Policy``
protocol), never copied to another process; every call leaves the process as it found it: no worker, thread
or GL context outlives it, torch's global settings (threads, determinism flags, grad mode) and the module's
train/eval mode and device are restored, and ``output=None`` leaves no files behind.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobench.core.records import EpisodeRecord
from lerobench.environment import preserved as preserved_environment
from lerobench.plan.options import default, given, settings_help

LOG_DIR = "lerobench-logs"
"""Where ``evaluate(output=None, log_to=...)`` puts the trackers' stores (relative to the working directory): its run
directory is temporary, the logs must outlast the call."""


@dataclass(frozen=True)
class TaskResult:
    """One task's rate and its exact 95% interval."""

    task: str
    n_episodes: int
    successes: int
    success_rate: float | None
    ci95: tuple[float, float]
    n_errors: int
    pass_at_k: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Results:
    """What ``evaluate`` returns: the numbers, the episodes, and where the run was written (if anywhere)."""

    suite: str
    policy: str
    success_rate: float | None
    """Overall success rate (trial 0 of every episode)."""
    ci95: tuple[float, float]
    n_episodes: int
    successes: int
    n_errors: int
    tasks: tuple[TaskResult, ...]
    episodes: tuple[EpisodeRecord, ...]
    env_steps_per_s: float | None
    eval_s: float
    run_dir: Path | None
    """The run directory, or None when ``output=None`` (it was temporary and is gone)."""
    document: dict[str, Any] = field(repr=False)
    """The full ``results.json`` document."""
    pass_at_k: tuple[dict[str, Any], ...] = ()
    """Overall pass@k for multi-trial runs (``results.json`` ``overall.pass_at_k``)."""
    logged: dict[str, Any] = field(default_factory=dict)
    """Where each tracker of ``log_to`` wrote (tracker -> location)."""
    log_errors: dict[str, str] = field(default_factory=dict)
    """Trackers of ``log_to`` that failed after the evaluation (tracker -> why); also warned as a
    ``TrackerWarning``. The results are whole either way."""

    @property
    def stopping(self) -> dict[str, Any] | None:
        """``until``/``versus``: the stopping block of results.json (reasons, intervals, the A/B test); else None."""
        return self.document.get("stopping")

    @property
    def decision(self) -> str | None:
        """``versus``: the A/B decision ("B better", "A better", "equivalent within ±m", "undecided"...); else None."""
        versus = (self.stopping or {}).get("versus") or {}
        return versus.get("decision")

    def task(self, name: str) -> TaskResult:
        """The result of task ``name``."""
        for t in self.tasks:
            if t.task == name:
                return t
        raise KeyError(f"no task {name!r} in this result (tasks: {[t.task for t in self.tasks]})")

    @classmethod
    def from_document(cls, document: dict[str, Any], records: Sequence[EpisodeRecord], run_dir: Path | None,
                      logged: dict[str, Any] | None = None, log_errors: dict[str, str] | None = None) -> Results:
        """Build from a ``results.json`` document and the run's episode records."""
        o = document["overall"]
        tasks = tuple(TaskResult(task=t["task"], n_episodes=t["n_episodes"], successes=t["successes"],
                                 success_rate=t["success_rate"], ci95=tuple(t["ci95"]), n_errors=t["n_errors"],
                                 pass_at_k=tuple(t.get("pass_at_k", ()))) for t in document["tasks"])
        return cls(suite=document["suite"], policy=document["policy"], success_rate=o["success_rate"],
                   ci95=tuple(o["ci95"]), n_episodes=o["n_episodes"], successes=o["successes"],
                   n_errors=o.get("n_errors", 0), tasks=tasks, episodes=tuple(records),
                   env_steps_per_s=o.get("env_steps_per_s"), eval_s=o["eval_s"], run_dir=run_dir,
                   document=document, pass_at_k=tuple(o.get("pass_at_k", ())), logged=dict(logged or {}),
                   log_errors=dict(log_errors or {}))


class TrackerWarning(UserWarning):
    """A tracker of ``log_to`` failed after the evaluation; ``Results.log_errors`` says which and why."""


_ARGUMENTS_HELP = """
    Args:
        policy: A spec string (as ``--policy``), a ``torch.nn.Module`` (``select_action(batch, tasks)``, or a
            plain module mapping the state to actions), a LeRobot ``PreTrainedPolicy`` (pass its
            ``preprocessor`` and ``postprocessor``), or any object following ``lerobench.policies.Policy``.
            Objects run in this process (executor ``auto``, ``vector`` or ``inline``) and are never copied to
            another process.
        suite: A suite name (``lerobench list``) or a suite TOML path.
        tasks: Task names or indices (a list, or the CLI's comma-separated string); None: every task.
        episodes: Episodes per task (None: the suite's; with ``versus``: run A's).
        delay_steps: Inference delay in control steps, or ``"measured"`` (docs/latency.md).
        formats: Other formats to write as well (``"lerobot"``): a list or a comma-separated string.
        shard: ``"I/N"``: run only shard I of N (``lerobench merge`` combines them).
        perturb: Perturbations, as ``--perturb`` (``"obs_noise=0.01,light=0.5"`` or a list).
        until: ``"halfwidth=H"``, ``"suite-halfwidth=H"`` or ``"decided"`` (with ``versus``): stop early, validly.
        versus: Run A's directory: pair this run with its episodes; with ``until="decided"`` (and ``effect``,
            ``power`` for the designed test) stop once B better / A better / equivalent is decided. The decision
            is ``Results.decision``, the whole stopping block ``Results.stopping``.
        metric: What ``until="decided"`` decides about: ``"success"`` (default) or ``"progress"`` (the mean of
            each pair's highest-progress difference, a betting e-process; the backend must define progress).
        output: The run directory to write (as ``--output``); None: a temporary directory removed on return.
        max_errors: Raise ``EpisodeErrors`` (with the ``Results``) if more than this many episodes end in an
            error. Whatever the limit, a run in which *every* episode ended in an error raises (there is no rate
            to return), and one in which some did warns with an ``EpisodeErrorWarning`` naming the first.
        log_to: Experiment trackers to log the results to (``wandb``, ``trackio``, ``mlflow``, ``tensorboard``):
            a list, or the CLI's comma-separated string. A tracker that fails after the evaluation does not lose
            it: the results come back with ``log_errors`` set and a ``TrackerWarning``.
        log_step: The training step the trackers log at (an int >= 0).
        log_project: The trackers' project name.
        log_dir: Where the trackers' offline stores go (``wandb/``, ``trackio/``, ``mlruns/``, ``tensorboard/``).
            None: the run directory, or ``./lerobench-logs`` with ``output=None`` (whose directory is removed on
            return); the runs are then named after the suite, so a training loop's evaluations gather there
            (one TensorBoard curve, one trackio run over the steps).
        policy_name: How results name an in-memory policy (default: its class).
        preprocessor: A LeRobot policy's preprocessor (``make_pre_post_processors``), with ``postprocessor``.
        postprocessor: A LeRobot policy's postprocessor.

    Returns:
        ``Results``: per-task and overall rates with exact 95% intervals, pass@k, the episodes, throughput, the
        stopping decision (``until``/``versus``) and the run directory (None with ``output=None``).

    Raises:
        LerobenchError: an argument (named in the API's words, before anything runs), the suite, the policy or
            the simulator refused the run (one-line message); ``EpisodeErrors`` as ``max_errors`` says.
"""
"""``evaluate``'s own arguments, appended to its docstring (kept here so the function stays short)."""


def evaluate(  # noqa: D417 - the shared settings' help is appended from plan/options.py (below)
    policy: Any,
    suite: str | Path,
    *,
    tasks: str | Sequence[str | int] | None = None,
    episodes: int | None = default("episodes"),
    batch_size: int = default("batch_size"),
    seed: int = default("seed"),
    protocol: str = default("protocol"),
    max_steps: int | None = default("max_steps"),
    stop_on_success: bool = default("stop_on_success"),
    videos: int = default("videos"),
    video_fps: float = default("video_fps"),
    video_size: int | None = default("video_size"),
    render_quality: str | None = default("render_quality"),
    episode_timeout: float | None = default("episode_timeout"),
    policy_timeout: float | None = default("policy_timeout"),
    replan_steps: int = default("replan_steps"),
    delay_steps: int | str = default("delay_steps"),
    parallel_tasks: int = default("parallel_tasks"),
    trials: int | None = default("trials"),
    formats: str | Sequence[str] = default("formats"),
    record: str = default("record"),
    record_size: int = default("record_size"),
    rerun: bool = default("rerun"),
    device: str = default("device"),
    call_width: int | None = default("call_width"),
    share_task: bool = default("share_task"),
    shard: str | None = default("shard"),
    executor: str = default("executor"),
    workers: int = default("workers"),
    ray_address: str | None = default("ray_address"),
    ray_gpus_per_worker: float = default("ray_gpus_per_worker"),
    allow_sim_drift: bool = default("allow_sim_drift"),
    perturb: str | Sequence[str] = default("perturb"),
    until: str | None = default("until"),
    versus: str | Path | None = default("versus"),
    alpha: float = default("alpha"),
    margin: float = default("margin"),
    effect: float | None = default("effect"),
    power: float = default("power"),
    metric: str = default("metric"),
    resume: bool = default("resume"),
    output: str | Path | None = None,
    max_errors: int | None = default("max_errors"),
    log_to: str | Sequence[str] = default("log_to"),
    log_step: int = default("log_step"),
    log_project: str = default("log_project"),
    log_dir: str | Path | None = None,
    policy_name: str | None = None,
    preprocessor: Any = None,
    postprocessor: Any = None,
) -> Results:
    """Evaluate ``policy`` on every task of ``suite``: ``lerobench eval`` from Python, same settings and defaults.

    Every argument named like a ``lerobench eval`` flag (``delay_steps`` for ``--delay-steps``) means what the
    flag means and has its default (``lerobench eval --help``, docs/usage.md); both are made from one
    declaration (``lerobench/plan/options.py``). The exceptions: ``output=None`` is a temporary run directory
    removed on return, and ``policy_name``, ``preprocessor``, ``postprocessor`` and ``log_dir`` exist only here.

    Its own arguments, what it returns and raises follow, then the settings it shares with the CLI.
    """
    from lerobench.arguments import check_arguments

    return _evaluate(check_arguments(locals()))  # every argument's type and range, named, before anything runs


def _evaluate(args: dict[str, Any]) -> Results:
    """``evaluate`` with its arguments checked: plan, run, log, and remove a temporary run directory."""
    from lerobench.arguments import api_words, check_output, check_store

    tasks, log_to, output, log_dir = args["tasks"], args["log_to"], args["output"], args["log_dir"]
    policy, policy_name = args["policy"], args["policy_name"]
    from lerobench.execution.runner import Evaluation, RunSettings
    from lerobench.suite.registry import load_suite

    with api_words():
        declared = settings_from(args)  # the settings declared once in plan/options.py, parsed as the CLI does
        if output is not None:
            check_output(Path(output), args["resume"])
        if log_to:
            from lerobench.trackers import check_trackers

            check_trackers(log_to, flag="log_to")
            store = _store(log_dir, output is None)
            check_store(store if store is not None else Path(str(output)))
        chosen = load_suite(str(args["suite"])).select_tasks([str(t) for t in tasks] if tasks is not None else None,
                                                     flag="tasks=")
    in_memory = not isinstance(policy, str)
    spec = policy if not in_memory else (policy_name or f"python:{type(policy).__module__}.{type(policy).__qualname__}")
    scratch = Path(tempfile.mkdtemp(prefix="lerobench-")) if output is None else None
    run_dir = scratch / "run" if scratch is not None else Path(str(output))
    try:
        with api_words():
            settings = RunSettings(**declared, suite=chosen, policy=spec, output=run_dir,
                                   command=("lerobench.evaluate", f"suite={chosen.name}", f"policy={spec}"))
            with _restored_torch_state(policy if in_memory else None), preserved_environment(), kept_templates():
                adapter = _in_memory(policy, args["preprocessor"], args["postprocessor"]) if in_memory else {}
                evaluation = Evaluation(settings, **adapter)
                document = evaluation.run()
                records = _records(evaluation.s.output)
        logged, failed = _log(document, evaluation.s.output, log_to, args["log_step"], args["log_project"], log_dir,
                              chosen.name if scratch else None)
        if failed:
            warnings.warn(TrackerWarning(f"lerobench.evaluate: the evaluation finished but could not be logged to "
                                         f"{'; '.join(f'{k}: {v}' for k, v in failed.items())} (Results.log_errors)"),
                          stacklevel=3)
        results = Results.from_document(document, records, None if scratch else evaluation.s.output, logged, failed)
        _warn_mkl_mode(document)
        _check_errors(results, evaluation.episodes_errored_at_any_trial, args["max_errors"])
        return results
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


evaluate.__doc__ = (evaluate.__doc__ or "") + _ARGUMENTS_HELP + settings_help()


def release_simulators() -> bool:
    """Stop the simulator template that ``evaluate`` keeps for its next call (docs/training.md).

    ``evaluate`` keeps the last task's built scene (a LIBERO template process, 0.5-0.9 GB) so that the next call on
    the same task starts in a fraction of the time; it also stops when the interpreter exits. The last LeRobot
    policy loaded from disk (``lerobot:<dir>``), kept for a next load of the same files, is dropped too. True if
    a template ran.
    """
    import sys

    from lerobench.envs.template import stop_kept

    if "lerobench.policies.lerobot_policy" in sys.modules:
        sys.modules["lerobench.policies.lerobot_policy"].release_kept()
    return stop_kept()


def kept_templates() -> Any:
    """The block in which a finished task's template is kept for the next ``evaluate`` (``envs/template.py``)."""
    from lerobench.envs.template import keeping

    return keeping()


def settings_from(args: dict[str, Any]) -> dict[str, Any]:
    """``RunSettings`` keyword arguments from ``evaluate``'s checked arguments: the CLI's spellings parsed."""
    from lerobench.core.shards import parse_shard
    from lerobench.envs.perturb import parse_perturbations

    declared = given(args)
    declared.update(shard=parse_shard(args["shard"]), perturb=parse_perturbations(args["perturb"]),
                    formats=args["formats"], versus=None if args["versus"] is None else Path(args["versus"]))
    return declared


class EpisodeErrorWarning(UserWarning):
    """Some episodes ended in an error (counted as failures); ``Results.episodes`` holds each one's ``error``."""


class EpisodeErrors(Exception):
    """More episodes ended in an error than ``max_errors`` allows, or every one did; ``.results`` has the run."""

    def __init__(self, message: str, results: Results):
        super().__init__(message)
        self.results = results


class NumericsWarning(UserWarning):
    """The run computed in another MKL mode than the ``lerobench`` command: a torch policy's actions may differ."""


_MKL_WARNED: list[str] = []
"""The MKL mode ``_warn_mkl_mode`` warned about in this process (a training loop's evaluations warn once)."""


def _warn_mkl_mode(document: dict[str, Any]) -> None:
    """Warn once per process when a CPU torch policy computed in another MKL mode than the CLI's (``strict``).

    Why: MKL reads ``MKL_CBWR`` once, when it starts, and ``evaluate`` leaves the caller's process as it is; the
    same policy then gives other last bits than ``lerobench eval`` (per-episode returns 182.60254 vs 182.60232 for
    a small MLP), so a result from a training loop and one from the command may differ episode by episode.
    """
    from lerobench.system import CLI_MKL_MODE, MKL_MATCH, mkl_modes_differ

    mode = (document["config"].get("numerics") or {}).get("mkl")
    if _MKL_WARNED or not mkl_modes_differ(mode, CLI_MKL_MODE):
        return
    _MKL_WARNED.append(str(mode))
    warnings.warn(NumericsWarning(
        f"lerobench.evaluate: this process's MKL computes in mode {mode!r}, the lerobench command in "
        f"{CLI_MKL_MODE!r} (recorded as config.numerics.mkl): a torch policy's actions may differ from the "
        f"command's in their last bits, and its episodes with them. To match the command, {MKL_MATCH}"),
        stacklevel=4)


def _check_errors(results: Results, n_errors: int, max_errors: int | None) -> None:
    """Raise when no episode ran or past ``max_errors``; warn when some episodes ended in an error."""
    if not n_errors:
        return
    first = next(r for r in results.episodes if r.error is not None)
    where = f"the first: task {first.task!r}, episode {first.episode}: {first.error}"
    saved = f"; results are in {results.run_dir}" if results.run_dir is not None else ""
    every = all(r.error is not None for r in results.episodes)
    if every:
        raise EpisodeErrors(f"lerobench.evaluate: every episode ({n_errors}) ended in an error, so there is no "
                            f"success rate ({where}){saved}", results)
    if max_errors is not None and n_errors > max_errors:
        raise EpisodeErrors(f"lerobench.evaluate: {n_errors} episodes ended in an error, more than max_errors="
                            f"{max_errors} ({where}){saved}", results)
    warnings.warn(EpisodeErrorWarning(f"lerobench.evaluate: {n_errors} episode{'s' * (n_errors != 1)} ended in an "
                                      f"error, counted as failures ({where})"), stacklevel=3)


def _store(log_dir: str | Path | None, scratch: bool) -> Path | None:
    """Where the trackers' stores go: ``log_dir``, else ``LOG_DIR`` for a temporary run, else the run directory."""
    if log_dir is not None:
        return Path(log_dir).resolve()
    return Path(LOG_DIR).resolve() if scratch else None


def _log(document: dict[str, Any], run_dir: Path, log_to: Sequence[str], step: int | None, project: str,
         log_dir: str | Path | None, scratch_name: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Log the results to ``log_to``'s trackers; return where each went and why any failed (never raise).

    A temporary run's stores go to ``LOG_DIR`` and its runs are named ``scratch_name`` (the suite), so a training
    loop's evaluations gather in one place; its media are logged only as copies the stores keep.
    """
    if not log_to:
        return {}, {}
    from lerobench.trackers import log_each

    scratch = scratch_name is not None
    try:
        return log_each(document, run_dir, list(log_to), step=step, project=project, store=_store(log_dir, scratch),
                        run_name=scratch_name, temporary=scratch)
    except Exception as exc:  # noqa: BLE001 - the evaluation is done: reported with the results, never lost
        return {}, {name: f"{type(exc).__name__}: {exc}" for name in log_to}


def _records(run_dir: Path) -> list[EpisodeRecord]:
    from lerobench.core.results import EPISODES_FILE
    from lerobench.core.rundir import read_episodes

    return read_episodes(run_dir / EPISODES_FILE)


def _in_memory(policy: Any, preprocessor: Any, postprocessor: Any) -> dict[str, Any]:
    """``Evaluation``'s policy arguments for an in-memory ``policy``.

    A LeRobot policy object becomes its adapter, built from the run's own plan (one plan per run; its processors
    required); anything else goes as it is.
    """
    lerobot = __import__("sys").modules.get("lerobot.policies.pretrained")
    if lerobot is not None and isinstance(policy, lerobot.PreTrainedPolicy):
        from lerobench.errors import ConfigError
        from lerobench.policies.lerobot_policy import LeRobotPolicy

        if preprocessor is None or postprocessor is None:
            raise ConfigError("a LeRobot policy object needs its preprocessor and postprocessor "
                              "(lerobench.evaluate(policy, suite, preprocessor=..., postprocessor=...))")
        return {"adapt": lambda context: LeRobotPolicy.from_objects(policy, preprocessor, postprocessor, context)}
    return {"policy": policy}


@contextlib.contextmanager
def _restored_torch_state(policy: Any) -> Iterator[None]:
    """Put torch's global settings and the caller's module (mode, device) back as they were, whatever happens."""
    import sys

    from lerobench.policies.numerics import preserved_torch_state

    torch = sys.modules.get("torch")
    modules = _modules(policy, torch) if torch is not None else []
    modes = [(m, m.training) for root in modules for m in root.modules()]
    devices = [(root, next((p.device for p in root.parameters()), None)) for root in modules]
    with preserved_torch_state():
        try:
            yield
        finally:
            for root, device in devices:
                if device is not None:
                    root.to(device)
            for m, training in modes:
                m.training = training


def _modules(policy: Any, torch: Any) -> list[Any]:
    """The caller's torch modules (the policy itself: a module or a LeRobot policy), whose mode must survive."""
    return [policy] if isinstance(policy, torch.nn.Module) else []


def compare(run_a: str | Path, run_b: str | Path, *, alpha: float = 0.05,
            allow_different: bool = False) -> dict[str, Any]:
    """``lerobench compare RUN_A RUN_B``: is B better than A? Exact paired tests on the same episodes.

    Returns what ``lerobench compare --json`` prints: per task, per group and overall rates, B - A with its 95%
    interval and p-value (tasks Holm-adjusted), ``b_worse`` and the one-line ``verdict`` ("B better than A", ...). A run
    directory is also what ``evaluate(output=...)`` returns as ``Results.run_dir``.

    Raises:
        LerobenchError: a run cannot be read, or the two runs are not of the same episodes (unless
            ``allow_different``), naming the field and both values.
    """
    from lerobench.analysis.compare import compare_runs, load_run
    from lerobench.arguments import api_words

    with api_words():
        return compare_runs(load_run(Path(run_a)), load_run(Path(run_b)), alpha=alpha,
                            allow_different=allow_different)


def plan_comparison(base: float, diff: float, *, discordance: float | None = None, alpha: float = 0.05,
                    power: float = 0.8, sims: int = 2000, progress_base: float | None = None,
                    progress_diff: float | None = None) -> dict[str, Any]:
    """``lerobench plan --base --diff``: pairs an A/B comparison needs, fixed-n, designed and anytime-valid.

    Returns what ``lerobench plan --json`` prints; ``["designed"]`` is the test ``evaluate(versus=...,
    until="decided", effect=diff, power=power)`` runs against a run A at rate ``base``. With ``progress_base``
    and ``progress_diff`` (A's mean progress and B - A) ``["progress"]`` is the designed progress test's
    (``metric="progress", effect=progress_diff``), simulated.

    Raises:
        ConfigError: a rate outside [0, 1] (``base`` or ``base + diff``), ``diff`` 0, alpha or power outside (0, 1).
    """
    from lerobench.errors import ConfigError
    from lerobench.stats.planning import plan_comparison as plan

    if not (0 < alpha < 1 and 0 < power < 1):
        raise ConfigError(f"lerobench.plan_comparison: alpha and power must lie in (0, 1), got {alpha:g} and "
                          f"{power:g}")
    if not (0 <= base <= 1 and 0 <= base + diff <= 1):
        raise ConfigError(f"lerobench.plan_comparison: diff {diff:g} over base {base:g} gives rate(B) = "
                          f"{base + diff:g}: impossible (both rates must lie in [0, 1])")
    if (progress_base is None) != (progress_diff is None):
        raise ConfigError("lerobench.plan_comparison: progress_base and progress_diff go together")
    try:
        return plan(base, diff, discordance, alpha, power, sims, progress_base=progress_base,
                    progress_diff=progress_diff)
    except ValueError as exc:
        raise ConfigError(f"lerobench.plan_comparison: {exc}") from None
