"""``libero-expert``: a privileged scripted expert that solves LIBERO tasks from the simulator's state.

Why: LIBERO ships no scripted policy, and a check on runs in which every episode fails cannot fail. This expert
reads the task's goal from its BDDL (``lerobench.envs.bddl``) and, each call, the simulator's privileged state
(object poses and bounds, joint positions of drawers, doors and knobs, goal regions, which goal conditions hold:
``lerobench.envs.libero_state``), which the LIBERO backend sends only because the policy declares
``ObservationNeeds(privileged=True)``. It is not a learned policy and sees no camera.

It acts through LIBERO's own action space (7-D delta end-effector pose + gripper, OSC at 20 Hz), composing one
skill per goal condition:

- ``On`` / ``In``: pick (top-down; across the narrow side of a small object, on the rim of a wide one), lift over
  whatever lies on the way, carry, lower until the object meets its support, release, retreat;
- ``In`` a region under a roof, behind a door (a microwave): pick by the object's end nearest the opening (a mug's
  handle), carry it in level at the cavity's floor as deep as the hand pointing down can go, set it down, then
  lean in and push that end until the whole object is behind the closed door's face;
- ``Open`` / ``Close`` of a drawer (slide joint): grasp the handle and pull / push the front along the slide;
- ``Open`` / ``Close`` of a door and ``TurnOn`` / ``TurnOff`` of a knob (hinge joints): push the moving part
  round its hinge at its far edge, in the direction that makes LIBERO's predicate hold.

Conditions run in a fixed order (open, then place, then close and switch) and a condition that holds already is
skipped; one that stops holding (a bowl knocked off a plate) is done again. Per-row state is keyed by
``row_ids`` and reset at each episode's start, so outcomes do not depend on which rows share a call.

This module composes the skills: ``libero_place.py`` (``On`` / ``In``) and ``libero_articulate.py``
(drawers, doors, knobs), over ``libero_control.py`` (memory, commands, the P control, shared phases),
``libero_grasps.py`` (grasp and spot planning) and ``libero_geometry.py``; ``libero_chunks.py`` holds the
chunked forms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobench.envs.bddl import TaskGoal
from lerobench.envs.libero_state import Scene, read_scene
from lerobench.policies.base import ObservationNeeds, PolicyTraits, row_ids
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.experts.libero_articulate import Articulation
from lerobench.policies.experts.libero_control import GRIP_OPEN, Command, Memory, action_for
from lerobench.policies.experts.libero_geometry import prerequisite
from lerobench.policies.experts.libero_grasps import clear_first, clear_spot
from lerobench.policies.experts.libero_place import PickAndPlace

ORDER = {"open": 0, "on": 1, "in": 1, "close": 2, "turnon": 3, "turnoff": 3}
"""Conditions run in this order: a drawer opens before things go in, closes after."""


class TaskExpert(PickAndPlace, Articulation):
    """The skill machine for one task's goal; ``act`` advances one row's ``Memory`` by one step."""

    def __init__(self, goal: TaskGoal):
        self.goal = goal
        self.order = sorted(range(len(goal.goal)), key=lambda k: (ORDER.get(goal.goal[k].predicate, 9), k))

    def act(self, scene: Scene, mem: Memory) -> np.ndarray:
        """One action for this row, advancing its memory."""
        for _ in range(8):  # phase changes that need no step (choose the next condition) happen at once
            command = self._phase(scene, mem)
            if command is not None:
                return action_for(scene, command)
        return action_for(scene, Command(scene.eef_pos.copy(), mem.yaw, GRIP_OPEN))

    def _phase(self, scene: Scene, mem: Memory) -> Command | None:
        if mem.phase == "choose":
            return self._choose(scene, mem)
        condition = mem.working
        assert condition is not None
        if condition.predicate in ("on", "in"):
            return self._place(scene, mem, condition)
        return self._articulate(scene, mem, condition)

    def _choose(self, scene: Scene, mem: Memory) -> Command | None:
        pending = [k for k in self.order if not scene.satisfied[k]]
        if not pending:
            self._enter(mem, scene, "idle")
            mem.phase = "choose"
            return Command(scene.eef_pos.copy(), mem.yaw, GRIP_OPEN)
        k = pending[0]
        mem.condition = k
        goal = self.goal.goal[k]
        first = prerequisite(scene, goal)
        opening = first if first is not None else goal if goal.predicate == "open" else None
        clear = None
        if opening is not None and not mem.cleared:  # what goes into this drawer later may stand in its way
            for j in pending:  # (k first: it is pending[0])
                clear = clear or clear_first(scene, self.goal.goal[j], opening)
        if clear is not None and clear_spot(scene, scene.entities[clear.args[0]], clear) is not None:
            mem.cleared = True
            mem.working = clear
        else:
            mem.working = first or goal
        mem.grasp = mem.offset = mem.place = mem.inside = None
        self._enter(mem, scene, "start")
        return None


class LiberoExpert:
    """The expert over a suite's tasks: one ``TaskExpert`` per task, one ``Memory`` per row."""

    observation_needs = ObservationNeeds(privileged=True)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)
    """Privileged by its ``observation_needs`` alone (the one source results and reports read to say so)."""

    def __init__(self, goals: dict[str, TaskGoal]):
        self.experts = {task: TaskExpert(goal) for task, goal in goals.items()}
        self._memory: dict[int, Memory] = {}

    def reset(self) -> None:
        """Forget every row (rebinds: a shallow copy never shares memory with its original)."""
        self._memory = {}

    def _row(self, key: int, start: bool) -> Memory:
        if start or key not in self._memory:
            self._memory[key] = Memory()
        return self._memory[key]

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """One action per row from its task's skill machine."""
        keys = row_ids(observation).tolist()
        starts = row_starts(observation, len(keys))
        out = np.zeros((len(keys), 7), dtype=np.float32)
        for i, key in enumerate(keys):
            expert = self.experts[observation["task"][i]]
            scene = read_scene(observation["privileged"][i], expert.goal)
            out[i] = expert.act(scene, self._row(int(key), bool(starts[i])))
        return out


def row_starts(observation: dict[str, Any], n: int) -> np.ndarray:
    """Rows whose memory starts afresh: a new episode, or a new trial of it (the env is back at its start)."""
    false = np.zeros(n, bool)
    return np.asarray(observation.get("episode_start", false), dtype=bool) | \
        np.asarray(observation.get("trial_start", false), dtype=bool)


def suite_goals(context: Any, policy: str) -> dict[str, TaskGoal]:
    """Every task's goal, refused before the run where the expert has no skill for it (``ConfigError``)."""
    from lerobench.envs.libero import task_goal
    from lerobench.errors import ConfigError

    if context.backend != "libero":
        raise ConfigError(f"policy {policy!r} only runs on LIBERO suites; suite {context.suite!r} uses backend "
                          f"{context.backend!r}")
    goals = {}
    for task in context.tasks:
        goal = task_goal(context.backend_options.get("suite"), task.name)
        check_goal(goal, f"suite {context.suite} task {task.name!r}", policy)
        goals[task.name] = goal
    return goals


def check_goal(goal: TaskGoal, where: str, policy: str = "libero-expert") -> None:
    """Refuse, before the run, a goal the expert has no skill for (``ConfigError`` naming ``where``).

    A predicate other than ``PREDICATES``, or an ``On``/``In`` that moves a fixture or an unknown name.
    """
    from lerobench.envs.bddl import PREDICATES
    from lerobench.envs.libero_state import check_fits
    from lerobench.errors import ConfigError

    bad = goal.unsupported()
    if bad:
        raise ConfigError(f"policy {policy!r} cannot solve {where}: goal condition {bad[0]} has no skill (it "
                          f"handles {', '.join(PREDICATES)})")
    for condition in goal.goal:
        if condition.predicate in ("on", "in") and condition.args[0] not in goal.objects:
            raise ConfigError(f"policy {policy!r} cannot solve {where}: {condition} moves {condition.args[0]!r}, "
                              "which is not a movable object of the scene")
    check_fits(goal, where)


def make_libero_expert(context: Any) -> LiberoExpert:
    """Factory for ``--policy libero-expert``: LIBERO suites only; refuses a goal it has no skill for."""
    return LiberoExpert(suite_goals(context, "libero-expert"))

