"""Regenerate ``render_reference.npz``: camera frames as lerobench rendered them at commit 3832a50.

The frames were written by this script run on commit 3832a50 (every step rendered the policy's cameras,
LIBERO rendered its cameras during settle steps too), before rendering became conditional on whether a
policy reads the observation. ``tests/test_render_savings.py`` checks that today's code still produces
these exact bytes at the steps a policy reads. Re-running it on newer code proves nothing: only do so
on purpose, when a simulator upgrade changes the pixels.

Run: ``MUJOCO_GL=egl PYTHONPATH=. python tests/data/make_render_reference.py``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

IMAGE_SIZE = (64, 64)
STEPS = 12
"""Each env is stepped this many times with ``reference_actions``; frames are kept at ``KEPT``."""
KEPT = (0, 1, 5, 10, 12)
"""Steps whose observation is stored (0 = the first observation after reset and settling)."""
CASES = {
    "metaworld": ("metaworld_mt10", "reach-v3", ("corner2",)),
    "libero": ("libero_spatial", None, ("agentview", "robot0_eye_in_hand")),  # None: the suite's task 0
}
EPISODE = 1


def reference_actions(action_dim: int) -> np.ndarray:
    """The fixed action sequence both the generator and the test step with."""
    return np.random.default_rng(7).uniform(-1, 1, (STEPS, action_dim)).astype(np.float32)


def make_env(case: str, max_steps: int = STEPS + 5):
    """The LazyTaskEnv the frames come from (suite default protocol, 64x64 images, seed 0)."""
    from lerobench.envs.base import EnvSpec, LazyTaskEnv
    from lerobench.suite.registry import get_backend, load_suite

    suite_name, task_name, cameras = CASES[case]
    suite = load_suite(suite_name)
    task = next(t for t in suite.tasks if t.name == task_name) if task_name else suite.tasks[0]
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), max_steps=max_steps, image_size=IMAGE_SIZE)
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=task, protocol=protocol, seed=0,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   backend_options=suite.backend_options)
    return LazyTaskEnv(spec, backend), backend.action_dim


def main() -> None:
    arrays: dict[str, np.ndarray] = {}
    for case, (_, _, cameras) in CASES.items():
        env, action_dim = make_env(case)
        obs, _ = env.reset(options={"episodes": [EPISODE]})
        frames = {cam: [obs["images"][cam].copy()] for cam in cameras}
        for action in reference_actions(action_dim):
            obs, *_ = env.step(action)
            for cam in cameras:
                frames[cam].append(obs["images"][cam].copy())
        env.close()
        for cam in cameras:
            arrays[f"{case}/{cam}"] = np.stack([frames[cam][k] for k in KEPT])
    out = Path(__file__).with_name("render_reference.npz")
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} ({out.stat().st_size} bytes): {sorted(arrays)}")


if __name__ == "__main__":
    main()
