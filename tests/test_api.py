"""``lerobench.evaluate`` from a training loop: in-memory policies, the CLI's defaults, nothing leaked (issue 29)."""

import gc
import inspect
import itertools
import json
import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

import lerobench
from lerobench.core.trials import pass_at_k, unbiased_pass_at_k
from lerobench.errors import ConfigError

pytestmark = pytest.mark.sim  # every test here drives a real simulator

torch = pytest.importorskip("torch")
pytest.importorskip("metaworld")


def test_the_api_and_the_cli_take_the_same_settings_with_the_same_defaults():
    """One declaration (plan/options.py): ``lerobench eval`` and ``lerobench.evaluate`` take the same settings
    under the same names with the same defaults (and ``RunSettings`` too); the only differences are the declared
    ``CLI_ONLY`` and ``API_ONLY`` ones, so a new setting cannot reach one and be forgotten in the other."""
    import dataclasses

    import typer.main

    from lerobench.cli import app
    from lerobench.plan.options import AFTER_RUN, API_ONLY, CLI_ONLY, SETTINGS
    from lerobench.plan.planner import RunSettings

    command = typer.main.get_command(app).commands["eval"]
    cli = {p.name: p.default for p in command.params}
    fields = {f.name: f.default for f in dataclasses.fields(RunSettings)}
    api = {name: p.default for name, p in inspect.signature(lerobench.evaluate).parameters.items()}
    assert set(cli) - set(api) == set(CLI_ONLY), set(cli) - set(api)
    assert set(api) - set(cli) == set(API_ONLY), set(api) - set(cli)
    assert set(SETTINGS) <= set(fields)
    for name, setting in {**SETTINGS, **AFTER_RUN}.items():
        on_cli = tuple(cli[name]) if isinstance(cli[name], list) else cli[name]
        assert on_cli == api[name] == setting.default, name
        if name in SETTINGS:
            assert fields[name] == setting.default, name
    assert cli["tasks"] is api["tasks"] is None and cli["output"] is api["output"] is None
    assert "evaluate" in dir(lerobench) and "compare" in dir(lerobench) and "Any" not in dir(lerobench)


def test_an_unguarded_script_gets_the_clis_rate(tmp_path):
    """A plain script (no ``__main__`` guard) used to re-run itself in every simulator worker: 0%, exit 0."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(
        "import lerobench\n"
        "r = lerobench.evaluate('metaworld-expert', 'metaworld_mt10', tasks=['reach-v3', 'push-v3'], episodes=3,\n"
        "                       max_steps=60, videos=1, batch_size=2, output='run')\n"
        "print('RATE', r.success_rate, r.n_errors)\n")
    env = {**os.environ, "MUJOCO_GL": "egl"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "RuntimeError" not in done.stderr, done.stderr
    cli = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--suite", "metaworld_mt10", "--tasks",
                          "reach-v3,push-v3", "--policy", "metaworld-expert", "--episodes", "3", "--max-steps", "60",
                          "--videos", "0", "--output", str(tmp_path / "cli")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    document = json.loads((tmp_path / "cli" / "results.json").read_text())
    rate = document["overall"]["success_rate"]
    assert 0 < rate < 1  # successes and failures: a rate that a dead worker could not fake
    assert f"RATE {rate} 0" in done.stdout, done.stdout


@pytest.mark.parametrize("executor", ["vector", "processes"])
def test_a_worker_that_dies_warns_raises_past_max_errors_and_never_gives_a_silent_zero(tmp_path, executor):
    """A real worker death (crash_backend: os._exit at episode 1, step 3), not a mocked error record."""
    from helpers import crash_suite

    suite = str(crash_suite(tmp_path, "exit", crash_episode=1))
    kwargs = dict(videos=0, executor=executor, **({"batch_size": 2} if executor == "vector" else {"workers": 2}))
    with pytest.warns(lerobench.EpisodeErrorWarning, match="1 episode ended in an error.*episode 1"):
        results = lerobench.evaluate("random", suite, **kwargs)
    assert results.n_errors == 1 and results.n_episodes == 4
    with pytest.raises(lerobench.EpisodeErrors, match="more than max_errors=0") as caught:
        lerobench.evaluate("random", suite, max_errors=0, **kwargs)
    assert caught.value.results.n_errors == 1
    (tmp_path / "all").mkdir()  # one episode, its worker dies (a worker process: os._exit would end pytest)
    with pytest.raises(lerobench.EpisodeErrors, match="every episode .1. ended in an error"):
        lerobench.evaluate("random", str(crash_suite(tmp_path / "all", "exit", crash_episode=0)), episodes=1,
                           videos=0, executor="processes", workers=1)


def _settled_thread_count(quiet_s=0.3, limit_s=10.0):
    """Live threads once the count held still for ``quiet_s``: pool threads that were told to stop take a moment
    to end on a busy machine, which is not a leak (a leak grows from one evaluation to the next)."""
    deadline, last, since = time.monotonic() + limit_s, threading.active_count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = threading.active_count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


def _memory():
    """(resident MB, live Python objects) after a full collection: a leak shows as a trend in either.

    ``malloc_trim`` first: glibc keeps freed heap pages mapped (tens of MB here, varying call to call), which is
    not memory the evaluation holds.
    """
    import ctypes

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return resident, len(gc.get_objects())


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(39, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4), torch.nn.Tanh())


@pytest.mark.slow
def test_a_training_loop_evaluates_five_times_without_leaks(tmp_path):
    """A torch MLP trained a few steps, evaluated every few steps: flat memory, state restored, no leftovers."""
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    rss, rates, children, live_threads = [], [], [], []
    for k in range(5):
        for _ in range(3):  # "training": pull the actions toward zero on random states
            loss = model(torch.randn(16, 39)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results = lerobench.evaluate(model, "smoke", episodes=2, videos=0, log_step=k)
        rates.append(results.success_rate)
        assert results.run_dir is None and results.n_episodes == 4 and len(results.episodes) == 4
        assert results.document["config"]["batch_invariant"] == "verified"
        assert model.training and torch.is_grad_enabled() == grad and torch.get_num_threads() == threads
        assert not torch.are_deterministic_algorithms_enabled()
        rss.append(_memory())
        children.append(len(multiprocessing.active_children()))
        live_threads.append(_settled_thread_count())
    # flat after the first evaluation (which loads what every later one reuses): resident memory within 5%,
    # and no Python objects piling up
    assert max(r for r, _ in rss[1:]) <= rss[0][0] * 1.05, rss
    assert rss[-1][1] <= rss[1][1] * 1.01, rss
    # a leak grows from one evaluation to the next; a late-ending thread of an earlier one may lower the count
    assert children == [0] * 5 and max(live_threads[1:]) <= live_threads[0], (children, live_threads)
    assert not list(tmp_path.iterdir())  # nothing written anywhere we own either


def test_twenty_calls_leak_nothing():
    model = _mlp()
    rss = []
    for i in range(20):
        lerobench.evaluate(model, "smoke", episodes=1, videos=0, max_steps=20)
        rss.append(_memory())
        if i == 0:  # the first call makes what every later one reuses (the process's call pool and its threads)
            after_first = threading.active_count()
    # no thread more than the first call left (a thread of an earlier test in this process may have ended since)
    assert threading.active_count() <= after_first and not multiprocessing.active_children()
    assert rss[-1][0] <= rss[0][0] * 1.05 and rss[-1][1] <= rss[1][1] * 1.01, rss


def test_output_writes_the_usual_run_directory_and_matches_the_cli(tmp_path):
    from typer.testing import CliRunner

    from lerobench.cli import app

    results = lerobench.evaluate("metaworld-expert", "smoke", episodes=2, videos=0, output=tmp_path / "api")
    assert results.run_dir == tmp_path / "api" and (tmp_path / "api" / "results.json").is_file()
    cli = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--episodes", "2", "--videos", "0",
                                   "--output", str(tmp_path / "cli")])
    assert cli.exit_code == 0, cli.output
    document = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert [(t["task"], t["successes"]) for t in document["tasks"]] == [(t.task, t.successes) for t in results.tasks]
    assert results.task("reach-v3").ci95 == tuple(document["tasks"][0]["ci95"])


def test_an_object_reused_across_runs_is_checked_in_each():
    from lerobench.policies.experts.metaworld import make_metaworld_expert
    from lerobench.policies.serve import suite_context

    policy = make_metaworld_expert(suite_context("smoke"))
    for _ in range(2):
        results = lerobench.evaluate(policy, "smoke", episodes=1, videos=0, max_steps=20)
        assert results.document["config"]["batch_invariant"] == "verified"


def test_an_in_memory_policy_never_goes_to_worker_processes():
    with pytest.raises(ConfigError, match="in-memory policy runs in this process"):
        lerobench.evaluate(_mlp(), "smoke", episodes=1, videos=0, executor="processes")


def test_a_module_on_its_device_and_mode_comes_back_as_it_was():
    model = _mlp().eval()
    lerobench.evaluate(model, "smoke", episodes=1, videos=0, max_steps=10)
    assert not model.training and next(model.parameters()).device.type == "cpu"


def test_unbiased_pass_at_k_matches_exact_enumeration():
    for n in range(1, 6):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                exact = sum(any(s) for s in subsets) / len(subsets)
                assert unbiased_pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    table = [[False, True, False], [False, False, False], [True, True, True]]
    rows = pass_at_k(table)
    assert [r["within_first_k"] for r in rows] == [1 / 3, 2 / 3, 2 / 3]
    assert rows[-1]["unbiased"] == pytest.approx(rows[-1]["within_first_k"])  # k = K: both are "any success"
    assert rows[0]["unbiased"] == pytest.approx((1 / 3 + 0 + 1) / 3)


def test_pass_at_k_in_a_three_trial_run(tmp_path):
    from typer.testing import CliRunner

    from lerobench.cli import app

    out = tmp_path / "trials"
    result = CliRunner().invoke(app, ["eval", "--suite", "metaworld_ml1_reach", "--policy", "metaworld-adaptive-reach",
                                      "--trials", "3", "--episodes", "3", "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "results.json").read_text())
    overall = document["overall"]["pass_at_k"]
    assert [r["k"] for r in overall] == [1, 2, 3]
    assert overall[0]["within_first_k"] == document["overall"]["success_rate"]
    assert all(a["within_first_k"] <= b["within_first_k"] for a, b in zip(overall, overall[1:], strict=False))
    assert "pass@3" in result.output
    compared = CliRunner().invoke(app, ["compare", str(out), str(out)])
    assert compared.exit_code == 0 and "pass@3" in compared.output, compared.output
    episodes = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    by_episode = {}
    for e in episodes:
        by_episode.setdefault(e["episode"], []).append(e["success"])
    assert overall[2]["within_first_k"] == np.mean([any(v) for v in by_episode.values()])


def test_a_lerobot_policy_object_with_its_processors(tmp_path):
    """LeRobot's training loop holds the policy and its processors in memory: evaluated as they are."""
    pytest.importorskip("lerobot")
    from test_lerobot import save_tiny_act

    from lerobench.policies.lerobot_policy import _import_lerobot

    path = save_tiny_act(tmp_path / "act")
    _import_lerobot()
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    policy = ACTPolicy.from_pretrained(str(path))
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(path))
    policy.train()
    common = dict(tasks=["reach-v3"], episodes=2, videos=0, max_steps=30)
    in_memory = lerobench.evaluate(policy, "metaworld_mt10", preprocessor=pre, postprocessor=post, **common)
    from_disk = lerobench.evaluate(f"lerobot:{path}", "metaworld_mt10", **common)
    assert policy.training  # its mode is the training loop's again
    assert [(e.episode, e.steps, e.return_) for e in in_memory.episodes] == \
        [(e.episode, e.steps, e.return_) for e in from_disk.episodes]
    with pytest.raises(ConfigError, match="preprocessor and postprocessor"):
        lerobench.evaluate(policy, "metaworld_mt10", **common)
