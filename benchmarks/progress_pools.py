"""Pools of real episodes for ``benchmarks/progress_vs_binary.py`` (issue 62 item 3): run once, resampled there.

Each pool is one ``lerobench eval`` run of a policy (state-only, no videos); per episode it keeps success and the
highest progress (``max_progress``; an error counts 0 for both, as the paired rules count it). Per benchmark three
pools: the degraded variant (A) and the expert (B) on the same seeds, paired by (task, episode), and the expert
again on other seeds (``--seed 1000``) for the null (the expert against itself).

    MUJOCO_GL=egl python benchmarks/progress_pools.py pusht pusht_short pusht_30 pusht_20 metaworld aloha libero

Writes ``benchmarks/data/progress_pools.json`` (merged with what is there). ``aloha`` uses the degraded ALOHA
expert below (noise of a fixed std in radians on its joint targets, added by the policy; ``--perturb
action_noise=σ`` would add σ half-widths of ALOHA's ±3.14 rad action bounds on the env's side).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parent / "data" / "progress_pools.json"

ALOHA_NOISE = 0.03
"""Std (rad) of the Gaussian noise the degraded ALOHA expert adds to each of its 14 joint targets per step
(8 episodes: 0.02 solved 7, failing at progress 0.5; 0.05 solved none, every one at 0.5)."""

BENCHMARKS: dict[str, dict[str, Any]] = {
    "pusht": {"suite": ["--suite", "pusht"], "episodes": 200,
              "expert": ["--policy", "pusht-expert"], "degraded": ["--policy", "pusht-expert-noisy"],
              "degraded_is": "pusht-expert-noisy (Gaussian action noise, std 45 px)"},
    "pusht_short": {"suite": ["--suite", "pusht", "--max-steps", "50"], "episodes": 200,
                    "expert": ["--policy", "pusht-expert"], "degraded": ["--policy", "pusht-expert-noisy"],
                    "degraded_is": "pusht-expert-noisy, both cut at 50 steps (--max-steps 50: partial pushes)"},
    "pusht_30": {"suite": ["--suite", "pusht", "--max-steps", "30"], "episodes": 200,
                 "expert": ["--policy", "pusht-expert"], "degraded": ["--policy", "pusht-expert-noisy"],
                 "degraded_is": "pusht-expert-noisy, both cut at 30 steps (success rare for both)"},
    "pusht_20": {"suite": ["--suite", "pusht", "--max-steps", "20"], "episodes": 200,
                 "expert": ["--policy", "pusht-expert"], "degraded": ["--policy", "pusht-expert-noisy"],
                 "degraded_is": "pusht-expert-noisy, both cut at 20 steps (success very rare)"},
    "metaworld": {"suite": ["--suite", "metaworld_mt10"], "episodes": 30,
                  "expert": ["--policy", "metaworld-expert"],
                  "degraded": ["--policy", "metaworld-expert", "--perturb", "action_noise=1"],
                  "degraded_is": "metaworld-expert under --perturb action_noise=1"},
    "libero": {"suite": ["--suite", "libero_10", "--tasks", "2", "--replan-steps", "8"], "episodes": 40,
               "expert": ["--policy", "libero-expert-chunks"],
               "degraded": ["--policy", "libero-expert-chunks", "--delay-steps", "4"],
               "degraded_is": "libero-expert-chunks (8 of 16 planned actions executed) with 4 steps of inference "
                              "delay, on libero_10 task 2 (stove on and moka pot on it: progress 0, 1/2, 1)"},
    "aloha": {"suite": ["--suite", "aloha_transfer_cube"], "episodes": 100,
              "expert": ["--policy", "aloha-expert"],
              "degraded": ["--policy", "progress_pools:make_noisy_aloha_expert"],
              "degraded_is": f"aloha-expert with N(0, {ALOHA_NOISE}^2) rad noise on every joint target"},
}


def make_noisy_aloha_expert(context: Any) -> Any:
    """The ALOHA expert with Gaussian noise on its joint targets: a degraded variant, batch-invariant."""
    from lerobench.policies.base import PolicyTraits, row_generators
    from lerobench.policies.experts.aloha import AlohaExpertPolicy, make_aloha_expert

    make_aloha_expert(context)  # the same refusals

    class NoisyAlohaExpert(AlohaExpertPolicy):
        traits = PolicyTraits(replicable=True, batchable=True, batch_invariant=True, stochastic=True)

        def select_action(self, observation: Any, task_descriptions: list[str]) -> np.ndarray:
            actions = super().select_action(observation, task_descriptions)
            if len(actions):
                noise = np.stack([rng.normal(0.0, ALOHA_NOISE, actions.shape[1])
                                  for rng in row_generators(observation)])
                actions = (actions + noise).astype(np.float32)
            return actions

    return NoisyAlohaExpert()


def run_pool(name: str, which: str, seed: int) -> dict[str, Any]:
    """One eval run; per (task, episode) its success and highest progress, in (task, episode) order."""
    spec = BENCHMARKS[name]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "lerobench", "eval", *spec["suite"], *spec[which], "--episodes",
               str(spec["episodes"]), "--videos", "0", "--seed", str(seed), "-o", str(out)]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}
        started = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if r.get("trial", 0) == 0), key=lambda r: (r["task"], r["episode"]))
    return {"command": " ".join(cmd[2:-2]), "wall_s": round(wall, 1),
            "keys": [[r["task"], r["episode"]] for r in rows],
            "success": [bool(r["success"]) and not r.get("error") for r in rows],
            "progress": [0.0 if r.get("error") else float(r.get("max_progress") or 0.0) for r in rows]}


def main(names: list[str]) -> None:
    pools = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name in names:
        entry = {"degraded_is": BENCHMARKS[name]["degraded_is"]}
        for which, seed, key in (("degraded", 0, "a"), ("expert", 0, "b"), ("expert", 1000, "null")):
            entry[key] = run_pool(name, which, seed)
            print(f"{name} {key}: {np.mean(entry[key]['success']):.3f} success, mean progress "
                  f"{np.mean(entry[key]['progress']):.3f}, {len(entry[key]['success'])} episodes, "
                  f"{entry[key]['wall_s']} s", flush=True)
        pools[name] = entry
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(pools) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or ["pusht", "metaworld"])
