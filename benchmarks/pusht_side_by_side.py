"""PushT side by side: lerobench against LeRobot 0.6.1's ``lerobot-eval`` on the same work, each at its defaults.

The work: PushT (gym-pusht 0.1.8), ``--episodes`` episodes from seed S (episode i starts from ``reset(seed=S + i)``
in both tools: ``benchmarks/pusht_same_starts.py``), the same random-init LeRobot ``diffusion`` directory (image +
2-D state -> 2-D target; saved by LeRobot 0.4.4, which 0.6.1 loads), CPU. lerobench: ``lerobench eval --suite pusht
--policy lerobot:DIR --episodes N --seed S`` (its auto batch size, 2 videos); lerobot-eval: ``--policy.path=DIR
--env.type=pusht --eval.n_episodes=N --seed=S --eval.use_async_envs=false --policy.device=cpu`` (its default batch
size: floor(0.7 x cores), 1 on a 2-core box; 10 videos). ``--steps`` shortens episodes in both (lerobench
``--max-steps``, lerobot-eval ``--env.episode_length``); ``--denoise`` sets the DDPM steps (``default``: LeRobot's,
``num_inference_steps`` unset = ``num_train_timesteps`` = 100); ``--size`` the model (``default``: LeRobot's
ResNet18 + UNet down_dims 512/1024/2048, ~260 M parameters; ``small``: down_dims 64/128/256; ``tiny``: 16/32).

Measured per run (``benchmarks/w3_side_by_side.measured``): wall seconds, CPU seconds of the whole process tree
(each process's own time, read every 0.5 s), the tree's peak **PSS** (``smaps_rollup``; a shared page counts
once), env-steps/s (lerobench's from its episodes; lerobot-eval's as episodes x steps when none succeeded: its
results do not record lengths), and each episode's outcome (success; lerobench's highest coverage, lerobot-eval's
max reward = min(coverage / 0.95, 1)). ``--chunk-cost`` first times one chunk (one full denoising) of the chosen
model in this process, to size a run before starting it.

``--lerobench-python PATH`` is the interpreter lerobench runs under (``PATH -m lerobench eval ...``; default: the
one running this script). For a fair comparison run both tools under the same venv, so that both use the same
Python and torch (a denoising chunk cost ~3x more under LeRobot 0.6.1's Python 3.12 torch 2.11 than under the
main venv's Python 3.11 torch 2.13 CPU build): install lerobench into the lerobot-eval venv (``pip install -e
'.[pusht]'``) and pass ``--lerobench-python /work/lerobot061-venv/bin/python``. The table's header says which
Python and torch each tool ran with.

    MUJOCO_GL=egl python benchmarks/pusht_side_by_side.py --chunk-cost --size default --denoise default
    MUJOCO_GL=egl python benchmarks/pusht_side_by_side.py --size small --denoise 10 --episodes 50 --steps 300 \
        --lerobench-python /work/lerobot061-venv/bin/python
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w3_side_by_side import measured  # noqa: E402

DEFAULT_LEROBOT_EVAL = "/work/lerobot061-venv/bin/lerobot-eval"
SIZES: dict[str, dict[str, Any]] = {
    "default": {},  # LeRobot's DiffusionConfig: down_dims (512, 1024, 2048), kernel 5, 8 groups, embed 128
    "small": {"down_dims": (64, 128, 256), "diffusion_step_embed_dim": 64},
    "tiny": {"down_dims": (16, 32), "kernel_size": 3, "n_groups": 4, "diffusion_step_embed_dim": 16},
}
"""UNet sizes; the vision encoder is LeRobot's ResNet18 (group norm, no pretrained weights, 84x84 crop) in all."""


def save_pusht_diffusion(directory: Path, *, denoise: int | None, size: str = "default") -> Path:
    """Save a random-init LeRobot diffusion for PushT: ``observation.image`` 3x96x96, ``observation.state`` (2,).

    LeRobot's PushT normalisation (image mean/std, state and action min/max over the 512x512 workspace), its
    diffusion defaults (2 observations, horizon 16, 8 actions executed, 100 train timesteps) but no pretrained
    backbone (nothing downloaded); ``denoise`` = ``num_inference_steps`` (None: LeRobot's default, 100).
    """
    if (directory / "model.safetensors").is_file():
        return directory
    import torch

    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    inputs = {"observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 96, 96)),
              "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,))}
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))}
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0), "mean": torch.full((2,), 256.0),
                 "std": torch.full((2,), 128.0)}
    stats = {"observation.image": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25),
                                   "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))},
             "observation.state": dict(workspace), "action": dict(workspace)}
    config = DiffusionConfig(input_features=inputs, output_features=outputs, pretrained_backbone_weights=None,
                             num_inference_steps=denoise, device="cpu", **SIZES[size])
    policy = DiffusionPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    directory.mkdir(parents=True, exist_ok=True)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return directory


def chunk_cost(directory: Path, repeats: int = 2) -> dict[str, float]:
    """Seconds of one chunk (LeRobot's ``select_action`` on an empty queue: one full denoising), this process."""
    import torch

    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

    policy = DiffusionPolicy.from_pretrained(str(directory)).eval()
    batch = {"observation.image": torch.rand(1, 3, 96, 96), "observation.state": torch.rand(1, 2)}
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            policy.reset()
            started = time.perf_counter()
            policy.select_action(dict(batch))
            times.append(time.perf_counter() - started)
    params = sum(p.numel() for p in policy.parameters())
    return {"chunk_s": min(times[1:]), "first_s": times[0], "params_m": params / 1e6,
            "threads": torch.get_num_threads(),
            "steps": policy.config.num_inference_steps or policy.config.num_train_timesteps}


def interpreter_of(executable: str) -> str:
    """The Python a console script (``lerobot-eval``) runs under: its ``#!`` line; else the executable itself."""
    try:
        with open(executable, "rb") as f:
            first = f.readline().decode(errors="replace").strip()
    except OSError:
        return executable
    return first[2:].split()[0] if first.startswith("#!") and "python" in first else executable


def python_and_torch(python: str, env: dict[str, str]) -> str:
    """``python``'s version and its torch's (e.g. ``Python 3.12.1, torch 2.11.0+cu130``), asked of that interpreter."""
    code = "import sys, torch; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}')"
    try:
        done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return done.stdout.strip() if done.returncode == 0 else "unknown (no torch?)"


def lerobench_run(python: str, policy: Path, episodes: int, steps: int, seed: int, out: Path,
                  env: dict[str, str]) -> dict:
    """``python -m lerobench eval --suite pusht`` at its defaults (``--max-steps`` only when ``steps`` < 300)."""
    command = [python, "-m", "lerobench", "eval", "--suite", "pusht", "--policy", f"lerobot:{policy}",
               "--episodes", str(episodes), "--seed", str(seed), "--output", str(out)]
    if steps != 300:
        command += ["--max-steps", str(steps)]
    row = measured(command, env, out.parent / "lerobench.log")
    lines = (out / "episodes.jsonl").read_text().splitlines()
    runs = sorted((json.loads(line) for line in lines if line.strip()), key=lambda e: int(e["episode"]))
    row["env_steps"] = sum(int(e["steps"]) for e in runs)
    row["success"] = [bool(e["success"]) for e in runs]
    row["best"] = [None if e.get("max_progress") is None else float(e["max_progress"]) for e in runs]
    config = json.loads((out / "results.json").read_text()).get("config", {})
    row["batch"] = config.get("batch_size_used")
    row["executor"] = config.get("executor_used")
    return row


def lerobot_eval_run(executable: str, policy: Path, episodes: int, steps: int, seed: int, out: Path,
                     env: dict[str, str]) -> dict:
    """``lerobot-eval --env.type=pusht`` at its defaults; env steps = episodes x steps when none succeeded."""
    command = [executable, f"--policy.path={policy}", "--env.type=pusht", f"--eval.n_episodes={episodes}",
               f"--seed={seed}", "--eval.use_async_envs=false", "--policy.device=cpu", f"--output_dir={out}"]
    if steps != 300:
        command.append(f"--env.episode_length={steps}")
    row = measured(command, env, out.parent / "lerobot-eval.log")
    info = json.loads((out / "eval_info.json").read_text())
    metrics = info["per_task"][0]["metrics"]
    row["success"] = [bool(s) for s in metrics["successes"]]
    row["best"] = [min(float(r) * 0.95, 1.0) for r in metrics["max_rewards"]]  # reward = min(coverage / 0.95, 1)
    row["env_steps"] = episodes * steps if not any(row["success"]) else None
    row["batch"] = max(1, int((os.cpu_count() or 4) * 0.7))
    return row


def main() -> None:
    """Build or reuse the policy directory, run the tools one after the other, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lerobot-eval", default=DEFAULT_LEROBOT_EVAL, help="lerobot-eval of a LeRobot 0.6.1 venv")
    parser.add_argument("--lerobench-python", default=sys.executable,
                        help="the Python that runs lerobench (PATH -m lerobench eval ...; default: this one); for a "
                             "fair comparison the lerobot-eval venv's, e.g. /work/lerobot061-venv/bin/python")
    parser.add_argument("--only", default="lerobot-eval,lerobench")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=300, help="episode length (300: PushT's)")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--denoise", default="10", help="DDPM steps, or 'default' (LeRobot's: 100)")
    parser.add_argument("--size", choices=tuple(SIZES), default="default")
    parser.add_argument("--policy", type=Path, help="a LeRobot diffusion directory (default: saved now)")
    parser.add_argument("--chunk-cost", action="store_true", help="only time one chunk of the model and exit")
    parser.add_argument("--out", type=Path, help="output folder (default: a new temporary one)")
    args = parser.parse_args()
    denoise = None if args.denoise == "default" else int(args.denoise)
    tmp = args.out or Path(tempfile.mkdtemp(prefix="pusht-sbs-"))
    tmp.mkdir(parents=True, exist_ok=True)
    policy = args.policy or save_pusht_diffusion(tmp / f"diffusion-{args.size}-{args.denoise}", denoise=denoise,
                                                 size=args.size)
    if args.chunk_cost:
        cost = chunk_cost(policy)
        chunks = args.episodes * -(-args.steps // 8)
        print(f"# {policy}: {json.dumps(cost)}; {args.episodes} x {args.steps} steps = {chunks} chunks of 8 actions "
              f"= ~{chunks * cost['chunk_s']:.0f} s of denoising per tool")
        return
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1", "PYGAME_HIDE_SUPPORT_PROMPT": "1"}
    rows = {}
    for tool in args.only.split(","):
        if tool == "lerobot-eval":
            if not Path(args.lerobot_eval).is_file():
                raise SystemExit(f"no lerobot-eval at {args.lerobot_eval} (scripts/lerobot-current-env.sh builds it;"
                                 " or --only lerobench)")
            rows[tool] = lerobot_eval_run(args.lerobot_eval, policy, args.episodes, args.steps, args.seed,
                                          tmp / "lerobot-eval", env)
        else:
            rows[tool] = lerobench_run(args.lerobench_python, policy, args.episodes, args.steps, args.seed,
                                       tmp / "lerobench", env)
        print(f"# {tool}: {json.dumps({k: v for k, v in rows[tool].items() if k not in ('success', 'best')})}",
              flush=True)
    denoise_text = "LeRobot's default (100)" if denoise is None else str(denoise)
    print(f"\n# PushT, {args.episodes} episodes x {args.steps} steps, seed {args.seed}, diffusion size {args.size}, "
          f"denoising steps {denoise_text}; {os.cpu_count()} cores; outputs in {tmp}")
    pythons = {tool: args.lerobench_python if tool == "lerobench" else interpreter_of(args.lerobot_eval)
               for tool in rows}
    versions = {tool: python_and_torch(python, env) for tool, python in pythons.items()}
    for tool, python in pythons.items():
        print(f"# {tool} ran under {python}: {versions[tool]}")
    print("| tool | Python, torch | batch | wall s | CPU s | peak PSS (GB) | env steps | env-steps/s | successes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tool, r in rows.items():
        rate = f"{r['env_steps'] / r['wall_s']:.2f}" if r["env_steps"] else "n/a"
        print(f"| {tool} | {versions[tool]} | {r['batch']} | {r['wall_s']:.1f} | "
              f"{r['cpu_s']:.0f} | {r['peak_mb'] / 1024:.2f} | {r['env_steps'] or 'n/a'} | {rate} | "
              f"{sum(r['success'])}/{args.episodes} |")
    if {"lerobench", "lerobot-eval"} <= rows.keys():
        a, b = rows["lerobench"], rows["lerobot-eval"]
        if b["env_steps"]:
            speed = (a["env_steps"] / a["wall_s"]) / (b["env_steps"] / b["wall_s"])
            print(f"\nlerobench: {speed:.2f}x lerobot-eval's env-steps/s, {a['peak_mb'] / b['peak_mb']:.0%} of its "
                  f"peak memory, {a['cpu_s'] / b['cpu_s']:.0%} of its CPU seconds")
        same = sum(x == y for x, y in zip(a["success"], b["success"], strict=False))
        equal = sum(x is not None and abs(x - y) < 5e-4 for x, y in zip(a["best"], b["best"], strict=False))
        pairs = min(len(a["success"]), len(b["success"]))
        print(f"\nPer-episode success, same seeds: {same}/{pairs} agree; best coverage equal (to 3 decimals) in "
              f"{equal}/{pairs}")
        print("\n| episode | seed | lerobench success | lerobench best coverage | lerobot-eval success | "
              "lerobot-eval best coverage |\n|---|---|---|---|---|---|")
        for i, (sa, ca, sb, cb) in enumerate(zip(a["success"], a["best"], b["success"], b["best"], strict=False)):
            ca_text = "n/a" if ca is None else f"{ca:.3f}"
            print(f"| {i} | {args.seed + i} | {sa} | {ca_text} | {sb} | {cb:.3f} |")


if __name__ == "__main__":
    main()
