"""PushT same starts: lerobench's episode i and lerobot-eval's episode i begin from the same observation.

Episode i of ``lerobench eval --suite pusht --seed S`` starts from gym-pusht's ``reset(seed=S + i)``, which is
where ``lerobot-eval --seed S`` starts its episode i (``range(S + b*n, S + (b+1)*n)`` for batch b of n envs). This
script checks it on the first observation of each episode (the 96x96x3 uint8 image and the agent's position),
three ways, against (a) gym-pusht's own API: ``gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")`` then
``reset(seed=S + i)``:

- (b) lerobench's rollout, ``lerobench eval --suite pusht --seed S --max-steps 2`` with a recording policy (this
  file's ``make_recorder``: it saves ``images["top"]`` and ``state`` of each row where ``episode_start`` is true), at
  ``--batch-size 1``, ``--batch-size 4`` and ``--executor processes``;
- (c) lerobot-eval 0.6.1 (a Python 3.12 environment, ``scripts/lerobot-current-env.sh``), run in-process by this
  same file under that interpreter (``--lerobot-eval-side``) with gymnasium's ``SyncVectorEnv.reset`` wrapped to
  save every observation it returns and the seeds it was called with: what lerobot-eval's own seeding gave its
  episodes (batch b env j = episode b*batch_size + j). Its policy is a random-init LeRobot ``diffusion`` for PushT
  (saved by LeRobot 0.4.4 here; 0.6.1 loads it), 2 steps per episode.

The image must be equal byte for byte; the agent position is compared as lerobench gives it (float32; gym-pusht's
reset draws integer positions, so float32 holds them exactly) and, for lerobot-eval, also as float64.

    MUJOCO_GL=egl python benchmarks/pusht_same_starts.py                      # S=1000, 20 episodes
    MUJOCO_GL=egl python benchmarks/pusht_same_starts.py --seed 7 --episodes 8 --python312 /path/venv/bin/python

Exit status 1 on any mismatch (or a run that fails), 0 when every episode is identical in every way run.
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
RECORD_DIR = "PUSHT_SAME_STARTS_DIR"
"""The recording policy writes ``episode_<i>.npz`` into the directory this environment variable names."""
DEFAULT_PYTHON312 = "/work/lerobot061-venv/bin/python"
WAYS = ("batch 1", "batch 4", "processes", "lerobot-eval")


# --- (b) the recording policy, loaded by lerobench as ``this_file.py:make_recorder`` -------------------------------


class StartRecorder:
    """Saves each episode's first observation (``images["top"]``, ``state``); acts by holding the agent still."""

    def __init__(self, directory: Path):
        from lerobench.policies.base import ObservationNeeds

        self.observation_needs = ObservationNeeds(cameras=("top",))
        self.directory = directory

    def reset(self) -> None:
        """No state to drop."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Target the agent's own position; save the rows at an episode's first observation."""
        state = np.asarray(observation["state"], dtype=np.float32)
        skip = np.zeros(len(state), dtype=bool)
        for flag in ("probe", "padding"):  # batch-invariance probe rows and call padding: not real episodes
            if flag in observation:
                skip |= np.asarray(observation[flag], dtype=bool)
        for row in np.flatnonzero(np.asarray(observation["episode_start"], dtype=bool) & ~skip):
            episode = int(observation["episode"][row])
            np.savez(self.directory / f"episode_{episode}.npz", pixels=np.asarray(observation["images"]["top"][row]),
                     agent_pos=state[row], seed=int(observation["episode_seed"][row]))
        return state.copy()


def make_recorder(context: Any) -> StartRecorder:
    """The ``--policy FILE:make_recorder`` factory (lerobench calls it with the run's ``PolicyContext``)."""
    return StartRecorder(Path(os.environ[RECORD_DIR]))


# --- (a) gym-pusht's own API ---------------------------------------------------------------------------------------


def gym_starts(seed: int, episodes: int) -> dict[int, dict[str, np.ndarray]]:
    """Episode i: ``reset(seed=seed + i)`` of ``gym_pusht/PushT-v0`` with ``obs_type="pixels_agent_pos"``."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
    import gymnasium as gym

    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    starts = {}
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        starts[i] = {"pixels": np.asarray(obs["pixels"]), "agent_pos": np.asarray(obs["agent_pos"]),
                     "seed": np.int64(seed + i)}
    env.close()
    return starts


# --- (b) lerobench's rollout ---------------------------------------------------------------------------------------


def lerobench_starts(seed: int, episodes: int, extra: list[str], work: Path) -> dict[int, dict[str, np.ndarray]]:
    """Run ``lerobench eval --suite pusht`` with the recording policy; the first observations it saved."""
    record = work / "record"
    record.mkdir(parents=True)
    command = [sys.executable, "-m", "lerobench", "eval", "--suite", "pusht", "--policy", f"{HERE}:make_recorder",
               "--seed", str(seed), "--episodes", str(episodes), "--max-steps", "2", "--videos", "0",
               "--output", str(work / "run"), *extra]
    env = {**os.environ, RECORD_DIR: str(record), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"lerobench {' '.join(extra)} failed ({done.returncode}):\n{done.stdout[-2000:]}"
                           f"{done.stderr[-3000:]}")
    config = json.loads((work / "run" / "results.json").read_text()).get("config", {})
    print(f"# lerobench {' '.join(extra)}: executor {config.get('executor_used')}, batch "
          f"{config.get('batch_size_used')}, workers {config.get('workers_used')}", flush=True)
    return _load(record)


def _load(directory: Path) -> dict[int, dict[str, np.ndarray]]:
    out = {}
    for path in directory.glob("episode_*.npz"):
        with np.load(path) as data:
            out[int(path.stem.split("_")[1])] = {k: data[k] for k in data.files}
    return out


# --- (c) lerobot-eval 0.6.1, in a Python 3.12 environment -----------------------------------------------------------


def lerobot_eval_side(policy: Path, seed: int, episodes: int, batch: int, out: Path) -> None:
    """Run lerobot-eval's own ``main`` in this process, recording what each ``SyncVectorEnv.reset`` returned.

    Runs under LeRobot 0.6.1's interpreter (``--lerobot-eval-side``); writes ``out/episode_<i>.npz`` (batch b env
    j = episode b*batch + j, as lerobot-eval numbers them) and ``out/resets.json`` (each reset's seeds).
    """
    import gymnasium as gym

    out.mkdir(parents=True, exist_ok=True)
    calls: list[dict[str, Any]] = []
    original = gym.vector.SyncVectorEnv.reset

    def recording_reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        observation, info = original(self, *args, **kwargs)
        seeds = kwargs.get("seed", args[0] if args else None)
        first = len(calls) * self.num_envs
        calls.append({"seeds": None if seeds is None else [int(s) for s in np.atleast_1d(seeds)],
                      "num_envs": self.num_envs, "options": repr(kwargs.get("options"))})
        for j in range(self.num_envs):
            np.savez(out / f"episode_{first + j}.npz", pixels=np.asarray(observation["pixels"][j]),
                     agent_pos=np.asarray(observation["agent_pos"][j]),
                     seed=-1 if seeds is None else int(np.atleast_1d(seeds)[j]))
        return observation, info

    gym.vector.SyncVectorEnv.reset = recording_reset
    from lerobot.scripts import lerobot_eval

    sys.argv = ["lerobot-eval", f"--policy.path={policy}", "--env.type=pusht", f"--eval.n_episodes={episodes}",
                f"--eval.batch_size={batch}", f"--seed={seed}", "--eval.use_async_envs=false", "--policy.device=cpu",
                "--env.episode_length=2", f"--output_dir={out / 'eval'}"]
    lerobot_eval.main()
    (out / "resets.json").write_text(json.dumps(calls, indent=1))


def lerobot_eval_starts(python: str, policy: Path, seed: int, episodes: int, work: Path) -> dict[int, dict]:
    """Run ``lerobot_eval_side`` under LeRobot 0.6.1's interpreter; its recorded first observations."""
    record = work / "lerobot-eval"
    command = [python, str(HERE), "--lerobot-eval-side", str(record), "--policy-dir", str(policy),
               "--seed", str(seed), "--episodes", str(episodes)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1", "PYGAME_HIDE_SUPPORT_PROMPT": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    (work / "lerobot-eval.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"lerobot-eval 0.6.1 failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    return _load(record)


def tiny_pusht_diffusion(directory: Path) -> Path:
    """A small random-init LeRobot diffusion for PushT (image + 2-D state -> 2-D target), saved by LeRobot here."""
    sys.path.insert(0, str(HERE.parent))
    from pusht_side_by_side import save_pusht_diffusion

    return save_pusht_diffusion(directory, denoise=4, size="tiny")


# --- comparison ------------------------------------------------------------------------------------------------------


def compare(ref: dict[str, np.ndarray], got: dict[str, np.ndarray] | None, float64: bool = False) -> tuple[bool, bool]:
    """(pixels equal, agent_pos equal): bytes and shape; agent_pos at float32 (and float64 too if ``float64``)."""
    if got is None:
        return False, False
    pixels = got["pixels"].dtype == np.uint8 and np.array_equal(ref["pixels"], got["pixels"])
    pos = np.array_equal(ref["agent_pos"].astype(np.float32), np.asarray(got["agent_pos"]).astype(np.float32))
    if float64:
        pos = pos and got["agent_pos"].dtype == np.float64 and np.array_equal(ref["agent_pos"], got["agent_pos"])
    return bool(pixels), bool(pos)


def main() -> int:
    """Record the three ways, print the table, return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--python312", default=os.environ.get("LEROBOT_CURRENT_PYTHON", DEFAULT_PYTHON312),
                        help="the Python of a LeRobot 0.6.1 environment (scripts/lerobot-current-env.sh)")
    parser.add_argument("--policy-dir", type=Path, help="a LeRobot diffusion for PushT (default: a tiny one, now)")
    parser.add_argument("--lerobot-eval-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lerobot_eval_side:  # running under LeRobot 0.6.1's interpreter
        lerobot_eval_side(args.policy_dir, args.seed, args.episodes, 4, args.lerobot_eval_side)
        return 0

    work = Path(tempfile.mkdtemp(prefix="pusht-same-starts-"))
    print(f"# seed {args.seed}, {args.episodes} episodes; files in {work}", flush=True)
    ref = gym_starts(args.seed, args.episodes)
    got: dict[str, dict[int, dict] | None] = {}
    errors = []
    for way, extra in (("batch 1", ["--batch-size", "1"]), ("batch 4", ["--batch-size", "4"]),
                       ("processes", ["--executor", "processes"])):
        try:
            got[way] = lerobench_starts(args.seed, args.episodes, extra, work / way.replace(" ", "-"))
        except RuntimeError as exc:
            got[way], _ = None, errors.append(str(exc))
        print(f"# lerobench {' '.join(extra)}: {len(got[way] or {})} episodes recorded", flush=True)

    have_312 = Path(args.python312).is_file() and subprocess.run(
        [args.python312, "-c", "import importlib.metadata as m; assert m.version('lerobot') == '0.6.1'"],
        capture_output=True).returncode == 0
    if not have_312:
        print(f"# LeRobot 0.6.1 ENVIRONMENT MISSING ({args.python312}: no Python with lerobot 0.6.1; build it with "
              "scripts/lerobot-current-env.sh): way (c), lerobot-eval, NOT RUN; only (a) and (b) compared", flush=True)
        ways = WAYS[:3]
    else:
        ways = WAYS
        policy = args.policy_dir or tiny_pusht_diffusion(work / "diffusion")
        try:
            got["lerobot-eval"] = lerobot_eval_starts(args.python312, policy, args.seed, args.episodes, work)
        except RuntimeError as exc:
            got["lerobot-eval"], _ = None, errors.append(str(exc))
        resets = work / "lerobot-eval" / "resets.json"
        if resets.is_file():
            print(f"# lerobot-eval 0.6.1 (batch 4): SyncVectorEnv.reset seeds: "
                  f"{[c['seeds'] for c in json.loads(resets.read_text())]}", flush=True)

    print()
    print("| episode | seed | " + " | ".join(f"{w}: pixels | {w}: agent_pos" for w in ways) + " |")
    print("|---|---|" + "---|---|" * len(ways))
    identical = 0
    for i in range(args.episodes):
        cells, same = [], True
        for way in ways:
            rec = (got.get(way) or {}).get(i)
            pix, pos = compare(ref[i], rec, float64=way == "lerobot-eval")
            seed_ok = rec is not None and int(rec["seed"]) == args.seed + i
            same = same and pix and pos and seed_ok
            cells += ["yes" if pix else "NO", ("yes" if pos else "NO") + ("" if seed_ok or rec is None else
                                                                          f" (seed {int(rec['seed'])})")]
        identical += same
        print(f"| {i} | {args.seed + i} | " + " | ".join(cells) + " |")
    print(f"\n{identical}/{args.episodes} episodes identical in all ways"
          + ("" if have_312 else " (a, b only: lerobot-eval's environment is missing)"))
    for error in errors:
        print(f"\nERROR: {error}", file=sys.stderr)
    return 0 if identical == args.episodes and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
