"""Every evaluation setting declared once: its flags, default and help.

Why: each eval flag used to be written three times (a typer option, a ``RunSettings`` field, the call that
copies one into the other) and the defaults drifted (``--videos`` was 2 on the command line and 0 for Python
callers). Now ``RunSettings`` takes its field defaults from ``SETTINGS``, ``lerobench eval`` builds its options
from it (``cli_option``) and ``lerobench.evaluate`` reads its defaults from it, so the three cannot disagree
(``tests/test_api.py`` checks it). Light on purpose: ``lerobench --help`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lerobench.errors import ConfigError

DEFAULT_VIDEO_FPS = 10.0
"""Frames per second videos aim at by default (``--video-fps``): every 8th step of an 80 Hz Meta-World task, every
2nd of a 20 Hz LIBERO one; only those steps render the video camera. Rendering every step for the video (80 fps
at 480x480) made videos 74-80% of a Meta-World run's wall time on a 2-core CPU box; at 20 fps they were still
35-43%, at 10 fps within the 25% aimed at (benchmarks/video_overhead.py)."""

DEFAULT_VIDEO_SIZE = 256
"""Largest side of frames rendered only for the video when ``--video-size`` is not given and the suite names no
``video_size`` of its own (0: the protocol's image size)."""

RECORD_MODES = ("none", "success", "all")
"""Values of ``--record``: which episodes' trajectories are saved."""


def check_record_mode(mode: str) -> str:
    """Return ``mode`` if it is a valid ``--record`` value, else raise a ``ConfigError`` naming the choices."""
    if mode not in RECORD_MODES:
        raise ConfigError(f"--record must be one of {', '.join(RECORD_MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class Setting:
    """One setting of an evaluation: the ``RunSettings`` field of the same name and its ``lerobench eval`` flags."""

    flags: tuple[str, ...]
    default: Any
    help: str
    minimum: float | None = None
    """Smallest value the command line takes (``typer``'s ``min``); ``make_plan`` checks the rest."""


SETTINGS: dict[str, Setting] = {
    "protocol": Setting(("--protocol",), "standard", "Named protocol of the suite (e.g. lerobot)."),
    "episodes": Setting(("--episodes", "-n"), None, "Episodes per task (default: suite's)."),
    "batch_size": Setting(("--batch-size", "-b"), 0, "Envs per task; 0 = auto (cores, memory)."),
    "seed": Setting(("--seed",), 0, "Run seed: episode i of a task is fixed by (seed, task, i)."),
    "max_steps": Setting(("--max-steps",), None, "Override the step limit (smoke runs)."),
    "stop_on_success": Setting(("--stop-on-success/--no-stop-on-success",), True,
                               "End an episode at its first success."),
    "resume": Setting(("--resume",), False, "Continue the run in --output, skipping finished episodes."),
    "videos": Setting(("--videos",), 2, "Record the first N episodes of each task (0: none)."),
    "video_fps": Setting(("--video-fps",), DEFAULT_VIDEO_FPS,
                         "Video frame rate, at most the control rate (80 Hz Meta-World, 20 Hz LIBERO, 50 Hz ALOHA, "
                         "10 Hz PushT; a higher one is the control rate, recorded as config.video_fps): only the "
                         "steps encoded are rendered."),
    "video_size": Setting(("--video-size",), None,
                          "Largest side of frames rendered for the video alone (default: the suite's video size "
                          "where it has one, ALOHA 480x640 and PushT 384x384, else 256; 0: the protocol's image "
                          "size; a policy camera's own images are reused)."),
    "render_quality": Setting(("--render-quality",), None,
                              "published (the simulator's own renderer settings) or draft (smaller shadow maps, "
                              "no multisampling: up to 2.7x cheaper frames on a CPU, other pixels; recorded). Default: "
                              "LEROBENCH_RENDER_QUALITY, else the suite's, else published (docs/suites.md)."),
    "episode_timeout": Setting(("--episode-timeout",), None,
                               "Seconds one env step may take before its worker counts as hung."),
    "policy_timeout": Setting(("--policy-timeout",), None,
                              "Seconds one policy call may take before the run ends naming it (finished episodes "
                              "kept). Default: 20x the task's slowest call, at least 120 s; 600 s for a first call."),
    "replan_steps": Setting(("--replan-steps",), 1, "Actions executed per returned action chunk."),
    "delay_steps": Setting(("--delay-steps",), "0",
                           "Inference delay in control steps: each chunk is asked for d steps early and executed "
                           "from its action d (RTC's protocol; 0: none), or 'measured' from each call's latency "
                           "(not reproducible). docs/latency.md"),
    "record": Setting(("--record",), "none",
                      "Save rollouts: none|success|all; LIBERO in LIBERO's demo files (recordings/<task>_demo.hdf5), "
                      "others in recordings/<task>.h5 (docs/results.md). Needs h5py: pip install 'lerobench[record]'."),
    "record_size": Setting(("--record-size",), 128,
                           "Side of the camera images in LIBERO's demo files (--record; LIBERO's own: 128).",
                           minimum=8),
    "rerun": Setting(("--rerun",), False, "Also write a Rerun recording rerun/<task>/episode_<i>.rrd of each "
                                          "episode --videos records (docs/trackers.md)."),
    "formats": Setting(("--format",), (), "Also write another format: lerobot (eval_info.json)."),
    "parallel_tasks": Setting(("--parallel-tasks",), 1, "Tasks evaluated at once (threads)."),
    "trials": Setting(("--trials",), None,
                      "Attempts per episode at the same start, policy memory kept (default: suite's)."),
    "device": Setting(("--device",), "cpu", "cpu | cuda | cuda:N | auto (for torch policies)."),
    "call_width": Setting(("--call-width",), None,
                          "Rows per call of a torch policy, padded, so a row's action never depends on its "
                          "neighbours (default: 1 on cpu, rows side by side on one thread each; 16 on cuda; "
                          "0: unpadded, batch-dependent numerics). "
                          "docs/policies.md", minimum=0),
    "shard": Setting(("--shard",), None, "Run only shard I of N (I/N, from 0) of the (task, episode) units; "
                                         "combine shards with `lerobench merge`."),
    "executor": Setting(("--executor",), "auto", "auto | inline | vector | processes | ray (docs/scaling.md)."),
    "share_task": Setting(("--share-task/--no-share-task",), True,
                          "Fork a task's vector workers from one built scene (less memory, same episodes); "
                          "LEROBENCH_SHARE_TASK=0|1 overrides it (docs/scaling.md)."),
    "workers": Setting(("--workers",), 0, "Episode worker processes or concurrent Ray tasks; 0 = auto."),
    "ray_address": Setting(("--ray-address",), None,
                           "Ray cluster to join (auto, ray://host:10001); default: local Ray."),
    "ray_gpus_per_worker": Setting(("--ray-gpus-per-worker",), 0.0, "GPUs reserved per Ray task."),
    "allow_sim_drift": Setting(("--allow-sim-drift",), False,
                               "Run even if the simulator fails its golden-state check (the run is marked drifted)."),
    "perturb": Setting(("--perturb",), (),
                       "Perturb every episode, same starts and seeds: obs_noise=S, action_noise=S, action_delay=K, "
                       "camera_shift=M, light=S (comma-separated or repeated; docs/perturbations.md)."),
    "until": Setting(("--until",), None,
                     "Stop early, validly: halfwidth=H (each task's 95% confidence sequence), suite-halfwidth=H (the "
                     "suite mean's), decided (with --versus). --episodes is the cap."),
    "versus": Setting(("--versus",), None,
                      "Recorded run A (same suite, tasks, protocol, seed): run its episodes pair by pair and stop "
                      "when B better / A better / equivalent is decided (docs/statistics.md)."),
    "alpha": Setting(("--alpha",), 0.05, "Error level of --until's confidence sequences and test."),
    "margin": Setting(("--margin",), 0.1, "--versus: equivalent once rate(B) - rate(A) is inside +-margin."),
    "effect": Setting(("--effect",), None,
                      "--versus: the smallest rate(B) - rate(A) worth detecting (negative: B worse); runs the "
                      "designed sequential test, fewer pairs at --power than fixed-n (docs/statistics.md). With "
                      "--metric progress: the smallest mean progress difference, B - A."),
    "power": Setting(("--power",), 0.8, "--effect: the designed test's power at the effect."),
    "metric": Setting(("--metric",), "success",
                      "--versus --until decided: decide on success (pairs where one policy succeeded) or progress "
                      "(each pair's highest progress, B - A: a betting e-process; docs/statistics.md)."),
}
"""Keyed by ``RunSettings`` field name. The command line spells some values differently (``--shard 0/2``,
``--perturb light=0.5``, repeated ``--format``); ``lerobench eval`` parses those before building the settings."""


AFTER_RUN: dict[str, Setting] = {
    "max_errors": Setting(("--max-errors",), None,
                          "Fail (exit 3; lerobench.evaluate: raise) if more than N episodes end in an error "
                          "(CI: 0). Default: no limit.", minimum=0),
    "log_to": Setting(("--log-to",), (), "Log the finished run to wandb, trackio, mlflow, tensorboard "
                                        "(comma-separated or repeated; offline, into the run directory; "
                                        "docs/trackers.md)."),
    "log_step": Setting(("--log-step",), 0, "--log-to: the training step the values are logged at (>= 0).",
                        minimum=0),
    "log_project": Setting(("--log-project",), "lerobench", "--log-to: wandb / trackio project, MLflow experiment."),
}
"""What happens once the episodes are done, for ``lerobench eval`` and ``lerobench.evaluate`` alike (not
``RunSettings``: the run itself does not depend on them)."""

CLI_ONLY = {
    "debug": "a traceback on the terminal; Python callers get the exception itself",
    "progress_interval": "plain progress lines on a terminal-less stdout; Python callers print nothing",
}
"""``lerobench eval`` options with no ``lerobench.evaluate`` argument, and why (``tests/test_api.py`` checks)."""

API_ONLY = {
    "policy_name": "how results name an in-memory policy object (the CLI's policy is always a spec string)",
    "preprocessor": "a LeRobot policy object's processors (the CLI loads them with lerobot:<dir>)",
    "postprocessor": "a LeRobot policy object's processors (the CLI loads them with lerobot:<dir>)",
    "log_dir": "where a temporary run's tracker stores go (the CLI's run directory is never temporary)",
}
"""``lerobench.evaluate`` arguments with no ``lerobench eval`` option, and why."""


def default(name: str) -> Any:
    """The default of setting ``name`` (``SETTINGS`` or ``AFTER_RUN``), for the CLI and ``lerobench.evaluate``."""
    return (SETTINGS.get(name) or AFTER_RUN[name]).default


def settings_help() -> str:
    """Every shared setting as ``name (--flag, default): help``, for ``lerobench.evaluate``'s docstring."""
    lines = ["", "    Settings shared with ``lerobench eval`` (name (flag; default): meaning):", ""]
    for name, setting in {**SETTINGS, **AFTER_RUN}.items():
        flag = setting.flags[0].split("/")[0]
        lines.append(f"        {name} ({flag}; {setting.default!r}): {setting.help}")
    return "\n".join(lines) + "\n"


def flags_to_names() -> dict[str, str]:
    """Every declared flag (``--delay-steps``, ``-n``, ``--no-resume``) -> its Python name (``delay_steps``)."""
    out: dict[str, str] = {}
    for name, setting in {**SETTINGS, **AFTER_RUN}.items():
        for flag in setting.flags:
            for spelling in flag.split("/"):
                out[spelling] = name
    return out


def given(values: dict[str, Any]) -> dict[str, Any]:
    """The declared settings among ``values`` (a caller's ``locals()``), ready for ``RunSettings(**...)``."""
    return {name: value for name, value in values.items() if name in SETTINGS}


def cli_option(name: str) -> Any:
    """The ``typer.Option`` of setting ``name`` (a repeated option's tuple default becomes typer's list)."""
    import typer

    setting = SETTINGS.get(name) or AFTER_RUN[name]
    value = list(setting.default) if isinstance(setting.default, tuple) else setting.default
    return typer.Option(value, *setting.flags, help=setting.help, min=setting.minimum)
