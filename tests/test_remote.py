"""openpi-compatible websocket policies: msgpack-numpy, ``lerobench serve`` and ``--policy ws://``."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import msgpack
import numpy as np
import pytest
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection
from websockets.sync.server import serve as ws_serve

from lerobench.errors import PolicyError
from lerobench.policies import msgpack_numpy
from lerobench.policies.base import PolicyContext
from lerobench.policies.builtin import RandomPolicy
from lerobench.policies.loading import load_policy
from lerobench.policies.remote import RemotePolicy
from lerobench.policies.serve import PolicyServer, RequestError, _Session, suite_context, to_batch
from lerobench.suite.config import TaskSpec

pytestmark = pytest.mark.sim  # every test here drives a real simulator


@pytest.fixture(scope="module")
def smoke() -> PolicyContext:
    return suite_context("smoke")


def _start(server) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def served(smoke):
    """Factory: serve a policy spec for the smoke suite on a free port; shut down after the test."""
    servers: list[PolicyServer] = []

    def make(spec: str) -> PolicyServer:
        server = PolicyServer(spec, smoke, port=0)
        servers.append(server)
        _start(server)
        return server

    yield make
    for server in servers:
        server.shutdown()


def _batch(n: int, state_dim: int, start: bool) -> dict:
    return {
        "state": np.random.default_rng(0).normal(size=(n, state_dim)).astype(np.float32),
        "task": ["reach-v3"] * n,
        "episode": np.arange(n, dtype=np.int64),
        "episode_seed": np.arange(100, 100 + n, dtype=np.int64),
        "episode_start": np.full(n, start),
        "active": np.ones(n, dtype=bool),
    }


@pytest.fixture
def libero_context() -> PolicyContext:
    task = TaskSpec(name="put_the_bowl", description="put the bowl on the plate", index=0)
    return PolicyContext(suite="libero_fake", backend="libero", tasks=(task,), action_dim=7, state_dim=8,
                         cameras=("agentview", "robot0_eye_in_hand"), image_size=(8, 8))


# -- msgpack-numpy --------------------------------------------------------------------------------
def test_msgpack_numpy_is_wire_compatible_with_openpi_client():
    openpi = pytest.importorskip("openpi_client.msgpack_numpy")
    data = {"image": np.arange(24, dtype=np.uint8).reshape(2, 4, 3), "state": np.ones(8),
            "n": np.int64(3), "flag": np.bool_(True), "prompt": "pick", "nested": {"a": np.zeros((0, 2))}}
    assert msgpack_numpy.packb(data) == openpi.packb(data)
    for decoded in (openpi.unpackb(msgpack_numpy.packb(data)), msgpack_numpy.unpackb(openpi.packb(data))):
        assert decoded["image"].dtype == np.uint8 and np.array_equal(decoded["image"], data["image"])
        assert decoded["n"] == 3 and decoded["n"].dtype == np.int64 and decoded["prompt"] == "pick"
        assert decoded["nested"]["a"].shape == (0, 2)


@pytest.mark.parametrize("dtype", ["|O", "|V8", "f4,O"])
def test_decoder_refuses_object_and_void_arrays(dtype):
    message = msgpack.packb({"x": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": dtype, b"shape": [1]}})
    with pytest.raises(msgpack_numpy.DecodeError, match="refusing array dtype"):
        msgpack_numpy.unpackb(message)
    generic = msgpack.packb({b"__npgeneric__": True, b"data": 0, b"dtype": dtype})
    with pytest.raises(msgpack_numpy.DecodeError):
        msgpack_numpy.unpackb(generic)


def test_encoder_refuses_object_arrays_and_decoder_checks_sizes():
    with pytest.raises(TypeError, match="object"):
        msgpack_numpy.packb({"x": np.array([1, None])})
    short = msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<f4", b"shape": [3]})
    with pytest.raises(msgpack_numpy.DecodeError, match="needs 12 bytes"):
        msgpack_numpy.unpackb(short)
    with pytest.raises(msgpack_numpy.DecodeError, match="not a valid msgpack"):
        msgpack_numpy.unpackb(b"\xc1 not msgpack")


# -- lerobench serve --------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
def test_openpi_client_gets_metadata_and_action_chunk(served, smoke):
    client_mod = pytest.importorskip("openpi_client.websocket_client_policy")
    server = served("zero")
    client = client_mod.WebsocketClientPolicy(server.url)
    try:
        metadata = client.get_server_metadata()
        assert metadata["server"] == "lerobench" and metadata["batched"] is True
        assert metadata["action_dim"] == smoke.action_dim and metadata["cameras"] == []
        reply = client.infer({"state": np.zeros(smoke.state_dim), "prompt": "Press the button."})
        assert reply["actions"].shape == (1, smoke.action_dim)  # single request: a (T, A) chunk
        assert "infer_ms" in reply["server_timing"]
    finally:
        client._ws.close()


def test_served_policy_declares_its_chunk_length_to_the_client(served, smoke):
    chunked = RemotePolicy(served("fixture_policies:make_fixed_chunk").url, smoke)
    plain = RemotePolicy(served("random").url, smoke)
    try:
        assert chunked.observation_needs.replan_steps == 5 and not chunked.observation_needs.every_frame
        assert plain.observation_needs.replan_steps is None
    finally:
        chunked.close()
        plain.close()


def test_remote_policy_returns_the_local_policys_actions(served, smoke):
    server = served("random")
    remote = RemotePolicy(server.url, smoke)
    local = RandomPolicy(smoke.action_dim)
    assert remote.batched and remote.observation_needs.cameras == ()
    twin = copy.copy(remote)
    try:
        for start in (True, False):  # episode start re-seeds; the next step continues both RNGs
            batch = _batch(3, smoke.state_dim, start)
            expected = local.select_action(batch, ["x"] * 3)
            got = remote.select_action(batch, ["x"] * 3)
            assert got.shape == (3, 1, smoke.action_dim)
            np.testing.assert_array_equal(got[:, 0], expected)
        assert twin._conn is None  # a copy never shares the socket; it opens its own on use
        twin.reset()
        np.testing.assert_array_equal(twin.select_action(_batch(3, smoke.state_dim, True), ["x"] * 3)[:, 0],
                                      RandomPolicy(smoke.action_dim).select_action(
                                          _batch(3, smoke.state_dim, True), ["x"] * 3))
        assert twin._conn is not None and twin._conn is not remote._conn
    finally:
        remote.close()
        twin.close()


def test_malformed_requests_get_text_frames_and_the_server_keeps_answering(served, smoke):
    server = served("zero")
    good = msgpack_numpy.packb({"state": np.zeros(smoke.state_dim)})
    with connect(server.url, compression=None) as ws:
        assert msgpack_numpy.unpackb(ws.recv())["server"] == "lerobench"
        bad = {
            b"\xc1 not msgpack": "not a valid msgpack",
            msgpack_numpy.packb({"prompt": "no state"}): "no 'state'",
            msgpack_numpy.packb([1, 2]): "must be a map",
            msgpack_numpy.packb({"state": np.zeros(5)}): "must have shape (39,)",
            msgpack_numpy.packb({"state": np.zeros((2, 39)), "task": ["a"]}): "list of 2 strings",
        }
        for message, reason in bad.items():
            ws.send(message)
            reply = ws.recv()
            assert isinstance(reply, str) and reason in reply
        ws.send(good)
        assert msgpack_numpy.unpackb(ws.recv())["actions"].shape == (1, smoke.action_dim)


def test_policy_exception_becomes_an_error_reply(smoke):
    class Broken:
        def select_action(self, observation, task_descriptions):
            raise RuntimeError("weights missing")

    reply = _Session(Broken(), smoke, ()).answer(msgpack_numpy.packb({"state": np.zeros(smoke.state_dim)}))
    assert isinstance(reply, str) and reply.startswith("policy raised RuntimeError: weights missing")


def test_openpi_libero_request_becomes_a_batch_of_one(libero_context):
    image = np.zeros((8, 8, 3), dtype=np.uint8)
    request = {"observation/state": np.ones(8), "observation/image": image, "images": {"robot0_eye_in_hand": image},
               "prompt": "put the bowl on the plate"}
    batch, descriptions, single = to_batch(request, libero_context, libero_context.cameras, first=False)
    assert single and batch["state"].shape == (1, 8) and batch["state"].dtype == np.float32
    assert {cam: img.shape for cam, img in batch["images"].items()} == {
        "agentview": (1, 8, 8, 3), "robot0_eye_in_hand": (1, 8, 8, 3)}
    assert batch["task"] == ["put_the_bowl"] and descriptions == ["put the bowl on the plate"]
    assert not batch["episode_start"][0] and batch["active"][0]
    request["observation/image"] = np.zeros((4, 4, 3), dtype=np.uint8)
    with pytest.raises(RequestError, match=r"camera 'agentview' must be uint8 of shape \(8, 8, 3\)"):
        to_batch(request, libero_context, libero_context.cameras)


# -- RemotePolicy against an openpi-style (unbatched) server ----------------------------------------
class FakeOpenpiServer:
    """Answers like openpi's server: ``{}`` metadata, a (T, A) chunk per request; can fail on demand."""

    def __init__(self, action_dim: int, horizon: int = 5):
        self.action_dim, self.horizon = action_dim, horizon
        self.requests: list[dict] = []
        self.connections = 0
        self.fail: str | None = None  # "error": text frame then close (like openpi); "drop": close
        self._server = ws_serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self.url = f"ws://127.0.0.1:{self._server.socket.getsockname()[1]}"
        _start(self._server)

    def _handle(self, conn: ServerConnection) -> None:
        self.connections += 1
        conn.send(msgpack_numpy.packb({}))
        for message in conn:
            request = msgpack_numpy.unpackb(message)
            self.requests.append(request)
            fail, self.fail = self.fail, None
            if fail == "error":
                conn.send("Traceback (most recent call last):\nValueError: boom")
            if fail:
                return
            chunk = np.full((self.horizon, self.action_dim), request["state"][0], dtype=np.float32)
            conn.send(msgpack_numpy.packb({"actions": chunk}))




@pytest.fixture
def fake(libero_context) -> Iterator[FakeOpenpiServer]:
    server = FakeOpenpiServer(libero_context.action_dim)
    yield server
    server._server.shutdown()


def _libero_batch(n: int) -> dict:
    batch = _batch(n, 8, True)
    batch["state"][:, 0] = np.arange(n)
    batch["task"] = ["put_the_bowl"] * n
    batch["images"] = {cam: np.full((n, 8, 8, 3), k, dtype=np.uint8)
                       for k, cam in enumerate(("agentview", "robot0_eye_in_hand"))}
    return batch


def test_unbatched_server_gets_one_openpi_libero_request_per_active_env(fake, libero_context):
    policy = RemotePolicy(fake.url, libero_context)
    batch = _libero_batch(3)
    batch["active"][1] = False
    try:
        assert not policy.batched and policy.observation_needs.cameras == libero_context.cameras
        actions = policy.select_action(batch, ["put the bowl on the plate"] * 3)
    finally:
        policy.close()
    assert actions.shape == (3, 5, 7)
    np.testing.assert_array_equal(actions[:, 0, 0], [0.0, 0.0, 2.0])  # env 1 inactive: zeros, not sent
    assert [r["state"][0] for r in fake.requests] == [0.0, 2.0]
    request = fake.requests[0]
    assert request["prompt"] == "put the bowl on the plate" and request["episode_start"] is True
    assert request["observation/image"].shape == (8, 8, 3) and request["observation/image"].dtype == np.uint8
    assert request["observation/wrist_image"][0, 0, 0] == 1 and request["observation/state"].shape == (8,)
    assert set(request["images"]) == set(libero_context.cameras)


@pytest.mark.parametrize(("fail", "message"), [("error", "ValueError: boom"), ("drop", "dropped")])
def test_server_error_or_drop_raises_and_the_next_call_reconnects(fake, libero_context, fail, message):
    policy = RemotePolicy(fake.url, libero_context)
    try:
        policy.select_action(_libero_batch(1), ["x"])
        fake.fail = fail
        with pytest.raises(PolicyError, match=message):
            policy.select_action(_libero_batch(1), ["x"])
        assert policy.select_action(_libero_batch(1), ["x"]).shape == (1, 5, 7)
        assert fake.connections == 2
    finally:
        policy.close()


def test_unreachable_server_fails_when_the_policy_is_loaded(smoke):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound but never listening: connections are refused
        with pytest.raises(PolicyError, match="cannot connect to policy server"):
            load_policy(f"ws://127.0.0.1:{sock.getsockname()[1]}", smoke)


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_help_does_not_import_websockets():
    code = "import sys, lerobench.cli; sys.exit('websockets' in sys.modules or 'msgpack' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_cli_serve_unknown_policy_is_one_error_line():
    from typer.testing import CliRunner

    from lerobench.cli import app

    result = CliRunner().invoke(app, ["serve", "--policy", "nope", "--suite", "smoke", "--port", "0"])
    assert result.exit_code == 2 and "unknown policy 'nope'" in result.output


def test_eval_through_cli_against_a_served_expert(served, tmp_path, monkeypatch):
    pytest.importorskip("metaworld")
    from typer.testing import CliRunner

    from lerobench.cli import app

    monkeypatch.setenv("MUJOCO_GL", "egl")
    server = served("metaworld-expert")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--policy", server.url, "--episodes", "1",
                                      "--max-steps", "20", "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["policy"] == server.url and results["complete"]
    assert results["overall"]["n_episodes"] == 2 and results["overall"]["n_errors"] == 0


def test_client_refuses_a_server_of_another_image_size_at_connect(tmp_path, monkeypatch):
    """Issue 61: a server built for one protocol's images and a client on another's met only at the first call,
    after the workers started. The server declares its shapes on connect; the client compares them first."""
    pytest.importorskip("metaworld")
    from typer.testing import CliRunner

    from lerobench.cli import app
    from lerobench.suite.registry import load_suite

    monkeypatch.setenv("MUJOCO_GL", "egl")
    small = tmp_path / "smoke64.toml"
    small.write_text(load_suite("smoke").source.read_text().replace("image_size = [480, 480]", "image_size = [64, 64]"))
    server = PolicyServer("fixture_policies:make_camera", suite_context(str(small)), port=0, protocol="standard")
    _start(server)
    try:
        with connect(server.url) as conn:
            declared = msgpack_numpy.unpackb(conn.recv())
        shapes = (declared["cameras"], declared["image_size"], declared["protocol"])
        assert shapes == (["corner2"], [64, 64], "standard")
        assert (declared["state_dim"], declared["action_dim"]) == (39, 4)
        common = ["eval", "--policy", server.url, "--episodes", "2", "--max-steps", "5", "--videos", "0",
                  "--executor", "processes", "--workers", "2"]
        refused = CliRunner().invoke(app, [*common, "--suite", "smoke", "--output", str(tmp_path / "other")])
        assert refused.exit_code == 2, refused.output
        text = " ".join(refused.output.split())
        assert "64x64" in text and "480x480" in text and "'standard'" in text and "corner2" in text, text
        assert "Traceback" not in refused.output and not (tmp_path / "other" / "episodes.jsonl").exists()
        # The same server and a run of its own size: no refusal (the check compares, it does not just refuse).
        same = CliRunner().invoke(app, [*common, "--suite", str(small), "--output", str(tmp_path / "same")])
        assert same.exit_code == 0, same.output
        assert json.loads((tmp_path / "same" / "results.json").read_text())["overall"]["n_episodes"] == 4
    finally:
        server.shutdown()


def test_libero_client_on_the_lerobot_protocol_is_refused_before_any_scene_is_built(tmp_path):
    """The issue's case: ``serve --suite libero_spatial`` (standard, 256x256) and ``eval --protocol lerobot``
    (360x360): exit 2 naming both sizes and the server's protocol, in about a second (no LIBERO scene built)."""
    pytest.importorskip("libero.libero")
    from typer.testing import CliRunner

    from lerobench.cli import app

    server = PolicyServer("fixture_policies:make_camera", suite_context("libero_spatial"), port=0,
                          protocol="standard")
    _start(server)
    try:
        refused = CliRunner().invoke(app, ["eval", "--suite", "libero_spatial", "--protocol", "lerobot", "--policy",
                                           server.url, "--tasks", "0", "--episodes", "1", "--videos", "0",
                                           "--output", str(tmp_path / "run")])
    finally:
        server.shutdown()
    assert refused.exit_code == 2, refused.output
    text = " ".join(refused.output.split())
    assert "256x256" in text and "360x360" in text and "--protocol standard" in text, text
    assert "Traceback" not in refused.output and not (tmp_path / "run" / "episodes.jsonl").exists()
