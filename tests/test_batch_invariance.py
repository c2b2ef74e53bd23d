"""Neural policies give the same per-episode numbers at any batch size, executor and schedule (issues 26, 33).

Real torch models (an MLP, LeRobot ACT, a LeRobot diffusion policy with per-row noise) on the real Meta-World
simulator: bit-identical outcomes at --batch-size 1/3/8, processes, --parallel-tasks 2 and through
``serve --max-batch``, and results.json says ``verified`` because the run checked it. Unpadded calls
(``--call-width 0``, what landed main did) differ, and the run's own check says ``failed``.

Issue 33: the same for what the policy *saw* (each episode's observation digest), for policies reading a camera
(push-v3's first image was stale) and for a stochastic policy counting its own calls (the check's probes used to
advance its counters); ``compare`` says the inputs were identical, and names the first differing read of a run
whose simulator is stale on purpose.
"""

import json

import numpy as np
import pytest
from helpers import write_suite
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.core.call_stats import model_calls
from lerobench.policies.base import PolicyContext
from lerobench.policies.loading import load_policy
from lerobench.policies.width import call_at_width, pad_rows, take_rows
from lerobench.suite.registry import load_suite
from lerobench.system import usable_cores

pytestmark = pytest.mark.sim  # every test here drives a real simulator

torch = pytest.importorskip("torch")
pytest.importorskip("metaworld")
runner = CliRunner()
TASKS = ["--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3", "--videos", "0"]


def _context(call_width=None):
    suite = load_suite("metaworld_mt10")
    return PolicyContext(suite=suite.name, backend="metaworld", tasks=suite.tasks, action_dim=4, state_dim=39,
                         cameras=(), image_size=(64, 64), call_width=call_width)


def _observation(slots, seed=0):
    n = len(slots)
    state = np.random.default_rng(seed).normal(size=(64, 39)).astype(np.float32)[slots]
    return {"state": state, "slot": np.asarray(slots), "episode_start": np.ones(n, bool), "task": ["reach-v3"] * n,
            "episode_seed": np.asarray(slots) * 7 + 1, "call": np.zeros(n, np.int64), "active": np.ones(n, bool)}


def _outcomes(out):
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["task"], e["episode"], e["success"], e["steps"], e["return"]) for e in lines)


def _seen(out):
    """Outcomes and what the policy read, per (task, episode, trial)."""
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["task"], e["episode"], e["trial"], e["success"], e["steps"], e["return"], e["obs_digest"],
                   e["obs_reads"]) for e in lines)


def small_camera_suite(tmp_path, backend="metaworld", tasks=("reach-v3", "push-v3"), size=64, steps=20):
    """Meta-World (push-v3 included) at a small image size, the policy's camera corner2."""
    return write_suite(tmp_path / f"{backend.replace(':', '_')}_{size}.toml", "small_camera", backend, tasks, 3,
                       protocol=f'max_steps = {steps}\nimage_size = [{size}, {size}]\ncameras = ["corner2"]\n'
                                'flip_images = true')


SCHEDULES = {"b1": ["--batch-size", "1"], "b3": ["--batch-size", "3"], "b8": ["--batch-size", "8"],
             "processes": ["--executor", "processes", "--workers", "2"],
             "parallel": ["--batch-size", "2", "--parallel-tasks", "2"]}
"""The schedules issue 33's promise covers: each episode's outcome and inputs are the same under all of them."""


def _same_everywhere(tmp_path, suite, policy, schedules=SCHEDULES, *extra):
    """Run ``policy`` under every schedule; assert identical outcomes and observation digests; return the dirs."""
    reference, dirs = None, {}
    for name, args in schedules.items():
        dirs[name] = tmp_path / name
        result = runner.invoke(app, ["eval", "--suite", str(suite), "--policy", policy, "--videos", "0",
                                     "--output", str(dirs[name]), *args, *extra])
        assert result.exit_code == 0, result.output
        config = json.loads((dirs[name] / "results.json").read_text())["config"]
        assert config["batch_invariant"] == "verified", (name, config["batch_invariance"])
        seen = _seen(dirs[name])
        assert all(s[6] is not None and s[7] > 0 for s in seen), seen
        reference = reference or seen
        assert seen == reference, name
    return dirs


def _eval(out, *args):
    result = runner.invoke(app, ["eval", *TASKS, "--output", str(out), *args])
    assert result.exit_code == 0, result.output
    return json.loads((out / "results.json").read_text())


def test_padding_marks_rows_and_keeps_real_rows_first():
    obs = _observation([3, 5])
    padded, texts = pad_rows(obs, ["a", "b"], 4)
    assert padded["padding"].tolist() == [False, False, True, True]
    assert padded["slot"].tolist() == [3, 5, -1, -1] and texts == ["a", "b", "b", "b"]
    assert np.array_equal(padded["state"][2], obs["state"][1])
    shapes = []
    call_at_width(lambda o, t: shapes.append(len(o["state"])) or np.zeros((len(o["state"]), 4)), _observation(
        list(range(11))), ["x"] * 11, 4)
    assert shapes == [4, 4, 4]  # larger requests split into calls of exactly the width
    assert model_calls(11, 4) == (3, 1) and model_calls(2, 8) == (1, 6) and model_calls(5, 1) == (5, 0)
    assert model_calls(5, 0) == (1, 0) and model_calls(0, 8) == (0, 0)


@pytest.mark.parametrize("width", [1, 8, 16])
def test_mlp_rows_do_not_depend_on_neighbours_count_or_position(width):
    policy = load_policy("fixture_policies:make_mlp", _context(width))
    alone = {s: policy.select_action(_observation([s]), ["x"])[0] for s in range(20)}
    for slots in ([0, 1, 2], [5, 2, 9, 0], list(range(19, -1, -1)), [7] + list(range(10))):
        out = policy.select_action(_observation(slots), ["x"] * len(slots))
        for k, s in enumerate(slots):
            assert np.array_equal(out[k], alone[s]), (width, slots, s)


def test_thread_count_does_not_change_rows():
    policy = load_policy("fixture_policies:make_mlp", _context())
    threads = torch.get_num_threads()
    try:
        got = []
        for n in (1, 2, 4):
            torch.set_num_threads(n)
            got.append(policy.select_action(_observation(list(range(13))), ["x"] * 13))
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])


@pytest.mark.slow
def test_mlp_same_numbers_at_every_batch_size_and_executor(tmp_path):
    """The issue's MLP: batch 1 vs 3 vs 8, processes and parallel tasks: identical and verified."""
    common = ["--policy", "fixture_policies:make_mlp", "--episodes", "3", "--max-steps", "80"]
    runs = {"b1": ["--batch-size", "1"], "b3": ["--batch-size", "3"], "b8": ["--batch-size", "8"],
            "processes": ["--executor", "processes", "--workers", "2"],
            "parallel": ["--batch-size", "2", "--parallel-tasks", "2"]}
    reference = None
    for name, extra in runs.items():
        results = _eval(tmp_path / name, *common, *extra)
        config = results["config"]
        assert config["batch_invariant"] == "verified", (name, config["batch_invariance"])
        assert config["call_width"] == 1 and config["numerics"]["deterministic_algorithms"]
        outcomes = _outcomes(tmp_path / name)
        assert len(outcomes) == 6
        reference = reference or outcomes
        assert outcomes == reference, name


def test_unpadded_calls_differ_and_the_run_says_failed(tmp_path):
    """What landed main did (no fixed width): batch 1 and 3 give other returns, and the check catches it.

    The difference is made here, not hoped for from the CPU: ``make_position_dependent`` moves each row by 1e-7 x
    its position in a call of 3 (what CPU kernels were measured to do); whether this CPU's own kernels round
    differently at 1 and 3 rows is its math library's business, not lerobench's.
    """
    common = ["--policy", "fixture_policies:make_position_dependent", "--episodes", "3", "--max-steps", "60",
              "--call-width", "0"]
    one = _eval(tmp_path / "b1", *common, "--batch-size", "1")
    three = _eval(tmp_path / "b3", *common, "--batch-size", "3")
    assert _outcomes(tmp_path / "b1") != _outcomes(tmp_path / "b3")
    assert three["config"]["batch_invariant"] == "failed" and three["config"]["batch_invariance"]["max_abs_diff"] > 0
    assert one["config"]["call_width"] == 0
    # the call width is part of the treatment: resuming with another width is refused
    result = runner.invoke(app, ["eval", *TASKS, *common[:-2], "--batch-size", "1", "--resume",
                                 "--output", str(tmp_path / "b1")])
    assert result.exit_code == 2 and "call_width" in result.output


def test_batch_normalising_policy_fails_check_policy_and_its_eval_records_failed(tmp_path):
    """At a padded width (one-row calls would hide the batch statistics: BatchNorm refuses one row)."""
    result = runner.invoke(app, ["check-policy", "--policy", "fixture_policies:make_batch_norm", "--suite",
                                 "metaworld_mt10", "--json", "--call-width", "8"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    failed = {c["name"] for c in report["checks"] if c["status"] == "fail"}
    assert {"batch-invariant", "row isolation"} <= failed
    assert "normalise over the batch" in result.output
    results = _eval(tmp_path / "bn", "--policy", "fixture_policies:make_batch_norm", "--episodes", "2",
                    "--max-steps", "20", "--call-width", "8")
    assert results["config"]["batch_invariant"] == "failed"
    assert results["config"]["batch_invariance"]["max_abs_diff"] > 1e-3


@pytest.mark.parametrize("spec", ["fixture_policies:make_batch_centred", "fixture_policies:make_batch_norm"])
def test_a_row_mixing_policy_fails_check_policy_at_the_cpu_default_naming_the_cuda_shape(spec):
    """One row per call (the CPU default) hides rows mixed inside a call: every call shape is checked."""
    result = runner.invoke(app, ["check-policy", "--policy", spec, "--suite", "metaworld_mt10", "--json"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    report = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["shape: width 16"] == "fail" and status["shape: width 0"] == "fail"
    assert status["shape: cuda"] == "unchecked"  # no GPU here: never "pass"
    detail = next(c["detail"] for c in report["checks"] if c["name"] == "shape: width 16")
    assert "the CUDA default" in detail and "normalise over the batch" in detail


def test_check_policy_passes_a_conforming_policy():
    result = runner.invoke(app, ["check-policy", "--policy", "fixture_policies:make_mlp", "--suite",
                                 "metaworld_mt10", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert report["ok"] and status["batch-invariant"] == "pass"
    assert status["shape: width 1"] == status["shape: width 16"] == "pass" and status["shape: cuda"] == "unchecked"
    assert status["shape: width 0"] in ("pass", "warn")  # rounding by call size: what --call-width 0 accepts
    assert [r["rows"] for r in report["latency"]][:2] == [1, 2] and report["suggestion"]


@pytest.fixture(scope="module")
def lerobot_dirs(tmp_path_factory):
    pytest.importorskip("lerobot")
    from lerobot_fixtures import save_tiny_diffusion
    from test_lerobot import save_tiny_act

    root = tmp_path_factory.mktemp("lerobot")
    return {"act": save_tiny_act(root / "act"), "diffusion": save_tiny_diffusion(root / "diffusion")}


@pytest.mark.slow
def test_act_reading_an_image_same_outcomes_and_inputs_everywhere(tmp_path):
    """(b) A LeRobot ACT reading corner2 (64x64) and the state, on push-v3 and reach-v3: every schedule."""
    pytest.importorskip("lerobot")
    from test_lerobot import save_tiny_act

    policy = save_tiny_act(tmp_path / "act", image_key="observation.image", image_hw=(64, 64), n_action_steps=8)
    dirs = _same_everywhere(tmp_path, small_camera_suite(tmp_path, steps=16), f"lerobot:{policy}", SCHEDULES,
                            "--episodes", "2")
    if usable_cores() >= 2:  # batch 1's lone rows ran on every core, with the bits of batch 8's one-thread rows
        threads = json.loads((dirs["b1"] / "results.json").read_text())["config"]["batch_invariance"]["threads"]
        assert threads["status"] == "verified" and 2 in threads["counts"], threads


def test_act_with_a_camera_under_delay_returns_whole_chunks_and_the_same_episodes_everywhere(tmp_path):
    """LeRobot's chunk policies under RTC's delay (issue 43): ACT (chunk 10, n_action_steps 4) with a camera
    returns its whole chunk when the run needs more than 4 actions, at batch 1, 3 and on worker processes."""
    pytest.importorskip("lerobot")
    from test_lerobot import save_tiny_act

    policy = save_tiny_act(tmp_path / "act", image_key="observation.image", image_hw=(64, 64), chunk_size=10,
                           n_action_steps=4)
    schedules = {k: SCHEDULES[k] for k in ("b1", "b3", "processes")}
    dirs = _same_everywhere(tmp_path, small_camera_suite(tmp_path, steps=16), f"lerobot:{policy}", schedules,
                            "--episodes", "2", "--delay-steps", "3", "--replan-steps", "5")
    config = json.loads((dirs["b3"] / "results.json").read_text())["config"]
    assert config["delay_steps"] == 3 and config["replan_steps_executed"] == 5
    # not asked: the whole chunk with n_action_steps executed (4 <= chunk 10 - delay 3)
    again = runner.invoke(app, ["eval", "--suite", str(small_camera_suite(tmp_path, steps=16)), "--policy",
                                f"lerobot:{policy}", "--videos", "0", "--episodes", "1", "--delay-steps", "3",
                                "--output", str(tmp_path / "default")])
    assert again.exit_code == 0, again.output
    config = json.loads((tmp_path / "default" / "results.json").read_text())["config"]
    assert config["replan_steps_executed"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["act", "diffusion"])
def test_lerobot_policies_same_numbers_at_batch_1_3_8(tmp_path, lerobot_dirs, kind):
    common = ["--policy", f"lerobot:{lerobot_dirs[kind]}", "--episodes", "3", "--max-steps", "40" if kind == "act"
              else "24"]
    reference = None
    for batch in ("1", "3", "8"):
        results = _eval(tmp_path / batch, *common, "--batch-size", batch)
        assert results["config"]["batch_invariant"] == "verified", results["config"]["batch_invariance"]
        outcomes = _outcomes(tmp_path / batch)
        reference = reference or outcomes
        assert outcomes == reference, batch


def test_served_batched_mlp_gives_the_local_numbers(tmp_path):
    """``serve --max-batch 4`` stacks rows of 3 envs into calls: the numbers of a local run at batch 1."""
    pytest.importorskip("websockets")
    import threading

    from lerobench.policies.serve import PolicyServer, suite_context

    server = PolicyServer("fixture_policies:make_mlp", suite_context("metaworld_mt10"), port=0, max_batch=4,
                          max_wait_ms=20)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    common = ["--episodes", "3", "--max-steps", "60"]
    try:
        served = _eval(tmp_path / "served", "--policy", server.url, "--batch-size", "3", *common)
    finally:
        server.shutdown()
        thread.join(timeout=30)
    _eval(tmp_path / "local", "--policy", "fixture_policies:make_mlp", "--batch-size", "1", *common)
    assert served["config"]["batch_invariant"] == "verified", served["config"]["batch_invariance"]
    assert served["config"]["call_width"] == 1
    assert _outcomes(tmp_path / "served") == _outcomes(tmp_path / "local")


@pytest.mark.slow
def test_camera_policy_same_outcomes_and_inputs_everywhere_and_compare_says_so(tmp_path):
    """(a) A row-independent policy reading corner2 (push-v3 included): identical outcomes and digests under
    every schedule; ``compare`` of two batch sizes reports every paired episode's inputs identical."""
    suite = small_camera_suite(tmp_path)
    dirs = _same_everywhere(tmp_path, suite, "fixture_policies:make_declared_image_chunk")
    result = runner.invoke(app, ["compare", str(dirs["b1"]), str(dirs["b3"]), "--json"])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.stdout)["same_observations_throughout"]
    assert inputs == {"identical": 6, "different": 0, "unknown": 0, "first": None}


@pytest.mark.slow
def test_counting_stochastic_policy_is_untouched_by_the_check(tmp_path):
    """(c) Noise keyed on its own call count, ``probe`` never read: the check's probes run on twins, so its
    episodes are the same everywhere and it is handed exactly one row per chunk executed (issue 33: 102 for 95)."""
    import math

    from fixture_policies import CountingNoisyChunk

    suite = small_camera_suite(tmp_path, steps=23)
    policy = "fixture_policies:make_counting_noisy_chunk"
    dirs = _same_everywhere(tmp_path, suite, policy, {"b3": ["--batch-size", "3"]})
    lines = [json.loads(x) for x in (dirs["b3"] / "episodes.jsonl").read_text().splitlines()]
    chunks = sum(math.ceil(e["steps"] / 5) for e in lines)
    assert CountingNoisyChunk.made[-1].rows_seen == chunks == sum(e["obs_reads"] for e in lines)
    overall = json.loads((dirs["b3"] / "results.json").read_text())["overall"]
    assert overall["probe_calls"] == 2 and overall["probe_rows"] == 3 + 2 + 2  # reordered (3 + 2), first alone
    _same_everywhere(tmp_path / "others", suite, "fixture_policies:make_counting_noisy_chunk",
                     {k: v for k, v in SCHEDULES.items() if k != "b3"})


@pytest.mark.slow
def test_compare_names_the_first_read_a_stale_simulator_changed(tmp_path):
    """A simulator that draws the previous episode's scene in its first image (a fixture): at batch 1 episode 1
    follows episode 0 on one simulator, at batch 3 it starts a fresh one. Same seeds and start digests, other
    pixels: compare names the episode, call 0 and the camera."""
    suite = small_camera_suite(tmp_path, backend="stale_backend:BACKEND", tasks=("push-v3",), steps=10)
    for name, batch in (("b1", "1"), ("b3", "3")):
        result = runner.invoke(app, ["eval", "--suite", str(suite), "--policy", "fixture_policies:make_image_chunk",
                                     "--videos", "0", "--batch-size", batch, "--output", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["compare", str(tmp_path / "b1"), str(tmp_path / "b3"), "--json"])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.stdout)["same_observations_throughout"]
    assert inputs["different"] >= 1 and inputs["identical"] >= 1  # episode 0 is every run's fresh first
    assert inputs["first"] == {"task": "push-v3", "episode": 1, "trial": 0, "call": 0, "part": "corner2",
                               "where": "call 0 (corner2)"}
    shown = runner.invoke(app, ["compare", str(tmp_path / "b1"), str(tmp_path / "b3")])
    assert "episode 1, call 0 (corner2)" in shown.output and "same observations throughout" in shown.output
    # --versus pairs B with A episode by episode: the first observation of a pair must be A's; here it is not
    result = runner.invoke(app, ["eval", "--suite", str(suite), "--policy", "fixture_policies:make_image_chunk",
                                 "--videos", "0", "--batch-size", "3", "--versus", str(tmp_path / "b1"),
                                 "--until", "decided", "--output", str(tmp_path / "versus")])
    assert result.exit_code == 0, result.output
    assert "episode 1: call 0 (corner2): same start as the --versus run" in " ".join(result.output.split())
    versus = json.loads((tmp_path / "versus" / "results.json").read_text())["stopping"]["versus"]
    first = versus["same_first_observation"]
    assert first["different"] >= 1 and first["identical"] >= 1
    assert first["first"] == {"task": "push-v3", "episode": 1, "call": 0, "part": "corner2",
                              "where": "call 0 (corner2)"}


@pytest.mark.slow
def test_camera_policy_on_libero_same_outcomes_and_inputs(tmp_path):
    """(a) on LIBERO: a row-independent policy reading agentview (64x64), 3 episodes of one task, at batch 1, 3,
    and in worker processes: identical outcomes and observation digests."""
    pytest.importorskip("libero")
    from pathlib import Path

    text = (Path(__file__).parent.parent / "suites" / "smoke_libero.toml").read_text()
    suite = tmp_path / "libero_small.toml"
    suite.write_text(text.replace("image_size = [256, 256]", "image_size = [64, 64]", 1)
                     .replace("max_steps = 120", "max_steps = 12", 1))
    _same_everywhere(tmp_path, suite, "fixture_policies:make_declared_image_chunk",
                     {"b1": ["--batch-size", "1"], "b3": ["--batch-size", "3"],
                      "processes": ["--executor", "processes", "--workers", "2"]}, "--episodes", "3")


def _tiny_act_policy(tmp_path):
    from test_lerobot import save_tiny_act

    directory = tmp_path / "act_image"
    save_tiny_act(directory, image_key="observation.images.corner2", image_hw=(64, 64))
    context = PolicyContext(suite="metaworld_mt10", backend="metaworld", tasks=load_suite("metaworld_mt10").tasks,
                            action_dim=4, state_dim=39, cameras=("corner2",), image_size=(64, 64))
    policy = load_policy(f"lerobot:{directory}", context)
    obs = _observation(list(range(6)))
    obs["images"] = {"corner2": np.random.default_rng(1).integers(0, 255, (6, 64, 64, 3), dtype=np.uint8)}
    return policy, obs


def test_one_row_calls_side_by_side_have_the_bits_of_serial_single_thread_calls(lerobot_dirs, tmp_path):
    """The CPU default: rows on the call pool's threads, whatever the caller's count, with one thread's bits."""
    from lerobench.policies.kernels import pinned_kernels
    from lerobench.policies.width import call_at_width as split

    policy, obs = _tiny_act_policy(tmp_path)
    assert policy.call_width == 1 and policy.numerics["threads"] == 1
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        side_by_side = policy.select_action(obs, ["x"] * 6)
        torch.set_num_threads(1)
        with torch.inference_mode(), pinned_kernels():
            serial = split(policy._select_chunk, obs, ["x"] * 6, 1)  # in this thread, one row at a time
    finally:
        torch.set_num_threads(threads)
    assert side_by_side.shape[0] == 6 and np.array_equal(side_by_side, serial)


def test_a_lone_row_uses_two_threads_where_checked_and_keeps_its_bits(lerobot_dirs, tmp_path):
    """Batch 1 on a 2-core pool: the ACT row runs on 2 intra-op threads (checked on twins first) and comes out
    bit-identical to the same row computed on one thread beside five others."""
    from lerobench.policies.width import CallPool

    policy, obs = _tiny_act_policy(tmp_path)
    pool = CallPool(2)
    alone = [call_at_width(policy._select_chunk, take_rows(obs, np.array([i])), ["x"], 1, pool, True,
                           key=policy.call_key, twin=lambda: policy._twin()._select_chunk) for i in range(6)]
    assert pool.used[2] == 5 and pool.used[1] == 1  # the first on one thread (the check's reference), then both
    plan = pool.plan(policy.call_key, None, *pad_rows(take_rows(obs, np.array([0])), ["x"], 1))
    assert plan.status == "verified" and plan.counts == (1, 2) and plan.checked == (1, 2), plan
    together = call_at_width(policy._select_chunk, obs, ["x"] * 6, 1, pool, True, key=policy.call_key)
    assert pool.used[1] == 7  # six rows side by side: one thread each
    assert np.array_equal(np.concatenate(alone), together)


class _ThreadDependent(torch.nn.Module):
    """A policy whose action sums a long vector: torch splits that reduction by the intra-op thread count."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, state):
        long = torch.exp(state.repeat(1, 50_000) * self.scale * 0.3)  # 1.95 M terms of mixed magnitude
        return state[:, :4] * 0 + long.sum(dim=1, keepdim=True)


def test_a_thread_count_that_changes_a_row_is_rejected_and_never_used():
    from lerobench.policies.torch_policy import TorchPolicy
    from lerobench.policies.width import CallPool

    policy = TorchPolicy(_ThreadDependent(), "cpu")
    obs = _observation([0, 1, 2])
    pool = CallPool(2)
    alone = [call_at_width(policy._call, take_rows(obs, np.array([i])), ["x"], 1, pool, True,
                           key=policy.call_key, twin=policy._twin) for i in range(3)]
    plan = pool.plan(policy.call_key, None, *pad_rows(take_rows(obs, np.array([0])), ["x"], 1))
    assert plan.counts == (1,) and plan.status == "unchecked" and 2 in plan.rejected, plan
    assert plan.rejected[2] is not None and plan.rejected[2] > 0 and "2 threads" in plan.reason
    assert pool.used[2] == 0 and pool.used[1] == 3
    together = call_at_width(policy._call, obs, ["x"] * 3, 1, pool, True, key=policy.call_key)
    assert np.array_equal(np.concatenate(alone), together)


def test_results_and_summary_say_what_the_call_shape_cost(tmp_path):
    common = ["--policy", "fixture_policies:make_mlp", "--episodes", "2", "--max-steps", "12", "--batch-size", "2"]
    result = runner.invoke(app, ["eval", *TASKS[:2], "--tasks", "reach-v3", "--videos", "0", *common,
                                 "--output", str(tmp_path / "w1")])
    assert result.exit_code == 0, result.output
    shape = json.loads((tmp_path / "w1" / "results.json").read_text())["overall"]["call_shape"]
    assert shape["call_width"] == 1 and shape["padded_rows"] == 0 and shape["model_calls_per_request"] > 1
    assert "batch invariance (verified): one row per model call" in result.output
    threads = json.loads((tmp_path / "w1" / "results.json").read_text())["config"]["batch_invariance"]["threads"]
    if usable_cores() >= 2:
        assert threads["counts"] == [1, 2] and threads["status"] == "verified", threads
        assert "up to 2 intra-op threads per call (checked equal to one thread's bits)" in result.output
    padded = runner.invoke(app, ["eval", *TASKS[:2], "--tasks", "reach-v3", "--videos", "0", *common,
                                 "--call-width", "8", "--output", str(tmp_path / "w8")])
    assert padded.exit_code == 0, padded.output
    shape = json.loads((tmp_path / "w8" / "results.json").read_text())["overall"]["call_shape"]
    # two envs in lockstep: every request has 2 real rows (first call: 2, later ones 1 or 2) padded to 8
    assert shape["call_width"] == 8 and shape["model_calls_per_request"] == 1
    assert 0.75 <= shape["padding_share"] < 1 and shape["padded_rows"] > 0
    assert "calls of 8 rows" in padded.output and "padding" in padded.output
