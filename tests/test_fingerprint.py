"""The simulator fingerprint and its golden-state check, on the real Meta-World stack.

A stack whose golden state differs is simulated by perturbing a copy of the stored golden file (pointed at by
``LEROBENCH_GOLDEN_DIR``), not by installing another MuJoCo.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.envs.fingerprint import fingerprint, golden_path
from lerobench.envs.metaworld import BACKEND

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")
runner = CliRunner()


@pytest.fixture
def isolated(golden_copy):
    """The shared golden copy (conftest ``golden_copy``), perturbed in its first case."""
    return lambda change: golden_copy(lambda doc: change(doc["cases"][0]))


def test_the_pinned_stack_passes_and_the_result_is_cached(isolated):
    first = fingerprint("metaworld", BACKEND.packages)
    assert first["golden"]["status"] == "pass" and first["golden"]["cached"] is False
    assert first["versions"]["mujoco"] == "3.3.0" and first["renderer"]["gl_renderer"]
    again = fingerprint("metaworld", BACKEND.packages)
    assert again["golden"]["cached"] is True and again["golden"]["seconds"] < 0.5
    assert again["golden"]["reference"] == first["golden"]["reference"]


def test_image_tolerance_accepts_small_and_refuses_large_differences(isolated):
    def shift(by):
        return lambda case: case.update(image=[[[v + by for v in px] for px in row] for row in case["image"]])

    isolated(shift(2))  # within 4 grey levels: another GL driver's anti-aliasing
    assert fingerprint("metaworld", BACKEND.packages)["golden"]["status"] == "pass"
    isolated(shift(10))  # a darker floor (on top of the first shift: 12 in all)
    result = fingerprint("metaworld", BACKEND.packages)["golden"]
    assert result["status"] == "drifted" and "image by 12 grey levels" in result["reason"]


def _eval(out: Path, *extra: str):
    return runner.invoke(app, ["eval", "--suite", "smoke", "--tasks", "reach-v3", "--max-steps", "5", "--videos", "0",
                               "--output", str(out), *extra])


def test_eval_on_a_drifted_stack_is_refused_unless_allowed_and_then_marked(isolated, tmp_path):
    reference = _eval(tmp_path / "reference")
    assert reference.exit_code == 0, reference.output
    isolated(lambda case: case["state"].__setitem__(0, case["state"][0] + 0.01))
    refused = _eval(tmp_path / "refused")
    assert refused.exit_code == 2
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: simulator drift"), refused.output
    assert "reach-v3 episode 0: state differs by 0.01" in lines[0] and "--allow-sim-drift" in lines[0]
    assert not (tmp_path / "refused" / "results.json").exists()

    allowed = _eval(tmp_path / "drifted", "--allow-sim-drift")
    assert allowed.exit_code == 0 and "this run is marked drifted" in allowed.output
    simulator = json.loads((tmp_path / "drifted" / "results.json").read_text())["config"]["simulator"]
    assert simulator["golden"]["status"] == "drifted" and simulator["versions"]["mujoco"] == "3.3.0"

    compared = runner.invoke(app, ["compare", str(tmp_path / "reference"), str(tmp_path / "drifted")])
    assert compared.exit_code == 2 and "episodes.simulator.golden_status: 'pass' vs 'drifted'" in compared.output
    warned = runner.invoke(app, ["compare", str(tmp_path / "reference"), str(tmp_path / "drifted"),
                                 "--allow-different"])
    assert warned.exit_code == 0 and "failed its golden-state check" in warned.output


def test_without_a_renderer_the_state_is_still_checked(isolated):
    from lerobench.envs.fingerprint import run_check

    result = run_check("metaworld", golden_path("metaworld"), render=False)  # what a crashed render falls back to
    assert result["status"] == "pass" and result["images_checked"] is False and result["max_image_mad"] is None
    isolated(lambda case: case["state_after"].__setitem__(1, case["state_after"][1] - 0.5))
    drifted = run_check("metaworld", golden_path("metaworld"), render=False)
    assert drifted["status"] == "drifted" and "state differs by 0.5" in drifted["reason"]
