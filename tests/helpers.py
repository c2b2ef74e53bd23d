"""Helpers several test modules share (a module never imports another test module).

Subprocess runs of the CLI (environment, waiting for episode lines, the processes a run left), the crashing test
backend's suite, and synthetic multi-trial run directories.
"""

import json
import os
import time
from pathlib import Path

TESTS = Path(__file__).parent
FULL_SWEEPS = os.environ.get("LEROBENCH_FULL_SWEEPS") == "1"
"""``make sweeps`` (LEROBENCH_FULL_SWEEPS=1): every case of the tests that sweep a whole suite; CI runs a sample."""


def swept(cases, every):
    """``cases`` under ``make sweeps``; otherwise every ``every``-th, from the first (CI's share of a long sweep)."""
    return tuple(cases) if FULL_SWEEPS else tuple(cases)[::every]


def write_suite(path, name, backend, tasks, episodes, top="", protocol=""):
    """A suite TOML at ``path`` (80 Hz, 400 MB workers): ``top`` lines before the tasks, ``protocol`` lines after."""
    tasks_toml = "[" + ", ".join(f'"{t}"' for t in tasks) + "]"
    path.write_text(f"""
name = "{name}"
backend = "{backend}"
episodes_per_task = {episodes}
control_fps = 80
worker_memory_mb = 400
{top}
tasks = {tasks_toml}

[protocol]
{protocol}
""")
    return path


def crash_suite(tmp_path, mode, crash_episode=1, crash_step=3):
    return write_suite(tmp_path / f"crash_{mode}.toml", f"crash_{mode}", "crash_backend:BACKEND", ["reach-v3"], 4,
                       top=f'backend_options = {{ crash_episode = {crash_episode}, crash_step = {crash_step}, '
                           f'mode = "{mode}" }}',
                       protocol="max_steps = 8")


def subprocess_env():
    return {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(TESTS)}


def wait_for_lines(path, n, proc, limit=120):
    start = time.time()
    while time.time() - start < limit:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, "run ended before it could be interrupted"
        time.sleep(0.05)
    raise AssertionError("no progress")


def kill_after_lines(command, path, n, env=None, limit=120):
    """Start ``command`` in a session of its own, ``kill -9`` the whole session once ``path`` has ``n`` lines."""
    import signal
    import subprocess

    proc = subprocess.Popen(command, env=env or subprocess_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_lines(path, n, proc, limit)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def session_processes(sid):
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(stat.parent.name)
    return found


def episode_line(task, episode, trial, success, error=None):
    return {"task": task, "episode": episode, "trial": trial, "seed": 1000 + episode, "init_state": episode,
            "success": success, "success_at_end": success, "steps": 10, "return": 1.0, "elapsed_s": 0.1,
            "error": error, "video": None, "renders": 0, "max_reward": 1.0}


def write_trial_run(path, outcomes, policy, errors=None):
    """``outcomes[task][episode]`` = per-trial successes; ``errors[(task, episode)] = trial`` ends that episode."""
    from lerobench.stats.binomial import compare_paired

    errors = errors or {}
    path.mkdir()
    trials = len(next(iter(next(iter(outcomes.values())))))
    lines, effective = [], {}
    for task, episodes in outcomes.items():
        for episode, row in enumerate(episodes):
            stop = errors.get((task, episode))
            eff = []
            for k, ok in enumerate(row):
                if stop is not None and k > stop:
                    eff.append(False)
                    continue
                failed = stop == k
                error = "simulator step failed" if failed else None
                lines.append(episode_line(task, episode, k, ok and not failed, error))
                eff.append(ok and not failed)
            effective[(task, episode)] = eff
    (path / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))

    def block(rows):
        n = len(rows)
        per_k = [sum(r[k] for r in rows) for k in range(trials)]
        within = [sum(any(r[: k + 1]) for r in rows) for k in range(trials)]
        first = [r[0] for r in rows]
        return {"n_episodes": n, "successes": per_k[0], "success_rate": per_k[0] / n, "ci95": [0.0, 1.0],
                "n_errors": 0, "mean_steps": 10.0, "trials": trials,
                "per_trial": [{"trial": k, "n": n, "successes": s, "success_rate": s / n, "ci95": [0.0, 1.0]}
                              for k, s in enumerate(per_k)],
                "success_within_k": [{"trial": k, "n": n, "successes": s, "success_rate": s / n, "ci95": [0.0, 1.0]}
                                     for k, s in enumerate(within)],
                "adaptation": [{"trial": k, "delta": cmp.delta, "ci95": cmp.ci95, "p_value": cmp.p_value, "n": n,
                                "gained": cmp.gained, "lost": cmp.lost}
                               for k in range(1, trials) for cmp in [compare_paired(first, [r[k] for r in rows])]]}

    tasks = [{"task": t, "description": t, "group": None,
              **block([effective[(t, e)] for e in range(len(eps))])} for t, eps in outcomes.items()]
    results = {"suite": "synthetic", "policy": policy, "complete": True,
               "config": {"suite": "synthetic", "protocol": "standard", "protocol_settings": {"max_steps": 10},
                          "stop_on_success": True, "trials": trials, "seed": 0, "tasks": list(outcomes),
                          "policy": policy, "episodes_per_task": max(len(eps) for eps in outcomes.values())},
               "provenance": {}, "tasks": tasks, "groups": {},
               "overall": {**block(list(effective.values())), "eval_s": 1.0}}
    (path / "results.json").write_text(json.dumps(results))
    return path


def libero_suite_copy(tmp_path, base, task_indices, name, changes=None):
    """A copy of ``suites/<base>.toml`` with only the tasks at ``task_indices`` and ``changes`` (old -> new text:
    a smaller image, a shorter step limit) applied once each; each old text must be there (the copy follows the
    shipped suite or fails loudly). Everything else -- cameras, settle steps, init states -- as shipped."""
    lines = (TESTS.parent / "suites" / f"{base}.toml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("tasks = ["))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "]")
    tasks = [lines[start + 1 + i] for i in task_indices]
    body = "\n".join([*lines[:start], "tasks = [", *tasks, "]", *lines[end + 1:]])
    for old, new in {f'name = "{base}"': f'name = "{name}"', **(changes or {})}.items():
        assert old in body, f"suites/{base}.toml no longer holds {old!r}: update this copy"
        body = body.replace(old, new, 1)
    path = tmp_path / f"{name}.toml"
    path.write_text(body)
    return path
