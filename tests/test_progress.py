"""Task progress (issue 62 items 1 and 4): each benchmark's own definition read from the real simulators, recorded
per episode and per trial, and its mean with an interval whose coverage is checked by simulation."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.core.progress import PROGRESS_NOTE, progress_block, progress_by_episode, progress_differences
from lerobench.core.records import EpisodeRecord
from lerobench.stats.bounded import (
    BETTING_METHOD,
    HB_METHOD,
    betting_interval,
    hoeffding_bentkus_interval,
)

runner = CliRunner()

LIBERO_TWO_CONDITIONS = "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it"
"""libero_10 task 2: (And (Turnon flat_stove_1) (On moka_pot_1 flat_stove_1_cook_region))."""


# -- the intervals ---------------------------------------------------------------------------------------------------
DISTRIBUTIONS = {
    "beta(0.5, 0.5)": (lambda rng, n: rng.beta(0.5, 0.5, n), 0.5),
    "beta(8, 1)": (lambda rng, n: rng.beta(8, 1, n), 8 / 9),
    "0 or 1, p 0.95": (lambda rng, n: (rng.random(n) < 0.95).astype(float), 0.95),
    "0.2 or 0.9, p 0.7": (lambda rng, n: np.where(rng.random(n) < 0.7, 0.9, 0.2), 0.7 * 0.9 + 0.3 * 0.2),
}


def _coverage(interval, draw, mean, n, sims, seed=0):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        lo, hi = interval(draw(rng, n))
        hits += lo <= mean <= hi
    return hits / sims


def _t_interval(x):
    """The normal-theory interval the module's docstring warns about: the negative control."""
    x = np.asarray(x)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x)) if len(x) > 1 else 0.0
    return (x.mean() - half, x.mean() + half)


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 50, 200])
def test_the_betting_interval_covers_at_least_95_percent_on_beta_and_two_point_distributions(n):
    """1,000 simulated runs per cell: a check an interval at 93% would fail (1.5% standard error at most)."""
    for name, (draw, mean) in DISTRIBUTIONS.items():
        coverage = _coverage(betting_interval, draw, mean, n, sims=1000)
        assert coverage >= 0.95, (name, n, coverage)


@pytest.mark.slow
def test_the_same_check_fails_a_normal_theory_interval():
    """The coverage check can fail: at n = 10 a t-interval on a 95% 0-or-1 variable covers ~40% (all ones: [1, 1])."""
    draw, mean = DISTRIBUTIONS["0 or 1, p 0.95"]
    assert _coverage(_t_interval, draw, mean, 10, sims=1000) < 0.95
    draw, mean = DISTRIBUTIONS["beta(8, 1)"]
    assert _coverage(_t_interval, draw, mean, 10, sims=1000) < 0.95


@pytest.mark.slow
@pytest.mark.parametrize("per_task", [2, 10, 40])
def test_hoeffding_bentkus_covers_the_mean_over_tasks_of_different_distributions(per_task):
    """Five tasks, each its own distribution (one never progresses, one always finishes): the pooled interval
    covers the mean of the tasks' means in at least 95% of 1,000 simulated runs."""
    tasks = [lambda rng, n: np.zeros(n), lambda rng, n: np.ones(n), lambda rng, n: rng.beta(0.5, 0.5, n),
             lambda rng, n: np.where(rng.random(n) < 0.3, 1.0, 0.1), lambda rng, n: rng.beta(2, 5, n)]
    mean = float(np.mean([0.0, 1.0, 0.5, 0.3 + 0.07, 2 / 7]))

    def draw(rng, n):
        return np.concatenate([task(rng, per_task) for task in tasks])

    assert _coverage(hoeffding_bentkus_interval, draw, mean, per_task, sims=1000) >= 0.95


def _brute_force_betting(x, alpha=0.05, grid=4001):
    """The same capital processes written as plain loops over a grid of candidate means (no bisection)."""
    n = len(x)
    bets, var_sum = [], 0.25
    for t, value in enumerate(x, start=1):
        sigma2 = var_sum / t  # σ̂²_{t-1}: pseudo-observation 1/4 with weight 1
        bets.append(math.sqrt(2 * math.log(2 / alpha) / (n * sigma2)))
        var_sum += (value - (0.5 + sum(x[:t])) / (t + 1)) ** 2  # around μ̂_t
    kept = []
    for m in np.linspace(0, 1, grid):
        up = down = 0.0
        best_up = best_down = -math.inf
        for value, bet in zip(x, bets, strict=True):
            up += math.log1p(min(bet, 0.5 / m if m > 0 else math.inf) * (value - m))
            down += math.log1p(-min(bet, 0.5 / (1 - m) if m < 1 else math.inf) * (value - m))
            best_up, best_down = max(best_up, up), max(best_down, down)
        if best_up < math.log(2 / alpha) and best_down < math.log(2 / alpha):
            kept.append(m)
    return kept[0], kept[-1]


def test_the_betting_interval_is_the_set_a_brute_force_grid_keeps():
    rng = np.random.default_rng(3)
    for x in (rng.beta(2, 2, 12), np.where(rng.random(20) < 0.8, 1.0, 0.0), rng.beta(0.3, 0.3, 30)):
        lo, hi = betting_interval(x)
        blo, bhi = _brute_force_betting(list(x))
        step = 1 / 4000
        assert lo <= blo and hi >= bhi, ((lo, hi), (blo, bhi))
        assert blo - lo <= step and hi - bhi <= step, ((lo, hi), (blo, bhi))


def test_hoeffding_bentkus_is_never_wider_than_hoeffding_and_exact_at_the_edges():
    from scipy.stats import binom

    for x in ([1.0] * 50, [0.5] * 40 + [0.9] * 10, [0.0] * 30):
        lo, hi = hoeffding_bentkus_interval(x)
        n, mean = len(x), sum(x) / len(x)
        half = math.sqrt(math.log(2 / 0.025) / (2 * n))  # Hoeffding's additive form at α/2 per side
        assert lo >= mean - half - 1e-9 and hi <= mean + half + 1e-9
        assert lo <= mean <= hi
    lo, hi = hoeffding_bentkus_interval([1.0] * 50)
    # all ones: Hoeffding's exp(-n kl(1, m)) = m^50 is below Bentkus's e · P(Binomial(50, m) ≥ 50) and binds
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 50), abs=1e-8)
    assert math.e * binom.sf(49, 50, lo) > 0.025
    lo, hi = hoeffding_bentkus_interval([0.5] * 20)  # inside: Bentkus's binomial tail (scipy's) binds
    assert math.e * binom.cdf(10, 20, hi) == pytest.approx(0.025, rel=1e-6)


def test_intervals_refuse_values_outside_0_1_and_hold_the_sample_mean():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        betting_interval([0.5, 1.2])
    x = [0.1, 0.9, 0.4, 0.4, 0.7]
    for interval in (betting_interval, hoeffding_bentkus_interval):
        lo, hi = interval(x)
        assert 0 <= lo <= np.mean(x) <= hi <= 1
    assert betting_interval([]) == (0.0, 1.0)


# -- the results block -------------------------------------------------------------------------------------------------
def _record(task, episode, progress=None, highest=None, error=None, trial=0, success=False):
    return EpisodeRecord(task=task, episode=episode, trial=trial, seed=episode, init_state=episode, success=success,
                         success_at_end=success, steps=5, return_=0.0, elapsed_s=0.1, error=error,
                         progress=progress, max_progress=highest)


def test_the_block_counts_an_error_as_zero_and_does_not_depend_on_finish_order():
    records = [_record("a", i, 0.2 * (i % 5), 0.25 * (i % 5)) for i in range(10)]
    records.append(_record("a", 10, error="simulator step failed: boom"))
    block = progress_block(records)
    assert block["n_episodes"] == 11 and block["ci95_method"] == BETTING_METHOD
    assert block["mean"] == pytest.approx(sum(0.25 * (i % 5) for i in range(10)) / 11, abs=1e-6)
    assert block["mean_at_end"] == pytest.approx(sum(0.2 * (i % 5) for i in range(10)) / 11, abs=1e-6)
    assert block["ci95"][0] <= block["mean"] <= block["ci95"][1]
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    assert progress_block(shuffled) == block
    two = progress_block([*records, _record("b", 0, 1.0, 1.0)])
    assert two["ci95_method"] == HB_METHOD


def test_lines_written_before_progress_existed_are_left_out_not_counted_zero():
    """A resumed or merged older run: its lines without progress (and without an error) are not zeros."""
    old = [_record("a", i, success=True) for i in range(4)]
    new = [_record("a", i, 1.0, 1.0, success=True) for i in range(4, 8)]
    block = progress_block([*old, *new])
    assert block["n_episodes"] == 4 and block["mean"] == 1.0
    assert progress_by_episode([*old, *new]) == {("a", i): 1.0 for i in range(4, 8)}


def test_a_backend_without_progress_gets_no_block_and_no_key():
    from lerobench.core.results import aggregate

    plain = [_record("a", i) for i in range(3)]
    assert progress_block(plain) is None and "progress" not in aggregate(plain)
    assert "progress" in aggregate([*plain, _record("a", 3, 0.5, 0.5)])


def test_paired_differences_are_in_index_order_over_common_episodes():
    a = [_record("t", 2, 0.0, 0.5), _record("t", 0, 0.0, 0.25), _record("t", 1, error="x")]
    b = [_record("t", 1, 1.0, 1.0), _record("t", 0, 0.0, 0.0), _record("u", 0, 1.0, 1.0)]
    assert progress_by_episode(a) == {("t", 0): 0.25, ("t", 1): 0.0, ("t", 2): 0.5}
    assert progress_differences(a, b) == [-0.25, 1.0]


# -- real simulators ---------------------------------------------------------------------------------------------------
def _eval(out: Path, *args: str):
    result = runner.invoke(app, ["eval", *args, "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted(lines, key=lambda e: (e["task"], e["episode"], e["trial"])), \
        json.loads((out / "results.json").read_text()), " ".join(result.output.split())


@pytest.mark.sim
def test_metaworld_progress_is_its_reward_scale_and_the_expert_beats_zero(tmp_path):
    pytest.importorskip("metaworld")
    common = ["--suite", "smoke", "--episodes", "2", "--max-steps", "100"]
    expert, expert_results, shown = _eval(tmp_path / "expert", *common, "--policy", "metaworld-expert")
    zero, zero_results, _ = _eval(tmp_path / "zero", *common, "--policy", "zero")
    assert all(e["success"] and e["progress"] == e["max_progress"] == 1.0 for e in expert)  # solved: 1
    assert all(not e["success"] and 0.0 < e["progress"] <= e["max_progress"] < 0.5 for e in zero), zero
    for task_e, task_z in zip(expert_results["tasks"], zero_results["tasks"], strict=True):
        pe, pz = task_e["progress"], task_z["progress"]
        assert pe["mean"] == 1.0 > pz["mean"] and pe["ci95_method"] == BETTING_METHOD
        assert pz["ci95"][0] <= pz["mean"] <= pz["ci95"][1]
        assert pz["mean"] == pytest.approx(np.mean([e["max_progress"] for e in zero if e["task"] == task_z["task"]]),
                                           abs=1e-6)
    assert zero_results["overall"]["progress"]["ci95_method"] == HB_METHOD
    assert " ".join(PROGRESS_NOTE.split()) in shown  # the table's progress columns, explained under it
    _report_shows_progress(tmp_path, tmp_path / "zero", zero_results)


def _report_shows_progress(tmp_path, run, results):
    """The HTML report's task table has the progress columns with the run's numbers, and none without progress."""
    import shutil

    from lerobench.stats.intervals import unit_interval

    html = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(run), "--output", str(html)])
    assert result.exit_code == 0, result.output
    page = html.read_text()
    assert "<th>progress</th><th>progress 95% CI</th>" in page
    for task in results["tasks"]:
        p = task["progress"]
        assert f"<td>{p['mean']:.2f}</td><td>{unit_interval(p['ci95'])}</td>" in page
    bare = tmp_path / "bare"
    shutil.copytree(run, bare)
    for block in (*results["tasks"], *results["groups"].values(), results["overall"]):
        block.pop("progress")
    (bare / "results.json").write_text(json.dumps(results))
    result = runner.invoke(app, ["report", str(bare), "--output", str(tmp_path / "bare.html")])
    assert result.exit_code == 0, result.output
    assert "progress 95% CI" not in (tmp_path / "bare.html").read_text()


@pytest.mark.sim
def test_metaworld_progress_is_identical_at_batch_1_and_3(tmp_path):
    pytest.importorskip("metaworld")
    common = ["--suite", "smoke", "--tasks", "reach-v3", "--policy", "random", "--episodes", "3",
              "--max-steps", "30", "--seed", "5"]
    one, one_results, _ = _eval(tmp_path / "b1", *common, "--batch-size", "1")
    three, three_results, _ = _eval(tmp_path / "b3", *common, "--batch-size", "3")
    key = [(e["episode"], e["progress"], e["max_progress"]) for e in one]
    assert key == [(e["episode"], e["progress"], e["max_progress"]) for e in three]
    assert len({k[2] for k in key}) == 3  # the episodes really differ
    assert one_results["tasks"][0]["progress"] == three_results["tasks"][0]["progress"]


@pytest.mark.sim
def test_each_trial_line_carries_its_own_progress_beside_success(tmp_path):
    """metaworld-adaptive-reach misses on trial 0 and reaches on trial 1: progress per trial follows each trial."""
    pytest.importorskip("metaworld")
    lines, results, _ = _eval(tmp_path / "t", "--suite", "metaworld_ml1_reach", "--policy",
                              "metaworld-adaptive-reach", "--trials", "2", "--episodes", "3", "--max-steps", "120")
    assert len(lines) == 6 and all("progress" in e and "max_progress" in e for e in lines)
    for e in lines:
        assert (e["max_progress"] == 1.0) == e["success"]  # Meta-World: 1 exactly on a solved step
    per_trial = results["overall"]["per_trial"]
    for k in (0, 1):
        mine = [e["max_progress"] for e in lines if e["trial"] == k]
        assert per_trial[k]["progress"]["mean"] == pytest.approx(np.mean(mine), abs=1e-6)
        assert per_trial[k]["success_rate"] == np.mean([e["success"] for e in lines if e["trial"] == k])
    assert per_trial[1]["progress"]["mean"] > per_trial[0]["progress"]["mean"]
    assert results["overall"]["progress"]["mean"] == per_trial[0]["progress"]["mean"]  # the headline: trial 0


def _libero_env(task_name: str, max_steps: int):
    from dataclasses import replace

    from lerobench.envs.base import EnvSpec, LazyTaskEnv
    from lerobench.suite.registry import get_backend, load_suite

    suite = load_suite("libero_10")
    backend = get_backend(suite.backend)
    task = next(t for t in suite.tasks if t.name == task_name)
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=task,
                   protocol=replace(suite.protocol(), max_steps=max_steps), seed=0, state_dim=backend.state_dim,
                   action_dim=backend.action_dim, cameras=(), backend_options=suite.backend_options)
    return LazyTaskEnv(spec, backend)


@pytest.mark.sim
def test_libero_progress_counts_goal_conditions_with_libero_own_predicates():
    """Zero actions on a two-condition goal: neither holds (stove off, pot beside it), progress 0 at every step;
    the simulator's count equals LIBERO's own conjunction, evaluated here through its problem class."""
    pytest.importorskip("libero.libero")
    env = _libero_env(LIBERO_TWO_CONDITIONS, max_steps=5)
    try:
        env.reset(options={"episodes": [0]})
        for _ in range(5):
            _, _, _, truncated, info = env.step(np.zeros(7, dtype=np.float32))
        end = info["episode_end"]
        assert truncated and end["progress"] == end["max_progress"] == 0.0 and not end["success"]
        problem = env._raw._live().env  # noqa: SLF001 - LIBERO's own problem env, read to cross-check
        goal = problem.parsed_problem["goal_state"]
        assert len(goal) == 2 and not problem._check_success()  # noqa: SLF001
        assert env._raw.progress() == sum(map(bool, map(problem._eval_predicate, goal))) / 2  # noqa: SLF001
    finally:
        env.close()


@pytest.mark.sim
@pytest.mark.slow
def test_libero_expert_stopped_halfway_has_progress_one_half(tmp_path):
    """The privileged expert on a two-condition goal, cut at 150 steps: one condition holds, progress 0.5."""
    pytest.importorskip("libero.libero")
    (line,), results, shown = _eval(tmp_path / "half", "--suite", "libero_10", "--tasks", LIBERO_TWO_CONDITIONS,
                                    "--policy", "libero-expert", "--episodes", "1", "--max-steps", "150")
    assert not line["success"] and line["progress"] == line["max_progress"] == 0.5, line
    assert results["tasks"][0]["progress"]["mean"] == 0.5 and " ".join(PROGRESS_NOTE.split()) in shown


@pytest.mark.sim
@pytest.mark.slow
def test_libero_expert_that_succeeds_has_progress_one(tmp_path):
    pytest.importorskip("libero.libero")
    (line,), results, _ = _eval(tmp_path / "full", "--suite", "libero_10", "--tasks", LIBERO_TWO_CONDITIONS,
                                "--policy", "libero-expert", "--episodes", "1")
    assert line["success"] and line["progress"] == line["max_progress"] == 1.0, line
    assert results["tasks"][0]["progress"]["mean"] == 1.0
