"""W3 side by side: lerobench against LeRobot's ``lerobot-eval`` on the same work, each at its defaults.

W3 (issue 34): LIBERO libero_spatial task 0, 10 episodes, batch 2, seed 0, a random-init LeRobot ACT reading
two 360x360 cameras (the directory ``random_lerobot.py`` writes; LeRobot 0.4 format, which 0.6.1 loads too),
on the CPU. lerobench runs ``--protocol lerobot`` (LeRobot's LIBERO conventions: 280 steps, 10 settle steps,
images turned 180 degrees); ``lerobot-eval`` runs ``--env.type=libero``. Both write their videos at their
defaults. For each run: wall seconds, CPU seconds of the whole process tree (each process's, read every
0.5 s), the tree's peak PSS (every process's ``/proc/<pid>/smaps_rollup``, sampled every 0.5 s: a shared page
counts once) and env-steps/s (counted env steps over the wall time: lerobench's from its results, LeRobot's as
episodes x 280 when no episode succeeded, since its results do not record lengths).

``lerobot-eval`` needs its own environment (LeRobot 0.6.1); point ``--lerobot-eval`` at its executable:

    MUJOCO_GL=egl python benchmarks/w3_side_by_side.py --lerobot-eval /path/to/venv/bin/lerobot-eval
    MUJOCO_GL=egl python benchmarks/w3_side_by_side.py --only lerobench --episodes 2   # a quick look

Run it on a quiet machine: the two tools run one after the other, and a run is one sample.
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

LEROBOT_HORIZON = 280
"""LeRobot's libero_spatial episode length (``TASK_SUITE_MAX_STEPS``): a failing episode runs all of it."""


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used so far (``/proc/<pid>/stat``), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(command: list[str], env: dict[str, str], log: Path) -> dict:
    """Run ``command``; its wall seconds, the tree's CPU seconds and the tree's peak PSS (MB).

    CPU: each process's own time, read at every sample (its last reading counts): ``getrusage`` of the children
    would miss workers whose parent is a forkserver that nobody waits for (both tools start workers so). A
    process's last half second is missed.
    """
    started = time.monotonic()
    cpu: dict[int, float] = {}
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak = 0.0
        while proc.poll() is None:
            tree = [proc.pid, *children(proc.pid)]
            peak = max(peak, sum(pss_mb(pid) for pid in tree))
            for pid in tree:
                if (seconds := cpu_seconds(pid)) is not None:
                    cpu[pid] = seconds
            time.sleep(0.5)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "cpu_s": sum(cpu.values()), "peak_mb": peak}


def lerobench_run(policy: Path, episodes: int, out: Path, env: dict[str, str]) -> dict:
    """``lerobench eval`` of W3 at its defaults; env steps from its results."""
    command = [sys.executable, "-m", "lerobench", "eval", "--suite", "libero_spatial", "--tasks", W3_TASK,
               "--protocol", "lerobot", "--policy", f"lerobot:{policy}", "--episodes", str(episodes),
               "--batch-size", "2", "--seed", "0", "--output", str(out)]
    row = measured(command, env, out.parent / "lerobench.log")
    lines = (out / "episodes.jsonl").read_text().splitlines()
    episodes_run = [json.loads(line) for line in lines if line.strip()]
    row["env_steps"] = sum(int(e["steps"]) for e in episodes_run)
    row["successes"] = sum(bool(e["success"]) for e in episodes_run)
    return row


def lerobot_eval_run(executable: str, policy: Path, episodes: int, out: Path, env: dict[str, str]) -> dict:
    """``lerobot-eval`` of W3 at its defaults; env steps = episodes x 280 when none succeeded."""
    command = [executable, f"--policy.path={policy}", "--env.type=libero", "--env.task=libero_spatial",
               "--env.task_ids=[0]", f"--eval.n_episodes={episodes}", "--eval.batch_size=2",
               "--policy.device=cpu", "--seed=0", f"--output_dir={out}"]
    row = measured(command, env, out.parent / "lerobot-eval.log")
    overall = json.loads((out / "eval_info.json").read_text())["overall"]
    row["successes"] = round(float(overall["pc_success"]) * episodes / 100)
    row["env_steps"] = episodes * LEROBOT_HORIZON if row["successes"] == 0 else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lerobot-eval", help="the lerobot-eval executable of a LeRobot 0.6.1 environment")
    parser.add_argument("--only", default="lerobot-eval,lerobench")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--policy", type=Path, help="a LeRobot ACT directory (default: a random one, written now)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="w3-"))
    policy = args.policy
    if policy is None:
        from random_lerobot import save_random_lerobot

        policy = save_random_lerobot("act", tmp / "act", cameras=("observation.images.image",
                                                                  "observation.images.image2"),
                                     image=360, state_dim=8, action_dim=7, action_std=0.5)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"}
    env.setdefault("MUJOCO_GL", "egl")
    rows = {}
    for tool in args.only.split(","):
        if tool == "lerobot-eval":
            if not args.lerobot_eval:
                raise SystemExit("--lerobot-eval PATH is needed to run lerobot-eval (or --only lerobench)")
            rows[tool] = lerobot_eval_run(args.lerobot_eval, policy, args.episodes, tmp / "lerobot-eval", env)
        else:
            rows[tool] = lerobench_run(policy, args.episodes, tmp / "lerobench", env)
        print(f"# {tool}: {json.dumps(rows[tool])}", flush=True)
    print(f"\n# W3 ({args.episodes} episodes, batch 2), {os.cpu_count()} cores, outputs in {tmp}")
    print("| tool | wall s | CPU s | peak PSS (GB) | env-steps/s | successes |")
    print("|---|---|---|---|---|---|")
    for tool, r in rows.items():
        rate = f"{r['env_steps'] / r['wall_s']:.2f}" if r["env_steps"] else "n/a"
        print(f"| {tool} | {r['wall_s']:.1f} | {r['cpu_s']:.0f} | {r['peak_mb'] / 1024:.2f} | {rate} | "
              f"{r['successes']}/{args.episodes} |")
    if {"lerobench", "lerobot-eval"} <= rows.keys():
        a, b = rows["lerobench"], rows["lerobot-eval"]
        speed = (a["env_steps"] / a["wall_s"]) / (b["env_steps"] / b["wall_s"]) if b["env_steps"] else float("nan")
        print(f"\nlerobench: {speed:.2f}x lerobot-eval's env-steps/s, {a['peak_mb'] / b['peak_mb']:.0%} of its "
              f"peak memory, {a['cpu_s'] / b['cpu_s']:.0%} of its CPU seconds")


if __name__ == "__main__":
    main()
