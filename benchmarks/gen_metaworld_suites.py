"""Regenerate suites/metaworld_*.toml from the task groups and descriptions below (run once, commit the TOML)."""

from __future__ import annotations

from pathlib import Path

DESCRIPTIONS = {
    "assembly": "Pick up the nut and place it onto the peg.",
    "basketball": "Dunk the basketball into the basket.",
    "bin-picking": "Grasp the puck from one bin and place it into the other bin.",
    "box-close": "Grasp the cover and close the box with it.",
    "button-press-topdown": "Press the button from the top.",
    "button-press-topdown-wall": "Bypass the wall and press the button from the top.",
    "button-press": "Press the button.",
    "button-press-wall": "Bypass the wall and press the button.",
    "coffee-button": "Push the button on the coffee machine.",
    "coffee-pull": "Pull the mug from the coffee machine.",
    "coffee-push": "Push the mug under the coffee machine.",
    "dial-turn": "Rotate the dial 180 degrees.",
    "disassemble": "Pick the nut off the peg.",
    "door-close": "Close the door with its revolving joint.",
    "door-lock": "Lock the door by rotating the lock clockwise.",
    "door-open": "Open the door with its revolving joint.",
    "door-unlock": "Unlock the door by rotating the lock counter-clockwise.",
    "hand-insert": "Insert the gripper into the hole.",
    "drawer-close": "Push and close the drawer.",
    "drawer-open": "Open the drawer.",
    "faucet-open": "Rotate the faucet counter-clockwise.",
    "faucet-close": "Rotate the faucet clockwise.",
    "hammer": "Hammer the screw into the wall.",
    "handle-press-side": "Press the handle down sideways.",
    "handle-press": "Press the handle down.",
    "handle-pull-side": "Pull the handle up sideways.",
    "handle-pull": "Pull the handle up.",
    "lever-pull": "Pull the lever down 90 degrees.",
    "peg-insert-side": "Insert the peg sideways into the hole.",
    "pick-place-wall": "Pick the puck, bypass the wall and place it at the goal.",
    "pick-out-of-hole": "Pick up the puck from the hole.",
    "reach": "Reach the goal position.",
    "push-back": "Push the puck back to the goal.",
    "push": "Push the puck to the goal.",
    "pick-place": "Pick up the puck and place it at the goal.",
    "plate-slide": "Slide the plate into the cabinet.",
    "plate-slide-side": "Slide the plate sideways into the cabinet.",
    "plate-slide-back": "Slide the plate out of the cabinet.",
    "plate-slide-back-side": "Slide the plate sideways out of the cabinet.",
    "peg-unplug-side": "Unplug the peg sideways.",
    "soccer": "Kick the soccer ball into the goal.",
    "stick-push": "Grasp the stick and push the box with it.",
    "stick-pull": "Grasp the stick and pull the box with it.",
    "push-wall": "Bypass the wall and push the puck to the goal.",
    "reach-wall": "Bypass the wall and reach the goal.",
    "shelf-place": "Pick and place the puck onto the shelf.",
    "sweep-into": "Sweep the puck into the hole.",
    "sweep": "Sweep the puck off the table.",
    "window-open": "Push and open the window.",
    "window-close": "Push and close the window.",
}

GROUPS = {
    "easy": ["button-press", "button-press-topdown", "button-press-topdown-wall", "button-press-wall",
             "coffee-button", "dial-turn", "door-close", "door-lock", "door-open", "door-unlock", "drawer-close",
             "drawer-open", "faucet-close", "faucet-open", "handle-press", "handle-press-side", "handle-pull",
             "handle-pull-side", "lever-pull", "plate-slide", "plate-slide-back", "plate-slide-back-side",
             "plate-slide-side", "reach", "reach-wall", "window-close", "window-open", "peg-unplug-side"],
    "medium": ["basketball", "bin-picking", "box-close", "coffee-pull", "coffee-push", "hammer", "peg-insert-side",
               "push-wall", "soccer", "sweep", "sweep-into"],
    "hard": ["assembly", "hand-insert", "pick-out-of-hole", "pick-place", "push", "push-back"],
    "very_hard": ["shelf-place", "disassemble", "stick-pull", "stick-push", "pick-place-wall"],
}
MT10 = ["reach", "push", "pick-place", "door-open", "drawer-open", "drawer-close", "button-press-topdown",
        "peg-insert-side", "window-open", "window-close"]

COMMON = """backend = "metaworld"
episodes_per_task = {episodes}
control_fps = 80
worker_memory_mb = 400
video_camera = "corner2"
default_policy = "metaworld-expert"
notes = \"\"\"Meta-World v3 (metaworld 3.1.1, mujoco 3.3.0). Episode i of a task runs on
MT1(task, seed).train_tasks[i % 50] (one of 50 fixed goal/object placements); success is
info["success"] at any step; 500 steps at most (80 Hz control). State = the 39-D observation.\"\"\"

[protocol]
max_steps = {max_steps}
image_size = [480, 480]
cameras = ["corner2", "corner", "corner3", "topview"]
flip_images = true  # Meta-World's corner cameras render upside down
"""


def _task_lines(tasks: list[str]) -> str:
    return "\n".join(f'  {{ name = "{t}-v3", description = "{DESCRIPTIONS[t]}" }},' for t in tasks)


def _groups(tasks: list[str]) -> str:
    lines = []
    for group, members in GROUPS.items():
        inside = [m for m in members if m in tasks]
        if inside:
            lines.append(f"{group} = [{', '.join(f'{chr(34)}{m}-v3{chr(34)}' for m in inside)}]")
    return "\n".join(lines)


def suite_text(name: str, description: str, tasks: list[str], episodes: int = 50, max_steps: int = 500,
               with_groups: bool = True) -> str:
    text = f'name = "{name}"\ndescription = "{description}"\n' + COMMON.format(episodes=episodes,
                                                                               max_steps=max_steps)
    text = text.replace("\n[protocol]", f"tasks = [\n{_task_lines(tasks)}\n]\n\n[protocol]", 1)
    if with_groups:
        text = text.replace("\n[protocol]", "\n[groups]\n" + _groups(tasks) + "\n\n[protocol]", 1)
    return text


ML1_TASKS = ["reach", "push", "pick-place"]
ML10_TEST = ["drawer-open", "door-close", "shelf-place", "sweep-into", "lever-pull"]
ML45_TEST = ["bin-picking", "box-close", "hand-insert", "door-lock", "door-unlock"]

ML_TEMPLATE = """name = "{name}"
description = "{description}"
backend = "metaworld"
backend_options = {{ benchmark = "{benchmark}", split = "test" }}
episodes_per_task = 50
trials = 3
control_fps = 80
worker_memory_mb = 400
video_camera = "corner2"
default_policy = "metaworld-expert"
notes = \"\"\"Meta-World v3 meta-learning benchmark {benchmark}, test split (metaworld 3.1.1, mujoco 3.3.0):
{what}, as {construct} defines them.
Episode i of a task runs on its test variant i mod 50. As in Meta-World's ML benchmarks the goal
is hidden: the env is partially observable and obs[36:39] is zero, so a policy must find the goal
from the dense reward (observation["reward"]). Each episode is 3 trials (--trials) from the same
start with the policy's memory kept; results.json reports per-trial success, success within k
trials and the adaptation delta rate(trial k) - rate(trial 0) with a paired 95% CI and an exact
McNemar p-value. Success is info["success"] at any step; 500 steps per trial (80 Hz control).\"\"\"
tasks = [
{tasks}
]

[protocol]
max_steps = 500
image_size = [480, 480]
cameras = ["corner2", "corner", "corner3", "topview"]
flip_images = true  # Meta-World's corner cameras render upside down
"""


def ml_suite_text(name: str, benchmark: str, tasks: list[str], what: str, construct: str) -> str:
    """A meta-learning (ML1/ML10/ML45 test split) suite: goal hidden, 3 trials per episode by default."""
    description = f"Meta-World {benchmark} meta-test: {', '.join(tasks)} (goal hidden, 3 trials per episode)."
    return ML_TEMPLATE.format(name=name, description=description, benchmark=benchmark, what=what,
                              construct=construct, tasks=_task_lines(tasks))


def main() -> None:
    out = Path(__file__).resolve().parent.parent / "suites"
    all_tasks = [t for g in GROUPS.values() for t in g]
    assert sorted(all_tasks) == sorted(DESCRIPTIONS), "groups must cover the 50 tasks exactly"
    suites = {
        "metaworld_mt50": ("All 50 Meta-World v3 tasks, grouped by difficulty.", all_tasks),
        "metaworld_mt10": ("The 10 Meta-World MT10 tasks.", MT10),
        **{f"metaworld_{g}": (f"Meta-World v3 '{g}' difficulty group ({len(ts)} tasks).", ts)
           for g, ts in GROUPS.items()},
    }
    for name, (description, tasks) in suites.items():
        (out / f"{name}.toml").write_text(suite_text(name, description, tasks))
    smoke = suite_text("smoke", "Two Meta-World tasks, one short episode each: a 1-minute end-to-end check.",
                       ["reach", "button-press"], episodes=1, max_steps=150, with_groups=False)
    (out / "smoke.toml").write_text(smoke)
    for task in ML1_TASKS:
        name = f"metaworld_ml1_{task.replace('-', '_')}"
        (out / f"{name}.toml").write_text(ml_suite_text(
            name, "ML1", [task], f"held-out goals of {task}-v3 (drawn with seed + 1)",
            f'metaworld.ML1("{task}-v3", seed).test_tasks'))
    (out / "metaworld_ml10.toml").write_text(ml_suite_text(
        "metaworld_ml10", "ML10", ML10_TEST, "its 5 held-out test tasks", "metaworld.ML10(seed).test_tasks"))
    (out / "metaworld_ml45.toml").write_text(ml_suite_text(
        "metaworld_ml45", "ML45", ML45_TEST, "its 5 held-out test tasks", "metaworld.ML45(seed).test_tasks"))


if __name__ == "__main__":
    main()
