"""What ALOHA's two scripted plans share: both grippers' kinematics on a private copy of the scene, and waypoints.

Each plan places the point between a gripper's finger pads (``TCP``) and the gripper's orientation in the world
frame; ``Kinematics.solve`` maps that to the arm's six joints by a damped least-squares solve with MuJoCo's own
Jacobian on the expert's **own** model and data (built from gym-aloha's scene file), so the live simulator is read
only through ``observation['privileged']`` and never written. ``interpolate`` walks a list of timed waypoints.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

TCP = np.array([0.105, 0.0, 0.0])
"""The point between the finger pads, in the gripper link's frame: what the plan places."""
ARMS = {"left": slice(0, 6), "right": slice(8, 14)}
"""Each arm's six joints in MuJoCo's ``qpos``/``qvel`` (the fingers' two slide joints follow each arm)."""
ROLL_LIMIT = 2.0
"""The IK keeps each arm's two roll joints (forearm and wrist) within this many radians: the joints allow +-pi, where
a roll of pi on both with the wrist bent the other way reaches the same pose; a solve that drifts there flips by
2 pi between neighbouring steps and throws the arm around (measured: seed 0 dropped its cube at step 257)."""
DAMPING = 1e-3
MAX_IK_STEP = 0.2
"""Radians one iteration of the solve may move a joint: near a singularity the damped step is still large."""
OPEN, CLOSED = 1.0, 0.0
"""gym-aloha's normalised gripper targets."""

Waypoint = tuple[int, np.ndarray, np.ndarray, float]
"""(step, finger point, gripper orientation, gripper target)."""


class Kinematics:
    """Forward and inverse kinematics of both grippers on a private MuJoCo model and data of one scene."""

    def __init__(self, scene: str) -> None:
        import mujoco
        from gym_aloha.constants import ASSETS_DIR

        self._mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(ASSETS_DIR / scene))
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
              iterations: int = 40, rotation_weight: float = 0.5, roll_cost: float = 1.0,
              tolerance: float = 1e-5) -> np.ndarray:
        """``side``'s six joints that put its finger point at ``position`` with ``rotation``, from ``qpos`` on.

        ``roll_cost`` > 1 makes the two roll joints that much dearer to move than the others (a weighted damped
        least-squares step), so a change of pitch goes to the wrist's bend rather than to a pair of opposite rolls:
        from gym-aloha's start pose (wrist bend -0.3 rad, near where the two rolls' axes line up) the unweighted
        solve pitched the gripper down by rolling both towards +-pi. ``tolerance``: the error (metres, and radians
        times ``rotation_weight``) at which the solve stops.
        """
        from scipy.spatial.transform import Rotation

        joints = ARMS[side]
        cost = np.array([1.0, 1.0, 1.0, roll_cost, 1.0, roll_cost])
        q = np.array(qpos, dtype=np.float64)
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        for _ in range(iterations):
            point, current = self.pose(q, side)
            error = np.concatenate([position - point,
                                    rotation_weight * Rotation.from_matrix(rotation @ current.T).as_rotvec()])
            if np.linalg.norm(error) < tolerance:
                break
            self._mujoco.mj_comPos(self.model, self.data)
            self._mujoco.mj_jac(self.model, self.data, jacp, jacr, point, self.body[side])
            jacobian = np.vstack([jacp[:, joints], rotation_weight * jacr[:, joints]])
            weighted = jacobian / cost
            step = weighted.T @ np.linalg.solve(weighted @ jacobian.T + DAMPING * np.eye(6), error) / cost
            step *= min(1.0, MAX_IK_STEP / max(np.abs(step).max(), 1e-12))
            q[joints] = np.clip(q[joints] + step, self.low[joints], self.high[joints])
        return q[joints]


@functools.cache
def kinematics(scene: str) -> Kinematics:
    """One private copy per scene file and process (built on the first action: ~10 ms)."""
    return Kinematics(scene)


def aim(kin: Kinematics, side: str, point: Any, pitch: float = 0.0, roll: float = 0.0) -> np.ndarray:
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


def joint_targets(kin: Kinematics, qpos: np.ndarray, plans: dict[str, list[Waypoint]], step: int,
                  roll_cost: float = 1.0, tolerance: float = 1e-5) -> np.ndarray:
    """The 14 joint targets (left arm, left gripper, right arm, right gripper) that follow ``plans`` at ``step``."""
    action: list[float] = []
    for side in ("left", "right"):
        position, rotation, gripper = interpolate(plans[side], step)
        action += [*kin.solve(qpos, side, position, rotation, roll_cost=roll_cost,
                                    tolerance=tolerance), gripper]
    return np.asarray(action, dtype=np.float32)
