"""ALOHA insertion's scripted plan (gym-aloha 0.1.5, ``AlohaInsertion-v0``), after the ACT authors' InsertionPolicy.

The left gripper grasps the blue socket (a square tube, 12 cm long) around its middle from above, vertical, and the
right gripper the red peg (12 cm, 2 cm square), pitched 60 degrees down; each heads along its own arm, which lines
its part up with the fingers that hold it. Both lift towards the middle of the table, where each heading is along
x. Unlike ACT's script (waypoints fixed from the parts' first poses, the two arms moving 5 cm towards each other at
the end), the right arm then places the peg by the parts' present poses: the gripper target is the one that puts
the peg, as it sits in the fingers now, on the socket's present axis, first with its end 5 cm outside the opening,
then 1 cm past the pin's end. gym-aloha's top stage is the peg touching the pin inside the socket.
"""

from __future__ import annotations

import numpy as np

from lerobench.policies.experts.aloha_kinematics import CLOSED, OPEN, Waypoint, aim, kinematics

SCENE = "bimanual_viperx_insertion.xml"
PEG, SOCKET = slice(16, 23), slice(23, 30)
"""The parts' free joints in ``qpos``: xyz then quaternion wxyz."""
PEG_REST_Z, SOCKET_REST_Z = 0.01, 0.022
"""Heights of the parts' centres resting on the table (half the peg's 2 cm; the tube's 4.4 cm)."""
PEG_PITCH, SOCKET_PITCH = 60.0, 90.0
"""Degrees each gripper points below horizontal while it picks and holds (ACT's script: 60 for both)."""
PEG_GRASP_Z, SOCKET_GRASP_Z = 0.035, 0.03
"""The finger point's height above each part's centre at the grasp, on the line along the fingers through the
centre (lower, the fingertips meet the table); so the pads close on the part's middle, where it balances."""
MEET = np.array([0.0, 0.5, 0.2])
"""Where the parts meet: above the table's middle."""
SOCKET_AT = MEET + [-0.06, 0.0, 0.0]
"""The left finger point while it holds the socket there."""
ROLL_COST = 10.0
"""How much dearer the solve makes the rolls than the other joints (``Kinematics.solve``): unweighted, the right arm
reached its pitched grasp by rolling both rolls to their +-2 rad limits, where it could not then turn the peg onto
the socket's axis (5 of seeds 0-15 failed; 0 with this)."""
TOLERANCE = 1e-3
"""Where the solve stops (1 mm; transfer cube's 1e-5 is never met with the rolls weighted, so every solve ran its
40 iterations: 35 ms a step, 3.5x the time, for the same 16 of seeds 0-15)."""
OUTSIDE, INSIDE = 0.17, 0.09
"""The peg's centre along the socket's axis from the socket's centre: its end 5 cm outside the opening (the
socket is 12 cm long, the peg 12 cm), then 1 cm past the pin's end (the pin spans 4 cm either side of the centre)."""


def _axis(quat: np.ndarray) -> np.ndarray:
    """A part's long axis (its body's x) from its quaternion (wxyz)."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_quat(quat, scalar_first=True).as_matrix()[:, 0]


def peg_on_axis(qpos: np.ndarray, depth: float) -> tuple[np.ndarray, np.ndarray]:
    """The right gripper's pose that puts the held peg on the socket's axis, its centre ``depth`` from the socket's.

    The peg's offset and turn in the fingers are read from the state now, so neither a grasp off the peg's centre
    nor a socket held tilted leaves the peg beside the opening.
    """
    from scipy.spatial.transform import Rotation

    kin = kinematics(SCENE)
    gripper, rotation = kin.pose(qpos, "right")
    peg, socket = qpos[PEG][:3], qpos[SOCKET][:3]
    axis = _axis(qpos[SOCKET][3:])
    axis = axis if axis @ (peg - socket) >= 0 else -axis  # towards the peg's side
    held = _axis(qpos[PEG][3:])
    held = held if held @ axis >= 0 else -held
    turn = np.cross(held, axis)
    angle = np.arctan2(np.linalg.norm(turn), held @ axis)
    align = Rotation.from_rotvec(turn / max(np.linalg.norm(turn), 1e-12) * angle).as_matrix()
    return socket + depth * axis + align @ (gripper - peg), align @ rotation


def waypoints(step: int, qpos: np.ndarray) -> dict[str, list[Waypoint]]:
    """Both arms' plan from the parts' present poses."""
    kin = kinematics(SCENE)
    start = kin.start()
    peg, socket = qpos[PEG][:3], qpos[SOCKET][:3]
    peg_rest, socket_rest = np.array([*peg[:2], PEG_REST_Z]), np.array([*socket[:2], SOCKET_REST_Z])
    pick_right, meet_right = aim(kin, "right", peg, pitch=PEG_PITCH), aim(kin, "right", MEET, pitch=PEG_PITCH)
    pick_left, meet_left = aim(kin, "left", socket, pitch=SOCKET_PITCH), aim(kin, "left", MEET, pitch=SOCKET_PITCH)
    peg_grasp = peg_rest - pick_right[:, 0] * PEG_GRASP_Z / np.sin(np.radians(PEG_PITCH))
    socket_grasp = socket_rest - pick_left[:, 0] * SOCKET_GRASP_Z / np.sin(np.radians(SOCKET_PITCH))
    left = [(0, *start["left"], CLOSED),
            (60, socket_grasp + [0, 0, 0.08], pick_left, OPEN),  # above the socket
            (90, socket_grasp, pick_left, OPEN),  # down around its middle
            (110, socket_grasp, pick_left, CLOSED),  # grasp
            (160, SOCKET_AT, meet_left, CLOSED), (400, SOCKET_AT, meet_left, CLOSED)]  # lift to the middle
    right = [(0, *start["right"], CLOSED),
             (60, peg_grasp + [0, 0, 0.08], pick_right, OPEN),
             (90, peg_grasp, pick_right, OPEN),
             (110, peg_grasp, pick_right, CLOSED),
             (160, MEET + [0.15, 0, 0], meet_right, CLOSED)]
    if step > 160:  # the peg is up: place it by the parts' poses
        right += [(200, *peg_on_axis(qpos, OUTSIDE), CLOSED), (240, *peg_on_axis(qpos, INSIDE), CLOSED),
                  (400, *peg_on_axis(qpos, INSIDE), CLOSED)]
    return {"left": left, "right": right}
