#!/usr/bin/env bash
# Build a venv with the CURRENT LeRobot (0.6.1), for side-by-side checks against lerobench (lerobot-eval on PushT):
#   Python 3.12 (LeRobot 0.6.1 requires >= 3.12), torch from PyPI (whatever lerobot 0.6.1 allows: torch<2.12, i.e.
#   2.11's CUDA build, ~3 GB, which also runs on the CPU), lerobot[diffusion,pusht]==0.6.1, gym-pusht==0.1.8,
#   pymunk==6.11.1.
# Extras (read off lerobot 0.6.1's METADATA): `diffusion` -> diffusers; `pusht` -> gym-pusht, pymunk and the
# `dataset` extra (datasets, pandas, pyarrow, av, torchcodec). lerobot-eval needs `dataset` even on a simulator:
# lerobot/scripts/lerobot_eval.py imports lerobot.datasets, which refuses to import without `datasets`.
#
# Usage: scripts/lerobot-current-env.sh TARGET_DIR
#   Idempotent: skips the install when TARGET_DIR already has lerobot 0.6.1, gym-pusht 0.1.8, pymunk 6.11.1, diffusers
#   and datasets; prints the versions at the end either way.
#   The wheels are kept in a wheelhouse (LEROBOT_WHEELHOUSE, default ~/.cache/lerobot-current-wheels) and installed
#   from there: pip's own HTTP cache is not kept on these machines (the responses come back uncacheable), so a
#   rebuild would otherwise download the ~3.5 GB again. LEROBOT_PYTHON picks another Python 3.12.
set -euo pipefail
target="${1:?usage: $0 TARGET_DIR}"
python="${LEROBOT_PYTHON:-/root/.pyenv/versions/3.12.1/bin/python}"
wheelhouse="${LEROBOT_WHEELHOUSE:-$HOME/.cache/lerobot-current-wheels}"
# gym-aloha and its pins (pyproject's `aloha` extra) too: tests/test_aloha_act.py runs here, and installing them in
# this background build keeps their download off the tests' path (scripts/test-lerobot-current.sh then finds them).
requirements=("lerobot[diffusion,pusht]==0.6.1" "gym-pusht==0.1.8" "pymunk==6.11.1" "gym-aloha==0.1.5"
              "dm-control==1.0.28" "mujoco==3.3.0")

complete() {
  [ -x "$target/bin/python" ] && "$target/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"lerobot": "0.6.1", "gym-pusht": "0.1.8", "pymunk": "6.11.1", "gym-aloha": "0.1.5", "dm-control": "1.0.28",
        "mujoco": "3.3.0", "diffusers": None, "datasets": None}
try:
    sys.exit(0 if all(v is None or m.version(k) == v for k, v in want.items() if m.version(k)) else 1)
except m.PackageNotFoundError:
    sys.exit(1)
PY
}

if complete; then
  echo "lerobot 0.6.1 (diffusion, pusht) and gym-aloha 0.1.5 already in $target; skipping install"
else
  [ -x "$target/bin/python" ] || "$python" -m venv "$target"
  "$target/bin/python" -m pip install --upgrade pip
  mkdir -p "$wheelhouse"
  # Files already in the wheelhouse are reused ("already downloaded"); only missing ones are fetched.
  "$target/bin/python" -m pip download -d "$wheelhouse" "${requirements[@]}"
  "$target/bin/python" -m pip install --find-links "$wheelhouse" "${requirements[@]}"
fi

"$target/bin/python" - <<'PY'
import importlib.metadata as m, sys
print("python", sys.version.split()[0])
for name in ("lerobot", "torch", "torchvision", "diffusers", "datasets", "gymnasium", "gym-pusht", "pymunk", "gym-aloha",
             "dm-control", "mujoco", "numpy",
             "opencv-python-headless"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "MISSING")
import torch
print("torch CUDA build", torch.version.cuda, "| CUDA available:", torch.cuda.is_available())
PY
