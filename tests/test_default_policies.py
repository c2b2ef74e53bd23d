"""Every shipped suite defaults to a policy that can succeed on it, or to none (then ``--policy`` is required)."""

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.policies.base import PolicyContext
from lerobench.policies.loading import load_policy
from lerobench.suite.registry import get_backend, load_suite, shipped_suite_paths

BASELINES = ("random", "zero")
"""Policies that succeed nowhere by design: never a shipped suite's default."""


@pytest.mark.slow
def test_every_shipped_suite_defaults_to_its_benchmarks_expert_and_the_expert_accepts_every_task():
    checked = 0
    for path in shipped_suite_paths().values():
        suite = load_suite(str(path))
        if suite.default_policy is None:
            continue
        assert suite.default_policy not in BASELINES, f"{suite.name} defaults to {suite.default_policy}"
        backend = get_backend(suite.backend)
        backend.check_installed()  # CI installs every extra: a missing simulator fails here, it is never skipped
        protocol = suite.protocol()
        context = PolicyContext(suite=suite.name, backend=suite.backend, tasks=suite.tasks,
                                action_dim=backend.action_dim, state_dim=backend.state_dim, cameras=protocol.cameras,
                                image_size=protocol.image_size, backend_options=dict(suite.backend_options),
                                action_bounds=backend.action_bounds, camera_aliases=backend.camera_aliases,
                                partial_states=backend.partial_states)
        load_policy(suite.default_policy, context)  # an expert refuses a task it has no skill for: ConfigError
        checked += 1
    assert checked >= 69  # every shipped suite but libero_study_table


def test_a_suite_without_a_default_asks_for_a_policy_and_says_so(tmp_path):
    shown = CliRunner().invoke(app, ["show", "libero_study_table"])
    assert "default policy none: pass --policy" in " ".join(shown.output.split())
    result = CliRunner().invoke(app, ["eval", "--suite", "libero_study_table", "--output", str(tmp_path / "o")])
    assert result.exit_code == 2 and "has no default policy" in result.output and "pass --policy" in result.output
