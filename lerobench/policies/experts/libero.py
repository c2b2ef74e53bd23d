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
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobench.envs.bddl import Condition, TaskGoal
from lerobench.envs.libero_state import EntityView, JointView, RegionView, Scene, read_scene
from lerobench.policies.base import ObservationNeeds, PolicyTraits, row_ids
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.experts.libero_geometry import (
    ROBOT_BASE_XY,
    Enclosure,
    condition_joint,
    current_yaw,
    down_rotation,
    enclosure,
    facing,
    fixture_of,
    goal_position,
    handle_grip,
    handle_point,
    hinge_contact,
    hinge_target,
    is_slide,
    leaning,
    nearest_yaw,
    opened_sweep,
    opens,
    part_corners,
    part_radius,
    perpendicular_pull,
    prerequisite,
    rotate_about,
    rotation_error,
    segment_hits_box,
    wrap,
)

LOW_HANDLE = 0.10
"""A drawer whose handle is less than this above the lowest object is closed by a hand pointing down and leaning
``LEAN`` into the push: a level hand is 20 cm high and stops 10 cm above the table, and a hand straight down would
meet the drawer above with its palm before the front is home."""
LEAN = math.radians(40.0)

POS_SCALE = 0.05
"""LIBERO's OSC maps a position action of 1 to a 5 cm target offset per step."""
ROT_SCALE = 0.5
"""... and a rotation action of 1 to 0.5 rad."""
DT = 0.05
"""Control period (20 Hz)."""
GRIP_OPEN, GRIP_CLOSE = -1.0, 1.0
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

KNOB_RADIUS = 0.09
"""A hinged part smaller than this is a knob (turned by the wrist); larger ones are doors (pushed round)."""
GRIP_HALF = 0.0
"""A gripper action of 0 holds the fingers where they are (robosuite ramps them by the action's sign)."""

PICK_PHASES = ("start", "rise", "above", "descend", "close", "lift", "drop")
"""The phases of taking an object (``_pick``); carry, lower, release and retreat put it down (``_put``)."""

CLEAR_SPOT = "__clear_of_the_drawer__"
"""``(On obj CLEAR_SPOT drawer_region)``: a move the expert adds before opening a drawer whose part, opened, would
stand over (or push) the object to be put in it: libero_goal's bowl beside the cabinet, which the hand could not
reach under the opened drawer. The object slides a few centimetres, barely lifted (``_clear_spot``)."""
SWEEP_CLEARANCE = 0.05
"""How far an object's centre must stay from an opening drawer's sweep for the hand to take it from above: the
pinching hand is 6 cm thick, and the grasp is planned across the way to the drawer (``plan_grasp``)."""
REACH = 0.72
"""Farthest spot from the robot's base (xy) the expert slides an object to."""

HAND_DEPTH = 0.05
"""How far the hand pointing down (palm, wrist) reaches from the grip site across its finger axis: what stays out
of an enclosure's opening while it sets an object down under the roof."""
PUSH_LEAN = math.radians(75.0)
"""The hand that pushes an object deeper into an enclosure leans this far from pointing down (fingertips first)."""
PUSH_HEIGHT = 0.03
"""... and pushes this far above the object's bottom: low, so the object slides rather than tips."""

ORDER = {"open": 0, "on": 1, "in": 1, "close": 2, "turnon": 3, "turnoff": 3}
"""Conditions run in this order: a drawer opens before things go in, closes after."""


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


def _free_spot(scene: Scene, region: RegionView, centre: np.ndarray, args: tuple[str, ...],
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


def _clear_first(scene: Scene, goal: Condition, first: Condition | None) -> Condition | None:
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


def _clear_spot(scene: Scene, obj: EntityView, condition: Condition) -> np.ndarray | None:
    """The nearest spot (body origin) out of the drawer's sweep, free, reached by a clear straight slide; None: none.

    The footprint (its box) stays off other objects' boxes along the whole slide (boxes round a bowl or a bottle
    leave a real gap where their corners meet); the centre ends ``SWEEP_CLEARANCE`` from the sweep and more.
    """
    held, region = condition.args[0], condition.args[2]
    joint = scene.regions[region].joint
    assert joint is not None  # _clear_first only adds the move for a region with a joint
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


def _over_the_way(scene: Scene, eef: np.ndarray, hover: np.ndarray, taken: str) -> float:
    """The hover's height, or, while the way there crosses something, high enough over it.

    Going down on the diagonal to the hover saves steps, but the hand would catch an opened drawer beside it (just
    after pulling it: kept 12 cm over the drawer's top) or the rim of the basket it has just let go into (the
    fingertips kept 3 cm over it), dragging the basket along; it keeps above them until it is past them or 3 cm
    from over the hover.
    """
    if float(np.linalg.norm((hover - eef)[:2])) < 0.03:
        return float(hover[2])
    tops = [float(part.hi[2]) + 0.12 for part in _opened_parts(scene) if part.hi[2] > hover[2] - 0.10
            and segment_hits_box(eef[:2], hover[:2], part.lo[:2] - PALM_REACH, part.hi[:2] + PALM_REACH)]
    tops += [float(e.hi[2]) + 0.05 for n, e in scene.entities.items() if n != taken and e.hi[2] > hover[2] - 0.10
             and segment_hits_box(eef[:2], hover[:2], e.lo[:2] - 0.03, e.hi[:2] + 0.03)]
    return max([float(hover[2])] + [min(top, float(eef[2])) for top in tops])


def _opened_parts(scene: Scene) -> list[EntityView]:
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


def _clear_push_point(scene: Scene, joint: JointView, handle: np.ndarray, outward: np.ndarray,
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


def _extent(obj: EntityView, direction: np.ndarray) -> float:
    """How far the object's box reaches from its body origin along ``direction`` (horizontal)."""
    corners = np.array([[x, y] for x in (obj.lo[0], obj.hi[0]) for y in (obj.lo[1], obj.hi[1])])
    return float(((corners - obj.pos[:2]) @ direction[:2]).max())


def _handle_grasp(obj: EntityView, inside: Enclosure | None, reference_yaw: float) -> Grasp | None:
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
    point = centre + out * (_extent(obj, out) - float((centre - obj.pos) @ out) - 0.006)
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


@dataclass
class Memory:
    """One row's progress: which condition, which phase, since when, and what the phase measured."""

    condition: int = -1
    phase: str = "choose"
    since: float = 0.0
    grasp: Grasp | None = None
    offset: np.ndarray | None = None
    """Held object: eef position minus object position, measured after the lift."""
    held_z: float = 0.0
    place: np.ndarray | None = None
    """Where the carried object's body origin goes (chosen once per carry)."""
    last_z: float = 0.0
    stalled: int = 0
    carry_z: float = 0.0
    yaw: float = math.pi / 2
    roll: float = 1.0
    """The level hand's finger axis up (1) or down (-1): whichever is the shorter turn (``facing``)."""
    rise_xy: np.ndarray | None = None
    """Where a rise started (it goes straight up from there, not from wherever the arm drifted)."""
    cleared: bool = False
    """The object was slid out of a drawer's sweep already (``CLEAR_SPOT``): once per episode, never a loop."""
    working: Condition | None = None
    """The condition being worked on: the goal's, or one it needs first (a drawer opened to put a bowl in)."""
    inside: Enclosure | None = None
    """Putting the object into a region under a roof (a microwave): set down at the opening, then pushed in."""
    push_to: float = 0.0
    """... to this distance of its body origin from the region's centre along the enclosure's ``out``."""
    lean: float = 0.0
    """Closing a low drawer: the hand points down, leaning into the push, fingers across it, turned +1 or -1
    (``LOW_HANDLE``); 0: the level hand."""


@dataclass
class Command:
    """What one step asks of the arm: a position, the hand pointing down at ``yaw`` (or ``rotation``), a grip."""

    pos: np.ndarray
    yaw: float
    grip: float
    rotation: np.ndarray | None = None


def action_for(scene: Scene, command: Command) -> np.ndarray:
    """The 7-D LIBERO action that moves towards ``command`` (P control, saturated)."""
    err = command.pos - scene.eef_pos
    pos = np.clip(err / POS_SCALE * 2.0, -1.0, 1.0)
    target = command.rotation if command.rotation is not None else down_rotation(command.yaw)
    rot = np.clip(rotation_error(target, scene.eef_rotation) / ROT_SCALE * 1.0, -1.0, 1.0)
    return np.concatenate([pos, rot, [command.grip]]).astype(np.float32)


class TaskExpert:
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

    # -- phases ------------------------------------------------------------------------------------------------
    def _enter(self, mem: Memory, scene: Scene, phase: str) -> None:
        mem.phase, mem.since, mem.stalled = phase, scene.time, 0
        mem.last_z = float(scene.eef_pos[2])

    def _elapsed(self, scene: Scene, mem: Memory) -> int:
        return int(round((scene.time - mem.since) / DT))

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
                clear = clear or _clear_first(scene, self.goal.goal[j], opening)
        if clear is not None and _clear_spot(scene, scene.entities[clear.args[0]], clear) is not None:
            mem.cleared = True
            mem.working = clear
        else:
            mem.working = first or goal
        mem.grasp = mem.offset = mem.place = mem.inside = None
        self._enter(mem, scene, "start")
        return None

    # -- pick and place ----------------------------------------------------------------------------------------
    def _place(self, scene: Scene, mem: Memory, condition: Condition) -> Command | None:
        obj = scene.entities[condition.args[0]]
        t = self._elapsed(scene, mem)
        eef = scene.eef_pos
        if mem.phase in PICK_PHASES:
            return self._pick(scene, mem, condition, obj, t, eef)
        if mem.inside is not None:
            return self._insert(scene, mem, condition, obj, t, eef, mem.inside)
        return self._put(scene, mem, condition, obj, t, eef)

    def _pick(self, scene: Scene, mem: Memory, condition: Condition, obj: EntityView, t: int,
              eef: np.ndarray) -> Command | None:
        """Plan the grasp, rise, go above it, descend, close, lift; open and start again if it slipped."""
        if mem.phase == "start":
            mem.yaw = current_yaw(scene.eef_rotation)
            others = [e for n, e in scene.entities.items() if n != condition.args[0]] + _opened_parts(scene)
            inside = enclosure(scene, condition.args[1], float(obj.hi[2] - obj.lo[2])) \
                if condition.predicate == "in" else None
            handle = _handle_grasp(obj, inside, mem.yaw) if inside is not None else None
            mem.inside = inside if handle is not None else None
            mem.grasp = handle or plan_grasp(obj, mem.yaw, others)
            mem.yaw = mem.grasp.yaw
            self._enter(mem, scene, "rise")
            return None
        grasp = mem.grasp
        assert grasp is not None
        hover = grasp.point + np.array([0.0, 0.0, 0.10])
        if mem.phase == "rise":  # up before moving sideways, so the open fingers sweep nothing
            z = max(float(eef[2]), hover[2])
            if eef[2] >= z - 0.02 or t > 30:
                self._enter(mem, scene, "above")
                return None
            return Command(np.array([eef[0], eef[1], z]), mem.yaw, GRIP_OPEN)
        if mem.phase == "above":
            target = np.array([hover[0], hover[1], max(hover[2], float(eef[2])) if t < 2 else
                               _over_the_way(scene, eef, hover, condition.args[0])])
            if (np.linalg.norm((hover - eef)[:2]) < 0.01 and abs(hover[2] - eef[2]) < 0.02) or t > 60:
                self._enter(mem, scene, "descend")
                return None
            return Command(target, mem.yaw, GRIP_OPEN)
        if mem.phase == "descend":
            if np.linalg.norm(grasp.point - eef) < 0.008 or t > 40:
                self._enter(mem, scene, "close")
                return None
            return Command(grasp.point, mem.yaw, GRIP_OPEN)
        if mem.phase == "close":
            if t >= 12:
                mem.held_z = float(obj.pos[2])
                mem.carry_z = self._carry_height(scene, condition, obj, eef)
                self._enter(mem, scene, "lift")
                return None
            return Command(grasp.point, mem.yaw, GRIP_CLOSE)
        if mem.phase == "lift":
            target = np.array([grasp.point[0], grasp.point[1], mem.carry_z])
            if obj.pos[2] - mem.held_z < 0.5 * (eef[2] - grasp.point[2]) - 0.01 and eef[2] - grasp.point[2] > 0.04:
                self._enter(mem, scene, "drop")  # it slipped: open and try again
                return None
            slide = condition.args[1] == CLEAR_SPOT  # up 1.5 cm only: all of it, then judge the grasp
            if abs(target[2] - eef[2]) < (0.004 if slide else 0.02) or t > 50:
                mem.offset = eef - obj.pos
                rose = float(obj.pos[2] - mem.held_z)
                if rose < 0.5 * float(eef[2] - grasp.point[2]) - 0.002 or np.linalg.norm(mem.offset[:2]) > 0.09:
                    self._enter(mem, scene, "drop")  # not in the hand: open and try again
                    return None
                self._enter(mem, scene, "carry")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE)
        if mem.phase == "drop":
            if t >= 6:
                mem.cleared = mem.cleared and condition.args[1] != CLEAR_SPOT  # a failed slide is tried again
                mem.phase = "choose"
                return None
            return Command(eef.copy(), mem.yaw, GRIP_OPEN)
        raise AssertionError(f"unknown phase {mem.phase}")

    def _put(self, scene: Scene, mem: Memory, condition: Condition, obj: EntityView, t: int,
             eef: np.ndarray) -> Command | None:
        """Carry the held object over its place, lower it until it meets its support, release, retreat."""
        offset = mem.offset if mem.offset is not None else np.zeros(3)
        if mem.phase in ("carry", "lower") and np.linalg.norm(eef - obj.pos - offset) > 0.05:
            self._enter(mem, scene, "drop")  # it slipped out on the way: open and start again
            return None
        if mem.place is None:
            mem.place = self._place_point(scene, condition, obj)
        place = mem.place
        goal_xy = place[:2] + offset[:2]
        if mem.phase == "carry":
            target = np.array([goal_xy[0], goal_xy[1], mem.carry_z])
            if np.linalg.norm((target - eef)[:2]) < 0.008 or t > 80:
                self._enter(mem, scene, "lower")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE)
        if mem.phase in ("lower", "release"):
            target = np.array([goal_xy[0], goal_xy[1], place[2] + offset[2]])
            return self._set_down(scene, mem, target, t, eef, limit=60, near=0.006)
        if mem.phase == "retreat":
            high, near = mem.carry_z, 0.03  # up, the fingertips over the container's rim before anything else
            holder = fixture_of(scene, condition.args[1])
            if holder is not None and float(holder.hi[2]) + 0.06 > high - near:  # (a basket the hand would drag
                high, near = float(holder.hi[2]) + 0.06, 0.01  # by its rim)
            if condition.args[1] == CLEAR_SPOT:  # (after a slide, up off the object: the next skill may close
                high = float(obj.hi[2]) + 0.08  # the fingers)
            target = np.array([eef[0], eef[1], max(high, float(eef[2]))])
            if t >= 16 or eef[2] > high - near:
                mem.phase = "choose"
                return None
            return Command(target, mem.yaw, GRIP_OPEN)
        raise AssertionError(f"unknown phase {mem.phase}")

    def _insert(self, scene: Scene, mem: Memory, condition: Condition, obj: EntityView, t: int, eef: np.ndarray,
                inside: Enclosure) -> Command | None:
        """Into a region under a roof: in at the opening at floor height, set down, let go, push it deeper.

        The hand pointing down cannot pass under the roof, so it sets the object down as deep as its palm allows
        (held by the end nearest the opening: a mug's handle), then leans in and pushes that end until the
        whole object is behind the closed door's face.
        """
        offset = mem.offset if mem.offset is not None else np.zeros(3)
        if mem.phase in ("carry", "level", "slide", "lower") and np.linalg.norm(eef - obj.pos - offset) > 0.05:
            self._enter(mem, scene, "drop")  # it slipped out on the way: open and start again
            return None
        region = scene.regions[condition.args[1]]
        out = inside.out
        ext_out, ext_in = _extent(obj, out), _extent(obj, -out)
        lift = float(obj.pos[2] - obj.lo[2])
        if mem.place is None:  # the body origin's spot, set down at the opening (as deep as the palm allows)
            spot = region.pos + out * (inside.front + HAND_DEPTH - float(offset @ out))
            mem.place = np.array([spot[0], spot[1], inside.floor + lift])
            mem.push_to = inside.front - ext_out - 0.012
        place = mem.place
        entry = place + out * (inside.front + ext_in + 0.03 - float((place - region.pos) @ out))
        low = inside.floor + 0.025 + lift  # the body origin's height while it goes in, clear of the floor
        if mem.phase == "carry":
            target = np.array([entry[0] + offset[0], entry[1] + offset[1], mem.carry_z])
            if np.linalg.norm((target - eef)[:2]) < 0.01 or t > 80:
                self._enter(mem, scene, "level")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE)
        if mem.phase == "level":
            target = np.array([entry[0] + offset[0], entry[1] + offset[1], low + offset[2]])
            if abs(target[2] - eef[2]) < 0.006 or t > 40:
                self._enter(mem, scene, "slide")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE)
        if mem.phase == "slide":
            target = np.array([place[0] + offset[0], place[1] + offset[1], low + offset[2]])
            if np.linalg.norm((target - eef)[:2]) < 0.006 or t > 50:
                self._enter(mem, scene, "lower")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE)
        if mem.phase in ("lower", "release"):
            target = np.array([place[0] + offset[0], place[1] + offset[1], place[2] + offset[2] - 0.01])
            return self._set_down(scene, mem, target, t, eef, limit=40)
        return self._push_in(scene, mem, region, obj, t, eef, out, ext_out)

    def _push_in(self, scene: Scene, mem: Memory, region: RegionView, obj: EntityView, t: int, eef: np.ndarray,
                 out: np.ndarray, ext_out: float) -> Command | None:
        """After the set-down: up off the object, lean in fingertips first, push its near end behind the door."""
        finger = scene.eef_rotation[:, 0]  # the lean's finger axis the nearer way round: a half turn of the wrist
        lean = leaning(-out, PUSH_LEAN, 1.0 if float(finger @ np.array([out[1], -out[0], 0.0])) >= 0 else -1.0)
        along = float((obj.pos - region.pos) @ out)
        tip = obj.pos + out * (ext_out + 0.015)  # the grip site behind the near end, at push height
        tip[2] = float(obj.lo[2]) + PUSH_HEIGHT
        if mem.phase == "retreat":  # up off it, then back and round to lean in
            high = float(obj.hi[2]) + 0.06
            if eef[2] > high - 0.02 or t > 20:
                self._enter(mem, scene, "aim")
                return None
            return Command(np.array([eef[0], eef[1], high]), mem.yaw, GRIP_OPEN)
        if mem.phase == "aim":
            target = tip + out * 0.04 + np.array([0.0, 0.0, 0.06])
            turned = float(np.linalg.norm(rotation_error(lean, scene.eef_rotation))) < 0.15
            if (np.linalg.norm(target - eef) < 0.015 and turned) or t > 60:
                self._enter(mem, scene, "reach")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE, lean)
        if mem.phase == "reach":
            target = tip + out * 0.03
            if np.linalg.norm(target - eef) < 0.01 or t > 30:
                self._enter(mem, scene, "push")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE, lean)
        if mem.phase == "push":
            target = tip - out * (along - mem.push_to)
            if along <= mem.push_to + 0.004 or t > 60:
                self._enter(mem, scene, "withdraw")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE, lean)
        if mem.phase == "withdraw":
            target = tip + out * 0.08
            if float((eef - tip) @ out) > 0.06 or t > 25:
                mem.phase = "choose"
                return None
            return Command(target, mem.yaw, GRIP_CLOSE, lean)
        raise AssertionError(f"unknown phase {mem.phase}")

    def _set_down(self, scene: Scene, mem: Memory, target: np.ndarray, t: int, eef: np.ndarray, limit: int,
                  near: float = 0.0) -> Command | None:
        """Lower the held object until it stops (it met its support) or is within `near`; then let go.

        The "lower" and "release" phases of every placing skill: the stall, not the target's height, says when the
        object is down, since the support's top is known only roughly.
        """
        if mem.phase == "lower":
            moved = mem.last_z - float(eef[2])
            mem.last_z = float(eef[2])
            mem.stalled = mem.stalled + 1 if moved < 0.001 and t > 3 else 0
            if abs(target[2] - eef[2]) < near or mem.stalled >= 2 or t > limit:
                self._enter(mem, scene, "release")
                return None
            return Command(target, mem.yaw, GRIP_CLOSE)
        if t >= 8:
            self._enter(mem, scene, "retreat")
            return None
        return Command(eef.copy(), mem.yaw, GRIP_OPEN)

    def _place_point(self, scene: Scene, condition: Condition, obj: EntityView) -> np.ndarray:
        """Where the object's body origin should end: over the target's centre, just above its support."""
        target = condition.args[1]
        if target == CLEAR_SPOT:
            spot = _clear_spot(scene, obj, condition)
            return spot if spot is not None else obj.pos + np.array([0.0, 0.0, 0.003])
        if target in scene.entities:
            other = scene.entities[target]
            return np.array([other.pos[0], other.pos[1], float(other.hi[2]) + 0.005 + (obj.pos[2] - obj.lo[2])])
        region = scene.regions[target]
        up = region.rotation[:, 2]
        lift = np.array([0.0, 0.0, obj.pos[2] - obj.lo[2]])
        centre = region.pos.copy() if condition.predicate == "in" else region.pos + up * (region.size[2] + 0.01)
        region_centre = centre.copy()
        sharing = [c for c in self.goal.goal if c.predicate == condition.predicate and c.args[1:] == condition.args[1:]]
        if len(sharing) > 1 and condition.predicate == "in":  # several into one container: each at its centre
            return centre + lift  # (they may pile up; a spot off centre lands on the container's wall)
        if len(sharing) > 1:  # several objects on one surface: each its own side of it, first come first
            half = np.maximum(np.abs(region.rotation[:2, :2] @ region.size[:2]) - 0.015, 0.0)
            parent = fixture_of(scene, target)
            room = half.copy()
            if parent is not None:  # the side along which the fixture under the region leaves the most room
                room = np.minimum(centre[:2] - parent.lo[:2], parent.hi[:2] - centre[:2])
            axis = int(np.argmax(np.minimum(room, half + 0.03)))
            k = sharing.index(condition)
            shift = np.zeros(3)
            shift[axis] = (2.0 * k / (len(sharing) - 1) - 1.0) * min(half[axis], 0.045)
            centre = centre + shift
        return _free_spot(scene, region, centre, condition.args, obj, region_centre) + lift

    def _carry_height(self, scene: Scene, condition: Condition, obj: EntityView, eef: np.ndarray) -> float:
        """Grip-site height that carries the object's bottom 4 cm over everything between here and the target.

        A slide out of a drawer's sweep lifts it 1.5 cm: its way is clear.
        """
        if condition.args[1] == CLEAR_SPOT:
            return float(eef[2]) + 0.015
        place = self._place_point(scene, condition, obj)
        start, end = obj.pos[:2], place[:2]
        body = float(np.max(obj.hi[:2] - obj.lo[:2])) / 2.0 + 0.03
        reach = max(body, PALM_REACH)
        tallest = max(float(obj.hi[2]), place[2])
        palm = -np.inf  # the highest thing only the hand's sides pass over (its palm is 2.6 cm above the grip)
        for name, other in scene.entities.items():
            if name == condition.args[0]:
                continue
            if segment_hits_box(start, end, other.lo[:2] - body, other.hi[:2] + body):
                tallest = max(tallest, float(other.hi[2]))
            elif segment_hits_box(start, end, other.lo[:2] - reach, other.hi[:2] + reach):
                palm = max(palm, float(other.hi[2]))
        below = float(eef[2] - obj.lo[2])  # grip site above the object's bottom
        return min(max(tallest + 0.04 + below, palm + 0.015 - 0.026), 1.45)

    # -- drawers, doors, knobs ---------------------------------------------------------------------------------
    def _articulate(self, scene: Scene, mem: Memory, condition: Condition) -> Command | None:
        joint = condition_joint(scene, condition)
        if joint is None:  # nothing with that affordance in the scene: wait (the episode fails at the limit)
            return Command(scene.eef_pos.copy(), mem.yaw, GRIP_OPEN)
        goal_q = goal_position(joint, condition.predicate)
        sense = 1.0 if goal_q > joint.qpos else -1.0
        if is_slide(joint):
            return self._drawer(scene, mem, joint, goal_q, sense)
        if part_radius(joint) < KNOB_RADIUS:
            return self._twist(scene, mem, joint, goal_q, sense)
        return self._swing(scene, mem, joint, goal_q, sense)

    def _approach(self, scene: Scene, mem: Memory, point: np.ndarray, rotation: np.ndarray, grip: float,
                  then: str) -> Command | None:
        """Rise to ``mem.carry_z``, move over ``point``, then down to it (phases rise / above / descend)."""
        t = self._elapsed(scene, mem)
        eef = scene.eef_pos
        if mem.phase == "rise":
            if eef[2] >= mem.carry_z - 0.02 or t > 30:
                self._enter(mem, scene, "above")
                return None
            if t == 0 or mem.rise_xy is None:
                mem.rise_xy = eef[:2].copy()
            return Command(np.array([mem.rise_xy[0], mem.rise_xy[1], mem.carry_z]), mem.yaw, grip, rotation)
        if mem.phase == "above":
            target = np.array([point[0], point[1], mem.carry_z])
            if np.linalg.norm((target - eef)[:2]) < 0.01 or t > 60:
                self._enter(mem, scene, "descend")
                return None
            return Command(target, mem.yaw, grip, rotation)
        turned = float(np.linalg.norm(rotation_error(rotation, scene.eef_rotation))) < 0.1
        if (np.linalg.norm(point - eef) < 0.01 and turned) or t > 50:
            self._enter(mem, scene, then)
            return None
        return Command(point, mem.yaw, grip, rotation)

    def _drawer(self, scene: Scene, mem: Memory, joint: JointView, goal_q: float, sense: float) -> Command | None:
        """A drawer, with the hand level and the fingers closing vertically.

        Opening pinches the handle bar and pulls; closing pushes the bar with closed fingers. A hand from above
        would meet the handle above, or the cabinet's top, with its palm.
        """
        t = self._elapsed(scene, mem)
        eef = scene.eef_pos
        opening = opens(joint, sense)
        motion = joint.axis * sense
        outward = motion if opening else -motion
        if mem.phase == "start":
            mem.yaw = current_yaw(scene.eef_rotation) if scene.eef_rotation[2, 2] < -0.7 else math.pi / 2
            handle = handle_point(joint, outward)
            floor = min(float(e.lo[2]) for e in scene.entities.values())
            mem.lean = 0.0
            if not opening and float(handle[2]) - floor < LOW_HANDLE:  # the way round nearer the hand's own
                mem.lean = min((1.0, -1.0), key=lambda f: float(np.linalg.norm(
                    rotation_error(leaning(-outward, LEAN, f), scene.eef_rotation))))
            if not opening:  # push the front where the hand keeps clear of what stands before it (a bottle)
                handle = _clear_push_point(scene, joint, handle, outward, 0.10 if mem.lean else 0.04)
            mem.roll = min((1.0, -1.0), key=lambda r: float(np.linalg.norm(  # the level grip the nearer turn away
                rotation_error(facing(-outward, r), scene.eef_rotation))))
            mem.grasp = Grasp(handle + outward * (0.0 if opening else 0.025), mem.yaw)
            mem.carry_z = max(float(handle[2]) + 0.15, float(eef[2]))
            self._enter(mem, scene, "rise")
            return None
        assert mem.grasp is not None
        level = leaning(-outward, LEAN, mem.lean) if mem.lean else facing(-outward, mem.roll)
        before = mem.grasp.point + outward * 0.10
        grip = GRIP_HALF if opening else GRIP_CLOSE
        if mem.phase in ("rise", "above", "descend"):
            if mem.phase == "rise" and t < 4 and opening:  # four steps of closing leave the fingers half open
                return Command(np.array([eef[0], eef[1], mem.carry_z]), mem.yaw, GRIP_CLOSE, level)
            return self._approach(scene, mem, before, level, grip, "insert")
        if mem.phase == "insert":
            target = mem.grasp.point
            if np.linalg.norm(target - eef) < 0.008 or t > 40:
                self._enter(mem, scene, "grip" if opening else "move")
                return None
            return Command(target, mem.yaw, grip, level)
        if mem.phase == "grip":
            if t >= 10:
                self._enter(mem, scene, "move")
                return None
            return Command(mem.grasp.point, mem.yaw, GRIP_CLOSE, level)
        if mem.phase == "move":
            if (joint.qpos - goal_q) * sense >= -0.003 or t > 100:
                self._enter(mem, scene, "release")
                return None
            target = eef + motion * 0.03
            target[2] = mem.grasp.point[2]
            target[:2] += perpendicular_pull(mem.grasp.point, eef, motion)
            return Command(target, mem.yaw, GRIP_CLOSE, level)
        if mem.phase == "release":
            if t >= (8 if opening else 1):
                self._enter(mem, scene, "back")
                return None
            return Command(eef.copy(), mem.yaw, GRIP_OPEN if opening else GRIP_CLOSE, level)
        if mem.phase == "back":
            if t >= 6:  # back to pointing down by the shortest turn (a level hand: about its palm's normal)
                ahead = math.atan2(-outward[1], -outward[0])
                mem.yaw = min((current_yaw(scene.eef_rotation), ahead, ahead + math.pi), key=lambda y: float(
                    np.linalg.norm(rotation_error(down_rotation(y), scene.eef_rotation))))
                self._enter(mem, scene, "up")
                return None
            return Command(eef + outward * 0.03, mem.yaw, GRIP_OPEN if opening else GRIP_CLOSE, level)
        if mem.phase == "up":  # and the hand back to pointing down before anything else
            down = float(np.linalg.norm(rotation_error(down_rotation(mem.yaw), scene.eef_rotation))) < 0.15
            if (t >= 12 or eef[2] > mem.carry_z - 0.03) and (down or t > 30):
                mem.phase = "choose"
                return None
            return Command(np.array([eef[0], eef[1], mem.carry_z]), mem.yaw, GRIP_OPEN)
        raise AssertionError(f"unknown phase {mem.phase}")

    def _twist(self, scene: Scene, mem: Memory, joint: JointView, goal_q: float, sense: float) -> Command | None:
        """A knob: pinch its fin from above, then turn the wrist (and the fin's centre round the axis).

        It turns until the joint is where the predicate holds.
        """
        t = self._elapsed(scene, mem)
        eef = scene.eef_pos
        spin = float(np.sign(joint.axis[2]) or 1.0)
        if mem.phase == "start":
            mem.yaw = current_yaw(scene.eef_rotation)
            centre, narrow, top = handle_grip(joint)
            mem.grasp = Grasp(np.array([centre[0], centre[1], top - 0.015]),
                              nearest_yaw(math.atan2(narrow[1], narrow[0]), mem.yaw))
            mem.yaw = mem.grasp.yaw
            mem.held_z = joint.qpos
            mem.carry_z = max(top + 0.10, float(eef[2]))
            self._enter(mem, scene, "rise")
            return None
        assert mem.grasp is not None
        if mem.phase in ("rise", "above", "descend"):
            return self._approach(scene, mem, mem.grasp.point, down_rotation(mem.yaw), GRIP_OPEN, "grip")
        if mem.phase == "grip":
            if t >= 10:
                self._enter(mem, scene, "move")
                return None
            return Command(mem.grasp.point, mem.yaw, GRIP_CLOSE)
        if mem.phase == "move":
            if (joint.qpos - goal_q) * sense >= -0.01 or t > 60:
                self._enter(mem, scene, "release")
                return None
            turn = sense * spin * min(abs(goal_q - mem.held_z) + 0.15, 0.12 * (t + 1))
            pos = rotate_about(mem.grasp.point, joint.anchor, turn)
            return Command(pos, mem.grasp.yaw + turn, GRIP_CLOSE)
        if mem.phase == "release":
            if t >= 6:
                self._enter(mem, scene, "up")
                return None
            return Command(eef.copy(), current_yaw(scene.eef_rotation), GRIP_OPEN)
        if mem.phase == "up":
            if t >= 12 or eef[2] > mem.carry_z - 0.03:
                mem.yaw = current_yaw(scene.eef_rotation)
                mem.phase = "choose"
                return None
            return Command(np.array([eef[0], eef[1], mem.carry_z]), current_yaw(scene.eef_rotation), GRIP_OPEN)
        raise AssertionError(f"unknown phase {mem.phase}")

    def _swing(self, scene: Scene, mem: Memory, joint: JointView, goal_q: float, sense: float) -> Command | None:
        """A door: closed fingers behind its far edge, pushed round the hinge."""
        t = self._elapsed(scene, mem)
        eef = scene.eef_pos
        if mem.phase == "start":
            mem.yaw = current_yaw(scene.eef_rotation)
            contact = hinge_contact(joint, sense)
            mem.grasp = Grasp(contact, mem.yaw)
            mem.carry_z = max(float(contact[2]) + 0.15, float(eef[2]))
            self._enter(mem, scene, "rise")
            return None
        assert mem.grasp is not None
        if mem.phase in ("rise", "above", "descend"):
            return self._approach(scene, mem, mem.grasp.point, down_rotation(mem.yaw), GRIP_CLOSE, "move")
        if mem.phase == "move":
            if (joint.qpos - goal_q) * sense >= -0.003 or t > 120:
                self._enter(mem, scene, "up")
                return None
            return Command(hinge_target(joint, sense, mem.grasp.point[2]), mem.yaw, GRIP_CLOSE)
        if mem.phase == "up":
            if t >= 12 or eef[2] > mem.carry_z - 0.03:
                mem.phase = "choose"
                return None
            return Command(np.array([eef[0], eef[1], mem.carry_z]), mem.yaw, GRIP_CLOSE)
        raise AssertionError(f"unknown phase {mem.phase}")

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
        starts = _starts(observation, len(keys))
        out = np.zeros((len(keys), 7), dtype=np.float32)
        for i, key in enumerate(keys):
            expert = self.experts[observation["task"][i]]
            scene = read_scene(observation["privileged"][i], expert.goal)
            out[i] = expert.act(scene, self._row(int(key), bool(starts[i])))
        return out



CHUNK = 16
"""Actions per chunk of ``libero-expert-chunks``: room for d = 8 with an execute horizon of 8."""
EXECUTED = 8
"""Actions of each chunk executed before the next call (declared: the row's memory advances by exactly these)."""
TRACKING = 0.28
"""Fraction of a position action's 5 cm offset the arm covers in one step (measured on LIBERO's OSC, steady
motion): how a chunk predicts where the hand will be."""


def predict(scene: Scene, action: np.ndarray, held: str | None) -> Scene:
    """The scene one step later, as a chunk plans it.

    The hand moves by ``TRACKING`` of its action, a held object with it, the clock by one step; everything else
    stays where it is.
    """
    from dataclasses import replace

    move = np.clip(action[:3], -1.0, 1.0) * POS_SCALE * TRACKING
    entities = dict(scene.entities)
    if held is not None and held in entities:
        e = entities[held]
        entities[held] = replace(e, pos=e.pos + move, lo=e.lo + move, hi=e.hi + move)
    return replace(scene, eef_pos=scene.eef_pos + move, time=scene.time + DT, entities=entities)


class LiberoExpertChunks(LiberoExpert):
    """The expert planning ``CHUNK`` actions ahead from a predicted hand (open loop within a chunk).

    Blind to ``--delay-steps``: the chunk starts where the hand is at the call, so with a delay its first actions
    are late; its success falls as the delay grows (docs/latency.md).
    """

    observation_needs = ObservationNeeds(privileged=True, chunk_length=CHUNK, replan_steps=EXECUTED)
    aware = False

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """(B, CHUNK, 7): each row's planned actions."""
        keys = row_ids(observation).tolist()
        starts = _starts(observation, len(keys))
        delays = np.asarray(observation.get("delay_steps", np.zeros(len(keys))), dtype=np.int64)
        committed = observation.get("committed_actions")
        known = observation.get("committed_from_previous")
        out = np.zeros((len(keys), CHUNK, 7), dtype=np.float32)
        for i, key in enumerate(keys):
            expert = self.experts[observation["task"][i]]
            scene = read_scene(observation["privileged"][i], expert.goal)
            mem = self._row(int(key), bool(starts[i]))
            d = max(int(delays[i]), 0) if self.aware and committed is not None else 0
            for k in range(d):  # where the committed actions take the hand before this chunk starts
                assert committed is not None
                action = np.asarray(committed[i, k], dtype=np.float64)
                if known is None or bool(known[i, k]):
                    scene = predict(scene, action, _held(mem))
                out[i, k] = action
            plan = mem
            for k in range(d, CHUNK):
                if k == d + EXECUTED:  # the rest is planned on a copy: only these steps run before the next call
                    plan = copy.deepcopy(mem)
                out[i, k] = expert.act(scene, plan)
                scene = predict(scene, out[i, k], _held(plan))
            self._memory[int(key)] = mem
        return out


class LiberoExpertBlend(LiberoExpertChunks):
    """The chunking expert told the delay.

    It plans from where the committed actions take the hand and starts its chunk with them (as real-time
    chunking's inpainting does).
    """

    aware = True


def _starts(observation: dict[str, Any], n: int) -> np.ndarray:
    """Rows whose memory starts afresh: a new episode, or a new trial of it (the env is back at its start)."""
    false = np.zeros(n, bool)
    return np.asarray(observation.get("episode_start", false), dtype=bool) | \
        np.asarray(observation.get("trial_start", false), dtype=bool)


def _held(mem: Memory) -> str | None:
    """The object the hand carries in this phase (it moves with the hand in a prediction)."""
    if mem.working is None or mem.working.predicate not in ("on", "in"):
        return None
    return mem.working.args[0] if mem.phase in ("lift", "carry", "level", "slide", "lower") else None


def _goals(context: Any, policy: str) -> dict[str, TaskGoal]:
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
    return LiberoExpert(_goals(context, "libero-expert"))


def make_libero_expert_chunks(context: Any) -> LiberoExpertChunks:
    """Factory for ``--policy libero-expert-chunks``: the expert as 16-step chunks (delay sweeps)."""
    return LiberoExpertChunks(_goals(context, "libero-expert-chunks"))


def make_libero_expert_blend(context: Any) -> LiberoExpertBlend:
    """Factory for ``--policy libero-expert-blend``: the chunking expert told the committed actions."""
    return LiberoExpertBlend(_goals(context, "libero-expert-blend"))
