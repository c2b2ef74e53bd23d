"""Requests/s and latency of ``lerobench serve`` with and without ``--max-batch``, many concurrent clients.

    python benchmarks/serve_batching.py                                  # 8 and 32 clients, CPU MLP
    python benchmarks/serve_batching.py --clients 64 --device cuda --hidden 4096

The served policy is a torch MLP (state -> hidden x layers -> an action chunk), the shape of a small
GPU policy head. Each client is its own process (like a process or Ray worker driving one env) and
uses lerobench's own client (``RemotePolicy``) over loopback, sending one 1-row request at a time
(``--requests`` each). The server runs in this process. Figures: total requests/s over the timed
window (all clients start together) and each request's round-trip latency (p50, p95), unbatched
(``--max-batch 1``: one policy copy per connection, one call per request) vs batched.

``--device-ms T`` adds a simulated accelerator to each forward: T ms of waiting, the same for any
batch size, under one process-wide lock (one device runs one forward at a time). That is the regime
batching is for (a GPU forward costs about the same for 1 and 32 rows); without a GPU at hand it
shows what the batcher itself adds. It is a model, labelled as such in the output, not a GPU figure.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import statistics
import threading
import time
from typing import Any

import numpy as np

DEVICE_LOCK = threading.Lock()
"""The simulated accelerator of ``--device-ms``: one forward at a time."""


def make_mlp(context: Any) -> Any:
    """A stateless, batchable torch MLP policy (the factory the server loads as ``serve_batching:make_mlp``)."""
    import torch

    from lerobench.policies.base import ObservationNeeds

    hidden, layers, chunk = (int(os.environ.get(k, d)) for k, d in
                             (("BENCH_HIDDEN", 1024), ("BENCH_LAYERS", 3), ("BENCH_CHUNK", 10)))
    device_s = float(os.environ.get("BENCH_DEVICE_MS", 0)) / 1000

    class MLPPolicy(torch.nn.Module):
        observation_needs = ObservationNeeds()
        batchable = True

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            sizes = [context.state_dim] + [hidden] * layers
            blocks: list[torch.nn.Module] = []
            for a, b in zip(sizes, sizes[1:], strict=False):
                blocks += [torch.nn.Linear(a, b), torch.nn.GELU()]
            self.net = torch.nn.Sequential(*blocks, torch.nn.Linear(hidden, context.action_dim * chunk))
            self.chunk = chunk

        def reset(self) -> None:
            """Stateless."""

        def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> Any:
            out = torch.tanh(self.net(observation["state"]))
            with DEVICE_LOCK if device_s else contextlib.nullcontext():
                time.sleep(device_s)
            return out.reshape(len(observation["state"]), self.chunk, -1)

    return MLPPolicy()


def _client(url: str, requests: int, seed: int, ready: Any, go: Any, results: Any) -> None:
    from lerobench.policies.remote import RemotePolicy
    from lerobench.policies.serve import suite_context

    context = suite_context("smoke")
    policy = RemotePolicy(url, context)
    assert policy.batched  # connect now, outside the timed window
    rng = np.random.default_rng(seed)
    obs = {"state": rng.normal(size=(1, context.state_dim)).astype(np.float32), "task": ["reach-v3"],
           "episode": np.zeros(1, np.int64), "episode_seed": np.array([seed]), "episode_start": np.array([True]),
           "active": np.ones(1, bool)}
    ready.wait()
    go.wait()
    latencies, start = [], time.perf_counter()
    for i in range(requests):
        obs["episode_start"][0] = i == 0
        obs["state"] = rng.normal(size=(1, context.state_dim)).astype(np.float32)
        t = time.perf_counter()
        policy.select_action(obs, ["Reach the goal position."])
        latencies.append(time.perf_counter() - t)
    results.put((start, time.perf_counter(), latencies))
    policy.close()


def measure(max_batch: int, max_wait_ms: float, clients: int, requests: int, device: str) -> dict[str, float]:
    """Serve the MLP, run ``clients`` client processes at once, return throughput and latency figures."""
    from lerobench.policies.serve import PolicyServer, suite_context

    server = PolicyServer("serve_batching:make_mlp", suite_context("smoke", device=device), port=0,
                          max_batch=max_batch, max_wait_ms=max_wait_ms)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ctx = mp.get_context("spawn")
    ready, go, results = ctx.Barrier(clients + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(server.url, requests, i, ready, go, results)) for i in range(clients)]
    try:
        for p in procs:
            p.start()
        ready.wait(timeout=300)
        go.set()
        done = [results.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        calls, rows = server.batch_stats
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        server.shutdown()
    start, end = min(d[0] for d in done), max(d[1] for d in done)
    latencies = sorted(x for d in done for x in d[2])
    total = len(latencies)
    return {"rps": total / (end - start), "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * latencies[int(0.95 * (total - 1))],
            "rows_per_call": rows / calls if calls else 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--requests", type=int, default=100, help="Requests per client.")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--device-ms", type=float, default=0.0,
                        help="Simulated accelerator: fixed ms per forward, one at a time (0: none).")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch intra-op threads (0: torch default).")
    args = parser.parse_args()
    os.environ.update(BENCH_HIDDEN=str(args.hidden), BENCH_LAYERS=str(args.layers), BENCH_DEVICE_MS=str(args.device_ms))
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    print(f"MLP {args.layers}x{args.hidden} on {args.device} (torch threads {torch.get_num_threads()}), "
          f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), {args.requests} one-row requests per "
          f"client process over loopback" + (f"; SIMULATED device: +{args.device_ms:g} ms per forward, serialized"
                                             if args.device_ms else ""))
    print(f"{'clients':>7} {'mode':<22} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'rows/call':>9} {'speedup':>8}")
    for clients in args.clients:
        base = None
        for label, max_batch in (("unbatched", 1), (f"--max-batch {args.max_batch}", args.max_batch)):
            r = measure(max_batch, args.max_wait_ms, clients, args.requests, args.device)
            base = base or r["rps"]
            print(f"{clients:>7} {label:<22} {r['rps']:>8.0f} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} "
                  f"{r['rows_per_call']:>9.1f} {r['rps'] / base:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
