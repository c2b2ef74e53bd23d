"""The LIBERO expert's ``On`` / ``In`` skill: pick an object, carry it over what is on the way, put it down.

Into a region under a roof (a microwave) it sets the object down at the opening, then leans in and pushes it
behind the door's face. Grasps and spots are planned in ``libero_grasps.py``; the phase machinery is
``libero_control.Phases``.
"""

from __future__ import annotations

import math

import numpy as np

from lerobench.envs.bddl import Condition
from lerobench.envs.libero_state import EntityView, RegionView, Scene
from lerobench.policies.experts.libero_control import GRIP_CLOSE, GRIP_OPEN, Command, Memory, Phases
from lerobench.policies.experts.libero_geometry import (
    Enclosure,
    current_yaw,
    enclosure,
    fixture_of,
    leaning,
    rotation_error,
    segment_hits_box,
)
from lerobench.policies.experts.libero_grasps import (
    CLEAR_SPOT,
    PALM_REACH,
    clear_spot,
    extent,
    free_spot,
    handle_grasp,
    opened_parts,
    over_the_way,
    plan_grasp,
)

PICK_PHASES = ("start", "rise", "above", "descend", "close", "lift", "drop")
"""The phases of taking an object (``_pick``); carry, lower, release and retreat put it down (``_put``)."""

HAND_DEPTH = 0.05
"""How far the hand pointing down (palm, wrist) reaches from the grip site across its finger axis: what stays out
of an enclosure's opening while it sets an object down under the roof."""
PUSH_LEAN = math.radians(75.0)
"""The hand that pushes an object deeper into an enclosure leans this far from pointing down (fingertips first)."""
PUSH_HEIGHT = 0.03
"""... and pushes this far above the object's bottom: low, so the object slides rather than tips."""


class PickAndPlace(Phases):
    """Pick and place: the phases of ``PICK_PHASES``, then carry, lower, release, retreat (or push in)."""

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
            others = [e for n, e in scene.entities.items() if n != condition.args[0]] + opened_parts(scene)
            inside = enclosure(scene, condition.args[1], float(obj.hi[2] - obj.lo[2])) \
                if condition.predicate == "in" else None
            handle = handle_grasp(obj, inside, mem.yaw) if inside is not None else None
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
                               over_the_way(scene, eef, hover, condition.args[0])])
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
        ext_out, ext_in = extent(obj, out), extent(obj, -out)
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
            spot = clear_spot(scene, obj, condition)
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
        return free_spot(scene, region, centre, condition.args, obj, region_centre) + lift

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
