"""ALOHA side by side: lerobench against LeRobot 0.6.1's ``lerobot-eval`` on the same work, each at its defaults.

The work (issue 60 item 6): ``AlohaTransferCube-v0`` (gym-aloha 0.1.5), ``--episodes`` episodes from seed S (episode
i starts from ``reset(seed=S + i)`` in both tools: checked first, below), the same random-init LeRobot ACT directory
as LeRobot trains it for ALOHA (``observation.images.top`` 3x480x640, 14-D state and actions, chunks of 100 all
executed; LeRobot's ACTConfig defaults, 52 M parameters; ``tests/lerobot_aloha_fixtures.py``, saved by LeRobot 0.4.4,
which 0.6.1 loads), CPU. lerobench: ``lerobench eval --suite aloha_transfer_cube --policy lerobot:DIR --episodes N
--seed S`` (its auto batch size and executor, 2 videos); lerobot-eval: ``--policy.path=DIR --env.type=aloha
--env.task=AlohaTransferCube-v0 --eval.n_episodes=N --seed=S --eval.use_async_envs=false --policy.device=cpu`` (its
default batch size, floor(0.7 x cores): 1 on a 2-core box, where async envs fall back to sync anyway; 10 videos).
``--steps`` shortens episodes in both (lerobench ``--max-steps``, lerobot-eval ``--env.episode_length``).

Measured per run (``benchmarks/w3_side_by_side.measured``): wall seconds, CPU seconds of the process tree, its peak
PSS, env-steps/s (lerobench's from its episodes; lerobot-eval's as episodes x steps when none succeeded: its results
do not record lengths) and each episode's outcome (success, highest reward stage 0-4).

Same first observations (issue 60 item 2, ``--starts``, on by default): episode i's first observation (the 480x640
``top`` image, byte for byte, and the 14-D ``agent_pos``) in (a) gym-aloha's own ``reset(seed=S + i)``, (b) lerobench
at ``--batch-size 1``, ``4`` and ``--executor processes`` (a recording policy, this file's ``make_recorder``), and
(c) lerobot-eval 0.6.1 run in-process under its interpreter with gymnasium's ``SyncVectorEnv.reset`` wrapped to save
what it returned (batch 4, 2-step episodes), for ``--start-episodes`` seeds on each task (transfer cube, insertion).

``--lerobench-python``: the interpreter lerobench runs under (default: lerobot-eval's, with this checkout first on
``PYTHONPATH``: the same Python 3.12 and torch 2.11 for both, as a fair comparison of the tools needs).

    MUJOCO_GL=egl python benchmarks/aloha_side_by_side.py --episodes 20
    MUJOCO_GL=egl python benchmarks/aloha_side_by_side.py --starts-only --start-episodes 20

Exit status 1 when a first observation differs (or a run fails).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

DEFAULT_VENV = Path.home() / ".cache/lerobench/lerobot-current-venv"
"""LeRobot 0.6.1 on Python 3.12 (``scripts/lerobot-current-env.sh``), with ``pip install gym-aloha==0.1.5``."""
RECORD_DIR = "ALOHA_SAME_STARTS_DIR"
"""The recording policy writes ``episode_<i>.npz`` into the directory this environment variable names."""
TASKS = {"AlohaTransferCube-v0": "aloha_transfer_cube", "AlohaInsertion-v0": "aloha_insertion"}
"""gym-aloha's env ids (LeRobot's ``--env.task``) -> lerobench's suites."""
HORIZON = 400


# --- the recording policy, loaded by lerobench as ``this_file.py:make_recorder`` ------------------------------------


class StartRecorder:
    """Saves each episode's first observation (``images["top"]``, ``state``); holds the arms where they are."""

    def __init__(self, directory: Path):
        from lerobench.policies.base import ObservationNeeds

        self.observation_needs = ObservationNeeds(cameras=("top",))
        self.directory = directory

    def reset(self) -> None:
        """No state to drop."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Each row's own joints as its target; the rows at an episode's first observation saved."""
        state = np.asarray(observation["state"], dtype=np.float32)
        skip = np.zeros(len(state), dtype=bool)
        for flag in ("probe", "padding"):  # batch-invariance probe rows and call padding: not real episodes
            if flag in observation:
                skip |= np.asarray(observation[flag], dtype=bool)
        for row in np.flatnonzero(np.asarray(observation["episode_start"], dtype=bool) & ~skip):
            episode = int(observation["episode"][row])
            np.savez(self.directory / f"episode_{episode}.npz", top=np.asarray(observation["images"]["top"][row]),
                     agent_pos=state[row], seed=int(observation["episode_seed"][row]))
        return state.copy()


def make_recorder(context: Any) -> StartRecorder:
    """The ``--policy FILE:make_recorder`` factory."""
    return StartRecorder(Path(os.environ[RECORD_DIR]))


def _load(directory: Path) -> dict[int, dict[str, np.ndarray]]:
    out = {}
    for path in directory.glob("episode_*.npz"):
        with np.load(path) as data:
            out[int(path.stem.split("_")[1])] = {k: data[k] for k in data.files}
    return out


# --- same first observations: (a) gym-aloha, (b) lerobench, (c) lerobot-eval ----------------------------------------


def gym_starts(task: str, seed: int, episodes: int) -> dict[int, dict[str, np.ndarray]]:
    """Episode i: gym-aloha's ``reset(seed=seed + i)`` with ``obs_type="pixels_agent_pos"``."""
    import gym_aloha  # noqa: F401  (registers the envs)
    import gymnasium as gym

    env = gym.make(f"gym_aloha/{task}", obs_type="pixels_agent_pos")
    starts = {}
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        starts[i] = {"top": np.asarray(obs["pixels"]["top"]), "agent_pos": np.asarray(obs["agent_pos"]),
                     "seed": np.int64(seed + i)}
    env.close()
    return starts


def lerobench_starts(python: str, task: str, seed: int, episodes: int, extra: list[str], work: Path,
                     env: dict[str, str]) -> dict[int, dict[str, np.ndarray]]:
    """``lerobench eval`` of the task's suite with the recording policy, 1 step; the first observations it saved."""
    record = work / "record"
    record.mkdir(parents=True)
    command = [python, "-m", "lerobench", "eval", "--suite", TASKS[task], "--policy", f"{HERE}:make_recorder",
               "--seed", str(seed), "--episodes", str(episodes), "--max-steps", "1", "--videos", "0",
               "--output", str(work / "run"), *extra]
    done = subprocess.run(command, env={**env, RECORD_DIR: str(record)}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"lerobench {' '.join(extra)} failed ({done.returncode}):\n{done.stdout[-2000:]}"
                           f"{done.stderr[-3000:]}")
    return _load(record)


def lerobot_eval_side(policy: Path, task: str, seed: int, episodes: int, batch: int, out: Path) -> None:
    """lerobot-eval's own ``main`` in this process (LeRobot 0.6.1's interpreter), recording each vector reset.

    Writes ``out/episode_<i>.npz`` (batch b env j = episode b*batch + j, as lerobot-eval numbers them) and
    ``out/resets.json`` (each reset's seeds).
    """
    import gymnasium as gym

    out.mkdir(parents=True, exist_ok=True)
    calls: list[dict[str, Any]] = []
    original = gym.vector.SyncVectorEnv.reset

    def recording_reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        observation, info = original(self, *args, **kwargs)
        seeds = kwargs.get("seed", args[0] if args else None)
        first = len(calls) * self.num_envs
        calls.append({"seeds": None if seeds is None else [int(s) for s in np.atleast_1d(seeds)]})
        for j in range(self.num_envs):
            np.savez(out / f"episode_{first + j}.npz", top=np.asarray(observation["pixels"]["top"][j]),
                     agent_pos=np.asarray(observation["agent_pos"][j]),
                     seed=-1 if seeds is None else int(np.atleast_1d(seeds)[j]))
        return observation, info

    gym.vector.SyncVectorEnv.reset = recording_reset
    from lerobot.scripts import lerobot_eval

    sys.argv = ["lerobot-eval", f"--policy.path={policy}", "--env.type=aloha", f"--env.task={task}",
                f"--eval.n_episodes={episodes}", f"--eval.batch_size={batch}", f"--seed={seed}",
                "--eval.use_async_envs=false", "--policy.device=cpu", "--env.episode_length=2",
                f"--output_dir={out / 'eval'}"]
    lerobot_eval.main()
    (out / "resets.json").write_text(json.dumps(calls))


def lerobot_eval_starts(python: str, policy: Path, task: str, seed: int, episodes: int, work: Path,
                        env: dict[str, str]) -> dict[int, dict[str, np.ndarray]]:
    """``lerobot_eval_side`` under LeRobot 0.6.1's interpreter; its recorded first observations."""
    record = work / "lerobot-eval"
    command = [python, str(HERE), "--lerobot-eval-side", str(record), "--policy", str(policy), "--task", task,
               "--seed", str(seed), "--start-episodes", str(episodes)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    (work / "lerobot-eval.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"lerobot-eval 0.6.1 failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    return _load(record)


def same(ref: dict[str, np.ndarray], got: dict[str, np.ndarray] | None) -> bool:
    """The image byte for byte (uint8, same shape), ``agent_pos`` at float32, the seed."""
    if got is None:
        return False
    return bool(got["top"].dtype == np.uint8 and np.array_equal(ref["top"], got["top"])
                and np.array_equal(ref["agent_pos"].astype(np.float32), got["agent_pos"].astype(np.float32))
                and int(got["seed"]) == int(ref["seed"]))


def same_starts(args: argparse.Namespace, python: str, lerobot_python: str, policy: Path, work: Path,
                env: dict[str, str]) -> bool:
    """Print, per task, which episodes start from gym-aloha's observation in each way; True if all do."""
    ways = ("batch 1", "batch 4", "processes", "lerobot-eval")
    identical_everywhere = True
    for task in TASKS:
        ref = gym_starts(task, args.seed, args.start_episodes)
        got: dict[str, dict[int, dict[str, np.ndarray]] | None] = {}
        for way, extra in (("batch 1", ["--batch-size", "1"]), ("batch 4", ["--batch-size", "4"]),
                           ("processes", ["--executor", "processes", "--workers", "2"])):
            try:
                got[way] = lerobench_starts(python, task, args.seed, args.start_episodes, extra,
                                            work / task / way.replace(" ", "-"), env)
            except RuntimeError as error:
                print(f"ERROR {task} {way}: {error}", file=sys.stderr)
                got[way] = None
        try:
            got["lerobot-eval"] = lerobot_eval_starts(lerobot_python, policy, task, args.seed, args.start_episodes,
                                                      work / task, env)
            resets = json.loads((work / task / "lerobot-eval" / "resets.json").read_text())
            print(f"# {task}: lerobot-eval 0.6.1 (batch 4) reset seeds {[c['seeds'] for c in resets]}")
        except RuntimeError as error:
            print(f"ERROR {task} lerobot-eval: {error}", file=sys.stderr)
            got["lerobot-eval"] = None
        rows = {way: [same(ref[i], (got[way] or {}).get(i)) for i in range(args.start_episodes)] for way in ways}
        identical = sum(all(rows[w][i] for w in ways) for i in range(args.start_episodes))
        identical_everywhere &= identical == args.start_episodes
        print(f"\n{task}, seeds {args.seed}..{args.seed + args.start_episodes - 1}: first observation (top 480x640 "
              "bytes, agent_pos, seed) equal to gym-aloha's reset(seed=S+i):")
        print("| way | " + " | ".join(ways) + " |\n|---|" + "---|" * len(ways))
        print("| episodes equal | " + " | ".join(f"{sum(rows[w])}/{args.start_episodes}" for w in ways) + " |")
        print(f"{identical}/{args.start_episodes} episodes identical in all four ways", flush=True)
    return identical_everywhere


# --- side by side ----------------------------------------------------------------------------------------------------


def lerobench_run(python: str, policy: Path, episodes: int, steps: int, seed: int, out: Path,
                  env: dict[str, str]) -> dict:
    """``python -m lerobench eval --suite aloha_transfer_cube`` at its defaults (``--max-steps`` only if < 400)."""
    from w3_side_by_side import measured

    command = [python, "-m", "lerobench", "eval", "--suite", "aloha_transfer_cube", "--policy", f"lerobot:{policy}",
               "--episodes", str(episodes), "--seed", str(seed), "--output", str(out)]
    if steps != HORIZON:
        command += ["--max-steps", str(steps)]
    row = measured(command, env, out.parent / "lerobench.log")
    lines = (out / "episodes.jsonl").read_text().splitlines()
    runs = sorted((json.loads(line) for line in lines if line.strip()), key=lambda e: int(e["episode"]))
    row["env_steps"] = sum(int(e["steps"]) for e in runs)
    row["success"] = [bool(e["success"]) for e in runs]
    row["stage"] = [float(e["max_reward"] or 0.0) for e in runs]
    config = json.loads((out / "results.json").read_text()).get("config", {})
    row["batch"] = config.get("batch_size_used")
    row["executor"] = config.get("executor_used")
    return row


def lerobot_eval_run(executable: str, policy: Path, episodes: int, steps: int, seed: int, out: Path,
                     env: dict[str, str]) -> dict:
    """``lerobot-eval --env.type=aloha --env.task=AlohaTransferCube-v0`` at its defaults."""
    from w3_side_by_side import measured

    command = [executable, f"--policy.path={policy}", "--env.type=aloha", "--env.task=AlohaTransferCube-v0",
               f"--eval.n_episodes={episodes}", f"--seed={seed}", "--eval.use_async_envs=false",
               "--policy.device=cpu", f"--output_dir={out}"]
    if steps != HORIZON:
        command.append(f"--env.episode_length={steps}")
    row = measured(command, env, out.parent / "lerobot-eval.log")
    metrics = json.loads((out / "eval_info.json").read_text())["per_task"][0]["metrics"]
    row["success"] = [bool(s) for s in metrics["successes"]]
    row["stage"] = [float(r) for r in metrics["max_rewards"]]
    row["env_steps"] = episodes * steps if not any(row["success"]) else None
    row["batch"] = max(1, int((os.cpu_count() or 4) * 0.7))
    row["executor"] = "sync vector env"
    return row


def versions(python: str, env: dict[str, str]) -> str:
    """``python``'s version and its torch's, asked of that interpreter."""
    code = "import sys, torch; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}')"
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def save_policy(directory: Path) -> Path:
    """The random-init ACT at LeRobot's defaults with ALOHA's features (saved by this interpreter's LeRobot)."""
    if (directory / "model.safetensors").is_file():
        return directory
    sys.path.insert(0, str(REPO / "tests"))
    from lerobot_aloha_fixtures import save_aloha_act

    return save_aloha_act(directory, size="default")


def main() -> int:
    """Same first observations, then the two tools one after the other; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="LeRobot 0.6.1's venv (with gym-aloha)")
    parser.add_argument("--lerobench-python", help="the Python running lerobench (default: the venv's)")
    parser.add_argument("--only", default="lerobot-eval,lerobench")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=HORIZON)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--start-episodes", type=int, default=20, help="seeds per task for the first observations")
    parser.add_argument("--starts-only", action="store_true", help="only compare the first observations")
    parser.add_argument("--no-starts", action="store_true", help="skip the first-observation comparison")
    parser.add_argument("--policy", type=Path, help="a LeRobot ACT for ALOHA (default: saved now, LeRobot's defaults)")
    parser.add_argument("--task", default="AlohaTransferCube-v0", help=argparse.SUPPRESS)
    parser.add_argument("--lerobot-eval-side", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="output folder (default: a new temporary one)")
    args = parser.parse_args()
    if args.lerobot_eval_side:  # running under LeRobot 0.6.1's interpreter
        lerobot_eval_side(args.policy, args.task, args.seed, args.start_episodes, 4, args.lerobot_eval_side)
        return 0

    lerobot_python = str(args.venv / "bin" / "python")
    python = args.lerobench_python or lerobot_python
    work = args.out or Path(tempfile.mkdtemp(prefix="aloha-sbs-"))
    work.mkdir(parents=True, exist_ok=True)
    policy = args.policy or save_policy(work / "act-aloha-default")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1", "MUJOCO_GL": "egl",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    print(f"# outputs in {work}; policy {policy}", flush=True)
    ok = True
    if not args.no_starts:
        ok = same_starts(args, python, lerobot_python, policy, work / "starts", env)
    if args.starts_only:
        return 0 if ok else 1

    rows = {}
    for tool in args.only.split(","):
        if tool == "lerobot-eval":
            rows[tool] = lerobot_eval_run(str(args.venv / "bin" / "lerobot-eval"), policy, args.episodes, args.steps,
                                          args.seed, work / "lerobot-eval", env)
        else:
            rows[tool] = lerobench_run(python, policy, args.episodes, args.steps, args.seed, work / "lerobench", env)
        print(f"# {tool}: {json.dumps({k: v for k, v in rows[tool].items() if k not in ('success', 'stage')})}",
              flush=True)
    pythons = {tool: python if tool == "lerobench" else lerobot_python for tool in rows}
    print(f"\n# AlohaTransferCube-v0, {args.episodes} episodes x {args.steps} steps, seed {args.seed}, random-init "
          f"ACT (LeRobot's defaults, ALOHA features); {os.cpu_count()} cores")
    print("| tool | Python, torch | batch | wall s | CPU s | peak PSS (GB) | env steps | env-steps/s | successes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tool, r in rows.items():
        rate = f"{r['env_steps'] / r['wall_s']:.2f}" if r["env_steps"] else "n/a"
        print(f"| {tool} | {versions(pythons[tool], env)} | {r['batch']} | {r['wall_s']:.1f} | {r['cpu_s']:.0f} | "
              f"{r['peak_mb'] / 1024:.2f} | {r['env_steps'] or 'n/a'} | {rate} | "
              f"{sum(r['success'])}/{len(r['success'])} |")
    if {"lerobench", "lerobot-eval"} <= rows.keys():
        a, b = rows["lerobench"], rows["lerobot-eval"]
        if b["env_steps"]:
            speed = (a["env_steps"] / a["wall_s"]) / (b["env_steps"] / b["wall_s"])
            print(f"\nlerobench: {speed:.2f}x lerobot-eval's env-steps/s, {a['peak_mb'] / b['peak_mb']:.0%} of its "
                  f"peak memory, {a['cpu_s'] / b['cpu_s']:.0%} of its CPU seconds (target: >= 3x at <= 40%)")
        pairs = list(zip(a["success"], a["stage"], b["success"], b["stage"], strict=False))
        agree = sum(sa == sb and ca == cb for sa, ca, sb, cb in pairs)
        print(f"\nPer-episode outcome (success, highest stage), same seeds: {agree}/{len(pairs)} agree")
        print("| episode | seed | lerobench success | lerobench stage | lerobot-eval success | lerobot-eval stage |\n"
              "|---|---|---|---|---|---|")
        for i, (sa, ca, sb, cb) in enumerate(pairs):
            print(f"| {i} | {args.seed + i} | {sa} | {ca:.0f} | {sb} | {cb:.0f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
