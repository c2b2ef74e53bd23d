"""ALOHA's privileged scripted expert for transfer cube (gym-aloha 0.1.5): the benchmark's ceiling, for reference.

The plan follows the ACT authors' scripted demonstrations (waypoints relative to the cube, the two arms meeting in
the middle of the table), re-made for the joint-controlled env LeRobot evaluates: where ACT's script moved mocap
bodies welded to the grippers, this expert plans each gripper's pose in Cartesian space and maps it to the 14 joint
targets with MuJoCo's own kinematics, a damped least-squares solve on its **own copy** of the scene (model and
data built from gym-aloha's file; the live simulator is never read except through ``observation['privileged']``,
never written). The right arm, pitched 60 degrees down, grasps the cube from above and lifts it to the meeting
point; the left arm, rolled 90 degrees so its fingers close vertically, comes in from the left to the cube's
present position and closes on it: gym-aloha's top stage is the left gripper touching the cube off the table.

Stateless: a row's action is a function of its step (``call``: one action per call) and its privileged state (the
joints and the cube), so it is batch invariant to the bit. Insertion has no plan yet: refused before the run.
"""

from __future__ import annotations

import functools

import numpy as np

from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits
from lerobench.policies.batch import PolicyBatch

TASK = "AlohaTransferCube-v0"
SCENE = "bimanual_viperx_transfer_cube.xml"
"""gym-aloha's scene file for the task (its ``assets`` folder): the expert's own copy of the kinematics."""
TCP = np.array([0.105, 0.0, 0.0])
"""The point between the finger pads, in the gripper link's frame: what the plan places."""
ARMS = {"left": slice(0, 6), "right": slice(8, 14)}
"""Each arm's six joints in MuJoCo's ``qpos``/``qvel`` (the fingers' two slide joints follow each arm)."""
MEET = np.array([0.0, 0.5, 0.25])
"""Where the right arm brings the cube: above the table's middle, between the arms."""
PICK_PITCH = 60.0
"""Degrees the right gripper points below horizontal while it picks and holds the cube (as in ACT's script)."""
GRASP_Z = 0.02
CUBE_REST_Z = 0.02
"""Height of the cube's centre resting on the table (gym-aloha drops it from 0.05 at reset; measured 0.020)."""
"""The right fingers' point above the cube's centre at the grasp (lower presses the fingertips into the table)."""
LEFT_IN = -0.025
"""The left fingers' point relative to the held cube's centre along x: the cube's left edge between the open pads.
Deeper (-0.01) the left gripper's palm met the cube and shoved it out of the right gripper (3 of seeds 0-49)."""
ROLL_LIMIT = 2.0
"""The IK keeps each arm's two roll joints (forearm and wrist) within this many radians: the joints allow +-pi, where
a roll of pi on both with the wrist bent the other way reaches the same pose; a solve that drifts there flips by
2 pi between neighbouring steps and throws the arm around (measured: seed 0 dropped its cube at step 257)."""
DAMPING = 1e-3
MAX_IK_STEP = 0.2
"""Radians one iteration of the solve may move a joint: near a singularity the damped step is still large."""
OPEN, CLOSED = 1.0, 0.0
"""gym-aloha's normalised gripper targets."""


def aim(kin: _Kinematics, side: str, point: np.ndarray, pitch: float = 0.0, roll: float = 0.0) -> np.ndarray:
    """A gripper orientation heading from ``side``'s base to ``point``, pitched down and rolled (degrees).

    Why heading from the base: the waist turns the whole arm, so a gripper pointing along the arm's own vertical
    plane is reached by the shoulder, elbow and wrist bend alone; a fixed heading off that plane needs the forearm
    and wrist rolls to cancel the waist's turn, where the solve drifts towards their +-pi limits.
    """
    from scipy.spatial.transform import Rotation

    dx, dy = np.asarray(point[:2]) - kin.base[side]
    yaw = Rotation.from_euler("z", np.arctan2(dy, dx))
    return (yaw * Rotation.from_euler("y", pitch, degrees=True) * Rotation.from_euler("x", roll, degrees=True)
            ).as_matrix()


class _Kinematics:
    """Forward and inverse kinematics of both grippers on a private MuJoCo model and data."""

    def __init__(self) -> None:
        import mujoco
        from gym_aloha.constants import ASSETS_DIR

        self._mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(ASSETS_DIR / SCENE))
        self.data = mujoco.MjData(self.model)
        self.body = {side: self.model.body(f"vx300s_{side}/gripper_link").id for side in ARMS}
        self.base = {side: self.model.body(f"vx300s_{side}").pos[:2].copy() for side in ARMS}
        self.low, self.high = self.model.jnt_range[:, 0] + 1e-3, self.model.jnt_range[:, 1] - 1e-3
        for joints in ARMS.values():
            rolls = np.arange(joints.start, joints.stop)[[3, 5]]
            self.low[rolls], self.high[rolls] = -ROLL_LIMIT, ROLL_LIMIT

    def start(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Both grippers' poses at gym-aloha's start joints."""
        from gym_aloha.constants import START_ARM_POSE

        qpos = np.zeros(self.model.nq)
        qpos[:16] = START_ARM_POSE
        return {side: self.pose(qpos, side) for side in ARMS}

    def pose(self, qpos: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """``side``'s finger point and gripper orientation (world frame) at joints ``qpos``."""
        self.data.qpos[:] = qpos
        self._mujoco.mj_kinematics(self.model, self.data)
        rotation = self.data.xmat[self.body[side]].reshape(3, 3).copy()
        return self.data.xpos[self.body[side]] + rotation @ TCP, rotation

    def solve(self, qpos: np.ndarray, side: str, position: np.ndarray, rotation: np.ndarray,
              iterations: int = 40, rotation_weight: float = 0.5) -> np.ndarray:
        """``side``'s six joints that put its finger point at ``position`` with ``rotation``, from ``qpos`` on."""
        from scipy.spatial.transform import Rotation

        joints = ARMS[side]
        q = np.array(qpos, dtype=np.float64)
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        for _ in range(iterations):
            point, current = self.pose(q, side)
            error = np.concatenate([position - point,
                                    rotation_weight * Rotation.from_matrix(rotation @ current.T).as_rotvec()])
            if np.linalg.norm(error) < 1e-5:
                break
            self._mujoco.mj_comPos(self.model, self.data)
            self._mujoco.mj_jac(self.model, self.data, jacp, jacr, point, self.body[side])
            jacobian = np.vstack([jacp[:, joints], rotation_weight * jacr[:, joints]])
            step = jacobian.T @ np.linalg.solve(jacobian @ jacobian.T + DAMPING * np.eye(6), error)
            step *= min(1.0, MAX_IK_STEP / max(np.abs(step).max(), 1e-12))
            q[joints] = np.clip(q[joints] + step, self.low[joints], self.high[joints])
        return q[joints]


@functools.cache
def _kinematics() -> _Kinematics:
    return _Kinematics()


Waypoint = tuple[int, np.ndarray, np.ndarray, float]
"""(step, finger point, gripper orientation, gripper target)."""


def waypoints(step: int, cube: np.ndarray) -> dict[str, list[Waypoint]]:
    """Both arms' plan, relative to where the cube is now (it stays put until the right arm grasps it)."""
    kin = _kinematics()
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


def interpolate(plan: list[Waypoint], step: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The pose and gripper target at ``step``: linear in position and gripper, along the shortest rotation."""
    from scipy.spatial.transform import Rotation

    for (t0, p0, r0, g0), (t1, p1, r1, g1) in zip(plan, plan[1:], strict=False):
        if step <= t1:
            f = min(max((step - t0) / (t1 - t0), 0.0), 1.0)
            turn = Rotation.from_matrix(r0.T @ r1).as_rotvec()
            return p0 + f * (p1 - p0), r0 @ Rotation.from_rotvec(f * turn).as_matrix(), g0 + f * (g1 - g0)
    _, position, rotation, gripper = plan[-1]
    return position, rotation, gripper


def plan_action(step: int, qpos: np.ndarray) -> np.ndarray:
    """The 14 joint targets at ``step`` from MuJoCo's ``qpos`` (the arms', then the cube's free joint)."""
    kin = _kinematics()
    qpos = np.asarray(qpos[:kin.model.nq], dtype=np.float64)
    plans = waypoints(step, qpos[16:19])
    action = []
    for side in ("left", "right"):
        position, rotation, gripper = interpolate(plans[side], step)
        action += [*kin.solve(qpos, side, position, rotation), gripper]
    return np.asarray(action, dtype=np.float32)


class AlohaExpertPolicy:
    """Transfers the cube from the right gripper to the left (see the module docstring)."""

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
        return np.stack([plan_action(int(step), row) for step, row in zip(steps, rows, strict=True)])


def make_aloha_expert(context: PolicyContext) -> AlohaExpertPolicy:
    """Factory; refuses suites with a task it has no plan for (insertion) before the run."""
    from lerobench.errors import ConfigError

    missing = [task.name for task in context.tasks if task.name != TASK]
    if missing:
        raise ConfigError(f"policy 'aloha-expert' has no scripted plan for tasks {missing} (only {TASK}); "
                          f"use --tasks {TASK}")
    return AlohaExpertPolicy()
