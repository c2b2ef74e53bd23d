"""ALOHA's privileged scripted expert for both tasks (gym-aloha 0.1.5): the benchmark's ceiling, for reference.

The plan follows the ACT authors' scripted demonstrations (waypoints relative to the cube, the two arms meeting in
the middle of the table), re-made for the joint-controlled env LeRobot evaluates: where ACT's script moved mocap
bodies welded to the grippers, this expert plans each gripper's pose in Cartesian space and maps it to the 14 joint
targets with MuJoCo's own kinematics, a damped least-squares solve on its **own copy** of the scene (model and
data built from gym-aloha's file; the live simulator is never read except through ``observation['privileged']``,
never written). The right arm, pitched 60 degrees down, grasps the cube from above and lifts it to the meeting
point; the left arm, rolled 90 degrees so its fingers close vertically, comes in from the left to the cube's
present position and closes on it: gym-aloha's top stage is the left gripper touching the cube off the table.
Insertion's plan is in ``aloha_insertion.py``; the kinematics and waypoints both share in ``aloha_kinematics.py``.

Stateless: a row's action is a function of its task, its step (``call``: one action per call) and its privileged
state (the joints and the objects), so it is batch invariant to the bit.
"""

from __future__ import annotations

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.experts import aloha_insertion as insertion
from lerobench.policies.experts.aloha_kinematics import CLOSED, OPEN, Waypoint, aim, joint_targets, kinematics

TASK = "AlohaTransferCube-v0"
SCENE = "bimanual_viperx_transfer_cube.xml"
"""gym-aloha's scene file for the task (its ``assets`` folder): the expert's own copy of the kinematics."""
MEET = np.array([0.0, 0.5, 0.25])
"""Where the right arm brings the cube: above the table's middle, between the arms."""
PICK_PITCH = 60.0
"""Degrees the right gripper points below horizontal while it picks and holds the cube (as in ACT's script)."""
GRASP_Z = 0.02
"""The right fingers' point above the cube's centre at the grasp (lower presses the fingertips into the table)."""
CUBE_REST_Z = 0.02
"""Height of the cube's centre resting on the table (gym-aloha drops it from 0.05 at reset; measured 0.020)."""
LEFT_IN = -0.025
"""The left fingers' point relative to the held cube's centre along x: the cube's left edge between the open pads.
Deeper (-0.01) the left gripper's palm met the cube and shoved it out of the right gripper (3 of seeds 0-49)."""


def waypoints(step: int, cube: np.ndarray) -> dict[str, list[Waypoint]]:
    """Both arms' plan, relative to where the cube is now (it stays put until the right arm grasps it)."""
    kin = kinematics(SCENE)
    start = kin.start()
    lifted = step >= 165 and cube[2] > 0.1  # the left arm goes for the cube only once it is up
    held = cube if lifted else MEET
    on_table = np.array([cube[0], cube[1], CUBE_REST_Z])  # lifted, it would drag the lift's start up with it
    above, grasp = on_table + [0, 0, 0.08], on_table + [0, 0, GRASP_Z]
    pick = aim(kin, "right", grasp, pitch=PICK_PITCH)
    meet = aim(kin, "right", MEET, pitch=PICK_PITCH)
    right = [(0, *start["right"], CLOSED),
             (60, above, pick, OPEN),  # above the cube
             (90, grasp, pick, OPEN),  # down around it
             (110, grasp, pick, CLOSED),  # grasp
             (145, MEET + [0.05, 0, 0], meet, CLOSED),  # lift towards the middle
             (165, MEET, meet, CLOSED), (400, MEET, meet, CLOSED)]
    wait, reach = held + [-0.12, 0, 0], held + [LEFT_IN, 0, 0]
    side = aim(kin, "left", reach, roll=90.0)  # fingers closing vertically, across the right's
    left = [(0, *start["left"], CLOSED),
            (120, MEET + [-0.12, 0, 0], aim(kin, "left", MEET, roll=90.0), OPEN),  # wait left of the meeting point
            (165, wait, side, OPEN),
            (195, reach, side, OPEN),  # around the held cube
            (225, reach, side, CLOSED), (400, reach, side, CLOSED)]
    return {"left": left, "right": right}


def plan_action(step: int, qpos: np.ndarray, task: str = TASK) -> np.ndarray:
    """The 14 joint targets at ``step`` on ``task`` from MuJoCo's ``qpos`` (arms, then the objects' free joints)."""
    if task == TASK:
        kin = kinematics(SCENE)
        qpos = np.asarray(qpos[:kin.model.nq], dtype=np.float64)
        return joint_targets(kin, qpos, waypoints(step, qpos[16:19]), step)
    kin = kinematics(insertion.SCENE)
    qpos = np.asarray(qpos[:kin.model.nq], dtype=np.float64)
    return joint_targets(kin, qpos, insertion.waypoints(step, qpos), step, roll_cost=insertion.ROLL_COST,
                         tolerance=insertion.TOLERANCE)


TASKS = (TASK, "AlohaInsertion-v0")
"""The tasks the expert has a plan for: gym-aloha's two joint-controlled ones."""


class AlohaExpertPolicy:
    """Transfers the cube, or puts the peg into the socket (see the module docstring)."""

    observation_needs = ObservationNeeds(privileged=True)
    traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True)
    """Stateless (a row's action depends on its step and its privileged state) and cheap to build per worker."""

    def reset(self) -> None:
        """Stateless: nothing to forget."""

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """One 14-D joint target per row (B, 14), float32."""
        rows = np.asarray(observation["privileged"], dtype=np.float64)
        steps = np.asarray(observation["call"], dtype=np.int64)
        if not len(rows):
            return np.zeros((0, 14), dtype=np.float32)
        tasks = observation.get("task") or [TASK] * len(rows)
        return np.stack([plan_action(int(step), row, task) for step, row, task in zip(steps, rows, tasks, strict=True)])


CHUNK, EXECUTED = 12, 8
"""Targets per chunk of ``aloha-expert-chunks`` and those executed before the next call: room for a delay of 4."""


class AlohaExpertChunks(AlohaExpertPolicy):
    """``aloha-expert-chunks``: the expert's next ``CHUNK`` targets from one observation, for ``--delay-steps`` curves.

    Why: a delay only matters to a policy that returns chunks, and the curve needs one that succeeds at d = 0
    without weights. Target k of the chunk that call c returns is the expert's plan for step c * replan + k from
    the state seen at call c (the waypoints follow the clock; the parts' poses are read once per chunk), executed
    open loop and blind to the delay. Stateless like the expert: batch invariant.
    """

    observation_needs = ObservationNeeds(privileged=True, chunk_length=CHUNK, replan_steps=EXECUTED)

    def __init__(self, replan_steps: int = EXECUTED):
        self.replan_steps = replan_steps

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """(B, CHUNK, 14) joint targets, float32."""
        rows = np.asarray(observation["privileged"], dtype=np.float64)
        calls = np.asarray(observation["call"], dtype=np.int64)
        tasks = observation.get("task") or [TASK] * len(rows)
        chunks = np.zeros((len(rows), CHUNK, 14), dtype=np.float32)
        for i, (call, row, task) in enumerate(zip(calls.tolist(), rows, tasks, strict=True)):
            chunks[i] = [plan_action(call * self.replan_steps + k, row, task) for k in range(CHUNK)]
        return chunks


def _check_tasks(context: PolicyContext, name: str) -> None:
    """Refuse a suite with a task there is no plan for, before the run."""
    from lerobench.errors import ConfigError

    missing = [task.name for task in context.tasks if task.name not in TASKS]
    if missing:
        raise ConfigError(f"policy {name!r} has no scripted plan for tasks {missing} (only {', '.join(TASKS)})")


def make_aloha_expert(context: PolicyContext) -> AlohaExpertPolicy:
    """Factory for ``--policy aloha-expert``."""
    _check_tasks(context, "aloha-expert")
    return AlohaExpertPolicy()


def make_aloha_expert_chunks(context: PolicyContext) -> AlohaExpertChunks:
    """Factory for ``--policy aloha-expert-chunks`` (``--replan-steps`` sets how many of each chunk run)."""
    _check_tasks(context, "aloha-expert-chunks")
    return AlohaExpertChunks(context.replan_steps if context.replan_steps > 1 else EXECUTED)
