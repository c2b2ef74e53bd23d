#!/usr/bin/env bash
# The LeRobot policies' tests under the CURRENT LeRobot (0.6.1, Python 3.12), beside the main tests' LeRobot 0.4.4
# (Python 3.11): policies saved by the current LeRobot and by 0.4.4 (saved here with the active environment's
# LeRobot) run through `lerobot:<dir>` on PushT with the same episodes at batch 1, 4 and in processes
# (tests/test_lerobot_versions.py). .ci/run calls it after the README's test command, with that environment active.
#
# Usage: scripts/test-lerobot-current.sh [VENV]   (default: $LEROBENCH_LEROBOT_CURRENT_VENV or
#   ~/.cache/lerobench/lerobot-current-venv; built by scripts/lerobot-current-env.sh, its wheels kept for the next run)
# Arguments after VENV go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${LEROBENCH_LEROBOT_CURRENT_VENV:-$HOME/.cache/lerobench/lerobot-current-venv}}"
shift || true
if [ -z "${VIRTUAL_ENV:-}" ] || ! python -c "import lerobot" 2>/dev/null; then
    echo "scripts/test-lerobot-current.sh: activate the main test environment first (scripts/test.sh installs it):" \
         "it saves the LeRobot 0.4.4 policies" >&2
    exit 2
fi
bash scripts/lerobot-current-env.sh "$venv"
"$venv/bin/python" -m pip install -q -e ".[pusht]" pytest
saved=$(mktemp -d)
trap 'rm -rf "$saved"' EXIT
echo "policies saved by LeRobot $(python -c 'import importlib.metadata as m; print(m.version("lerobot"))') into $saved"
HF_HUB_OFFLINE=1 PYTHONPATH=tests python tests/lerobot_pusht_fixtures.py "$saved"
echo "tests under LeRobot $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lerobot"))')" \
     "(Python $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])'))"
LEROBENCH_LEROBOT_SAVED="$saved" MUJOCO_GL=egl PYTHONPATH=tests \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_lerobot_versions.py "$@"
