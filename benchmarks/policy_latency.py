"""A chunk policy with a fixed per-call latency: how much of the time goes to the policy, and how close to the bounds.

    MUJOCO_GL=egl python benchmarks/policy_latency.py                          # state-only Meta-World
    MUJOCO_GL=egl python benchmarks/policy_latency.py --latencies-ms 0,50,150 --batches 1,4,8
    MUJOCO_GL=egl python benchmarks/policy_latency.py --suite smoke_libero --task <name> --cameras 2 --image 64 \
        --episodes 2 --max-steps 40 --batches 1,2 --latencies-ms 0,150                  # LIBERO, two cameras

The policy returns a chunk of ``--chunk`` actions (Meta-World's expert action repeated; zeros elsewhere) after
sleeping L ms per call, whatever the number of rows, as a VLA on a GPU or a remote server does. For each
batch size B and latency L (``--concurrency`` calls may overlap, as with a remote server) it runs a full
``Evaluation`` (``--executor``: inline for state-only runs, vector when cameras are read) and prints
env-steps/s (between the start of the first policy call and the end of the last: worker start-up excluded),
policy calls, rows given to the policy per call, the policy's busy fraction, and two bounds:

- policy bound ``B x chunk / L`` env-steps/s (every call full, the policy never idle), and
- the simulation rate: the same run at L = 0 (the render-bound limit of docs/scaling.md for this batch).

``calls / lockstep`` compares the calls made with those of a lockstep schedule (every active env served in
one call per round of ``chunk`` steps; a finished env starts its next episode at the next round): computed
from the run's own episode lengths. ``auto`` in ``--latencies-ms`` means L = the measured simulation time
of one chunk at that batch (where overlapping inference with simulation matters most).
Works against any lerobench checkout (``PYTHONPATH=<checkout>``), so before/after numbers come from one script.
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from lerobench.execution.runner import Evaluation, RunSettings
from lerobench.policies.base import ObservationNeeds
from lerobench.suite.registry import load_suite


class LatencyChunk:
    """A chunk policy that costs ``L`` seconds per call (a sleep: no CPU, like a GPU or a remote server)."""

    calls = 0
    rows = 0
    busy_s = 0.0
    first = last = 0.0
    """Start of the first call and end of the last: the steady-state window (worker start-up excluded)."""

    def __init__(self, context):
        self.latency = float(os.environ.get("POLICY_LATENCY_MS", "0")) / 1000.0
        self.chunk = int(os.environ.get("POLICY_CHUNK", "10"))
        cameras = int(os.environ.get("POLICY_CAMERAS", "0"))
        self.observation_needs = ObservationNeeds(cameras=tuple(context.cameras[:cameras]), replan_steps=self.chunk)
        self.action_dim = context.action_dim
        try:  # PolicyTraits is newer than some checkouts this script measures
            from lerobench.policies.base import PolicyTraits

            self.traits = PolicyTraits(concurrent_calls=int(os.environ.get("POLICY_CONCURRENCY", "1")),
                                       batch_invariant=True)
        except ImportError:
            pass
        self.expert = None
        if context.backend == "metaworld":
            from lerobench.policies.builtin import make_metaworld_expert

            self.expert = make_metaworld_expert(context)

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        started = time.perf_counter()
        cls = type(self)
        cls.first = cls.first or started
        n = len(observation["state"])
        if self.expert is not None:
            base = self.expert.select_action(observation, task_descriptions)
        else:
            base = np.zeros((n, self.action_dim), dtype=np.float32)
        time.sleep(self.latency)
        cls.calls += 1
        cls.rows += n
        cls.last = time.perf_counter()
        cls.busy_s += cls.last - started
        return np.repeat(base[:, None, :], self.chunk, axis=1).astype(np.float32)


def make_latency_chunk(context):
    return LatencyChunk(context)


def lockstep_calls(steps: list[int], batch: int, chunk: int) -> int:
    """Calls of the lockstep schedule: episodes (in order) on ``batch`` slots, each lasting ceil(steps/chunk) rounds."""
    free = [0] * batch
    heapq.heapify(free)
    end = 0
    for s in steps:
        start = heapq.heappop(free)
        end = max(end, start + math.ceil(s / chunk))
        heapq.heappush(free, start + math.ceil(s / chunk))
    return end


def call_when_all_dry(steps_to_next_dry, *_):
    """Lockstep: call the policy only when no env can step (dry rows wait until every env ran dry)."""
    return steps_to_next_dry is None


def schedule_rules(schedule: str):
    """This checkout's rules (``default``) or the lockstep baseline of the same code (``lockstep``): one call
    serves every env while nothing steps, and no phases are shifted. Passed in through ``RunSettings.schedule``."""
    from lerobench.core.task_run import ScheduleRules

    if schedule == "lockstep":
        return ScheduleRules(should_call=call_when_all_dry, run_dry_first=False)
    return ScheduleRules()


def run(suite, task: str, batch: int, latency_ms: float, args, schedule: str = "default") -> dict:
    import json

    import policy_latency  # the class the loaded policy counts in (this file runs as __main__)

    counter = policy_latency.LatencyChunk
    os.environ["POLICY_LATENCY_MS"] = str(latency_ms)
    os.environ["POLICY_CHUNK"] = str(args.chunk)
    os.environ["POLICY_CAMERAS"] = str(args.cameras)
    os.environ["POLICY_CONCURRENCY"] = str(args.concurrency)
    counter.calls = counter.rows = 0
    counter.busy_s = counter.first = counter.last = 0.0

    with tempfile.TemporaryDirectory() as tmp:
        settings = RunSettings(suite=suite.select_tasks([task]), policy="policy_latency:make_latency_chunk",
                               output=Path(tmp) / "o", episodes=args.episodes, max_steps=args.max_steps,
                               executor=args.executor, batch_size=batch, seed=args.seed, videos=0,
                               schedule=schedule_rules(schedule))
        results = Evaluation(settings).run()
        lines = [json.loads(x) for x in (Path(tmp) / "o" / "episodes.jsonl").read_text().splitlines()]
    lines.sort(key=lambda e: e["episode"])
    steps = [e["steps"] for e in lines]
    window = counter.last - counter.first
    return {"rate": sum(steps) / window, "eval_s": results["overall"]["eval_s"], "calls": counter.calls,
            "rows": counter.rows, "busy": counter.busy_s / window,
            "lockstep": lockstep_calls(steps, batch, args.chunk), "successes": sum(e["success"] for e in lines),
            "steps": sum(steps), "outcomes": [(e["success"], e["steps"]) for e in lines]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="metaworld_mt10")
    parser.add_argument("--task", default="reach-v3")
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--cameras", type=int, default=0, help="cameras the policy consumes (rendered once per chunk)")
    parser.add_argument("--image", type=int, default=0, help="image side in pixels (0: the suite's)")
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--latencies-ms", default="0,50,150", help="comma-separated; 'auto' = one chunk's sim time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schedules", default="default",
                        help="comma-separated: default (this checkout's), lockstep (no overlap, same code)")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="calls the policy lets overlap (PolicyTraits.concurrent_calls: a remote server)")
    parser.add_argument("--executor", default=None,
                        help="vector (worker processes) or inline (envs in this process); default: inline for a "
                             "state-only run (what eval's auto picks for Meta-World), vector when cameras are read")
    args = parser.parse_args()
    args.executor = args.executor or ("inline" if args.cameras == 0 else "vector")
    sys.path.insert(0, str(Path(__file__).resolve().parent))

    suite = load_suite(args.suite)
    if args.image:
        protocol = replace(suite.protocol(), image_size=(args.image, args.image))
        suite = replace(suite, protocols={**suite.protocols, "standard": protocol})
    schedules = args.schedules.split(",")
    print(f"suite {suite.name}, task {args.task}, chunk {args.chunk}, {args.cameras} camera(s), "
          f"{args.episodes} episodes, max {args.max_steps} steps, {args.concurrency} concurrent call(s), "
          f"executor {args.executor}")
    print(f"{'schedule':>8} {'B':>2} {'L ms':>6} {'steps/s':>8} {'sim':>8} {'policy':>8} {'calls':>6} {'lockstep':>8} "
          f"{'ratio':>6} {'rows/call':>9} {'busy':>5} {'succ':>5} {'gain':>5}")
    for batch in (int(b) for b in args.batches.split(",")):
        sim = None
        items = args.latencies_ms.split(",")
        if "auto" in items and "0" not in items:
            items = ["0", *items]  # the simulation rate comes first: auto is derived from it
        for item in items:
            if item == "auto":
                latency = 1000.0 * args.chunk / (sim / batch)  # one chunk of all B envs at the simulation rate
            else:
                latency = float(item)
            rates = {}
            for schedule in schedules:
                r = run(suite, args.task, batch, latency, args, schedule)
                rates[schedule] = r
                if latency == 0:  # the simulation rate: the best schedule at L = 0
                    sim = max(sim or 0.0, r["rate"])
                policy_bound = batch * args.chunk / (latency / 1000.0) if latency else math.inf
                gain = r["rate"] / rates["lockstep"]["rate"] if "lockstep" in rates else math.nan
                print(f"{schedule:>8} {batch:>2} {latency:>6.0f} {r['rate']:>8.1f} {sim or math.nan:>8.1f} "
                      f"{policy_bound:>8.1f} {r['calls']:>6} {r['lockstep']:>8} {r['calls'] / r['lockstep']:>6.2f} "
                      f"{r['rows'] / max(1, r['calls']):>9.2f} {r['busy']:>5.2f} {r['successes']:>5} {gain:>5.2f}",
                      flush=True)
            if "default" in rates and "lockstep" in rates:
                same = rates["default"]["outcomes"] == rates["lockstep"]["outcomes"]
                gain = rates["default"]["rate"] / rates["lockstep"]["rate"]
                print(f"{'':>8} B={batch} L={latency:.0f} ms: overlap gain {gain:.2f}x over lockstep; per-episode "
                      f"outcomes {'identical' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
