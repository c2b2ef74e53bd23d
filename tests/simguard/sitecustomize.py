"""The fast loop builds no simulator: ``make fast`` puts this folder on PYTHONPATH (child processes inherit it).

Python imports ``sitecustomize`` at start-up in every process; this one makes ``mujoco.MjModel`` raise when
anything builds a model (Meta-World and LIBERO both do, in any process), so a test that drives a simulator without
the ``sim`` marker fails in ``make fast`` with a message naming the fix. Importing mujoco stays allowed (versions,
fingerprint facts). Patched on import, through a meta-path finder: importing mujoco here at start-up hangs.
"""

import importlib.abc
import importlib.machinery
import sys


class _NoModels:
    def __getattr__(self, name):
        raise RuntimeError(f"make fast: a test built a simulator (mujoco.MjModel.{name}); mark it "
                           "@pytest.mark.sim (docs: CONTRIBUTING.md)")

    def __call__(self, *args, **kwargs):
        raise RuntimeError("make fast: a test built a simulator (mujoco.MjModel); mark it @pytest.mark.sim")


class _PatchMujocoOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "mujoco":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.MjModel = _NoModels()

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchMujocoOnImport())
