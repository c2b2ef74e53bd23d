"""Train the MT10 behaviour-cloning policy from Meta-World's scripted experts, evaluating with lerobench as it goes.

One file, top to bottom (cleanrl's shape): collect demonstrations with the real simulator (unrendered), fit an MLP
by regression on the experts' actions with torch on the CPU, and every ``--eval-every`` updates evaluate the model
in memory through ``lerobench.evaluate`` (its success curve logged to TensorBoard by lerobench, the training loss
by tensorboardX, both into ``OUT/tensorboard``). Writes ``OUT/early.pt`` (after ``--early-at`` updates) and
``OUT/final.pt``: two checkpoints of different quality, the A/B pair of README.md.

Why the demonstrations are noised (DART, Laskey et al. 2017): an MLP cloned from clean expert paths drifts off them
and has never seen how to come back; executing ``expert + N(0, noise)`` while recording the expert's clean action
teaches the recovery for the cost of nothing. Why another seed than the evaluation's: the demonstrations' goal and
object placements (``MT1(task, seed=--demo-seed)``) are not the 50 placements lerobench evaluates on
(``MT1(task, seed=0)``), so the success rates measure generalisation, not memory.

    python examples/metaworld_bc/train.py --out runs/metaworld_bc
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make `examples.metaworld_bc` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


@dataclass(frozen=True)
class Args:
    """Every setting of a training run; the defaults train in about 5 minutes on 2 CPU cores."""

    out: Path
    """Where checkpoints, ``curve.json`` and ``tensorboard/`` go."""
    suite: str = "metaworld_mt10"
    """The lerobench suite whose tasks are learned and evaluated."""
    tasks: tuple[str, ...] = ()
    """A subset of the suite's tasks (empty: all)."""
    demos: int = 20
    """Demonstrations per task."""
    demo_steps: int = 250
    """Step limit of a demonstration (it ends earlier at the expert's success)."""
    demo_seed: int = 1000
    """Meta-World seed of the demonstrations' placements (not the evaluation's)."""
    noise: float = 0.1
    """Standard deviation of the Gaussian noise added to the executed (not the recorded) expert action."""
    updates: int = 6000
    """Gradient steps."""
    batch: int = 256
    lr: float = 1e-3
    hidden: int = 256
    eval_every: int = 1000
    """Evaluate through ``lerobench.evaluate`` every this many updates (and at ``early_at`` and the end)."""
    eval_episodes: int = 2
    """Episodes per task of each evaluation in the loop."""
    eval_max_steps: int = 200
    """Step limit of the loop's evaluations (the suite's protocol says 500; shorter keeps the loop cheap)."""
    early_at: int = 300
    """Updates after which ``early.pt`` is written."""
    seed: int = 0
    threads: int = 1
    """torch threads. Why 1: on the loaded 2-core box, 2 threads made an update 10x slower (74 vs 7 ms: OpenMP
    threads spin waiting for each other when other processes hold the cores)."""


def parse(argv: list[str] | None = None) -> Args:
    """Command-line flags named after ``Args``' fields (``--eval-every``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Args(out=Path("."))
    for name, value in asdict(defaults).items():
        flag = f"--{name.replace('_', '-')}"
        if name == "out":
            parser.add_argument(flag, type=Path, required=True)
        elif name == "tasks":
            parser.add_argument(flag, default="", help="comma-separated task names (default: the suite's)")
        else:
            parser.add_argument(flag, type=type(value), default=value)
    ns = vars(parser.parse_args(argv))
    ns["tasks"] = tuple(t for t in ns["tasks"].split(",") if t)
    return Args(**ns)


def collect(task: str, args: Args) -> tuple[np.ndarray, np.ndarray, int]:
    """``args.demos`` noised expert demonstrations of ``task``: states, clean expert actions, successes."""
    import metaworld
    from metaworld.policies import ENV_POLICY_MAP

    bench = metaworld.MT1(task, seed=args.demo_seed)
    env = bench.train_classes[task]()
    expert = ENV_POLICY_MAP[task]()  # type: ignore[abstract]  # the map holds concrete experts
    rng = np.random.default_rng([args.seed, args.demo_seed])
    states, actions, successes = [], [], 0
    for i in range(args.demos):
        env.set_task(bench.train_tasks[i % len(bench.train_tasks)])
        obs, _ = env.reset(seed=args.demo_seed + i)
        for _ in range(args.demo_steps):
            with warnings.catch_warnings():  # the experts' gains exceed 1 on purpose
                warnings.simplefilter("ignore", UserWarning)
                action = np.clip(expert.get_action(obs), -1.0, 1.0)
            states.append(obs)
            actions.append(action)
            obs, _, _, _, info = env.step(np.clip(action + rng.normal(0.0, args.noise, action.shape), -1.0, 1.0))
            if info["success"] >= 1.0:
                successes += 1
                break
    env.close()
    return np.asarray(states, np.float32), np.asarray(actions, np.float32), successes


def write_json(path: Path, document: object) -> None:
    """Atomically: the curve on disk is always a whole document."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1))
    os.replace(tmp, path)


def train(args: Args) -> dict:
    """Collect, fit, evaluate every ``eval_every`` updates; returns the curve (also ``OUT/curve.json``)."""
    import torch
    from tensorboardX import SummaryWriter

    import lerobench
    from examples.metaworld_bc.policy import BCPolicy, save
    from lerobench.suite.registry import load_suite

    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)  # restored on return: a caller (a test session) keeps its own
    torch.manual_seed(args.seed)
    tasks = list(args.tasks) or [t.name for t in load_suite(args.suite).tasks]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    states, actions, labels, demo_successes = [], [], [], {}
    for index, task in enumerate(tasks):
        s, a, ok = collect(task, args)
        states.append(s)
        actions.append(a)
        labels.append(np.full(len(s), index))
        demo_successes[task] = ok
        print(f"demos {task}: {ok}/{args.demos} successes, {len(s)} steps", flush=True)
    x = torch.from_numpy(np.concatenate(states))
    y = torch.from_numpy(np.concatenate(actions))
    k = torch.from_numpy(np.concatenate(labels)).long()
    collect_s = time.perf_counter() - started

    model = BCPolicy(tasks, hidden=args.hidden)
    model.state_mean.copy_(x.mean(0))
    model.state_std.copy_(x.std(0).clamp_min(1e-3))  # constant dims (the hidden parts of the state) stay finite
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    log_dir = args.out / "tensorboard"
    writer = SummaryWriter(logdir=str(log_dir), filename_suffix=".loss")
    curve: dict = {"args": {**asdict(args), "out": str(args.out)}, "demo_successes": demo_successes,
                   "demo_steps": len(x), "collect_s": collect_s, "evaluations": []}
    generator = torch.Generator().manual_seed(args.seed)
    try:
        for update in range(1, args.updates + 1):
            rows = torch.randint(len(x), (args.batch,), generator=generator)
            loss = torch.nn.functional.mse_loss(model(x[rows], k[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if update % 50 == 0 or update == args.updates:
                writer.add_scalar("train/loss", loss.item(), update)
            if update == args.early_at:
                save(model, args.out / "early.pt", updates=update)
            if update % args.eval_every == 0 or update in (args.early_at, args.updates):
                writer.flush()
                results = lerobench.evaluate(model, args.suite, tasks=tasks, episodes=args.eval_episodes,
                                             max_steps=args.eval_max_steps, videos=0, seed=args.seed,
                                             log_to=["tensorboard"], log_step=update, log_dir=args.out)
                curve["evaluations"].append({
                    "update": update, "loss": loss.item(), "success_rate": results.success_rate,
                    "tasks": {t.task: t.success_rate for t in results.tasks},
                    "eval_s": results.eval_s, "elapsed_s": time.perf_counter() - started})
                write_json(args.out / "curve.json", curve)
                print(f"update {update}: loss {loss.item():.4f}, success {results.success_rate:.2f} "
                      f"({results.eval_s:.0f} s), {time.perf_counter() - started:.0f} s in", flush=True)
    finally:
        writer.close()
        torch.set_num_threads(threads)
    save(model, args.out / "final.pt", updates=args.updates)
    curve["total_s"] = time.perf_counter() - started
    write_json(args.out / "curve.json", curve)
    return curve


if __name__ == "__main__":  # lerobench may start simulator workers: guard the entry point
    done = train(parse())
    print(f"done in {done['total_s']:.0f} s: {done['args']['out']}/early.pt, final.pt; "
          f"tensorboard --logdir {done['args']['out']}/tensorboard")
