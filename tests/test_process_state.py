"""lerobench leaves the caller's process as it found it: on import, and around ``lerobench.evaluate`` (issue 47).

Both checks run in a clean subprocess without ``MKL_CBWR`` (conftest.py sets it for the tests' own CliRunner
commands, as the ``lerobench`` command does at its start): what a training loop that imports lerobench sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

IMPORT_ONLY = """
import json, os, signal, sys, warnings
env, filters = dict(os.environ), list(warnings.filters)
handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
import lerobench, lerobench.api, lerobench.cli
print(json.dumps({"env": {k: [env.get(k), os.environ.get(k)] for k in set(env) | set(os.environ)
                          if env.get(k) != os.environ.get(k)},
                  "filters": len(warnings.filters) - len(filters),
                  "handlers": [signal.getsignal(s) == h for s, h in handlers.items()],
                  "heavy": sorted(m for m in ("torch", "mujoco", "numpy", "ray", "matplotlib") if m in sys.modules)}))
"""

AROUND_EVALUATE = """
import ctypes, json, os, sys
from pathlib import Path
import torch
import lerobench

def mkl():
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    lib.mkl_serv_cbwr_get.restype, lib.mkl_serv_cbwr_get.argtypes = ctypes.c_int, [ctypes.c_int]
    return lib.mkl_serv_cbwr_get(-1)

def train_step():  # what a training loop computes: shapes whose sums depend on MKL's mode and threads
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 777, generator=g), torch.randn(777, 129, generator=g)
    return (a @ b).numpy().tobytes().hex()

torch.set_num_threads(2)
before = {"bits": train_step(), "mkl": mkl(), "threads": torch.get_num_threads(), "env": dict(os.environ)}
result = lerobench.evaluate("fixture_policies:make_mlp", "metaworld_mt10", tasks=["reach-v3"], episodes=2,
                            max_steps=20, videos=0, output=sys.argv[1])
after = {"bits": train_step(), "mkl": mkl(), "threads": torch.get_num_threads(), "env": dict(os.environ)}
changed = {k: [before["env"].get(k), after["env"].get(k)] for k in set(before["env"]) | set(after["env"])
           if before["env"].get(k) != after["env"].get(k)}
print(json.dumps({"same": {k: before[k] == after[k] for k in before}, "mode": before["mkl"], "changed": changed,
                  "numerics": result.document["config"]["numerics"]["mkl"], "n": result.n_episodes}))
"""


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


def test_importing_lerobench_changes_nothing_process_wide():
    out = subprocess.run([sys.executable, "-c", IMPORT_ONLY], capture_output=True, text=True, env=_clean_env(),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {"env": {}, "filters": 0, "handlers": [True, True], "heavy": []}, seen


@pytest.mark.sim
def test_a_training_loop_computes_the_same_bits_after_evaluate(tmp_path):
    pytest.importorskip("metaworld")
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", AROUND_EVALUATE, str(tmp_path / "run")], capture_output=True,
                         text=True, env=_clean_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["same"] == {"bits": True, "mkl": True, "threads": True, "env": True}, seen  # "changed" names any
    assert seen["n"] == 2
    assert seen["mode"] == 1 and seen["numerics"] == "default"  # MKL left as the caller had it, and recorded so


TURNS = """
import sys, threading
import numpy as np
from lerobench.system import bounded_malloc_arenas

def resident() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * 4096

applied = bounded_malloc_arenas(2) if sys.argv[1] == "on" else False
turns = [threading.Event() for _ in range(5)]
kept = []

def work(i):
    np.ones(16, np.uint8)  # the thread's first allocation picks its arena, while all four threads are alive
    turns[i].wait()
    blocks = [np.ones(64 << 10, np.uint8) for _ in range(128)]  # 8 MB in 64 KB blocks (from the arena's heap)
    kept.append(np.ones(1024, np.uint8))  # still in use above them: the arena cannot shrink
    del blocks
    turns[i + 1].set()

before = resident()
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
turns[0].set()
for t in threads:
    t.join()
print(applied, (resident() - before) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_threads_sharing_malloc_arenas_reuse_what_each_other_freed():
    """``bounded_malloc_arenas`` (the ``lerobench`` command's, before any thread): four long-lived threads taking
    turns with 8 MB each keep 32 MB resident in arenas of their own (glibc's default), one turn's worth in two
    shared ones: what the command's call threads keep of a policy call's activations."""
    kept = {}
    for mode in ("off", "on"):
        done = subprocess.run([sys.executable, "-c", TURNS, mode], capture_output=True, text=True, timeout=60,
                              env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")})
        assert done.returncode == 0, done.stderr
        applied, megabytes = done.stdout.split()
        assert applied == str(mode == "on"), done.stdout
        kept[mode] = int(megabytes)
    assert kept["off"] >= 30 and kept["on"] <= 17, kept
