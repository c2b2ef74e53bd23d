"""A policy call that never returns ends the run at its deadline, named, with every finished episode kept.

Real Meta-World runs in a subprocess (the CLI a user runs): the policy ``fixture_policies:make_hangs_on_call``
hangs on the call numbered ``LEROBENCH_TEST_HANG_CALL``; unset, the same spec finishes the run on ``--resume``.
"""

import json
import re
import subprocess
import sys
import time

import pytest
from helpers import subprocess_env

from lerobench.rollout.deadline import FIRST_CALL_S, FLOOR_S, CallDeadline

pytest.importorskip("metaworld")

POLICY = "fixture_policies:make_hangs_on_call"
EXECUTORS = {"inline": ["--executor", "inline"], "vector-3": ["--executor", "vector", "--batch-size", "3"],
             "processes": ["--executor", "processes", "--workers", "2"]}


def _eval(out, extra, hang_call=None, timeout=240):
    cmd = [sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--policy", POLICY, "--episodes", "3",
           "--max-steps", "5", "--videos", "0", "--seed", "1", "--policy-timeout", "4", "--progress-interval", "0.5",
           "--output", str(out), *extra]
    env = subprocess_env()
    env.pop("LEROBENCH_TEST_HANG_CALL", None)
    if hang_call is not None:
        env["LEROBENCH_TEST_HANG_CALL"] = str(hang_call)
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.perf_counter() - started


def _episodes(out):
    return sorted((e["task"], e["episode"], e["success"], e["steps"], round(e["return"], 6))
                  for e in map(json.loads, (out / "episodes.jsonl").read_text().splitlines()))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_hung_call_ends_the_run_named_at_its_deadline_and_resume_finishes_it(tmp_path, executor):
    out = tmp_path / "run"
    hung, took = _eval(out, EXECUTORS[executor], hang_call=8)
    text = hung.stdout + hung.stderr
    assert hung.returncode == 1, text
    assert "Traceback" not in text, text
    error = [line for line in text.splitlines() if "has not returned" in line]
    assert len(error) == 1, text
    named = re.search(r"suite 'smoke', task '([\w-]+)', episode (\d+): policy call (\d+) has not returned after 4 s "
                      r"\(deadline 4 s, --policy-timeout\)", error[0])
    assert named, error[0]
    task, episode, call = named.group(1), int(named.group(2)), int(named.group(3))
    assert took < 120, f"the run took {took:.0f} s to end after a 4 s deadline"
    # the progress lines name the late call before the deadline; a worker process's is relayed to the driver (both
    # workers hang there, each on its own 8th call: the line may name the other one)
    named_call = (r"call \d+, task '[\w-]+', episode \d+" if executor == "processes" else
                  re.escape(f"call {call}, task '{task}', episode {episode}"))
    waiting = [line for line in hung.stdout.splitlines() if line.startswith(tuple("0123456789"))
               and re.search(rf"progress smoke: .*; waiting \d+ s for the policy: {named_call}( and \d+ more)? "
                             r"\(the run ends at 4 s\)", line)]
    assert waiting, hung.stdout
    kept = _episodes(out)
    assert 0 < len(kept) < 6, kept  # some episodes finished before the hang, none was invented after it
    failure = json.loads((out / "results.json").read_text())["failure"]
    assert (failure["type"], failure["task"], failure["episode"], failure["call"], failure["deadline_s"]) == \
        ("PolicyTimeout", task, episode, call, 4)
    stack = (out / "traceback.txt").read_text()
    assert "HANG_RELEASE.wait" in stack  # where the policy hangs, not where the rollout gave up

    resumed, _ = _eval(out, [*EXECUTORS[executor], "--resume"])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    whole, _ = _eval(tmp_path / "whole", EXECUTORS[executor])
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert _episodes(out) == _episodes(tmp_path / "whole") and len(_episodes(out)) == 6
    assert set(kept) <= set(_episodes(out))


def test_the_derived_deadline_follows_the_runs_own_call_times_with_a_generous_floor():
    derived = CallDeadline()
    assert derived.limit_s(None) == FIRST_CALL_S == 600  # a first call may load or compile a model
    assert derived.limit_s(0.002) == FLOOR_S == 120  # a fast policy still gets two minutes
    assert derived.limit_s(30.0) == 600  # a slow one twenty times its slowest call
    assert derived.notice_s(0.002) == 10 and derived.notice_s(30.0) == 150
    fixed = CallDeadline(4.0)
    assert fixed.limit_s(None) == fixed.limit_s(100.0) == 4 and fixed.notice_s(None) == 2
    assert "--policy-timeout" in fixed.source() and "--policy-timeout sets it" in derived.source()


def test_a_deadline_must_be_positive(tmp_path):
    done, _ = _eval(tmp_path / "o", ["--policy-timeout", "0"])
    assert done.returncode == 2 and "--policy-timeout" in done.stdout + done.stderr


def test_a_remote_policy_that_stops_answering_ends_the_run_the_same_way(tmp_path, monkeypatch):
    """``--policy ws://``: a server whose policy hangs (here, in this process) is named like a local one."""
    import threading

    import fixture_policies

    from lerobench.policies.serve import PolicyServer, suite_context

    monkeypatch.setenv("LEROBENCH_TEST_HANG_CALL", "4")
    fixture_policies.HangsOnCall.calls = 0
    server = PolicyServer(POLICY, suite_context("smoke"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "remote"
        cmd = [sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--policy", server.url, "--episodes",
               "2", "--max-steps", "5", "--videos", "0", "--policy-timeout", "3", "--output", str(out)]
        env = subprocess_env()
        env.pop("LEROBENCH_TEST_HANG_CALL", None)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    finally:
        fixture_policies.HANG_RELEASE.set()
        server.shutdown()
    text = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in text, text
    assert re.search(r"episode \d+: policy call \d+ has not returned after 3 s \(deadline 3 s", text), text
    assert json.loads((out / "results.json").read_text())["failure"]["type"] == "PolicyTimeout"
