import os

os.environ.setdefault("MUJOCO_GL", "egl")
