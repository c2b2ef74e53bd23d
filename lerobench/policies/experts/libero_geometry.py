"""Geometry of the LIBERO expert: end-effector rotations, and the drawers, doors and knobs it moves.

Pure functions of the scene's privileged state (``lerobench.envs.libero_state``): where a hinged part's far edge
is, which way it opens, where a drawer's handle is gripped, whether a path meets a box. The skills that use them
are in ``experts/libero.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lerobench.envs.bddl import Condition
from lerobench.envs.libero_state import EntityView, JointView, Scene

HANDLE_DEPTH = 0.008
"""Half the thickness of LIBERO's cabinet handle bars: their centre lies this far inside the drawer's front."""
ROBOT_BASE_XY = np.array([-0.66, 0.0])
"""Where LIBERO mounts the Panda (approach the rim of a wide object from this side)."""


def down_rotation(yaw: float) -> np.ndarray:
    """The gripper pointing down with its fingers closing along ``(cos yaw, sin yaw, 0)``."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def rotation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Axis-angle (world frame) that takes ``current`` to ``target``."""
    r = target @ current.T
    angle = math.acos(max(-1.0, min(1.0, (np.trace(r) - 1.0) / 2.0)))
    if angle < 1e-9:
        return np.zeros(3)
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    norm = float(np.linalg.norm(axis))
    if norm < 1e-9:  # 180 degrees: any perpendicular axis from the symmetric part
        w, v = np.linalg.eigh((r + np.eye(3)) / 2.0)
        axis = v[:, int(np.argmax(w))]
        norm = 1.0
    return axis / norm * angle


def current_yaw(rotation: np.ndarray) -> float:
    """The yaw of the finger axis (the gripper frame's x column)."""
    return math.atan2(rotation[1, 0], rotation[0, 0])


def nearest_yaw(direction_yaw: float, reference: float) -> float:
    """``direction_yaw`` or its opposite (a pinch is symmetric), whichever is closer to ``reference``."""
    best = direction_yaw
    for k in (-2, -1, 0, 1, 2):
        cand = direction_yaw + k * math.pi
        if abs(wrap(cand - reference)) < abs(wrap(best - reference)):
            best = cand
    return reference + wrap(best - reference)


def wrap(a: float) -> float:
    """An angle in [-pi, pi)."""
    return (a + math.pi) % (2 * math.pi) - math.pi


def prerequisite(scene: Scene, condition: Condition) -> Condition | None:
    """``(Open drawer_region)`` before putting something in a drawer that is not open; None: nothing first."""
    if condition.predicate not in ("on", "in") or len(condition.args) < 2:
        return None
    region = scene.regions.get(condition.args[1])
    if region is None or region.joint is None or region.joint.open_dir == 0.0:
        return None
    joint = region.joint
    opened = goal_position(joint, "open")
    if abs(joint.qpos - opened) < 0.25 * abs(joint.high - joint.low):
        return None
    return Condition("open", (condition.args[1],))


def opened_sweep(joint: JointView) -> tuple[np.ndarray, np.ndarray, float]:
    """A drawer's sweep: the xy box its part covers from where it is to fully open, and the part's bottom height."""
    corners = part_corners(joint)
    shift = joint.axis[:2] * (goal_position(joint, "open") - joint.qpos)
    both = np.concatenate([corners[:, :2], corners[:, :2] + shift])
    return both.min(axis=0), both.max(axis=0), float(corners[:, 2].min())


def condition_joint(scene: Scene, condition: Condition) -> JointView | None:
    """The joint a condition is about: a region's own (a drawer), or the entity's joint with that affordance."""
    name = condition.args[0]
    if name in scene.regions:
        return scene.regions[name].joint
    entity = scene.entities.get(name)
    if entity is None:
        return None
    switch = condition.predicate in ("turnon", "turnoff")
    joints = [j for j in entity.joints if (j.on_dir if switch else j.open_dir) != 0.0]
    if not joints:
        return None
    pending = [j for j in joints if abs(j.qpos - goal_position(j, condition.predicate)) > 0.01]
    return (pending or joints)[0]


def goal_position(joint: JointView, predicate: str) -> float:
    """Where to drive the joint: the end of its range that opens / closes it, mid-range to switch it on."""
    if predicate in ("turnon", "turnoff"):
        if predicate == "turnon":
            return (joint.low + joint.high) / 2.0
        return joint.low if joint.on_dir > 0 else joint.high
    opened = joint.high if joint.open_dir > 0 else joint.low
    closed = joint.low if joint.open_dir > 0 else joint.high
    return opened if predicate == "open" else closed


def opens(joint: JointView, sense: float) -> bool:
    """Whether moving ``joint`` in direction ``sense`` opens it."""
    return joint.open_dir * sense > 0


def is_slide(joint: JointView) -> bool:
    """A drawer: its part translates (a slide joint's part moves along the axis through the anchor)."""
    return bool(abs(joint.axis[2]) < 0.5)


def part_corners(joint: JointView, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """The moving part's box corners (or the box ``lo``-``hi`` in its frame), world frame (8, 3)."""
    from lerobench.envs.libero_state import quat_matrix

    lo = joint.part_lo if lo is None else lo
    hi = joint.part_hi if hi is None else hi
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    return joint.part_pos + corners @ quat_matrix(joint.part_quat).T


def perpendicular_pull(contact: np.ndarray, eef: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """Keep the hand on the drawer's line while it slides (corrects sideways drift)."""
    off = (eef - contact)[:2]
    d = direction[:2] / max(float(np.linalg.norm(direction[:2])), 1e-9)
    side = off - d * float(off @ d)
    return -side


def hinge_geometry(joint: JointView, sense: float) -> tuple[np.ndarray, float, np.ndarray]:
    """The far edge to push: (radial unit vector from the axis, radius, push direction).

    Chosen so the hand pushes away from the robot where the part has two far ends (a knob's paddle).
    """
    axis = joint.axis / max(float(np.linalg.norm(joint.axis)), 1e-9)
    radial = part_corners(joint) - joint.anchor
    radial -= np.outer(radial @ axis, axis)
    lengths = np.linalg.norm(radial, axis=1)
    far = lengths >= 0.8 * lengths.max()
    best, best_score = 0, -np.inf
    for i in np.flatnonzero(far):
        u = radial[i] / max(lengths[i], 1e-9)
        tangent = sense * np.cross(axis, u)
        point = joint.anchor + radial[i]
        away = point[:2] - ROBOT_BASE_XY
        score = float(tangent[:2] @ away / max(float(np.linalg.norm(away)), 1e-9)) + 0.1 * lengths[i]
        if score > best_score:
            best, best_score = int(i), score
    u = radial[best] / max(lengths[best], 1e-9)
    return u, float(lengths[best]), sense * np.cross(axis, u)


def hinge_contact(joint: JointView, sense: float) -> np.ndarray:
    """Where the closed fingertips start: behind the far edge, at the part's mid height."""
    u, radius, tangent = hinge_geometry(joint, sense)
    corners = part_corners(joint)
    z = float(corners[:, 2].min() + 0.6 * (corners[:, 2].max() - corners[:, 2].min()))
    point = joint.anchor + u * radius * 0.85 - tangent * 0.035
    point[2] = z
    return point


def hinge_target(joint: JointView, sense: float, z: float) -> np.ndarray:
    """A point ahead on the far edge's arc: moving there pushes the part round its hinge."""
    u, radius, tangent = hinge_geometry(joint, sense)
    axis = joint.axis / max(float(np.linalg.norm(joint.axis)), 1e-9)
    lead = 0.35
    ahead = u * math.cos(lead) + np.cross(axis, u) * sense * math.sin(lead)
    point = joint.anchor + ahead * radius * 0.85 - tangent * 0.01
    point[2] = z
    return point


def leaning(direction: np.ndarray, angle: float, side: float) -> np.ndarray:
    """The hand pointing down and leaning ``angle`` (radians) towards ``direction`` (horizontal).

    Its fingers close across that direction (``side`` +1 or -1 picks which way round); its fingertips lead and its
    palm stays behind them.
    """
    d = np.array([direction[0], direction[1], 0.0])
    d /= max(float(np.linalg.norm(d)), 1e-9)
    z = d * math.sin(angle) - np.array([0.0, 0.0, 1.0]) * math.cos(angle)
    x = np.array([-d[1], d[0], 0.0]) * (1.0 if side > 0 else -1.0)
    return np.stack([x, np.cross(z, x), z], axis=1)


def facing(direction: np.ndarray, roll: float = 1.0) -> np.ndarray:
    """The hand level, pointing along ``direction`` (horizontal), fingers closing vertically.

    ``roll`` -1: the same grip turned half round its pointing axis (the finger axis down, not up).
    """
    z = np.array([direction[0], direction[1], 0.0])
    z /= max(float(np.linalg.norm(z)), 1e-9)
    x = np.array([0.0, 0.0, 1.0 if roll > 0 else -1.0])
    y = np.cross(z, x)
    return np.stack([x, y, z], axis=1)


def rotate_about(point: np.ndarray, anchor: np.ndarray, angle: float) -> np.ndarray:
    """``point`` turned by ``angle`` about the vertical line through ``anchor``."""
    c, s = math.cos(angle), math.sin(angle)
    d = point[:2] - anchor[:2]
    return np.array([anchor[0] + c * d[0] - s * d[1], anchor[1] + s * d[0] + c * d[1], point[2]])


def part_radius(joint: JointView) -> float:
    """How far the moving part reaches from its hinge axis."""
    radial = part_corners(joint) - joint.anchor
    axis = joint.axis / max(float(np.linalg.norm(joint.axis)), 1e-9)
    radial -= np.outer(radial @ axis, axis)
    return float(np.linalg.norm(radial, axis=1).max())


def handle_grip(joint: JointView) -> tuple[np.ndarray, np.ndarray, float]:
    """A knob's fin: (centre in the world, its narrow horizontal axis, its top z)."""
    from lerobench.envs.libero_state import quat_matrix

    rot = quat_matrix(joint.part_quat)
    centre = joint.part_pos + rot @ ((joint.handle_lo + joint.handle_hi) / 2.0)
    half = (joint.handle_hi - joint.handle_lo) / 2.0
    vertical = int(np.argmax(np.abs(rot[2, :])))
    narrow = min((i for i in range(3) if i != vertical), key=lambda i: half[i])
    corners = part_corners(joint, joint.handle_lo, joint.handle_hi)
    return centre, rot[:, narrow], float(corners[:, 2].max())


def handle_point(joint: JointView, outward: np.ndarray) -> np.ndarray:
    """The middle of a drawer's handle bar: ``HANDLE_DEPTH`` inside the part's outermost face, at mid height."""
    corners = part_corners(joint)
    centre = corners.mean(axis=0)
    front = float((corners @ outward).max())
    return centre + outward * (front - float(centre @ outward) - HANDLE_DEPTH)


def fixture_of(scene: Scene, region_name: str) -> EntityView | None:
    """The fixture a goal region belongs to (``basket_1`` for ``basket_1_contain_region``); None: none in the scene."""
    return next((e for n, e in scene.entities.items() if region_name.startswith(n + "_")), None)


def segment_hits_box(a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether the 2-D segment a-b passes through the box [lo, hi]."""
    t0, t1 = 0.0, 1.0
    d = b - a
    for i in range(2):
        if abs(d[i]) < 1e-12:
            if a[i] < lo[i] or a[i] > hi[i]:
                return False
            continue
        u0, u1 = (lo[i] - a[i]) / d[i], (hi[i] - a[i]) / d[i]
        t0, t1 = max(t0, min(u0, u1)), min(t1, max(u0, u1))
        if t0 > t1:
            return False
    return True


DOOR_RADIUS = 0.09
"""A hinged part reaching this far from its axis is a door (smaller ones are knobs)."""
ROOF_ROOM = 0.12
"""Room over an object that a hand from above needs (fingers and palm): a region whose fixture's top is lower than
the object plus this is under a roof, and the object goes in sideways."""


@dataclass(frozen=True)
class Enclosure:
    """A goal region under a roof, behind a door (a microwave's heating region): objects go in sideways.

    ``out`` is the horizontal unit vector from the region out through its opening; ``front`` is how far the
    closed door's inner face lies from the region's centre along ``out``; ``floor`` is the region's bottom.
    """

    out: np.ndarray
    front: float
    floor: float


def enclosure(scene: Scene, region_name: str, height: float) -> Enclosure | None:
    """The region's enclosure if ``region_name`` lies under its fixture's roof, behind a door; None otherwise.

    The opening is found from the door closed: its part, turned about the hinge to the closed end of its range,
    lies across the opening; ``out`` is the fixture's body axis nearest the direction from the region to it.
    ``height``: the object's, for the roof test.
    """
    region = scene.regions.get(region_name)
    if region is None or region.joint is not None:  # a drawer's region opens from above
        return None
    parent = fixture_of(scene, region_name)
    if parent is None:
        return None
    floor = float(region.pos[2] - (np.abs(region.rotation) @ region.size)[2])
    if float(parent.hi[2]) > floor + height + ROOF_ROOM:
        return None
    doors = [j for j in parent.joints if j.open_dir != 0.0 and not is_slide(j) and part_radius(j) >= DOOR_RADIUS]
    if not doors:
        return None
    door = doors[0]
    turn = (goal_position(door, "close") - door.qpos) * (1.0 if door.axis[2] >= 0 else -1.0)
    closed = np.array([rotate_about(c, door.anchor, turn) for c in part_corners(door)])
    toward = closed.mean(axis=0)[:2] - region.pos[:2]
    axes = [parent.rotation[:2, i] * s for i in (0, 1) for s in (1.0, -1.0)]
    best = max(axes, key=lambda a: float(a @ toward) / max(float(np.linalg.norm(a)), 1e-9))
    out = np.array([best[0], best[1], 0.0]) / max(float(np.linalg.norm(best)), 1e-9)
    front = float(((closed - region.pos) @ out).min())
    return Enclosure(out=out, front=front, floor=floor)
