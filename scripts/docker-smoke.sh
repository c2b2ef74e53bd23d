#!/usr/bin/env bash
# Build the Docker image and run its smoke on both simulators with --max-errors 0: a broken backend (a missing
# system library, a simulator that cannot reset) fails here with a non-zero exit instead of "passing"; the LIBERO
# episode (the privileged expert) must also succeed (exit 4 otherwise).
# The same steps as .github/workflows/smoke.yml; .ci/run calls it when a Docker engine is available.
#
# Usage: scripts/docker-smoke.sh
#   LEROBENCH_IMAGE      image tag to build and run (default lerobench:smoke)
#   DOCKER_BUILD_ARGS    extra `docker build` arguments (e.g. "--network host" where the build's pip needs it)
#   LEROBENCH_SMOKE_ARGS extra `lerobench eval` arguments for both runs (e.g. "--policy my_pkg.policy:make")
set -euo pipefail
cd "$(dirname "$0")/.."
image=${LEROBENCH_IMAGE:-lerobench:smoke}

if ! docker info >/dev/null 2>&1; then
    echo "docker-smoke: error: no Docker engine reachable (docker info failed)" >&2
    exit 1
fi

step() { echo "docker-smoke: $*"; }
start=$(date +%s)
step "building $image"
# shellcheck disable=SC2086  # DOCKER_BUILD_ARGS is a list of arguments
docker build ${DOCKER_BUILD_ARGS:-} -t "$image" .
step "built in $(( $(date +%s) - start )) s; image size $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1/1e9}')"

step "lerobench doctor (versions vs pinned, offscreen render, assets, golden state per backend)"
docker run --rm "$image" lerobench doctor

# shellcheck disable=SC2086
run_smoke() {
    local suite=$1
    step "lerobench eval --suite $suite --max-errors 0 ${LEROBENCH_SMOKE_ARGS:-}"
    docker run --rm "$image" lerobench eval --suite "$suite" --max-errors 0 --output "/tmp/$suite" \
        ${LEROBENCH_SMOKE_ARGS:-}
}
run_smoke smoke          # Meta-World: two tasks, rendered videos
# LIBERO: one episode of the privileged expert, which must succeed: a simulator that resets, steps and renders but
# moves objects wrongly (a broken asset, a changed physics default) fails here, not only one that raises.
step "lerobench eval --suite smoke_libero --max-errors 0 (the expert's episode must succeed)"
# shellcheck disable=SC2086  # LEROBENCH_SMOKE_ARGS is a list of arguments, passed on as "$@", never re-parsed
docker run --rm "$image" sh -c 'lerobench eval --suite smoke_libero --max-errors 0 --output /tmp/smoke_libero "$@" \
    && python docker/require-success.py /tmp/smoke_libero' sh ${LEROBENCH_SMOKE_ARGS:-}

# Negative control: the smoke must be able to fail. The same image without GLib (the system library whose absence
# once broke every LIBERO reset while the smoke "passed") must fail the LIBERO smoke with exit 3.
step "lerobench eval --suite pusht --episodes 1 --max-errors 0 (PushT: the privileged expert's episode must succeed)"
docker run --rm "$image" sh -c 'lerobench eval --suite pusht --episodes 1 --max-errors 0 --output /tmp/pusht "$@" \
    && python docker/require-success.py /tmp/pusht' sh ${LEROBENCH_SMOKE_ARGS:-}

step "negative control: $image without libglib/libgthread must fail the LIBERO smoke with exit 3"
broken="$image-no-glib"
printf 'FROM %s\nRUN rm -f /usr/lib/*-linux-gnu/libgthread-2.0.so.0* /usr/lib/*-linux-gnu/libglib-2.0.so.0*\n' "$image" \
    | docker build -q -t "$broken" - >/dev/null
code=0
# --allow-sim-drift: the golden-state check refuses this image up front (exit 2); the control is that the episodes
# themselves fail and --max-errors turns that into exit 3.
docker run --rm "$broken" lerobench eval --suite smoke_libero --max-errors 0 --videos 0 --output /tmp/broken \
    --allow-sim-drift >/dev/null 2>&1 || code=$?
docker rmi "$broken" >/dev/null
if [ "$code" -ne 3 ]; then
    echo "docker-smoke: error: the smoke did not fail on a broken image (exit $code, expected 3)" >&2
    exit 1
fi
step "PASSED in $(( $(date +%s) - start )) s (Meta-World, LIBERO and PushT without episode errors; a broken image fails)"
