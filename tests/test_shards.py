"""``--shard I/N`` and ``lerobench merge``: shards of a real Meta-World run merge into the unsharded run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.analysis.merge import MergeError, merge, missing_units
from lerobench.cli import app
from lerobench.core.call_stats import CALL_STATS_KEYS
from lerobench.core.records import EpisodeRecord
from lerobench.core.shards import Shard, all_units, parse_shard, shard_episodes, shard_units
from lerobench.errors import ConfigError

pytestmark = pytest.mark.sim  # every test here drives a real simulator

runner = CliRunner()
TASKS = "reach-v3,push-v3,button-press-topdown-v3"
COMMON = ["--suite", "metaworld_mt10", "--tasks", TASKS, "--policy", "metaworld-expert", "--episodes", "4",
          "--max-steps", "60", "--videos", "0"]
TIMINGS = ("eval_s", "episodes_per_s", "env_steps_per_s", *CALL_STATS_KEYS)


# -- the shard function (pure) ----------------------------------------------------------------------
@pytest.mark.parametrize(("text", "shard"), [("0/1", Shard(0, 1)), ("3/4", Shard(3, 4)), (" 1 / 2 ", Shard(1, 2)),
                                             (None, None), ("", None)])
def test_parse_shard_accepts_i_of_n(text, shard):
    assert parse_shard(text) == shard


@pytest.mark.parametrize(("text", "message"), [("2/2", "must be in 0..1"), ("0/0", "N must be >= 1"),
                                               ("1", "must be I/N"), ("-1/2", "must be I/N"), ("a/b", "must be I/N"),
                                               ("1/2/3", "must be I/N")])
def test_parse_shard_refuses_bad_input_in_one_line(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_shard(text)
    assert "--shard" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("n_tasks", "episodes", "count"), [(3, 4, 2), (3, 4, 5), (1, 7, 3), (10, 1, 4), (2, 3, 1)])
def test_shards_partition_the_units_round_robin(n_tasks, episodes, count):
    tasks = [f"t{i}" for i in range(n_tasks)]
    units = all_units(tasks, episodes)
    parts = [shard_units(tasks, episodes, Shard(i, count)) for i in range(count)]
    assert sorted(u for p in parts for u in p) == sorted(units)  # every unit exactly once
    assert sum(len(p) for p in parts) == len(units)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced
    for i, part in enumerate(parts):
        assert part == [u for k, u in enumerate(units) if k % count == i]
        for task in tasks:  # the per-task form the runner uses agrees with the unit list
            assert shard_episodes(tasks, task, episodes, Shard(i, count)) == [e for t, e in part if t == task]
    assert shard_units(tasks, episodes, None) == units


# -- real Meta-World: unsharded == shards merged ------------------------------------------------------
def _eval(*args: str) -> None:
    result = runner.invoke(app, ["eval", *args])
    assert result.exit_code == 0, result.output


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _outcomes(out: Path) -> list[tuple]:
    """Every field of every record except the timing and the batch-invariance check (made once per process)."""
    return sorted(tuple(sorted((k, json.dumps(v)) for k, v in e.items() if k not in ("elapsed_s", "policy_check")))
                  for e in _lines(out))


def _aggregates(results: dict) -> dict:
    overall = {k: v for k, v in results["overall"].items() if k not in TIMINGS}
    return {"tasks": results["tasks"], "groups": results["groups"], "overall": overall}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One unsharded run and its two shards (one in-process, one on 2 worker processes), on real Meta-World."""
    root = tmp_path_factory.mktemp("shards")
    _eval(*COMMON, "--output", str(root / "full"))
    _eval(*COMMON, "--shard", "0/2", "--output", str(root / "s0"))
    _eval(*COMMON, "--shard", "1/2", "--batch-size", "2", "--output", str(root / "s1"))  # worker processes
    return {name: root / name for name in ("full", "s0", "s1")} | {"root": root}


def test_shards_run_their_units_and_record_the_shard(runs):
    tasks = TASKS.split(",")
    for name, shard in (("s0", Shard(0, 2)), ("s1", Shard(1, 2))):
        units = shard_units(tasks, 4, shard)  # written in finishing order, which workers may change
        assert sorted((e["task"], e["episode"]) for e in _lines(runs[name])) == sorted(units)
        results = json.loads((runs[name] / "results.json").read_text())
        assert results["config"]["shard"] == str(shard) and results["complete"]
    assert json.loads((runs["full"] / "results.json").read_text())["config"]["shard"] is None


def test_merged_shards_equal_the_unsharded_run(runs):
    out = runs["root"] / "merged"
    result = runner.invoke(app, ["merge", str(runs["s1"]), str(runs["s0"]), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert _outcomes(out) == _outcomes(runs["full"])
    order = [(e["task"], e["episode"]) for e in _lines(out)]
    assert order == all_units(TASKS.split(","), 4)  # sorted by task order then episode, whatever the input order
    merged, full = (json.loads((d / "results.json").read_text()) for d in (out, runs["full"]))
    assert _aggregates(merged) == _aggregates(full)
    assert merged["complete"] is True and merged["missing"] == []
    assert merged["config"]["shard"] is None and merged["config"]["seed"] == full["config"]["seed"]
    assert [s["shard"] for s in merged["shards"]] == ["1/2", "0/2"]
    assert all(s["provenance"]["versions"]["mujoco"] for s in merged["shards"])
    assert merged["overall"]["eval_s"] > 0


def test_identical_duplicates_are_kept_once(runs):
    out = runs["root"] / "dups"
    merge(out, [runs["s0"], runs["full"], runs["s1"]])
    assert _outcomes(out) == _outcomes(runs["full"])
    assert len(_lines(out)) == 12


def test_a_missing_shard_leaves_the_run_incomplete_with_its_units(runs):
    out = runs["root"] / "half"
    result = runner.invoke(app, ["merge", str(runs["s0"]), "--output", str(out)])
    assert result.exit_code == 4, result.output  # incomplete: written, but a merge job must not pass
    allowed = runner.invoke(app, ["merge", str(runs["s0"]), "--output", str(out / "allowed"), "--allow-incomplete"])
    assert allowed.exit_code == 0, allowed.output
    merged = json.loads((out / "results.json").read_text())
    missing = shard_units(TASKS.split(","), 4, Shard(1, 2))
    assert merged["complete"] is False
    assert [(m["task"], m["episode"]) for m in merged["missing"]] == missing
    assert merged["overall"]["n_episodes"] == 6
    assert "6 episodes missing" in result.output


def test_a_shard_with_another_seed_is_refused_naming_the_field(runs):
    other = runs["root"] / "seed1"
    _eval("--suite", "metaworld_mt10", "--tasks", TASKS, "--policy", "metaworld-expert", "--episodes", "4",
          "--max-steps", "60", "--videos", "0", "--shard", "5/6", "--seed", "1", "--output", str(other))
    result = runner.invoke(app, ["merge", str(runs["s0"]), str(other), "--output", str(runs["root"] / "bad")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith("error:") and "episodes.seed: 0 vs 1" in line
    assert not (runs["root"] / "bad" / "results.json").exists()


def test_inconsistent_overlap_is_refused_naming_the_unit(runs):
    changed = runs["root"] / "changed"
    shutil.copytree(runs["s1"], changed)
    lines = _lines(changed)
    lines[0]["success"] = not lines[0]["success"]
    (changed / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    with pytest.raises(MergeError, match=f"task '{lines[0]['task']}' episode {lines[0]['episode']} trial 0 has "
                                         f"different outcomes"):
        merge(runs["root"] / "conflict", [runs["full"], changed])


def test_an_overlap_that_saw_other_observations_is_refused_naming_the_read(runs):
    """Same outcome, other inputs (issue 33): the duplicate's observation digests differ from read 2 on."""
    import base64

    changed = runs["root"] / "other_inputs"
    shutil.copytree(runs["s1"], changed)
    lines = _lines(changed)
    first = lines[0]
    assert first["obs_parts"] == ["state"] and first["obs_reads"] > 2
    short = bytearray(base64.b64decode(first["obs_read_digests"]))
    short[8:12] = bytes(b ^ 0xFF for b in short[8:12])  # read 2's state
    first["obs_read_digests"] = base64.b64encode(bytes(short)).decode()
    first["obs_digest"] = "0" * 32
    (changed / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    with pytest.raises(MergeError, match=f"task '{first['task']}' episode {first['episode']} trial 0 showed the "
                                         r"policy other observations .* first differing read: call 2 \(state\)"):
        merge(runs["root"] / "other_inputs_merged", [runs["full"], changed])


def test_resume_refuses_another_shard(runs):
    result = runner.invoke(app, ["eval", *COMMON, "--shard", "1/2", "--resume", "--output", str(runs["s0"])])
    assert result.exit_code == 2 and "shard: previous '0/2', now '1/2'" in result.output


def test_merge_refuses_non_runs_and_its_own_input(runs, tmp_path):
    with pytest.raises(MergeError, match="results.json does not exist"):
        merge(tmp_path / "m", [tmp_path])
    with pytest.raises(MergeError, match="is one of the shard directories"):
        merge(runs["s0"], [runs["s0"], runs["s1"]])


def test_videos_follow_their_episodes(tmp_path):
    suite = tmp_path / "tiny.toml"
    suite.write_text("""
name = "tiny"
backend = "metaworld"
episodes_per_task = 2
control_fps = 80
worker_memory_mb = 400
video_camera = "corner2"
tasks = ["reach-v3", "button-press-v3"]

[protocol]
max_steps = 12
image_size = [64, 64]
cameras = ["corner2"]
flip_images = true
""")
    common = ["--suite", str(suite), "--policy", "zero", "--videos", "2"]
    _eval(*common, "--shard", "0/2", "--output", str(tmp_path / "a"))
    _eval(*common, "--shard", "1/2", "--output", str(tmp_path / "b"))
    out = tmp_path / "merged"
    merge(out, [tmp_path / "a", tmp_path / "b"])  # a suite by path: merge reads it from suite_file
    lines = _lines(out)
    assert len(lines) == 4 and all(e["video"] for e in lines)
    for e in lines:
        source = tmp_path / ("a" if e["episode"] == 0 else "b") / e["video"]  # units alternate a, b
        assert (out / e["video"]).read_bytes() == source.read_bytes() and source.stat().st_size > 0


# -- multi-trial records (schema of notes/TRIALS_SCHEMA.md), synthetic -----------------------------
def _record(task: str, episode: int, trial: int, success: bool, error: str | None = None) -> EpisodeRecord:
    return EpisodeRecord(task=task, episode=episode, trial=trial, seed=100 + episode, init_state=episode,
                         success=success, success_at_end=success, steps=10 + trial, return_=1.5 * trial,
                         elapsed_s=0.1, error=error, max_reward=0.5)


def _shard_dir(path: Path, shard: str, records: list[EpisodeRecord], trials: int = 3) -> Path:
    path.mkdir()
    config = {"suite": "smoke", "suite_file": None, "policy": "zero", "protocol": "standard",
              "protocol_settings": {"max_steps": 20}, "tasks": ["reach-v3", "button-press-v3"],
              "episodes_per_task": 2, "seed": 0, "stop_on_success": True, "replan_steps": 1, "trials": trials,
              "formats": [], "shard": shard}
    (path / "results.json").write_text(json.dumps({"complete": True, "config": config,
                                                   "overall": {"eval_s": 2.0, "env_steps_per_s": 10.0}}))
    (path / "episodes.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return path


def test_trial_records_merge_sorted_with_episode_completeness(tmp_path):
    # reach-v3 #0: 3 trials; #1: error at trial 1 ends it; button-press #0: 3 trials; #1: only trial 0 (unfinished)
    a = [_record("button-press-v3", 0, 2, True), _record("reach-v3", 0, 0, False), _record("reach-v3", 0, 1, True),
         _record("reach-v3", 0, 2, True), _record("button-press-v3", 0, 0, False)]
    b = [_record("reach-v3", 1, 0, False), _record("reach-v3", 1, 1, False, error="worker died"),
         _record("button-press-v3", 0, 1, True), _record("button-press-v3", 0, 2, True),
         _record("button-press-v3", 1, 0, True)]
    out = tmp_path / "merged"
    results = merge(out, [_shard_dir(tmp_path / "a", "0/2", a), _shard_dir(tmp_path / "b", "1/2", b)])
    keys = [(e["task"], e["episode"], e["trial"]) for e in _lines(out)]
    assert keys == [("reach-v3", 0, 0), ("reach-v3", 0, 1), ("reach-v3", 0, 2), ("reach-v3", 1, 0),
                    ("reach-v3", 1, 1), ("button-press-v3", 0, 0), ("button-press-v3", 0, 1),
                    ("button-press-v3", 0, 2)]  # the duplicate trial 2 kept once; the half episode left out
    assert results["missing"] == [{"task": "button-press-v3", "episode": 1}] and results["complete"] is False
    assert any("'button-press-v3' episode 1: left out" in note for note in results["merge_notes"])
    assert missing_units([_record("reach-v3", 0, 0, True)], ["reach-v3"], 1, 1) == []
    conflicting = [_record("button-press-v3", 0, 2, False)]
    with pytest.raises(MergeError, match="task 'button-press-v3' episode 0 trial 2 has different outcomes"):
        merge(tmp_path / "bad", [tmp_path / "a", _shard_dir(tmp_path / "c", "1/2", conflicting)])
    with pytest.raises(MergeError, match=r"different runs \(treatment.trials: 3 vs 1\)"):
        merge(tmp_path / "bad2", [tmp_path / "a", _shard_dir(tmp_path / "d", "1/2", [], trials=1)])


def test_merge_skips_an_unterminated_last_line_and_names_a_broken_one(tmp_path):
    whole = [_record("reach-v3", 0, k, True) for k in range(3)]
    shard = _shard_dir(tmp_path / "a", "0/1", whole)
    text = (shard / "episodes.jsonl").read_text()
    (shard / "episodes.jsonl").write_text(text + json.dumps(_record("reach-v3", 1, 0, True).to_json())[:40])
    results = merge(tmp_path / "merged", [shard])
    assert len(_lines(tmp_path / "merged")) == 3 and results["shards"][0]["cut_unterminated_line"] is True
    assert {"task": "reach-v3", "episode": 1} in results["missing"]
    assert any("unterminated last line" in note for note in results["merge_notes"])
    assert (shard / "episodes.jsonl").read_text().endswith(json.dumps(_record("reach-v3", 1, 0, True).to_json())[:40])
    (shard / "episodes.jsonl").write_text(text.replace("\n", "\nnot json\n", 1))
    with pytest.raises(MergeError, match=r"cannot merge: .*a/episodes.jsonl: line 2 is not JSON"):
        merge(tmp_path / "merged2", [shard])
