"""``lerobench serve --max-batch``: concurrent websocket clients batched into one policy call, same actions."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.errors import ConfigError, PolicyError
from lerobench.policies.batching import SlotTable, stack
from lerobench.policies.loading import load_policy
from lerobench.policies.remote import RemotePolicy
from lerobench.policies.serve import PolicyServer, suite_context

STEPS = 12


@pytest.fixture(scope="module")
def smoke():
    return suite_context("smoke")


def _observations(client: int, rows: int, state_dim: int) -> list[dict]:
    """One client's request sequence: rows restart episodes at different steps (per-env state matters)."""
    rng = np.random.default_rng(client)
    out = []
    for step in range(STEPS):
        start = np.array([step == 0 or (step == 5 + row) for row in range(rows)])
        out.append({
            "state": rng.normal(size=(rows, state_dim)).astype(np.float32),
            "task": ["reach-v3"] * rows,
            "episode": np.full(rows, step // 6, dtype=np.int64),
            "episode_seed": np.array([1000 * client + 10 * row + int(step >= 5 + row) for row in range(rows)],
                                     dtype=np.int64),
            "episode_start": start,
            "active": np.ones(rows, dtype=bool),
        })
    return out


def _local_actions(spec: str, context, observations: list[dict]) -> list[np.ndarray]:
    """The reference: a fresh local policy of its own for this client, as an unbatched server gives it."""
    policy = load_policy(spec, context)
    policy.reset()
    out = []
    for obs in observations:
        actions = np.asarray(policy.select_action(obs, ["Reach."] * len(obs["state"])), dtype=np.float32)
        out.append(actions if actions.ndim == 2 else actions[:, 0])
    return out


def _served_actions(server: PolicyServer, context, traffic: dict[int, list[dict]]) -> dict[int, list[np.ndarray]]:
    """Every client in its own thread with its own connection, all sending at once."""
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(traffic))

    def client(cid: int) -> None:
        remote = RemotePolicy(server.url, context)
        try:
            assert remote.batched  # connects before the barrier, so every connection counts for the batcher
            barrier.wait()
            results[cid] = [remote.select_action(obs, ["Reach."] * len(obs["state"]))[:, 0]
                            for obs in traffic[cid]]
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)
        finally:
            remote.close()

    threads = [threading.Thread(target=client, args=(cid,)) for cid in traffic]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return results


@pytest.mark.parametrize("spec", ["random", "fixture_policies:make_slot_queue_policy"])
def test_batched_actions_equal_each_clients_own_policy(spec, smoke):
    sizes = [1, 2, 3, 1, 2, 1]  # 10 rows from 6 clients, max batch 4: stacking, carry-over, a request alone
    traffic = {cid: _observations(cid, rows, smoke.state_dim) for cid, rows in enumerate(sizes)}
    server = PolicyServer(spec, smoke, port=0, max_batch=4, max_wait_ms=50)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        served = _served_actions(server, smoke, traffic)
        calls, rows = server.batch_stats
    finally:
        server.shutdown()
    for cid, observations in traffic.items():
        expected = _local_actions(spec, smoke, observations)
        for step, (got, want) in enumerate(zip(served[cid], expected, strict=True)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"client {cid} step {step}")
    requests = len(traffic) * STEPS
    assert rows == sum(sizes) * STEPS
    assert calls < requests  # requests really were stacked into fewer policy calls
    print(f"{spec}: {requests} requests, {rows} rows in {calls} policy calls")


def test_a_new_connection_starts_fresh_in_a_reused_slot(smoke):
    server = PolicyServer("random", smoke, port=0, max_batch=8, max_wait_ms=1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        first = RemotePolicy(server.url, smoke)
        for obs in _observations(0, 2, smoke.state_dim)[:3]:
            first.select_action(obs, ["Reach."] * 2)
        first.close()
        for _ in range(500):  # let the server see the disconnect, so the second client reuses slots 0 and 1
            if server._slots.connections == 0:
                break
            threading.Event().wait(0.01)
        second = RemotePolicy(server.url, smoke)
        obs = _observations(7, 2, smoke.state_dim)[1]  # episode_start False: mid-episode for the client
        got = second.select_action(obs, ["Reach."] * 2)[:, 0]
        second.close()
    finally:
        server.shutdown()
    fresh = load_policy("random", smoke)  # what an unbatched server's fresh copy answers
    np.testing.assert_array_equal(got, fresh.select_action(obs, ["Reach."] * 2))


def test_slots_are_stable_per_connection_and_reused_lowest_first():
    table = SlotTable()
    for conn in (0, 1):
        table.connect(conn)
    a, fresh_a = table.rows(0, 2)
    b, _ = table.rows(1, 3)
    assert a.tolist() == [0, 1] and fresh_a.all() and b.tolist() == [2, 3, 4]
    again, fresh = table.rows(0, 3)  # same rows keep their slots; a third row gets a new one
    assert again.tolist() == [0, 1, 5] and fresh.tolist() == [False, False, True]
    table.disconnect(0)
    table.connect(2)
    assert table.rows(2, 2)[0].tolist() == [0, 1] and table.connections == 2


def test_stack_concatenates_rows_lists_and_images():
    one = {"state": np.zeros((1, 2)), "task": ["a"], "images": {"cam": np.zeros((1, 4, 4, 3), np.uint8)}}
    two = {"state": np.ones((2, 2)), "task": ["b", "c"], "images": {"cam": np.ones((2, 4, 4, 3), np.uint8)}}
    stacked = stack([one, two])
    assert stacked["state"].shape == (3, 2) and stacked["task"] == ["a", "b", "c"]
    assert stacked["images"]["cam"].shape == (3, 4, 4, 3) and stacked["images"]["cam"][0].sum() == 0


def test_policies_that_do_not_declare_batchable_are_refused(smoke):
    with pytest.raises(ConfigError, match="does not declare batchable = True"):
        PolicyServer("fixture_policies:make_queue_policy", smoke, port=0, max_batch=4)
    with pytest.raises(ConfigError, match="--max-wait-ms must be >= 0"):
        PolicyServer("zero", smoke, port=0, max_batch=4, max_wait_ms=-1)
    result = CliRunner().invoke(app, ["serve", "--policy", "zero", "--suite", "smoke", "--max-batch", "0"])
    assert result.exit_code == 2 and result.output.strip() == "error: --max-batch must be >= 1, got 0"


def test_a_policy_error_answers_its_batch_and_the_server_keeps_serving(smoke):
    server = PolicyServer("fixture_policies:make_raises_on_large_state", smoke, port=0, max_batch=8, max_wait_ms=1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    remote = RemotePolicy(server.url, smoke)
    try:
        poisoned = _observations(0, 2, smoke.state_dim)[0]
        poisoned["state"][1, 0] = 1000.0
        with pytest.raises(PolicyError, match="policy raised RuntimeError: poisoned row"):
            remote.select_action(poisoned, ["Reach."] * 2)
        good = _observations(1, 2, smoke.state_dim)[0]  # the client reconnects; the batcher is still alive
        assert remote.select_action(good, ["Reach."] * 2).shape == (2, 1, smoke.action_dim)
    finally:
        remote.close()
        server.shutdown()
