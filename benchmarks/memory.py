"""Memory of one task's worker vector env: total PSS of the process tree and PSS per worker, and start-up time.

    MUJOCO_GL=egl python benchmarks/memory.py                          # LIBERO, two 256x256 cameras, 1 2 4 workers
    MUJOCO_GL=egl python benchmarks/memory.py --workers 1 2 4 8 --backends libero metaworld
    MUJOCO_GL=egl python benchmarks/memory.py --sharing off            # today's build: every worker builds its own

Each configuration runs in a fresh Python process (``--one``): it builds ``make_vector_env`` for the suite's first
task, resets every slot (slot i runs episode i), takes a few steps reading both cameras, then reads
``/proc/<pid>/smaps_rollup`` of every process below it. PSS (proportional set size) splits a shared page between
the processes that map it, so the tree's total counts every page once; a worker's PSS is what it costs beside
the others. Start-up is the time from ``make_vector_env`` to every slot's first observation.
``--sharing off`` sets ``LEROBENCH_SHARE_TASK=0`` (workers build their task themselves, as before issue 30).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

SUITES = {"libero": ("libero_spatial", ("agentview", "robot0_eye_in_hand")),
          "metaworld": ("metaworld_mt10", ("corner2",)),
          "aloha": ("aloha_transfer_cube", ("top",))}


def pss_mb(pid: int) -> float:
    """Proportional set size of one process in MB (0 if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    """Every process below ``pid``."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for kid in map(int, kids):
            found += [kid, *children(kid)]
    return found


def one(backend: str, workers: int, image: int, steps: int, n_cameras: int | None = None) -> dict:
    """Measure one configuration in this process."""
    import numpy as np

    from lerobench.envs.base import EnvSpec, env_action
    from lerobench.envs.vector import make_vector_env
    from lerobench.suite.registry import get_backend, load_suite

    suite_name, cameras = SUITES[backend]
    cameras = cameras[:n_cameras] if n_cameras is not None else cameras
    suite = load_suite(suite_name)
    be = get_backend(suite.backend)
    size = (image, image) if image > 0 else suite.protocol().image_size  # 0: the suite's own (ALOHA's 480x640)
    protocol = replace(suite.protocol(), image_size=size, max_steps=steps + 5)
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=protocol, seed=3,
                   state_dim=be.state_dim, action_dim=be.action_dim, cameras=cameras,
                   backend_options=suite.backend_options)
    start = time.perf_counter()
    env = make_vector_env(spec, workers, in_process=False)
    obs, _ = env.reset(options={"episodes": list(range(workers))})
    startup = time.perf_counter() - start
    for _ in range(steps):
        obs, *_ = env.step(env_action(np.zeros((workers, be.action_dim), np.float32), np.ones(workers, bool)))
    worker_pids = [p.pid for p in env.processes]
    tree = [os.getpid(), *children(os.getpid())]
    pss = {pid: pss_mb(pid) for pid in tree}
    digest = [float(np.asarray(obs["state"]).sum())]
    env.close()
    per_worker = [pss[p] for p in worker_pids]
    return {"backend": backend, "workers": workers, "cameras": list(cameras), "image": list(size),
            "sharing": os.environ.get("LEROBENCH_SHARE_TASK", "1") != "0",
            "total_pss_mb": round(sum(pss.values())), "driver_pss_mb": round(pss[os.getpid()]),
            "per_worker_pss_mb": [round(x) for x in per_worker],
            "others_pss_mb": round(sum(v for k, v in pss.items() if k not in worker_pids and k != os.getpid())),
            "startup_s": round(startup, 2), "state_sum": digest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["libero"], choices=sorted(SUITES))
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--image", type=int, default=256, help="square side; 0: the suite's own image size")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--cameras", type=int,
                        help="rendered cameras (LIBERO: 0-2, Meta-World and ALOHA: 0-1; default all)")
    parser.add_argument("--sharing", choices=("on", "off", "both"), default="on")
    parser.add_argument("--json", help="append each result as a JSON line to this file")
    parser.add_argument("--one", nargs=2, metavar=("BACKEND", "WORKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.image, args.steps, args.cameras)))
        return
    modes = ["off", "on"] if args.sharing == "both" else [args.sharing]
    results: dict[tuple[str, str], list[tuple[int, int]]] = {}
    print(f"{'backend':<10} {'cams':>4} {'sharing':<7} {'N':>2} {'total MB':>9} {'driver':>7} {'template+other':>14} "
          f"{'per worker MB':<28} {'start-up s':>10}")
    for backend in args.backends:
        for n in args.workers:
            for mode in modes:
                env = {**os.environ, "LEROBENCH_SHARE_TASK": "0" if mode == "off" else "1"}
                out = subprocess.run([sys.executable, __file__, "--one", backend, str(n), "--image", str(args.image),
                                      "--steps", str(args.steps),
                                      *(["--cameras", str(args.cameras)] if args.cameras is not None else [])],
                                     env=env, capture_output=True, text=True)
                lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
                if out.returncode or not lines:
                    print(f"{backend} {mode} N={n} failed:\n{out.stderr[-2000:]}")
                    continue
                r = json.loads(lines[-1])
                print(f"{backend:<10} {len(r['cameras']):>4} {mode:<7} {n:>2} {r['total_pss_mb']:>9} "
                      f"{r['driver_pss_mb']:>7} "
                      f"{r['others_pss_mb']:>14} {str(r['per_worker_pss_mb']):<28} {r['startup_s']:>10}", flush=True)
                results.setdefault((backend, mode), []).append((n, r["total_pss_mb"]))
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
    for (backend, mode), points in results.items():
        if len(points) > 1:  # what each worker beyond the first adds, from the fewest to the most workers
            (n0, t0), (n1, t1) = points[0], points[-1]
            slope = (t1 - t0) / (n1 - n0)
            print(f"{backend} sharing {mode}: first worker {points[0][1]} MB (N={points[0][0]}), "
                  f"each further worker {slope:.0f} MB")


if __name__ == "__main__":
    main()
