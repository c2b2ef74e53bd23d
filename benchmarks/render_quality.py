"""What a frame costs at each render quality (``--render-quality``): lerobench's own simulators, one camera.

    MUJOCO_GL=egl python benchmarks/render_quality.py                 # Meta-World 64x64 and LIBERO 128x128
    MUJOCO_GL=egl python benchmarks/render_quality.py --sizes 64 256 --frames 30

Each case builds the simulator through its backend (as a worker does), resets it, renders once (the GL context
and shaders), then times ``--frames`` steps that each give the camera's image (median, ms): a Meta-World step and
its render; a LIBERO step, which renders a camera the policy reads inside the step (robosuite's sensors).
docs/suites.md#render-quality quotes these figures; rerun on your machine before quoting it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np

CASES = {"metaworld": ("smoke", "corner2"), "libero": ("smoke_libero", "agentview")}


def frame_ms(case: str, quality: str, size: int, frames: int) -> float:
    """Median milliseconds of one step and its camera image at ``size`` x ``size``."""
    from lerobench.envs.base import EnvSpec
    from lerobench.suite.registry import get_backend, load_suite

    suite_name, camera = CASES[case]
    suite = load_suite(suite_name)
    backend = get_backend(suite.backend)
    options = {**suite.backend_options, **({"render_quality": quality} if quality != "published" else {})}
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0],
                   protocol=replace(suite.protocol(), image_size=(size, size)), seed=0,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=(camera,),
                   backend_options=options)
    sim = backend.make_simulator(spec)
    try:
        sim.reset_to(0, 0)
        sim.render(camera, size, size)
        rng, times = np.random.default_rng(0), []
        for _ in range(frames):
            action = rng.uniform(-0.3, 0.3, backend.action_dim).astype(np.float32)
            start = time.perf_counter()
            sim.step(action)
            sim.render(camera, size, size)
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)
    finally:
        sim.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--sizes", nargs="+", type=int, default=None, help="default: 64 (Meta-World), 128 (LIBERO)")
    parser.add_argument("--frames", type=int, default=20)
    args = parser.parse_args()
    print(f"{'case':10} {'size':>5} {'published ms':>13} {'draft ms':>9} {'speed-up':>9}  (a step and its frame)")
    for case in args.cases:
        for size in args.sizes or [64 if case == "metaworld" else 128]:
            published = frame_ms(case, "published", size, args.frames)
            draft = frame_ms(case, "draft", size, args.frames)
            print(f"{case:10} {size:5d} {published:13.1f} {draft:9.1f} {published / draft:8.2f}x")


if __name__ == "__main__":
    main()
