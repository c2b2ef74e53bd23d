"""Train the LIBERO visuomotor BC policy on demo files ``lerobench eval --record`` wrote, evaluating as it goes.

One file, top to bottom: read LIBERO demo files (``recordings/<task>_demo.hdf5``, LIBERO's own layout: the way
LIBERO's loader reads them, ``data/demo_<i>`` sorted by i, ``obs/agentview_rgb``, ``obs/eye_in_hand_rgb`` turned
as the file's ``lerobench_policy_image_rotation`` says the evaluated policy sees them, ``obs/ee_states`` +
``obs/gripper_states`` as the 8-D state), fit ``VisuomotorBC`` to the recorded action chunks
(mean squared error, Adam, torch on the CPU, random-shift augmentation of the images), and every ``--eval-every``
updates evaluate the model in memory through ``lerobench.evaluate`` (its success curve to TensorBoard by
lerobench, the training loss by tensorboardX, both into ``OUT/tensorboard``). Writes ``OUT/early.pt`` (after
``--early-at`` updates) and ``OUT/final.pt``.

Why the demonstrations are recorded under ``--perturb action_noise`` (DART, Laskey et al. 2017): the expert acts
from the simulator's state, so it corrects the noise it is given, and the recording keeps its clean action: a clone
learns how to come back to the path, which a clone of clean paths never sees.

    python examples/libero_bc/train.py --demos runs/libero_demos --out runs/libero_bc
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):  # run as a script: make `examples.libero_bc` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


@dataclass(frozen=True)
class Args:
    """Every setting of a training run."""

    demos: Path
    """A run directory of ``lerobench eval --record`` (its ``recordings/*_demo.hdf5``), or one demo file."""
    out: Path
    """Where checkpoints, ``curve.json`` and ``tensorboard/`` go."""
    suite: str = "libero_object"
    """The suite the demonstrations' tasks belong to; the evaluations run on it."""
    updates: int = 2000
    """Gradient steps."""
    batch: int = 64
    lr: float = 1e-3
    chunk: int = 8
    """Actions predicted per call."""
    replan_steps: int = 4
    """Actions of each chunk executed before the policy looks again (renders once per this many steps)."""
    shift: int = 4
    """Random-shift augmentation: images padded by this many pixels and cropped back at random (0: none)."""
    hidden: int = 256
    channels: int = 32
    eval_every: int = 500
    """Evaluate through ``lerobench.evaluate`` every this many updates (and at ``early_at`` and the end)."""
    eval_episodes: int = 4
    """Episodes per task of each evaluation in the loop."""
    eval_max_steps: int = 0
    """Step limit of the loop's evaluations (0: the suite's protocol)."""
    early_at: int = 200
    """Updates after which ``early.pt`` is written."""
    render_quality: str = "draft"
    """The evaluations' rendering: the demonstrations' (``lerobench eval --render-quality``)."""
    seed: int = 0
    threads: int = 2
    """torch threads while training (an update of 64 rows: ~100 ms with 1, ~60 with 2 on this 2-core box; on a
    shared, loaded machine use 1: idle threads spin, examples/metaworld_bc/README.md)."""


def parse(argv: list[str] | None = None) -> Args:
    """Command-line flags named after ``Args``' fields (``--eval-every``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Args(demos=Path("."), out=Path("."))
    for name, value in asdict(defaults).items():
        flag = f"--{name.replace('_', '-')}"
        if name in ("demos", "out"):
            parser.add_argument(flag, type=Path, required=True)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    return Args(**vars(parser.parse_args(argv)))


def demo_files(demos: Path) -> list[Path]:
    """The LIBERO demo files under ``demos`` (a run directory) or ``demos`` itself; an error naming what is missing."""
    files = [demos] if demos.is_file() else sorted((demos / "recordings").glob("*_demo.hdf5"))
    if not files:
        raise FileNotFoundError(f"no LIBERO demo files in {demos}/recordings: record them with `lerobench eval "
                                f"--policy libero-expert --record success --output {demos}` (README.md)")
    return files


def load_demos(files: list[Path], chunk: int) -> dict[str, np.ndarray | list[str]]:
    """Every successful demo's rows: images, 8-D states, task names, and the next ``chunk`` actions of each row.

    A chunk running past its demo's end repeats the last action (the episode ended there: holding still).
    """
    import h5py

    agent, wrist, states, targets, tasks = [], [], [], [], []
    for path in files:
        with h5py.File(path, "r") as f:
            data = f["data"]
            task = str(data.attrs["lerobench_task"])
            # stored as LIBERO's files hold them; the policy is evaluated on what lerobench gave it: turned so
            turn = 2 if data.attrs.get("lerobench_policy_image_rotation", "0") == "180" else 0
            for name in sorted(data.keys(), key=lambda n: int(n[5:])):  # robomimic's order: demo_<i> by i
                demo = data[name]
                if not bool(demo.attrs.get("success", True)):
                    continue
                actions = demo["actions"][()].astype(np.float32)
                steps = len(actions)
                index = np.minimum(np.arange(steps)[:, None] + np.arange(chunk)[None, :], steps - 1)
                agent.append(np.rot90(demo["obs/agentview_rgb"][()], turn, axes=(1, 2)))
                wrist.append(np.rot90(demo["obs/eye_in_hand_rgb"][()], turn, axes=(1, 2)))
                states.append(np.hstack([demo["obs/ee_states"][()], demo["obs/gripper_states"][()]]))
                targets.append(actions[index])
                tasks += [task] * steps
    return {"agent": np.concatenate(agent), "wrist": np.concatenate(wrist),
            "state": np.concatenate(states).astype(np.float32), "actions": np.concatenate(targets), "task": tasks}


def shifted(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Random-shift augmentation (DrQ): pad by replicating the border, crop back at a random offset per image."""
    if pad == 0:
        return images
    n, h, w, _ = images.shape
    padded = torch.nn.functional.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(n, 3, h, w + 2 * pad)
    cropped = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(n, 3, h, w)
    return cropped.gather(3, cols).permute(0, 2, 3, 1).round().to(torch.uint8)


def write_json(path: Path, document: object) -> None:
    """Atomically: the curve on disk is always a whole document."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1))
    os.replace(tmp, path)


def evaluate(model: torch.nn.Module, args: Args, tasks: list[str], update: int, episodes: int) -> dict:
    """The model in memory on ``tasks`` through ``lerobench.evaluate``, logged to ``OUT/tensorboard`` at ``update``."""
    import lerobench

    results = lerobench.evaluate(model, args.suite, tasks=tasks, episodes=episodes, videos=0, seed=args.seed,
                                 max_steps=args.eval_max_steps or None, render_quality=args.render_quality,
                                 log_to=["tensorboard"], log_step=update, log_dir=args.out)
    return {"update": update, "success_rate": results.success_rate, "episodes": results.n_episodes,
            "tasks": {t.task: t.success_rate for t in results.tasks}, "eval_s": results.eval_s}


def train(args: Args) -> dict:
    """Load, fit, evaluate every ``eval_every`` updates; returns the curve (also ``OUT/curve.json``)."""
    from tensorboardX import SummaryWriter

    from examples.libero_bc.policy import VisuomotorBC, save, to_model_input

    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)  # restored on return: a caller (a test session) keeps its own
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    data = load_demos(demo_files(args.demos), args.chunk)
    tasks = sorted(set(data["task"]))
    agent, wrist = torch.from_numpy(data["agent"]), torch.from_numpy(data["wrist"])
    state, target = torch.from_numpy(data["state"]), torch.from_numpy(data["actions"])
    task_index = torch.tensor([tasks.index(t) for t in data["task"]], dtype=torch.long)
    print(f"{len(state)} rows of {len(tasks)} task(s), images {tuple(agent.shape[1:])}", flush=True)

    model = VisuomotorBC(tasks, image_size=agent.shape[1], chunk=args.chunk, replan_steps=args.replan_steps,
                         hidden=args.hidden, channels=args.channels)
    model.state_mean.copy_(state.mean(0))
    model.state_std.copy_(state.std(0).clamp_min(1e-3))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    writer = SummaryWriter(logdir=str(args.out / "tensorboard"), filename_suffix=".loss")
    curve: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(args).items()},
                   "rows": len(state), "tasks": tasks, "evaluations": []}
    generator = torch.Generator().manual_seed(args.seed)
    try:
        for update in range(1, args.updates + 1):
            rows = torch.randint(len(state), (args.batch,), generator=generator)
            images = [to_model_input(shifted(agent[rows], args.shift, generator)),
                      to_model_input(shifted(wrist[rows], args.shift, generator))]
            loss = torch.nn.functional.mse_loss(model(images, state[rows], task_index[rows]), target[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if update % 50 == 0 or update == args.updates:
                writer.add_scalar("train/loss", loss.item(), update)
            if update == args.early_at:
                save(model.eval(), args.out / "early.pt", updates=update)
            if update % args.eval_every == 0 or update in (args.early_at, args.updates):
                writer.flush()
                point = evaluate(model.eval(), args, tasks, update, args.eval_episodes)
                model.train()
                curve["evaluations"].append({**point, "loss": loss.item(),
                                             "elapsed_s": time.perf_counter() - started})
                write_json(args.out / "curve.json", curve)
                print(f"update {update}: loss {loss.item():.4f}, success {point['success_rate']:.2f} "
                      f"({point['eval_s']:.0f} s), {time.perf_counter() - started:.0f} s in", flush=True)
    finally:
        writer.close()
        torch.set_num_threads(threads)
    save(model.eval(), args.out / "final.pt", updates=args.updates)
    curve["total_s"] = time.perf_counter() - started
    write_json(args.out / "curve.json", curve)
    return curve


if __name__ == "__main__":  # lerobench starts simulator workers: guard the entry point
    done = train(parse())
    print(f"done in {done['total_s']:.0f} s: {done['args']['out']}/early.pt, final.pt; "
          f"tensorboard --logdir {done['args']['out']}/tensorboard")
