"""LIBERO's privileged state as one flat vector: written in the worker, read by the expert in the driver.

Why a flat vector: observations cross process boundaries through Gymnasium's vector envs, which need a fixed
shape per key. The layout is a pure function of the task's BDDL (``lerobench.envs.bddl.TaskGoal``), so both
sides agree on it without the driver building a simulator. Zeros pad the vector to ``PRIVILEGED_DIM``.

Layout (all float64, world frame, metres; quaternions w, x, y, z):

- robot (15): end-effector position (3), its rotation matrix row-major (9), gripper finger positions (2), the
  simulation time in seconds (phase timers of an expert read it);
- per entity, objects then fixtures in BDDL order (``ENTITY`` each): present, body position (3), quaternion (4),
  collision-geometry bounds in the body frame (lo 3, hi 3) and in the world frame (lo 3, hi 3), then
  ``MAX_JOINTS`` hinge/slide joints (``JOINT`` each): present, position, range (2), anchor (3), axis (3), the
  moving part's body position (3) and quaternion (4), its bounds in its own body frame (lo 3, hi 3) and those of
  its handle (the part's geoms that reach within 1.5 cm of its top: a knob's fin; lo 3, hi 3), the direction that
  opens it and the one that turns it on (+1 / -1, 0 where the object has no such affordance);
- per goal region (sites such as ``basket_1_contain_region``, ``REGION`` each): present, position (3), rotation
  row-major (9), half-size (3), then its joint (a drawer's region moves with the drawer; ``JOINT``);
- per goal condition: 1.0 where LIBERO's own predicate holds now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobench.envs.base import PRIVILEGED_DIM
from lerobench.envs.bddl import TaskGoal

MAX_JOINTS = 3
ROBOT = 15
JOINT = 1 + 1 + 2 + 3 + 3 + 3 + 4 + 3 + 3 + 3 + 3 + 1 + 1
ENTITY = 1 + 3 + 4 + 3 + 3 + 3 + 3 + MAX_JOINTS * JOINT
REGION = 1 + 3 + 9 + 3 + JOINT


def layout_size(goal: TaskGoal) -> int:
    """Floats the task's privileged state uses (the rest of ``PRIVILEGED_DIM`` is zero)."""
    return ROBOT + len(goal.entities) * ENTITY + len(goal.regions) * REGION + len(goal.goal)


def check_fits(goal: TaskGoal, where: str) -> None:
    """Refuse a task whose privileged state would not fit the fixed vector."""
    if layout_size(goal) > PRIVILEGED_DIM:
        raise ValueError(f"{where}: {len(goal.entities)} entities and {len(goal.regions)} regions need "
                         f"{layout_size(goal)} floats of privileged state, more than {PRIVILEGED_DIM}")


# -- reading (driver) ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JointView:
    """One hinge or slide joint of an entity (or of a goal region)."""

    qpos: float
    low: float
    high: float
    anchor: np.ndarray
    axis: np.ndarray
    part_pos: np.ndarray
    part_quat: np.ndarray
    part_lo: np.ndarray
    part_hi: np.ndarray
    """Bounds of the moving part, in its own body frame."""
    handle_lo: np.ndarray
    handle_hi: np.ndarray
    """Bounds of its top geoms (what a hand takes hold of: a knob's fin), in the part's frame."""
    open_dir: float
    on_dir: float


@dataclass(frozen=True)
class EntityView:
    """An object or fixture: where it is and how big."""

    pos: np.ndarray
    quat: np.ndarray
    local_lo: np.ndarray
    local_hi: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    joints: tuple[JointView, ...]

    @property
    def rotation(self) -> np.ndarray:
        """Body rotation matrix."""
        return quat_matrix(self.quat)


@dataclass(frozen=True)
class RegionView:
    """A goal site: a box (centre, rotation, half-size), with the joint that moves it if any."""

    pos: np.ndarray
    rotation: np.ndarray
    size: np.ndarray
    joint: JointView | None


@dataclass(frozen=True)
class Scene:
    """One row of privileged state, read by name."""

    eef_pos: np.ndarray
    eef_rotation: np.ndarray
    gripper: np.ndarray
    time: float
    entities: dict[str, EntityView]
    regions: dict[str, RegionView]
    satisfied: tuple[bool, ...]


def _joint(v: np.ndarray) -> JointView | None:
    if v[0] < 0.5:
        return None
    return JointView(qpos=float(v[1]), low=float(v[2]), high=float(v[3]), anchor=v[4:7], axis=v[7:10],
                     part_pos=v[10:13], part_quat=v[13:17], part_lo=v[17:20], part_hi=v[20:23],
                     handle_lo=v[23:26], handle_hi=v[26:29], open_dir=float(v[29]), on_dir=float(v[30]))


def read_scene(vector: np.ndarray, goal: TaskGoal) -> Scene:
    """The named view of one row's privileged vector."""
    v = np.asarray(vector, dtype=np.float64)
    entities: dict[str, EntityView] = {}
    at = ROBOT
    for name in goal.entities:
        e = v[at:at + ENTITY]
        at += ENTITY
        if e[0] < 0.5:
            continue
        joints = [_joint(e[20 + k * JOINT:20 + (k + 1) * JOINT]) for k in range(MAX_JOINTS)]
        entities[name] = EntityView(pos=e[1:4], quat=e[4:8], local_lo=e[8:11], local_hi=e[11:14], lo=e[14:17],
                                    hi=e[17:20], joints=tuple(j for j in joints if j is not None))
    regions: dict[str, RegionView] = {}
    for name in goal.regions:
        r = v[at:at + REGION]
        at += REGION
        if r[0] >= 0.5:
            regions[name] = RegionView(pos=r[1:4], rotation=r[4:13].reshape(3, 3), size=r[13:16], joint=_joint(r[16:]))
    satisfied = tuple(bool(x > 0.5) for x in v[at:at + len(goal.goal)])
    return Scene(eef_pos=v[0:3], eef_rotation=v[3:12].reshape(3, 3), gripper=v[12:14], time=float(v[14]),
                 entities=entities, regions=regions, satisfied=satisfied)


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of a (w, x, y, z) quaternion."""
    w, x, y, z = (float(c) for c in np.asarray(q) / max(float(np.linalg.norm(q)), 1e-12))
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


# -- writing (worker) ----------------------------------------------------------------------------------------------
class PrivilegedWriter:
    """Fills the vector from a LIBERO problem env (``ControlEnv.env``); geometry is looked up once."""

    def __init__(self, env: Any, goal: TaskGoal):
        self.env = env
        self.goal = goal
        model = env.sim.model._model
        self.model = model
        self._geoms: dict[str, np.ndarray] = {}
        self._joints: dict[str, list[tuple[int, np.ndarray, np.ndarray, float, float]]] = {}
        """Per entity: (joint id, the moving part's collision geoms, its handle's, open direction, on direction);
        the part is rigid, so which geoms make its handle is found once."""
        for name in goal.entities:
            body = env.obj_body_id.get(name)
            if body is None:
                continue
            self._geoms[name] = _collision_geoms(model, _subtree(model, body))
            obj = env.get_object(name)
            self._joints[name] = [self._joint_info(obj, j) for j in _articulations(model, getattr(obj, "joints", []))]
        self._region_joint: dict[str, tuple[int, np.ndarray, np.ndarray, float, float] | None] = {}
        for name in goal.regions:
            site = env.object_sites_dict.get(name)
            joints = _articulations(model, getattr(site, "joints", None) or [])
            parent = env.get_object(site.parent_name) if site is not None and site.parent_name else None
            self._region_joint[name] = self._joint_info(parent, joints[0]) if joints and parent is not None else None

    def _joint_info(self, obj: Any, joint: int) -> tuple[int, np.ndarray, np.ndarray, float, float]:
        model = self.model
        low, high = (float(x) for x in model.jnt_range[joint])
        geoms = _collision_geoms(model, _subtree(model, int(model.jnt_bodyid[joint])))
        return joint, geoms, _top_geoms(model, self.env.sim.data._data, geoms), \
            _direction(obj, "is_open", low, high), _direction(obj, "turn_on", low, high)

    def write(self) -> np.ndarray:
        """The current privileged state (``PRIVILEGED_DIM`` floats)."""
        env, data = self.env, self.env.sim.data._data
        out = np.zeros(PRIVILEGED_DIM, dtype=np.float64)
        robot = env.robots[0]
        site = robot.eef_site_id if isinstance(robot.eef_site_id, int) else int(robot.eef_site_id)
        out[0:3] = data.site_xpos[site]
        out[3:12] = data.site_xmat[site]
        out[12:14] = data.qpos[robot._ref_gripper_joint_pos_indexes]
        out[14] = data.time
        at = ROBOT
        for name in self.goal.entities:
            body = env.obj_body_id.get(name)
            if body is not None:
                self._entity(out[at:at + ENTITY], name, int(body))
            at += ENTITY
        for name in self.goal.regions:
            if name in env.object_sites_dict:
                self._region(out[at:at + REGION], name)
            at += REGION
        for k, condition in enumerate(self.goal.goal):
            out[at + k] = float(bool(env._eval_predicate([condition.predicate, *condition.args])))
        return out

    def _entity(self, e: np.ndarray, name: str, body: int) -> None:
        data = self.env.sim.data._data
        pos, rot = data.xpos[body], data.xmat[body].reshape(3, 3)
        e[0] = 1.0
        e[1:4] = pos
        e[4:8] = data.xquat[body]
        e[8:11], e[11:14] = _bounds(self.model, data, self._geoms[name], pos, rot)
        e[14:17], e[17:20] = _bounds(self.model, data, self._geoms[name], np.zeros(3), np.eye(3))
        for k, info in enumerate(self._joints[name][:MAX_JOINTS]):
            self._write_joint(e[20 + k * JOINT:20 + (k + 1) * JOINT], info)

    def _write_joint(self, j: np.ndarray, info: tuple[int, np.ndarray, np.ndarray, float, float]) -> None:
        model, data = self.model, self.env.sim.data._data
        joint, geoms, handle, open_dir, on_dir = info
        part = int(model.jnt_bodyid[joint])
        j[0] = 1.0
        j[1] = data.qpos[model.jnt_qposadr[joint]]
        j[2:4] = model.jnt_range[joint]
        j[4:7] = data.xanchor[joint]
        j[7:10] = data.xaxis[joint]
        j[10:13] = data.xpos[part]
        j[13:17] = data.xquat[part]
        frame = (data.xpos[part], data.xmat[part].reshape(3, 3))
        j[17:20], j[20:23] = _bounds(model, data, geoms, *frame)
        j[23:26], j[26:29] = _bounds(model, data, handle, *frame)
        j[29], j[30] = open_dir, on_dir

    def _region(self, r: np.ndarray, name: str) -> None:
        data = self.env.sim.data
        site = self.env.object_sites_dict[name]
        r[0] = 1.0
        r[1:4] = data.get_site_xpos(name)
        r[4:13] = np.asarray(data.get_site_xmat(name)).reshape(9)
        r[13:16] = np.asarray(site.size, dtype=np.float64)[:3] if site.size is not None else 0.0
        info = self._region_joint.get(name)
        if info is not None:
            self._write_joint(r[16:], info)


def _subtree(model: Any, root: int) -> list[int]:
    bodies = [root]
    for b in range(root + 1, model.nbody):
        parent = int(model.body_parentid[b])
        if parent in bodies:
            bodies.append(b)
    return bodies


def _collision_geoms(model: Any, bodies: list[int]) -> np.ndarray:
    geoms = [g for b in bodies for g in range(model.body_geomadr[b], model.body_geomadr[b] + model.body_geomnum[b])
             if model.geom_contype[g] or model.geom_conaffinity[g]]
    return np.asarray(geoms, dtype=np.int64)


def _top_geoms(model: Any, data: Any, geoms: np.ndarray) -> np.ndarray:
    """The geoms whose top reaches within 1.5 cm of the highest one's (world z)."""
    if len(geoms) == 0:
        return geoms
    tops = np.array([_bounds(model, data, geoms[k:k + 1], np.zeros(3), np.eye(3))[1][2] for k in range(len(geoms))])
    return geoms[tops >= tops.max() - 0.015]


_CORNERS = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)


def _bounds(model: Any, data: Any, geoms: np.ndarray, origin: np.ndarray,
            rot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``geoms``' boxes in the frame (origin, rot): (lo, hi); zeros without geoms."""
    if len(geoms) == 0:
        return np.zeros(3), np.zeros(3)
    aabb = model.geom_aabb[geoms]  # (G, 6): centre, half-size in the geom frame
    corners = aabb[:, None, :3] + _CORNERS[None] * aabb[:, None, 3:]  # (G, 8, 3)
    mats = data.geom_xmat[geoms].reshape(-1, 3, 3)
    world = np.einsum("gij,gkj->gki", mats, corners) + data.geom_xpos[geoms][:, None, :]
    local = (world.reshape(-1, 3) - origin) @ rot
    return local.min(axis=0), local.max(axis=0)


def _articulations(model: Any, names: list[str]) -> list[int]:
    """Hinge and slide joints among ``names`` (free joints of movable objects are left out)."""
    out = []
    for name in names:
        try:
            j = int(model.joint(name).id)
        except KeyError:
            continue
        if int(model.jnt_type[j]) in (2, 3):
            out.append(j)
    return out


def _direction(obj: Any, method: str, low: float, high: float) -> float:
    """+1 where ``obj.method(qpos)`` holds at the top of the range only, -1 at the bottom only, 0 otherwise.

    LIBERO's ``turn_on`` also flips a stove's burner flag (what it shows); the flags are put back as found.
    """
    test = getattr(obj, method, None)
    if test is None:
        return 0.0
    props = getattr(obj, "object_properties", None)
    shown = dict(props.get("vis_site_names", {})) if isinstance(props, dict) else None
    try:
        at_low, at_high = bool(test(low)), bool(test(high))
    except Exception:  # noqa: BLE001 - an object whose predicate needs more than a position: no affordance
        return 0.0
    finally:
        if shown is not None and isinstance(props, dict):
            props["vis_site_names"] = shown
    return 1.0 if at_high and not at_low else -1.0 if at_low and not at_high else 0.0
