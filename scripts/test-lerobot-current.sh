#!/usr/bin/env bash
# The LeRobot policies' tests under the CURRENT LeRobot (0.6.1, Python 3.12), beside the main tests' LeRobot 0.4.4
# (Python 3.11): policies saved by the current LeRobot and by 0.4.4 (saved here with the active environment's
# LeRobot) run through `lerobot:<dir>` on PushT with the same episodes at batch 1, 4 and in processes
# (tests/test_lerobot_versions.py); ACT with LeRobot's ALOHA features, saved by the current LeRobot, on gym-aloha
# (tests/test_aloha_act.py: batch 1, 4, processes; temporal ensembling per env); and the adapter's tests
# (tests/test_lerobot.py: per-env queues against LeRobot's own select_action, for an ACT saved by 0.6.1 and by
# 0.4.4; slim import; config errors; reuse). That environment has PushT and ALOHA, not Meta-World nor LIBERO: the
# two CLI runs on those simulators are not collected here (they run in the main tests). SmolVLA's RTC tests
# (tests/test_lerobot_rtc.py) need LeRobot's `smolvla` extra (transformers), which that environment does not
# install. Serial: two pytest workers were slower here (each imports LeRobot, and the PushT runs already use two
# processes): 82 s serial vs 108 s with -n 2 on a busy 2-core box.
# .ci/run calls it after the README's test command, with that environment active.
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
"$venv/bin/python" -m pip install -q -e ".[pusht,aloha]" pytest
saved=$(mktemp -d)
trap 'rm -rf "$saved"' EXIT
echo "policies saved by LeRobot $(python -c 'import importlib.metadata as m; print(m.version("lerobot"))') into $saved"
HF_HUB_OFFLINE=1 PYTHONPATH=tests python tests/lerobot_pusht_fixtures.py "$saved"
echo "tests under LeRobot $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lerobot"))')" \
     "(Python $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])'))"
started=$(date +%s)
LEROBENCH_LEROBOT_SAVED="$saved" MUJOCO_GL=egl PYTHONPATH=tests \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_lerobot.py tests/test_lerobot_versions.py \
    tests/test_aloha_act.py \
    --deselect tests/test_lerobot.py::test_eval_smoke_through_cli \
    --deselect tests/test_lerobot.py::test_eval_libero_through_cli "$@"
echo "tests under the current LeRobot: $(( $(date +%s) - started )) s"
