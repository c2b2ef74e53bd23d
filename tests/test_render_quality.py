"""Draft rendering (``--render-quality draft``): other pixels, the same physics, and said wherever the run is."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _episodes(out):
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["task"], r["episode"]))


@pytest.mark.sim
@pytest.mark.slow
def test_draft_changes_the_images_not_the_episodes_and_the_run_says_so(tmp_path, monkeypatch):
    """Meta-World's expert reading corner2 (successes and failures), published vs draft: the same outcomes,
    steps, returns and start digests; other observation digests; config and label name the quality."""
    pytest.importorskip("metaworld")
    monkeypatch.setenv("LEROBENCH_RENDER_QUALITY", "draft")  # the flag wins over the environment
    suite = tmp_path / "mt10_small.toml"
    suite.write_text((ROOT / "suites" / "metaworld_mt10.toml").read_text()
                     .replace("image_size = [480, 480]", "image_size = [48, 48]", 1))
    common = ["eval", "--suite", str(suite), "--policy", "fixture_policies:make_camera_expert", "--tasks",
              "reach-v3", "--episodes", "4", "--max-steps", "42", "--batch-size", "2", "--videos", "0"]
    runs = {}
    for quality in ("published", "draft"):
        out = tmp_path / quality
        result = CliRunner().invoke(app, [*common, "--render-quality", quality, "--output", str(out)])
        assert result.exit_code == 0, result.output
        runs[quality] = (result.output, json.loads((out / "results.json").read_text())["config"], _episodes(out))
    (label_p, config_p, published), (label_d, config_d, draft) = runs["published"], runs["draft"]
    same = ("episode", "success", "steps", "return", "max_reward", "start_digest")
    assert [[r[k] for k in same] for r in published] == [[r[k] for k in same] for r in draft]
    assert {r["success"] for r in draft} == {True, False}, "the check needs episodes that succeed and fail"
    assert all(a["obs_digest"] != b["obs_digest"] for a, b in zip(published, draft, strict=True))
    assert "render_quality" not in config_p["backend_options"] and "render_quality" not in \
        (config_p["protocol_changes"] or {})
    assert config_d["backend_options"]["render_quality"] == "draft"
    assert config_d["protocol_changes"]["render_quality"] == ["published", "draft"]
    assert "draft rendering" in label_d and "draft rendering" not in label_p


@pytest.mark.sim
@pytest.mark.slow
def test_libero_draft_images_are_the_same_whether_the_worker_built_the_task_or_forked_from_its_template():
    """robosuite makes its GL context while building: draft waits for the quality, as a template's worker does
    (``attach_gl``); both give the same draft frames, and they differ from the published frames."""
    pytest.importorskip("libero")
    from dataclasses import replace

    from lerobench.envs.base import EnvSpec
    from lerobench.envs.libero import LiberoSimulator
    from lerobench.suite.registry import load_suite

    suite = load_suite("smoke_libero")
    protocol = replace(suite.protocol(), image_size=(48, 48))
    base = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=protocol, seed=0,
                   state_dim=8, action_dim=7, cameras=("agentview",))

    def first_frame(options, defer_gl=False):
        sim = LiberoSimulator(replace(base, backend_options={**suite.backend_options, **options}), defer_gl=defer_gl)
        try:
            if defer_gl:
                sim.attach_gl()
            sim.reset_to(0, 0)
            quality = sim.mujoco_model().vis.quality
            return sim.render("agentview", 48, 48).copy(), (quality.shadowsize, quality.offsamples)
        finally:
            sim.close()

    published, published_quality = first_frame({})
    built, built_quality = first_frame({"render_quality": "draft"})
    forked, forked_quality = first_frame({"render_quality": "draft"}, defer_gl=True)
    assert built_quality == forked_quality == (1024, 0) and published_quality == (4096, 4)
    np.testing.assert_array_equal(built, forked)
    assert not np.array_equal(built, published)


def test_a_quality_that_does_not_exist_is_refused_naming_where_it_was_given(tmp_path, monkeypatch):
    pytest.importorskip("metaworld")
    from lerobench.plan.planner import RunSettings, make_plan
    from lerobench.suite.registry import load_suite

    def plan(suite, **settings):
        return make_plan(RunSettings(suite=suite, policy="zero", output=tmp_path / "out", **settings))

    smoke = load_suite("smoke")
    with pytest.raises(ConfigError, match="--render-quality must be one of published, draft, got 'fast'"):
        plan(smoke, render_quality="fast")
    monkeypatch.setenv("LEROBENCH_RENDER_QUALITY", "low")
    with pytest.raises(ConfigError, match="LEROBENCH_RENDER_QUALITY must be one of published, draft, got 'low'"):
        plan(smoke)
    monkeypatch.delenv("LEROBENCH_RENDER_QUALITY")
    path = tmp_path / "typo.toml"
    path.write_text((ROOT / "suites" / "smoke.toml").read_text().replace(
        'backend = "metaworld"', 'backend = "metaworld"\nbackend_options = { render_quality = "draught" }', 1))
    with pytest.raises(ConfigError, match=r"typo.toml: field 'backend_options.render_quality': 'draught'"):
        plan(load_suite(str(path)))
    assert plan(smoke).backend_options == {}  # published: the options as before, no key
