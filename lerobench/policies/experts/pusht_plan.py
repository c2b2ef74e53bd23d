"""Geometry and short-horizon planning behind ``PushTExpertPolicy`` (gym-pusht 0.1.8).

Why this works: gym-pusht's space has damping 0 (each body loses all its velocity every substep) and frictionless
shapes, so the T moves quasi-statically, only while the agent presses on it and only along the contact normal.
A push at a contact point therefore has a first-order effect that follows from the T's mass and moment (an impulse
along the normal); that ranks where to push. The agent walks there round the T on a grid (a travel field that knows
the walls) and stops dead at the push's approach point (its PD loop is linear: a closed-form plan). The push itself
is chosen by simulating a few candidate depths on the planner's own copy of the physics, which is what makes the
last few pixels and degrees come out right.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

BAR = (-60.0, 60.0, 0.0, 30.0)
"""The T's bar in its body frame: x0, x1, y0, y1 (``PushTEnv.add_tee`` at scale 30)."""
STEM = (-15.0, 15.0, 30.0, 120.0)
COG = np.array([0.0, 45.0])
"""Centre of gravity in the body frame: the point the T rotates about when pushed."""
MASS, MOMENT = 1.0, 3000.0
AGENT_RADIUS = 15.0
ANGLE_SCALE = 62.0
"""Pixels per radian: 1 px of translation and 1/62 rad of rotation about the COG lose about the same coverage."""
LOW, HIGH = 24.0, 488.0
"""Where the agent's centre may be sent: the walls are at 5 and 506, 2 px thick."""
GAP = 2.0
"""Distance between the agent and the T at a push's approach point."""
K_P, K_V, DT, SUBSTEPS = 100.0, 20.0, 0.01, 10
WALLS = (((5, 506), (5, 5)), ((5, 5), (506, 5)), ((506, 5), (506, 506)), ((5, 506), (506, 506)))
DEPTHS = (0.0, 1.0, 2.0, 3.5, 5.0, 7.5, 11.0, 16.0, 24.0, 35.0, 50.0)
"""Candidate push depths (px of the agent's target beyond the contact) simulated before each push."""
SUCCESS_COVERAGE = 0.955
"""Coverage a simulated push must reach to count as a success (gym-pusht's 0.95, with room for the copy's error)."""
TRAVEL_SCALE = 120.0
"""A push whose approach needs this much travel counts half as much as one the agent is already at."""
STRETCH = 60.0
"""How far beyond an intermediate waypoint the agent is aimed (PD control slows down as it nears its target)."""
CLEARANCE = 8.0
"""Air (px) kept between the agent and the T while travelling: room for the agent's lag behind its target."""


def rotation(angle: float) -> np.ndarray:
    """2x2 rotation matrix of ``angle`` (pymunk's convention: counter-clockwise in x-right, y-up axes)."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]])


def wrap(angle: float) -> float:
    """``angle`` folded into [-pi, pi): the T has no rotational symmetry, so only this residue matters."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _contacts(spacing: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Contact points (body frame) and outward normals on every edge the agent's disc can touch.

    The segments of the bar's underside and the stem's sides next to the inner corners are left out: a disc of
    radius 15 touching them there would also touch the other edge of the corner.
    """
    edges = (((-60, 0), (60, 0), (0, -1)), ((60, 0), (60, 30), (1, 0)), ((60, 30), (30, 30), (0, 1)),
             ((15, 45), (15, 120), (1, 0)), ((15, 120), (-15, 120), (0, 1)), ((-15, 120), (-15, 45), (-1, 0)),
             ((-30, 30), (-60, 30), (0, 1)), ((-60, 30), (-60, 0), (-1, 0)))
    points, normals = [], []
    for a, b, n in edges:
        start, end = np.array(a, float), np.array(b, float)
        length = float(np.linalg.norm(end - start))
        for t in np.linspace(2.0 / length, 1.0 - 2.0 / length, max(2, round(length / spacing) + 1)):
            points.append(start + (end - start) * t)
            normals.append(n)
    return np.array(points), np.array(normals, float)


CONTACTS, NORMALS = _contacts()
_ARM = CONTACTS - COG
_TORQUE = _ARM[:, 0] * -NORMALS[:, 1] + _ARM[:, 1] * NORMALS[:, 0]
"""Torque about the COG of a unit push along the inward normal at each contact."""
_IMPULSE = 1.0 / (1.0 / MASS + _TORQUE**2 / MOMENT)
"""Impulse that moves each contact point by 1 px along its normal (rigid body, single frictionless contact)."""
EFFECT_LOCAL = -NORMALS * (_IMPULSE / MASS)[:, None]
"""COG displacement (body frame) per px of push at each contact."""
EFFECT_ANGLE = _IMPULSE * _TORQUE / MOMENT
"""Rotation (rad) per px of push at each contact."""


def distance_to_tee(points: np.ndarray, position: np.ndarray, angle: float) -> np.ndarray:
    """Distance from world ``points`` (N, 2) to the T at (``position``, ``angle``); 0 inside."""
    local = (points - position) @ rotation(angle)
    best = np.full(len(points), np.inf)
    for x0, x1, y0, y1 in (BAR, STEM):
        dx = np.maximum(np.maximum(x0 - local[:, 0], local[:, 0] - x1), 0.0)
        dy = np.maximum(np.maximum(y0 - local[:, 1], local[:, 1] - y1), 0.0)
        best = np.minimum(best, np.hypot(dx, dy))
    return best


def _tee_polygons(position: np.ndarray, angle: float) -> list[list[tuple[float, float]]]:
    """The T's two rectangles as world polygons."""
    rot = rotation(angle)
    polygons = []
    for x0, x1, y0, y1 in (BAR, STEM):
        corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]]) @ rot.T + position
        polygons.append([(float(x), float(y)) for x, y in corners])
    return polygons


def _clip_area(subject: list[tuple[float, float]], clip: list[tuple[float, float]]) -> float:
    """Area of the intersection of two counter-clockwise convex polygons (Sutherland-Hodgman)."""
    output = subject
    for i in range(len(clip)):
        (ax, ay), (bx, by) = clip[i], clip[(i + 1) % len(clip)]
        points, output = output, []
        if not points:
            break
        for j in range(len(points)):
            (px, py), (qx, qy) = points[j - 1], points[j]
            side_p = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
            side_q = (bx - ax) * (qy - ay) - (by - ay) * (qx - ax)
            if side_q >= 0:
                if side_p < 0:
                    t = side_p / (side_p - side_q)
                    output.append((px + t * (qx - px), py + t * (qy - py)))
                output.append((qx, qy))
            elif side_p >= 0:
                t = side_p / (side_p - side_q)
                output.append((px + t * (qx - px), py + t * (qy - py)))
    return 0.5 * abs(sum(output[k - 1][0] * output[k][1] - output[k][0] * output[k - 1][1]
                         for k in range(len(output))))


def coverage(position: np.ndarray, angle: float, goal: np.ndarray) -> float:
    """gym-pusht's ``_get_coverage`` without shapely: the T's area inside the goal T, over the T's area (6300)."""
    block, target = _tee_polygons(position, angle), _tee_polygons(goal[:2], float(goal[2]))
    return sum(_clip_area(a, b) for a in block for b in target) / 6300.0


def pose_error(position: np.ndarray, angle: float, goal: np.ndarray) -> np.ndarray:
    """(dx, dy, ANGLE_SCALE * dtheta) from the T's COG and angle to the goal's: its norm ranks coverage loss."""
    cog = position + rotation(angle) @ COG
    goal_cog = goal[:2] + rotation(float(goal[2])) @ COG
    return np.array([*(goal_cog - cog), ANGLE_SCALE * wrap(float(goal[2]) - angle)])


class PhysicsCopy:
    """The planner's own pymunk space built like gym-pusht's (same walls, agent, T, gains); never the evaluated one.

    Built afresh for every planning call so that what a row's rollouts return depends on that row's state only
    (pymunk caches contacts between steps): batch invariance down to the bit.
    """

    def __init__(self) -> None:
        import pymunk
        from gym_pusht.envs.pusht import PushTEnv

        self.space = pymunk.Space()
        self.space.gravity = 0, 0
        self.space.damping = 0.0
        self.space.add(*[PushTEnv.add_segment(self.space, a, b, 2) for a, b in WALLS])
        self.agent = PushTEnv.add_circle(self.space, (256, 400), AGENT_RADIUS)
        self.block, self.shapes = PushTEnv.add_tee(self.space, (256, 300), 0)

    def rollout(self, state: dict[str, Any], targets: list[np.ndarray | None]) -> list[tuple[np.ndarray, float]]:
        """Run one env step per target from ``state`` (None holds the agent where it is).

        Returns:
            The block's position and angle after each step.
        """
        agent, block = self.agent, self.block
        agent.position, agent.velocity = tuple(state["agent"]), tuple(state["agent_velocity"])
        block.angle = state["angle"]  # angle first: pymunk turns the body about its COG, moving the origin
        block.position = tuple(state["block"])
        block.velocity, block.angular_velocity = tuple(state["block_velocity"]), state["angular_velocity"]
        self.space.remove(*self.shapes)  # drops the contacts cached by the previous rollout
        self.space.add(*self.shapes)
        poses = []
        for target in targets:
            tx, ty = agent.position if target is None else target
            for _ in range(SUBSTEPS):
                (px, py), (vx, vy) = agent.position, agent.velocity
                agent.velocity = (vx + (K_P * (tx - px) - K_V * vx) * DT, vy + (K_P * (ty - py) - K_V * vy) * DT)
                self.space.step(DT)
            poses.append((np.array(block.position), float(block.angle)))
        return poses


def _segments_clear(start: np.ndarray, ends: np.ndarray, position: np.ndarray, angle: float) -> np.ndarray:
    """Whether the agent's disc can travel straight from ``start`` to each of ``ends`` (N, 2) clear of the T.

    Clear means CLEARANCE px of air, or as much as the segment's ends have if less: an agent that has just pushed
    starts in contact and may slide along the edge (the shapes are frictionless), and a push's approach point is
    GAP px from its edge. The first 6 px are exempt.
    """
    t = np.linspace(0.0, 1.0, 13)[1:]
    points = start + (ends[:, None, :] - start) * t[None, :, None]
    gaps = distance_to_tee(points.reshape(-1, 2), position, angle).reshape(len(ends), len(t))
    ends_gap = distance_to_tee(np.vstack([start[None], ends]), position, angle)
    needed = np.minimum(AGENT_RADIUS + CLEARANCE, np.minimum(ends_gap[0], ends_gap[1:]) - 0.25)
    near = np.linalg.norm(points - start, axis=2) < 6.0
    return np.all((gaps >= needed[:, None]) | near, axis=1)


def _in_bounds(points: np.ndarray) -> np.ndarray:
    """Whether each point is somewhere the agent's centre may be sent."""
    return np.all((points >= LOW) & (points <= HIGH), axis=-1)


CELL = 12.0
GRID = np.arange(LOW, HIGH + 1e-9, CELL)
CELLS = np.stack(np.meshgrid(GRID, GRID, indexing="ij"), axis=-1).reshape(-1, 2)
_STEPS = tuple((dx, dy, CELL * math.hypot(dx, dy)) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy)


def travel_field(agent: np.ndarray, position: np.ndarray, angle: float) -> np.ndarray:
    """Shortest travel (px) from the agent to every grid cell without touching the T or leaving the walls.

    A wavefront on a 12 px grid: it knows which way round the T is shorter and when a wall closes one way.
    """
    n = len(GRID)
    free = (distance_to_tee(CELLS, position, angle) >= AGENT_RADIUS + CLEARANCE + 2.0).reshape(n, n)
    near = np.linalg.norm(CELLS - agent, axis=1).reshape(n, n)
    seeds = free & (near < 1.5 * CELL)
    if not seeds.any():
        seeds = free & (near <= near[free].min() + 1e-9) if free.any() else near <= near.min()
    field = np.where(seeds, near, np.inf)
    padded = np.full((n + 2, n + 2), np.inf)
    for _ in range(4 * n):
        padded[1:-1, 1:-1] = field
        relaxed = field.copy()
        for dx, dy, cost in _STEPS:
            np.minimum(relaxed, padded[1 + dx:n + 1 + dx, 1 + dy:n + 1 + dy] + cost, out=relaxed)
        relaxed[~free] = np.inf
        relaxed[seeds] = np.minimum(relaxed[seeds], near[seeds])
        if np.array_equal(relaxed, field):
            break
        field = relaxed
    return field


def _lookup(field: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Travel to each of ``points`` (..., 2) through its best of the 4 surrounding cells, and that cell's index."""
    n = len(GRID)
    base = np.clip(np.floor((points - LOW) / CELL).astype(int), 0, n - 2)
    best = np.full(points.shape[:-1], np.inf)
    index = np.zeros(points.shape[:-1] + (2,), dtype=int)
    for ox, oy in ((0, 0), (0, 1), (1, 0), (1, 1)):
        cell = base + np.array([ox, oy])
        cost = field[cell[..., 0], cell[..., 1]] + np.linalg.norm(GRID[cell] - points, axis=-1)
        better = cost < best
        best = np.where(better, cost, best)
        index = np.where(better[..., None], cell, index)
    return best, index


def _path(field: np.ndarray, cell: np.ndarray) -> list[np.ndarray]:
    """Grid cells from ``cell`` back down the travel field to the agent (steepest descent)."""
    n = len(GRID)
    path: list[np.ndarray] = []
    i, j = int(cell[0]), int(cell[1])
    while len(path) < 4 * n:
        path.append(GRID[[i, j]])
        options = [(field[i + dx, j + dy], i + dx, j + dy) for dx, dy, _ in _STEPS
                   if 0 <= i + dx < n and 0 <= j + dy < n]
        value, i2, j2 = min(options)
        if not value < field[i, j]:
            break
        i, j = i2, j2
    return path


_SUB = np.array([[1.0 - K_P * DT * DT, DT * (1.0 - K_V * DT)], [-K_P * DT, 1.0 - K_V * DT]])
"""One physics substep of the agent's PD loop on (position, velocity) along one axis, target 0 (semi-implicit Euler)."""
_SUB_TARGET = np.array([K_P * DT * DT, K_P * DT])
_STEP = np.linalg.matrix_power(_SUB, SUBSTEPS)
_STEP_TARGET = sum(np.linalg.matrix_power(_SUB, SUBSTEPS - 1 - k) @ _SUB_TARGET for k in range(SUBSTEPS))
"""One env step of the same loop: state' = _STEP @ state + _STEP_TARGET * target."""


def _arrive(agent: np.ndarray, velocity: np.ndarray, point: np.ndarray, position: np.ndarray,
            angle: float) -> np.ndarray | None:
    """This step's target of the shortest plan (2 to 5 steps) that stops the agent exactly at ``point``, or None.

    The agent's PD loop is linear, so the targets that bring it to rest at ``point`` after N steps (the ones nearest
    ``point``) follow in closed form; a plain target at ``point`` would take ~5 steps to get within a pixel. A plan
    counts only if its targets are in the workspace and its path keeps clear of the T.
    """
    start = np.stack([agent - point, velocity])  # rows: position, velocity; columns: x, y
    end_gap = float(distance_to_tee(point[None], position, angle)[0])
    needed = min(AGENT_RADIUS + CLEARANCE, end_gap, float(distance_to_tee(agent[None], position, angle)[0])) - 0.5
    for steps in range(2, 6):
        inputs = np.column_stack([np.linalg.matrix_power(_STEP, steps - 1 - k) @ _STEP_TARGET for k in range(steps)])
        offsets = -np.linalg.pinv(inputs) @ np.linalg.matrix_power(_STEP, steps) @ start  # (steps, 2)
        targets = point + offsets
        if not ((targets >= 0.0) & (targets <= 512.0)).all():
            continue
        state, path = start.copy(), []
        for k in range(steps):
            for _ in range(SUBSTEPS):
                state = _SUB @ state + np.outer(_SUB_TARGET, offsets[k])
                path.append(state[0])
        path = np.array(path) + point
        far = np.linalg.norm(path - agent, axis=1) >= 6.0
        if (distance_to_tee(path[far], position, angle) >= needed).all() and _in_bounds(path).all():
            return targets[0]
    return None


def _walk(agent: np.ndarray, velocity: np.ndarray, way: list[np.ndarray], position: np.ndarray,
          angle: float) -> np.ndarray:
    """This step's target along ``way`` (a push's approach point first, then back down the path to the agent).

    Heads for the furthest point of the way in sight; past a waypoint it aims beyond it, so the agent keeps its
    speed, and at the approach point it stops dead with a closed-form PD plan (``_arrive``).
    """
    visible = _segments_clear(agent, np.array(way), position, angle)
    visible &= np.linalg.norm(np.array(way) - agent, axis=1) > 3.0
    pick = int(np.argmax(visible)) if visible.any() else max(len(way) - 2, 0)
    if pick == 0:
        arrival = _arrive(agent, velocity, way[0], position, angle)
        return way[0] if arrival is None else arrival
    heading = way[pick] - agent
    length = max(float(np.linalg.norm(heading)), 1e-9)
    stretched = agent + heading / length * np.array([[min(2.0 * length, length + STRETCH)], [length]])
    ok = _segments_clear(agent, stretched, position, angle) & _in_bounds(stretched)
    return stretched[int(np.argmax(ok))] if ok.any() else way[pick]


def plan_action(state: dict[str, Any]) -> np.ndarray:
    """The agent's next target position for one env's privileged ``state`` (see ``pusht.unpack``).

    Ranks every contact by what the first-order push model says it gains, discounted by the travel needed to get
    there; walks there around the T when the agent is elsewhere, and when it is there picks the push depth whose
    simulated outcome (one step of pushing, one of letting the agent stop) lands nearest the goal.
    """
    agent, position, angle, goal = state["agent"], state["block"], state["angle"], state["goal"]
    rot = rotation(angle)
    error = pose_error(position, angle, goal)
    effect = np.column_stack([EFFECT_LOCAL @ rot.T, ANGLE_SCALE * EFFECT_ANGLE])
    along = effect @ error
    depth = np.clip(along / (effect**2).sum(1), 0.0, 60.0)
    gain = (2 * depth * along - depth**2 * (effect**2).sum(1)) / max(float(error @ error), 1e-9)

    contacts = position + CONTACTS @ rot.T
    normals = NORMALS @ rot.T
    approach = contacts + normals * (AGENT_RADIUS + GAP)
    lateral = np.abs(((agent - contacts) * normals[:, ::-1] * np.array([-1.0, 1.0])).sum(1))
    outward = ((agent - contacts) * normals).sum(1)
    docked = (lateral < 3.0) & (outward > AGENT_RADIUS - 5.0) & (outward < AGENT_RADIUS + GAP + 30.0)
    score = np.where(_in_bounds(approach) & (gain > 0), gain, -np.inf)
    rays = approach[:, None, :] + normals[:, None, :] * np.array([0.0, 6.0, 12.0, 18.0, 24.0])[None, :, None]
    field = cells = None
    now = float(np.linalg.norm(error))
    sim = None
    while np.isfinite(score.max()):
        best = int(np.argmax(score))
        if not docked[best] and field is None:  # travel matters: discount every contact that needs it
            field = travel_field(agent, position, angle)
            costs, cells = _lookup(field, rays)
            costs = costs + np.array([0.0, 6.0, 12.0, 18.0, 24.0])
            travel = np.where(docked, 0.0, np.minimum(costs.min(1), 1e6))  # 1e6: no way there
            with np.errstate(invalid="ignore"):  # -inf scores stay -inf (inf/inf where there is no way)
                score = np.where(np.isfinite(score), score / (1.0 + travel / TRAVEL_SCALE), -np.inf)
            continue
        if not docked[best]:
            assert field is not None and cells is not None
            entry = int(np.argmin(_lookup(field, rays[best])[0] + np.array([0.0, 6.0, 12.0, 18.0, 24.0])))
            way = [rays[best, k] for k in range(entry + 1)] + _path(field, cells[best, entry])
            return _walk(agent, state["agent_velocity"], way, position, angle)
        sim = sim or PhysicsCopy()
        cost, target = _refine(sim, state, contacts[best], normals[best])
        if cost < now - 0.05:
            return target
        score[best] = -np.inf  # the model promised progress the simulation does not deliver: push elsewhere
    cog = position + rot @ COG
    return agent + (agent - cog) / max(float(np.linalg.norm(agent - cog)), 1e-9) * 20.0


def _refine(sim: PhysicsCopy, state: dict[str, Any], contact: np.ndarray,
            normal: np.ndarray) -> tuple[float, np.ndarray]:
    """The push depth at ``contact`` whose simulated outcome lands nearest the goal, and that outcome's error norm.

    Each depth is simulated for one step of pushing and one of letting the agent stop (its momentum carries on);
    a push whose first step already covers the goal wins outright (the episode ends there), the most covering first.
    """
    goal = state["goal"]
    results = []
    for d in DEPTHS:
        target = np.clip(contact + normal * (AGENT_RADIUS - d), LOW - 20.0, HIGH + 20.0)
        (first_pose, first_angle), (settled_pose, settled_angle) = sim.rollout(state, [target, None])
        first = float(np.linalg.norm(pose_error(first_pose, first_angle, goal)))
        covered = coverage(first_pose, first_angle, goal) if first < 10.0 else 0.0
        settled = float(np.linalg.norm(pose_error(settled_pose, settled_angle, goal)))
        results.append((-covered if covered > SUCCESS_COVERAGE else settled, d, target))
    cost, _, target = min(results, key=lambda r: r[0])
    return cost, target
