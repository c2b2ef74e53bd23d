"""LIBERO-PRO suites, their control arms and `lerobench robustness` on the real LIBERO (one task, few steps)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libero.libero")
os.environ.setdefault("MUJOCO_GL", "egl")

from typer.testing import CliRunner  # noqa: E402

from lerobench.cli import app  # noqa: E402
from lerobench.envs.base import EnvSpec, episode_seed  # noqa: E402
from lerobench.envs.libero import LiberoSimulator  # noqa: E402
from lerobench.envs.perturb import start_digest  # noqa: E402
from lerobench.suite.config import Protocol  # noqa: E402
from lerobench.suite.registry import list_suites, load_suite, shipped_suite_paths  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIRST = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"


def _sim(suite_name, position=0):
    suite = load_suite(suite_name)
    spec = EnvSpec(suite=suite.name, backend="libero", task=suite.tasks[position], protocol=Protocol(max_steps=2),
                   seed=0, state_dim=8, action_dim=7, backend_options=suite.backend_options)
    return LiberoSimulator(spec)


def test_pro_suites_use_the_task_files_instructions_and_their_init_state_counts():
    lan, spatial = load_suite("libero_spatial_lan"), load_suite("libero_spatial")
    assert [t.name for t in lan.tasks] == [t.name for t in spatial.tasks]
    assert lan.tasks[0].description == "lift the black bowl between the plate and ramekin and set it on the plate"
    assert all(a.description != b.description for a, b in zip(lan.tasks, spatial.tasks, strict=True))
    assert load_suite("libero_goal_task").tasks[7].description == "Turn off the stove"
    # the object family changed the objects, not the instruction: the standard one stays
    assert [t.description for t in load_suite("libero_spatial_object").tasks] == [t.description for t in spatial.tasks]
    assert load_suite("libero_spatial_with_milk").init_states == 10 and lan.init_states == 50
    milk = load_suite("libero_10_with_milk")
    assert len(milk.tasks) == 8 and "milk_1" in milk.notes  # two broken tasks left out, with the reason
    family = list_suites("libero-pro")
    assert len(family) == 51 and not {s.name for s in family} & {s.name for s in list_suites()}
    for suite in family:
        assert suite.init_states and suite.backend == "libero"
        if suite.name.endswith("_control"):
            perturbed = load_suite(suite.name.removesuffix("_control"))
            assert len(perturbed.tasks) == len(suite.tasks)
            assert suite.backend_options["init_states_from"] == perturbed.name


def test_list_family_shows_the_pro_suites_apart():
    listed = CliRunner().invoke(app, ["list", "--family", "libero-pro", "--json"])
    assert listed.exit_code == 0 and len(json.loads(listed.output)) == 51
    main = CliRunner().invoke(app, ["list"])
    assert "libero_spatial_lan" not in main.output and "--family libero-pro" in main.output
    assert CliRunner().invoke(app, ["list", "--family", "nosuch"]).exit_code == 2


def test_generator_reproduces_the_shipped_pro_suites(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gen_libero_suites
    finally:
        sys.path.pop(0)
    gen_libero_suites.write_pro_suites(tmp_path)
    written = {p.stem: p.read_text() for p in tmp_path.glob("*.toml")}
    shipped = {name: p.read_text() for name, p in shipped_suite_paths().items() if p.parent.name == "libero_pro"}
    assert written == shipped


def test_lan_control_starts_from_the_perturbed_start_bit_for_bit():
    seed = episode_seed(0, 0, 3)
    digests = []
    for name in ("libero_spatial_lan", "libero_spatial_lan_control"):
        sim = _sim(name)
        try:
            sim.reset_to(3, seed)
            digests.append((start_digest(sim), sim.physics_state().copy()))
        finally:
            sim.close()
    assert digests[0][0] == digests[1][0]
    np.testing.assert_array_equal(digests[0][1], digests[1][1])


def test_with_mug_control_drops_only_the_mug():
    perturbed = _sim("libero_spatial_with_mug")
    try:
        perturbed.reset_to(0, 1)
        model = perturbed.mujoco_model()
        state = perturbed.physics_state().copy()
        joints = {model.joint(j).name: (int(model.jnt_qposadr[j]), int(model.jnt_type[j])) for j in range(model.njnt)}
    finally:
        perturbed.close()
    control = _sim("libero_spatial_with_mug_control")
    try:
        control.reset_to(0, 1)
        model = control.mujoco_model()
        mine = control.physics_state()
        names = {model.joint(j).name for j in range(model.njnt)}
        assert set(joints) - names and all("mug" in n for n in set(joints) - names)  # only the distractor goes
        for j in range(model.njnt):
            address, kind = joints[model.joint(j).name]
            width = 7 if kind == 0 else 1
            np.testing.assert_array_equal(mine[1 + model.jnt_qposadr[j]:1 + model.jnt_qposadr[j] + width],
                                          state[1 + address:1 + address + width])
    finally:
        control.close()


def test_swap_control_exchanges_the_swapped_pair_back():
    control_suite = load_suite("libero_object_swap_control")
    first, second = control_suite.backend_options["swap_objects"][control_suite.tasks[0].name]
    starts = []
    for name in ("libero_object_swap", "libero_object_swap_control"):
        sim = _sim(name)
        try:
            sim.reset_to(2, 5)
            model = sim.mujoco_model()
            addresses = [1 + int(model.joint(f"{o}_joint0").qposadr[0]) for o in (first, second)]
            starts.append(sim.physics_state().copy())
        finally:
            sim.close()
    swapped, control = starts
    a, b = addresses
    np.testing.assert_array_equal(control[a:a + 2], swapped[b:b + 2])
    np.testing.assert_array_equal(control[b:b + 2], swapped[a:a + 2])
    rest = np.ones(len(control), dtype=bool)
    rest[[a, a + 1, b, b + 1]] = False
    np.testing.assert_array_equal(control[rest], swapped[rest])  # heights, orientations, everything else


def test_missing_assets_are_named_at_load(tmp_path):
    suite = tmp_path / "red.toml"
    suite.write_text('name = "red"\nbackend = "libero"\nbackend_options = { suite = "libero_spatial_with_red_stick" }\n'
                     f'tasks = ["MAIN_TABLE_SCENE1_{FIRST}"]\n[protocol]\nmax_steps = 2\n')
    spec = EnvSpec(suite="red", backend="libero", task=load_suite(str(suite)).tasks[0],
                   protocol=Protocol(max_steps=2), seed=0, state_dim=8, action_dim=7,
                   backend_options={"suite": "libero_spatial_with_red_stick"})
    with pytest.raises(FileNotFoundError, match=r"red_sticker\.xml is missing"):
        LiberoSimulator(spec)


def test_ten_state_suite_records_the_state_it_runs(tmp_path):
    task = load_suite("libero_spatial_with_milk").tasks[0].name
    result = CliRunner().invoke(app, ["eval", "--suite", "libero_spatial_with_milk", "--tasks", task, "--episodes",
                                      "12", "--max-steps", "1", "--videos", "0", "--policy", "zero",
                                      "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = {r["episode"]: r for r in map(json.loads, (tmp_path / "episodes.jsonl").read_text().splitlines())}
    assert lines[10]["init_state"] == 0 and lines[11]["init_state"] == 1
    assert lines[10]["start_digest"] == lines[0]["start_digest"]


def test_robustness_on_libero_spatial(tmp_path):
    result = CliRunner().invoke(app, ["robustness", "--base", "libero_spatial", "--tasks", FIRST, "--families",
                                      "lan", "--episodes", "2", "--max-steps", "5", "--policy", "zero",
                                      "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (family,) = json.loads((tmp_path / "robustness.json").read_text())["families"]
    assert family["family"] == "lan" and family["paired"] and family["n_pairs"] == 2
    assert family["start_digests_equal"] == 2  # every control episode starts where its perturbed one did
    assert {"perturbed", "control", "drop", "drop_ci95", "p_value", "p_holm", "tasks"} <= set(family)
    assert family["perturbed"]["rate"] == family["control"]["rate"] == 0.0 and family["p_value"] == 1.0
