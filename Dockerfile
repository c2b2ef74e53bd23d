# lerobench smoke image: CPU-only, headless rendering through Mesa EGL. See docs/docker.md.
# Base pinned to Debian bookworm (python:3.11-slim alone now means trixie and drifts); offline, build a local
# stand-in of the same name with docker/build-offline-base.sh.
FROM python:3.11-slim-bookworm

# Mesa EGL/OSMesa for MuJoCo rendering; libglib2.0-0 for opencv-python (pulled by robosuite/LIBERO: without it
# every LIBERO reset fails with "libgthread-2.0.so.0: cannot open shared object file"); libsm6 for opencv's Qt
# plugin; libgomp1 and libtbb12 for numba's threading layers. docker/check-shared-libs.sh proves none is missing.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libegl1 libegl-mesa0 libgl1 libgles2 libglvnd0 libosmesa6 libglib2.0-0 libsm6 libgomp1 libtbb12 \
 && rm -rf /var/lib/apt/lists/*

ENV MUJOCO_GL=egl \
    PYOPENGL_PLATFORM=egl \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_CONSTRAINT=/opt/lerobench/docker/constraints.txt \
    PYTHONUNBUFFERED=1

WORKDIR /opt/lerobench
COPY docker/constraints.txt docker/check-shared-libs.sh docker/

# Dependencies first, from pyproject.toml alone (an empty package stands in for the code), so editing the code
# does not download LIBERO's ~2 GB again. Every version comes from docker/constraints.txt.
COPY pyproject.toml ./
# (lerobench/_version.py too: pyproject.toml reads the version from it)
RUN mkdir -p lerobench suites && touch lerobench/__init__.py README.md \
 && echo '__version__ = "0.0.0"' > lerobench/_version.py \
 && pip install --upgrade pip \
 && pip install ".[metaworld,libero,pusht]" \
 && pip uninstall -y lerobench \
 && rm -rf lerobench suites README.md

COPY README.md ./
COPY docker/require-success.py docker/
COPY lerobench ./lerobench
COPY suites ./suites
RUN pip install --no-deps . && docker/check-shared-libs.sh

# Exec form: lerobench is PID 1 and gets docker stop's SIGTERM itself (exit 143, finished episodes saved).
# --max-errors 0: any episode that ends in a simulator error fails the smoke (exit 3).
# The LIBERO half: docker run IMAGE lerobench eval --suite smoke_libero --max-errors 0 (scripts/docker-smoke.sh).
CMD ["lerobench", "eval", "--suite", "smoke", "--max-errors", "0", "--output", "/tmp/smoke"]
