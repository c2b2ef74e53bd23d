"""The memory floor of evaluating a LeRobot policy: what one process holds with the policy alone, no simulator.

Any evaluator of a saved LeRobot policy holds at least this: torch, LeRobot's modules for the policy, its weights,
and the activations of a call. lerobench and lerobot-eval hold the same torch and the same weights, so this floor
sits inside both tools' peaks, and it bounds what a ratio of the two can reach (docs/scaling.md, "ALOHA side by
side"): with the floor at F and lerobot-eval's peak at P, no evaluator runs below F / P of lerobot-eval, whatever
its simulators cost.

Each way of importing runs in a fresh interpreter (``--python``, default this one), which reads its own PSS
(``/proc/self/smaps_rollup``) after ``import torch``, after the policy's modules, after the weights, and at its
peak over ``--calls`` calls of ``select_action`` at ``--batch`` rows of random inputs of the policy's own input
shapes (a thread samples every 10 ms):
- ``lerobot``: LeRobot's own way (``lerobot.policies.factory.get_policy_class``, as ``lerobot-eval`` loads it);
- ``lerobench``: lerobench's (``lerobench.policies.lerobot_import.import_lerobot(type)``: that type's modules only).

    python benchmarks/policy_memory_floor.py DIR --against-mb 3020 \
        --python ~/.cache/lerobench/lerobot-current-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r'''
import json, sys, threading, time
def pss():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], pss())
        time.sleep(0.01)
threading.Thread(target=sample, daemon=True).start()
directory, way, batch, calls, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
row = {}
import torch
torch.set_num_threads(threads)
row["torch"] = pss()
policy_type = json.load(open(f"{directory}/config.json"))["type"]
if way == "lerobot":
    from lerobot.policies.factory import get_policy_class
else:
    from lerobench.policies.lerobot_import import import_lerobot
    get_policy_class = import_lerobot(policy_type)["get_policy_class"]
policy_class = get_policy_class(policy_type)
row["modules"] = pss()
policy = policy_class.from_pretrained(directory).eval()
row["weights"] = pss()
row["weights_mb"] = sum(p.numel() * p.element_size() for p in policy.parameters()) / 2**20
inputs = {name: torch.rand(batch, *feature.shape) for name, feature in policy.config.input_features.items()}
with torch.inference_mode():
    for _ in range(calls):
        policy.reset()
        policy.select_action(inputs)
time.sleep(0.05)
row["after_calls"] = pss()
row["peak"] = max(peak[0], row["after_calls"])
print("FLOOR " + json.dumps(row))
'''


def measure(python: str, directory: Path, way: str, batch: int, calls: int, threads: int) -> dict:
    """One fresh interpreter's readings for one way of importing."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([python, "-c", CHILD, str(directory), way, str(batch), str(calls), str(threads)],
                          env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FLOOR ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{way}: failed ({done.returncode})\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("FLOOR "):])


def main() -> int:
    """Measure both ways; print the table (and each peak as a share of ``--against-mb``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("policy", type=Path, help="a saved LeRobot policy directory")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (its torch and LeRobot)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch's intra-op threads")
    parser.add_argument("--ways", default="lerobot,lerobench")
    parser.add_argument("--against-mb", type=float, help="another run's peak PSS (MB): print the floor's share of it")
    args = parser.parse_args()
    print(f"{args.policy}, batch {args.batch}, {args.calls} calls, {args.threads} intra-op threads, {args.python}")
    print("| import | after torch (MB) | + modules | + weights | peak over calls | weights (MB) |"
          + (" peak / against |" if args.against_mb else ""))
    print("|---|---|---|---|---|---|" + ("---|" if args.against_mb else ""))
    for way in args.ways.split(","):
        row = measure(args.python, args.policy, way, args.batch, args.calls, args.threads)
        share = f" {100 * row['peak'] / args.against_mb:.0f}% |" if args.against_mb else ""
        print(f"| {way} | {row['torch']:.0f} | {row['modules']:.0f} | {row['weights']:.0f} | {row['peak']:.0f} | "
              f"{row['weights_mb']:.0f} |{share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
