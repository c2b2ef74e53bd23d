# lerobench smoke image: CPU-only, headless rendering through Mesa EGL.
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends libegl1 libegl-mesa0 libgl1 libgles2 libglvnd0 libosmesa6 \
 && rm -rf /var/lib/apt/lists/*

ENV MUJOCO_GL=egl \
    PYOPENGL_PLATFORM=egl \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/lerobench
COPY pyproject.toml README.md ./
COPY lerobench ./lerobench
COPY suites ./suites

# Same install as the README (the core needs no torch; add the CPU wheel for torch policies:
#   pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu).
RUN pip install --upgrade pip && pip install ".[metaworld,libero]"

# Smoke: two Meta-World tasks, then one short LIBERO episode (both simulators, real rendering for the videos).
CMD ["sh", "-c", "lerobench eval --suite smoke --output /tmp/smoke && lerobench eval --suite smoke_libero --output /tmp/smoke_libero"]
