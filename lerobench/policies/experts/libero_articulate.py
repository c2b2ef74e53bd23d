"""The LIBERO expert's articulation skills: open or close a drawer, swing a door, turn a knob.

A drawer's handle is pinched and pulled (or its front pushed); a door is pushed round its hinge at its far edge; a
knob's fin is pinched from above and turned by the wrist. Where parts are gripped and pushed is in
``libero_geometry.py``; the phase machinery is ``libero_control.Phases``.
"""

from __future__ import annotations

import math

import numpy as np

from lerobench.envs.bddl import Condition
from lerobench.envs.libero_state import JointView, Scene
from lerobench.policies.experts.libero_control import GRIP_CLOSE, GRIP_OPEN, Command, Memory, Phases
from lerobench.policies.experts.libero_geometry import (
    condition_joint,
    current_yaw,
    down_rotation,
    facing,
    goal_position,
    handle_grip,
    handle_point,
    hinge_contact,
    hinge_target,
    is_slide,
    leaning,
    nearest_yaw,
    opens,
    part_radius,
    perpendicular_pull,
    rotate_about,
    rotation_error,
)
from lerobench.policies.experts.libero_grasps import Grasp, clear_push_point

LOW_HANDLE = 0.10
"""A drawer whose handle is less than this above the lowest object is closed by a hand pointing down and leaning
``LEAN`` into the push: a level hand is 20 cm high and stops 10 cm above the table, and a hand straight down would
meet the drawer above with its palm before the front is home."""
LEAN = math.radians(40.0)

KNOB_RADIUS = 0.09
"""A hinged part smaller than this is a knob (turned by the wrist); larger ones are doors (pushed round)."""
GRIP_HALF = 0.0
"""A gripper action of 0 holds the fingers where they are (robosuite ramps them by the action's sign)."""


class Articulation(Phases):
    """Drawers (slide joints), doors and knobs (hinge joints), driven to where the goal's predicate holds."""

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
                handle = clear_push_point(scene, joint, handle, outward, 0.10 if mem.lean else 0.04)
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
