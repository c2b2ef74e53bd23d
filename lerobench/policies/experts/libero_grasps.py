"""Where the LIBERO expert takes an object, and where it puts or slides one: grasp and spot planning.

Pure functions of the scene (``lerobench.envs.libero_state``): the grip site and finger yaw for an object (across
its narrow side, on the rim of a wide one, by the handle nearest an enclosure's opening), free spots on a region,
the way over what stands between, and where a drawer's front can be pushed clear of what stands before it. The
skills that use them are in ``libero_place.py`` and ``libero_articulate.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lerobench.envs.bddl import Condition
from lerobench.envs.libero_state import EntityView, JointView, RegionView, Scene
from lerobench.policies.experts.libero_geometry import (
    ROBOT_BASE_XY,
    Enclosure,
    goal_position,
    is_slide,
    nearest_yaw,
    opened_sweep,
    part_corners,
    segment_hits_box,
    wrap,
)

MAX_PINCH = 0.085
"""Widest side the Panda gripper (8 cm stroke) closes across with margin; wider objects are taken by the rim."""
WIDE_PINCH = 0.07
"""Widest other side a box is pinched across where its narrow side would put the hand against something tall: a
box 7.6-8.1 cm across (butter, cream cheese) stays wedged in the 8 cm stroke when let go (measured, libero_10)."""
PALM_REACH = 0.11
"""The Panda hand reaches 10.5 cm either side of the grip site along the finger axis, 2.6 cm above it: what a
carried object's path must clear besides the object itself."""
WRIST_OFFSET = np.array([-0.088, 0.0, 0.204])
"""Where the Panda's wrist (link 6) sits relative to the grip site when the hand points down, at any yaw
(measured on LIBERO's mounted Panda): an open drawer beside a bowl meets the wrist, not the hand."""

CLEAR_SPOT = "__clear_of_the_drawer__"
"""``(On obj CLEAR_SPOT drawer_region)``: a move the expert adds before opening a drawer whose part, opened, would
stand over (or push) the object to be put in it: libero_goal's bowl beside the cabinet, which the hand could not
reach under the opened drawer. The object slides a few centimetres, barely lifted (``clear_spot``)."""
SWEEP_CLEARANCE = 0.05
"""How far an object's centre must stay from an opening drawer's sweep for the hand to take it from above: the
pinching hand is 6 cm thick, and the grasp is planned across the way to the drawer (``plan_grasp``)."""
REACH = 0.72
"""Farthest spot from the robot's base (xy) the expert slides an object to."""


@dataclass
class Grasp:
    """Where and how to take an object: the grip site's point and the finger axis's yaw."""

    point: np.ndarray
    yaw: float


def plan_grasp(obj: EntityView, reference_yaw: float, others: list[EntityView] | None = None) -> Grasp:
    """Across the narrow horizontal side at the centre for a small object; radially on the rim for a wide one.

    The rim point is the one that keeps the hand clear of the other objects (``others``: an open drawer beside a
    bowl) and the wrist near ``reference_yaw``, on the robot's side where that is free.
    """
    rot = obj.rotation
    centre_local = (obj.local_lo + obj.local_hi) / 2.0
    centre = obj.pos + rot @ centre_local
    half = (obj.local_hi - obj.local_lo) / 2.0
    vertical = int(np.argmax(np.abs(rot[2, :])))
    horizontal = [i for i in range(3) if i != vertical]
    widths = {i: 2.0 * half[i] for i in horizontal}
    narrow = min(horizontal, key=lambda i: widths[i])
    top, bottom = float(obj.hi[2]), float(obj.lo[2])
    height = top - bottom
    obstacles = [o for o in (others or []) if o.hi[2] > bottom + 0.01  # what the object stands in is no obstacle
                 and _box_distance(centre[:2], o.lo[:2], o.hi[:2]) > 0.0]
    if widths[narrow] <= MAX_PINCH:  # across the narrow side; across the other where the hand would meet something
        z = max(top - min(0.03, 0.5 * height), bottom + 0.015)  # tall there (an opened drawer) and not here
        tall = [o for o in obstacles if o.hi[2] > z + 0.02]

        def palm_room(i: int) -> float:
            u = rot[:2, i] / max(float(np.linalg.norm(rot[:2, i])), 1e-9)
            return min((_box_distance(centre[:2] + u * f * PALM_REACH, o.lo[:2], o.hi[:2])
                        for o in tall for f in np.linspace(-1.0, 1.0, 7)), default=1.0)

        pinchable = [narrow] + [i for i in horizontal if i != narrow and widths[i] <= WIDE_PINCH]
        across = max(pinchable, key=lambda i: (min(palm_room(i), 0.02), i == narrow))
        axis = rot[:, across]
        return Grasp(np.array([centre[0], centre[1], z]), nearest_yaw(math.atan2(axis[1], axis[0]), reference_yaw))
    radius = widths[narrow] / 2.0
    z = max(top - 0.025, bottom + 0.015)
    toward = ROBOT_BASE_XY - centre[:2]
    toward = toward / max(float(np.linalg.norm(toward)), 1e-9)
    best: tuple[float, Grasp] | None = None
    for k in range(16):
        angle = k * math.pi / 8
        u = np.array([math.cos(angle), math.sin(angle)])
        xy = centre[:2] + u * max(radius - 0.015, 0.0)
        yaw = nearest_yaw(angle, reference_yaw)
        clearance = min((_box_distance(xy, o.lo[:2], o.hi[:2]) for o in obstacles), default=1.0)
        wrist = xy + WRIST_OFFSET[:2]
        high = [o for o in obstacles if o.hi[2] > z + WRIST_OFFSET[2] - 0.08]
        wrist_clearance = min((_box_distance(wrist, o.lo[:2], o.hi[:2]) for o in high), default=1.0)
        cost = (-min(clearance, 0.08) * 4.0 - min(wrist_clearance, 0.15) * 4.0
                + 0.05 * abs(wrap(yaw - reference_yaw)) - 0.12 * float(u @ toward))
        if best is None or cost < best[0]:
            best = (cost, Grasp(np.array([xy[0], xy[1], z]), yaw))
    assert best is not None
    return best[1]


def free_spot(scene: Scene, region: RegionView, centre: np.ndarray, args: tuple[str, ...],
               obj: EntityView, region_centre: np.ndarray) -> np.ndarray:
    """The point of a goal region nearest ``centre`` clear of what already lies in it (a second moka pot).

    Candidates lie in the region around ``region_centre`` and keep the object's centre 1.5 cm
    inside it (LIBERO tests the body origin against the box); clearance is between footprints (a moka pot's handle
    makes it long one way only).
    """
    held, target = args[0], args[1]
    floor = float(region.pos[2] - (np.abs(region.rotation) @ region.size)[2]) - 0.01  # (a plate below a drawer
    inside = [e for n, e in scene.entities.items() if n != held and not target.startswith(n + "_")  # is not in it)
              and e.hi[2] - e.lo[2] < 0.25 and e.hi[2] > floor
              and _box_distance(centre[:2], e.lo[:2], e.hi[:2]) < float(np.max(region.size[:2])) + 0.05]
    if not inside:
        return centre
    half = np.abs(region.rotation[:2, :2] @ region.size[:2]) - 0.015
    half = np.maximum(half, 0.0)
    below, above = obj.lo[:2] - obj.pos[:2], obj.hi[:2] - obj.pos[:2]
    best, best_score = centre, -np.inf
    for fx in np.linspace(-1.0, 1.0, 9):
        for fy in np.linspace(-1.0, 1.0, 9):
            xy = region_centre[:2] + np.array([fx * half[0], fy * half[1]])
            gap = min(_box_gap(xy + below, xy + above, e.lo[:2], e.hi[:2]) for e in inside)
            score = min(gap, 0.02) - 0.1 * float(np.linalg.norm(xy - centre[:2]))
            if score > best_score:
                best, best_score = np.array([xy[0], xy[1], centre[2]]), score
    return best


def clear_first(scene: Scene, goal: Condition, first: Condition | None) -> Condition | None:
    """The slide out of an opening drawer's sweep (``CLEAR_SPOT``) the object needs first; None: it needs none.

    It needs one where the opened part would stand over it (or push it).
    """
    if first is None or first.predicate != "open" or first.args[0] not in scene.regions or \
            goal.predicate not in ("on", "in") or goal.args[0] not in scene.entities or goal.args[1:2] != first.args:
        return None
    joint = scene.regions[first.args[0]].joint
    if joint is None:
        return None
    obj = scene.entities[goal.args[0]]
    lo, hi, bottom = opened_sweep(joint)
    if float(obj.lo[2]) >= bottom or _box_distance(obj.pos[:2], lo, hi) >= SWEEP_CLEARANCE:
        return None
    return Condition("on", (goal.args[0], CLEAR_SPOT, first.args[0]))


def clear_spot(scene: Scene, obj: EntityView, condition: Condition) -> np.ndarray | None:
    """The nearest spot (body origin) out of the drawer's sweep, free, reached by a clear straight slide; None: none.

    The footprint (its box) stays off other objects' boxes along the whole slide (boxes round a bowl or a bottle
    leave a real gap where their corners meet); the centre ends ``SWEEP_CLEARANCE`` from the sweep and more.
    """
    held, region = condition.args[0], condition.args[2]
    joint = scene.regions[region].joint
    assert joint is not None  # clear_first only adds the move for a region with a joint
    lo, hi, _ = opened_sweep(joint)
    below, above = obj.lo[:2] - obj.pos[:2], obj.hi[:2] - obj.pos[:2]
    start = obj.pos[:2]
    others = [e for n, e in scene.entities.items() if n != held and e.hi[2] > obj.lo[2] + 0.01]
    # boxes that overlap at the start already (a bowl's box over a plate's) may not overlap more; on the way, a
    # box may cut another's corner by 8 mm (a round bowl's box is empty there)
    allowed = [min(0.0, _box_gap(obj.lo[:2], obj.hi[:2], e.lo[:2], e.hi[:2])) - 1e-4 for e in others]

    def free(xy: np.ndarray, slack: float) -> bool:
        return all(_box_gap(xy + below, xy + above, e.lo[:2], e.hi[:2]) >= gap - slack
                   for e, gap in zip(others, allowed, strict=True))

    for distance in np.arange(0.02, 0.26, 0.01):
        found = []
        for k in range(24):
            angle = 2.0 * math.pi * k / 24
            xy = start + distance * np.array([math.cos(angle), math.sin(angle)])
            if _box_distance(xy, lo, hi) < SWEEP_CLEARANCE + 0.005 or \
                    float(np.linalg.norm(xy - ROBOT_BASE_XY)) > REACH:
                continue
            steps = max(int(distance / 0.01), 1)
            if free(xy, 0.0) and all(free(start + (xy - start) * (i / steps), 0.008) for i in range(1, steps)):
                found.append((float(np.linalg.norm(xy - ROBOT_BASE_XY)), xy))
        if found:
            xy = min(found, key=lambda f: f[0])[1]
            return np.array([xy[0], xy[1], float(obj.pos[2]) + 0.003])
    return None


def over_the_way(scene: Scene, eef: np.ndarray, hover: np.ndarray, taken: str) -> float:
    """The hover's height, or, while the way there crosses something, high enough over it.

    Going down on the diagonal to the hover saves steps, but the hand would catch an opened drawer beside it (just
    after pulling it: kept 12 cm over the drawer's top) or the rim of the basket it has just let go into (the
    fingertips kept 3 cm over it), dragging the basket along; it keeps above them until it is past them or 3 cm
    from over the hover.
    """
    if float(np.linalg.norm((hover - eef)[:2])) < 0.03:
        return float(hover[2])
    tops = [float(part.hi[2]) + 0.12 for part in opened_parts(scene) if part.hi[2] > hover[2] - 0.10
            and segment_hits_box(eef[:2], hover[:2], part.lo[:2] - PALM_REACH, part.hi[:2] + PALM_REACH)]
    tops += [float(e.hi[2]) + 0.05 for n, e in scene.entities.items() if n != taken and e.hi[2] > hover[2] - 0.10
             and segment_hits_box(eef[:2], hover[:2], e.lo[:2] - 0.03, e.hi[:2] + 0.03)]
    return max([float(hover[2])] + [min(top, float(eef[2])) for top in tops])


def opened_parts(scene: Scene) -> list[EntityView]:
    """Every drawer part pulled out of its cabinet by more than 2 cm, as a box.

    An obstacle the cabinet's own bounds do not cover.
    """
    found = []
    for entity in scene.entities.values():
        for joint in entity.joints:
            if is_slide(joint) and abs(joint.qpos - goal_position(joint, "close")) > 0.02:
                corners = part_corners(joint)
                lo, hi = corners.min(axis=0), corners.max(axis=0)
                found.append(EntityView((lo + hi) / 2.0, np.array([1.0, 0.0, 0.0, 0.0]), lo - (lo + hi) / 2.0,
                                        hi - (lo + hi) / 2.0, lo, hi, ()))
    return found


def clear_push_point(scene: Scene, joint: JointView, handle: np.ndarray, outward: np.ndarray,
                      half_width: float) -> np.ndarray:
    """Where along a drawer's front the hand (``half_width`` to each side) pushes it, clearest of other things.

    The hand sweeps the strip in front of the front, 15 cm deep; the point that leaves the most room to the nearest
    object beside that strip wins, the middle on ties (within 1 cm).
    """
    corners = part_corners(joint)
    side = np.array([-outward[1], outward[0], 0.0])
    along = corners @ side
    centre = float(handle @ side)
    reach = max(0.0, (float(along.max()) - float(along.min())) / 2.0 - 0.03)
    front = float((corners @ outward).max())
    others = [e for e in scene.entities.values()
              if not np.any(np.all((corners[:, :2] >= e.lo[:2] - 1e-6) & (corners[:, :2] <= e.hi[:2] + 1e-6), axis=1))]
    best, best_score = handle, -np.inf
    for f in np.linspace(-1.0, 1.0, 9):
        point = handle + side * (f * reach)
        lo_s, hi_s = float(point @ side) - half_width, float(point @ side) + half_width
        room = 0.2
        for e in others:
            box = np.array([[x, y, 0.0] for x in (e.lo[0], e.hi[0]) for y in (e.lo[1], e.hi[1])])
            e_side, e_out = box @ side, box @ outward
            if e_out.max() < front - 0.01 or e_out.min() > front + 0.15:
                continue
            room = min(room, max(float(e_side.min()) - hi_s, lo_s - float(e_side.max())))
        score = min(room, 0.05) - 0.01 * abs(float(point @ side) - centre) / max(reach, 1e-6)
        if score > best_score:
            best, best_score = point, score
    return best


def extent(obj: EntityView, direction: np.ndarray) -> float:
    """How far the object's box reaches from its body origin along ``direction`` (horizontal)."""
    corners = np.array([[x, y] for x in (obj.lo[0], obj.hi[0]) for y in (obj.lo[1], obj.hi[1])])
    return float(((corners - obj.pos[:2]) @ direction[:2]).max())


def handle_grasp(obj: EntityView, inside: Enclosure | None, reference_yaw: float) -> Grasp | None:
    """The grasp that sets an object down under a roof: its end nearest the opening, pinched across.

    For an object long along the way in (a mug whose handle faces the opening): the hand pointing down keeps out
    of the opening while the rest of the object is under the roof. None: the object is not long that way.
    """
    if inside is None:
        return None
    out = inside.out
    side = np.array([-out[1], out[0], 0.0])
    corners = np.array([[x, y, 0.0] for x in (obj.lo[0], obj.hi[0]) for y in (obj.lo[1], obj.hi[1])])
    if float(np.ptp(corners @ out)) < float(np.ptp(corners @ side)) + 0.02:
        return None
    centre = (obj.lo + obj.hi) / 2.0
    point = centre + out * (extent(obj, out) - float((centre - obj.pos) @ out) - 0.006)
    point[2] = float(obj.lo[2]) + 0.7 * float(obj.hi[2] - obj.lo[2])
    return Grasp(point, nearest_yaw(math.atan2(side[1], side[0]), reference_yaw))


def _box_gap(lo: np.ndarray, hi: np.ndarray, other_lo: np.ndarray, other_hi: np.ndarray) -> float:
    """Distance between two 2-D boxes (negative: how deep they overlap along the shallower axis)."""
    apart = np.maximum(other_lo - hi, lo - other_hi)
    if np.all(apart < 0):
        return float(np.max(apart))
    return float(np.linalg.norm(np.maximum(apart, 0.0)))


def _box_distance(point: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Distance from a 2-D point to a 2-D box (0 inside)."""
    return float(np.linalg.norm(np.maximum(np.maximum(lo - point, point - hi), 0.0)))
