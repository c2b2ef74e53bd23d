"""Peak memory of a whole ``lerobench eval`` process tree, sampled while it runs (issue 46's memory target).

    MUJOCO_GL=egl python benchmarks/run_memory.py                       # W3, with and without the shared renderer
    MUJOCO_GL=egl python benchmarks/run_memory.py --renderer shared --episodes 4 --max-steps 80

The workload is issue 34's W3 (libero_spatial task 0, ``--protocol lerobot``: two 360x360 cameras, batch 2, a
random-init LeRobot ACT reading both), shortened to ``--episodes`` x ``--max-steps`` (the tree's memory is flat
once every worker has rendered and the policy has been called; the whole W3 only runs longer). Every 0.5 s
the PSS of every process of the tree is read (``/proc/<pid>/smaps_rollup``: a page shared by k processes counts
1/k in each, so the sum counts it once); printed: the tree's peak, and at that moment the driver, the task
template and each worker. ``--renderer own`` sets ``LEROBENCH_SHARE_RENDERER=0`` (each worker its own GL
context, as before issue 46). Each run is a fresh process; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from first_step import W3_TASK  # noqa: E402
from memory import children, pss_mb  # noqa: E402


def sample(args: list[str], env: dict[str, str], out: Path) -> dict:
    """Run ``lerobench eval ARGS``; the tree's PSS at its peak, split by process role."""
    proc = subprocess.Popen([sys.executable, "-m", "lerobench", "eval", *args, "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    peak: dict = {"total": 0.0}
    started = time.monotonic()
    while proc.poll() is None:
        tree = [proc.pid, *children(proc.pid)]
        pss = {pid: pss_mb(pid) for pid in tree}
        total = sum(pss.values())
        if total > peak["total"]:
            roles = {pid: _role(pid, proc.pid) for pid in tree}
            peak = {"total": total, "at_s": time.monotonic() - started,
                    "driver": pss.get(proc.pid, 0.0),
                    "template": sum(v for p, v in pss.items() if roles[p] == "template"),
                    "workers": sorted((v for p, v in pss.items() if roles[p] == "worker"), reverse=True),
                    "other": sum(v for p, v in pss.items() if roles[p] == "other")}
        time.sleep(0.5)
    if proc.returncode != 0:
        raise SystemExit(f"eval failed ({proc.returncode}): {' '.join(args)}\n{proc.stderr.read()[-2000:]}")
    json.loads((out / "results.json").read_text())  # the run finished and wrote its results
    peak["wall_s"] = time.monotonic() - started
    return peak


def _role(pid: int, driver: int) -> str:
    """driver, template (runs ``lerobench.envs.template.serve``), worker (forked from it) or other."""
    if pid == driver:
        return "driver"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        parent_cmd = Path(f"/proc/{parent}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return "other"
    if "lerobench.envs.template" in parent_cmd:  # (forked from the template: its command line is the template's)
        return "worker"
    return "template" if "lerobench.envs.template" in cmdline else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--renderer", choices=("shared", "own", "both"), default="both")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=40)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="run-memory-"))
    from random_lerobot import save_random_lerobot

    policy = save_random_lerobot("act", tmp / "act", cameras=("observation.images.image", "observation.images.image2"),
                                 image=360, state_dim=8, action_dim=7, action_std=0.5)
    command = ["--suite", "libero_spatial", "--tasks", W3_TASK, "--protocol", "lerobot", "--policy",
               f"lerobot:{policy}", "--episodes", str(args.episodes), "--batch-size", "2", "--max-steps",
               str(args.max_steps), "--videos", "0", "--seed", "0"]
    print(f"# W3 ({args.episodes} episodes x {args.max_steps} steps), peak PSS of the tree (MB), "
          f"{os.cpu_count()} cores")
    print("| renderer | tree peak | driver | template | workers | other | wall s |")
    print("|---|---|---|---|---|---|---|")
    for mode in ("shared", "own") if args.renderer == "both" else (args.renderer,):
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "LEROBENCH_SHARE_RENDERER": "1" if mode == "shared" else "0"}
        r = sample(command, env, tmp / f"run-{mode}")
        workers = ", ".join(f"{w:.0f}" for w in r["workers"])
        print(f"| {mode} | {r['total']:.0f} | {r['driver']:.0f} | {r['template']:.0f} | {workers} | "
              f"{r['other']:.0f} | {r['wall_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
