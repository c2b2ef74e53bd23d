"""The LIBERO expert's controller and phase machinery: a row's ``Memory``, a step's ``Command``, the P control.

``action_for`` turns a ``Command`` (a grip-site position, the hand's rotation, a grip) into LIBERO's 7-D delta
action (OSC at 20 Hz, saturated). ``Phases`` is what every skill shares: entering a phase (its clock and stall
counter) and the steps spent in it; and the rise / above / descend approach of drawers, doors and knobs. The skills
are in ``libero_place.py`` and ``libero_articulate.py``; ``libero.py`` composes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lerobench.envs.bddl import Condition, TaskGoal
from lerobench.envs.libero_state import Scene
from lerobench.policies.experts.libero_geometry import Enclosure, down_rotation, rotation_error
from lerobench.policies.experts.libero_grasps import Grasp

POS_SCALE = 0.05
"""LIBERO's OSC maps a position action of 1 to a 5 cm target offset per step."""
ROT_SCALE = 0.5
"""... and a rotation action of 1 to 0.5 rad."""
DT = 0.05
"""Control period (20 Hz)."""
GRIP_OPEN, GRIP_CLOSE = -1.0, 1.0


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


class Phases:
    """What every skill shares: a phase's start and clock; and the approach from above (drawers, doors, knobs)."""

    goal: TaskGoal
    """The task's goal (set by ``TaskExpert``)."""

    def _enter(self, mem: Memory, scene: Scene, phase: str) -> None:
        mem.phase, mem.since, mem.stalled = phase, scene.time, 0
        mem.last_z = float(scene.eef_pos[2])

    def _elapsed(self, scene: Scene, mem: Memory) -> int:
        return int(round((scene.time - mem.since) / DT))

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
