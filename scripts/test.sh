#!/usr/bin/env bash
# Install what the tests need into the active Python environment, then lint, type-check and run every test.
# The README's test command and .ci/run call exactly this. torch comes first, pinned, so nothing later replaces it
# (TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu picks the CPU-only build; default: pip's index).
# openpi-client and lerobot come last without their stale numpy<2 / torch<2.11 pins (their real needs are in
# requirements-lerobot.txt), so pip's resolver never sees those pins; robomimic (tests/test_libero_recording.py
# loads recordings with it) likewise, without egl_probe and imageio-ffmpeg (its real needs are in the dev extra).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
    echo "scripts/test.sh: activate a virtual environment first (python3 -m venv .venv && . .venv/bin/activate)" >&2
    exit 2
fi
# pip byte-compiles what it installs (~60 s on a 2-core box): keep it. Without the .pyc files, under
# PYTHONDONTWRITEBYTECODE=1 (set on the CI machines) every test process compiled torch's modules anew (measured:
# pytest 1.5x slower).
python -m pip install -q --upgrade pip
pip install -q torch==2.13.0 torchvision==0.28.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
pip install -q -e ".[metaworld,libero,pusht,aloha,dev]"
pip install -q -r requirements-lerobot.txt
pip install -q --no-deps openpi-client==0.1.2 lerobot==0.4.4 robomimic==0.3.0
# mypy follows the imports into numpy, torch, scipy ... (~40 s cold); its cache outside the checkout makes the next
# clean clone's check ~5 s (each cached module is re-validated by its content hash, so a changed file is rechecked).
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lerobench/mypy}"
ruff check lerobench tests benchmarks examples
mypy
# Three pytest workers (pytest-xdist; LEROBENCH_TEST_WORKERS=1 runs them in one process): a test keeps ~0.8 of a
# core busy on average (simulator start-up, one process at a time), so two side by side leave part of the second
# core idle and three fill both (2026-11-27: 19.7 min at 2 workers against 30.8 at 1 on a busy 2-core box). Each
# worker may hold LIBERO workers of ~2 GB: three fit in 24 GB (the suite passed at 3 under a load of 6, 2026-12-02).
# Each test file's time goes to LEROBENCH_RECORD_DURATIONS (tests/file_times.py; the 20 slowest are printed).
LEROBENCH_RECORD_DURATIONS="${LEROBENCH_RECORD_DURATIONS:-/tmp/lerobench-test-durations.json}" \
    MUJOCO_GL=egl python -m pytest -q -n "${LEROBENCH_TEST_WORKERS:-3}" --durations=40 "$@"
