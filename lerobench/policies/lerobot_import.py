"""Importing LeRobot for one saved policy: only that policy type's modules where LeRobot's layout allows it.

``lerobot.policies``' ``__init__`` imports every policy's configuration, and GR00T's package imports its model
(``transformers`` and ``diffusers`` models among it): ~1.5 s and ~60 MB an ACT never uses, and LeRobot's
``factory`` imports them all again. For a saved policy of type ``T`` whose modules are where LeRobot keeps them
(``lerobot/policies/T/{configuration,modeling,processor}_T.py``), ``import_lerobot(T)`` imports just those:
the package ``lerobot.policies`` is entered without running its ``__init__``, which runs in place the first time
anything asks the package for a name it defines (PEP 562 ``__getattr__``), so a later ``from lerobot.policies
import ACTConfig`` still works. The policy class is the one ``T``'s modeling module defines under
``name = "T"`` (what ``factory.get_policy_class`` returns), and the processors load as the factory loads a
saved policy's (``PolicyProcessorPipeline.from_pretrained`` with its converters). A type outside that layout
(``reward_classifier``) or one the factory loads differently (``groot``) goes through LeRobot's factory.

What stays on the critical path is what LeRobot's core imports whatever the policy: torch, torchvision (whose
``ops`` import ``torch._dynamo``), ``lerobot.configs.policies`` (``lerobot.optim`` -> ``lerobot.datasets.utils``
-> Hugging Face ``datasets``, pandas, pyarrow) and ``lerobot.processor`` (its tokenizer step imports
``transformers``): docs/scaling.md measures each.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import warnings
from typing import Any

from lerobench import environment
from lerobench.errors import MissingDependencyError

INSTALL_HINT = "see docs/lerobot.md for the install recipe (lerobot==0.4.4 with --no-deps beside your torch)"
FACTORY_ONLY = frozenset({"groot"})
"""Types whose saved processors LeRobot's factory loads with overrides of its own."""

_import_lock = threading.RLock()
_TORCHVISION_SHIM: Any = None


def import_torchvision() -> None:
    """Import torchvision; tolerate a build whose C++ ops cannot load beside this torch.

    LeRobot imports torchvision at module level (transforms, ResNet backbones: pure Python). PyPI's
    torchvision is built against CUDA torch; beside a CPU-only torch its ``_C`` extension fails to load,
    which torchvision tolerates, except that it then registers fake kernels for ``torchvision::nms`` /
    ``qnms`` and fails with "operator torchvision::nms does not exist". Declaring those two schemas
    (no kernels) lets it import; only its detection ops (nms, roi_align) are then unavailable.
    """
    global _TORCHVISION_SHIM
    try:
        import torchvision  # noqa: F401
        return
    except ImportError:
        return  # LeRobot's own import reports the missing package
    except RuntimeError as exc:
        if "torchvision::" not in str(exc) or "does not exist" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    import torch

    if _TORCHVISION_SHIM is None:
        lib = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            if not hasattr(torch.ops.torchvision, op):
                lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_SHIM = lib  # must stay alive: dropping the Library object drops the schemas
    warnings.warn("torchvision's C++ ops do not load beside this torch (a CUDA build of torchvision?): "
                  "using its Python parts only", RuntimeWarning, stacklevel=3)
    import torchvision  # noqa: F401,F811


def import_lerobot(policy_type: str | None = None) -> dict[str, Any]:
    """The pieces of LeRobot the adapter uses (offline), with actionable errors.

    ``PreTrainedConfig``, ``get_policy_class(type)`` and ``make_pre_post_processors(config, pretrained_path=,
    preprocessor_overrides=)``; with ``policy_type``, only that type's modules where it can (module docstring).
    """
    environment.set_default(environment.HF_HUB_OFFLINE, "1")
    with _import_lock:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(f"--policy lerobot: needs torch and lerobot; {INSTALL_HINT}") from exc
        import_torchvision()
        try:
            found = _one_type(policy_type) if policy_type else None
            return found if found is not None else _factory()
        except ImportError as exc:
            raise MissingDependencyError(
                f"--policy lerobot: cannot import lerobot ({exc}); {INSTALL_HINT}") from exc


def _factory() -> dict[str, Any]:
    """LeRobot's own entry points: every policy's configuration imported."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    return {"PreTrainedConfig": PreTrainedConfig, "get_policy_class": get_policy_class,
            "make_pre_post_processors": make_pre_post_processors}


def _one_type(policy_type: str) -> dict[str, Any] | None:
    """Entry points that import only ``policy_type``'s modules; None when they are not in LeRobot's layout."""
    if policy_type in FACTORY_ONLY or not policy_type.isidentifier():
        return None
    _enter_policies_package()
    package = f"lerobot.policies.{policy_type}"
    names = [f"{package}.{kind}_{policy_type}" for kind in ("configuration", "modeling", "processor")]
    try:
        if any(importlib.util.find_spec(name) is None for name in names):
            return None
    except ModuleNotFoundError:
        return None
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.pretrained import PreTrainedPolicy

    configuration, modeling, processor = (importlib.import_module(name) for name in names)
    classes = [value for value in vars(modeling).values() if isinstance(value, type)
               and issubclass(value, PreTrainedPolicy) and value.__module__ == modeling.__name__
               and getattr(value, "name", None) == policy_type]
    if len(classes) != 1:
        return None
    policy_class = classes[0]

    def get_policy_class(name: str) -> type:
        if name != policy_type:
            return _factory()["get_policy_class"](name)
        return policy_class

    return {"PreTrainedConfig": PreTrainedConfig, "get_policy_class": get_policy_class,
            "make_pre_post_processors": _saved_processors}


def _saved_processors(config: Any, pretrained_path: str, preprocessor_overrides: dict | None = None) -> tuple:
    """A saved policy's pre/post-processors, loaded as LeRobot's factory loads them from a directory."""
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import (
        batch_to_transition,
        policy_action_to_transition,
        transition_to_batch,
        transition_to_policy_action,
    )
    from lerobot.utils.constants import POLICY_POSTPROCESSOR_DEFAULT_NAME, POLICY_PREPROCESSOR_DEFAULT_NAME

    pre = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=pretrained_path, config_filename=f"{POLICY_PREPROCESSOR_DEFAULT_NAME}.json",
        overrides=preprocessor_overrides or {}, to_transition=batch_to_transition, to_output=transition_to_batch)
    post = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=pretrained_path, config_filename=f"{POLICY_POSTPROCESSOR_DEFAULT_NAME}.json",
        overrides={}, to_transition=policy_action_to_transition, to_output=transition_to_policy_action)
    return pre, post


def _enter_policies_package() -> None:
    """Put ``lerobot.policies`` in ``sys.modules`` without running its ``__init__`` yet (module docstring)."""
    if "lerobot.policies" in sys.modules:
        return
    import lerobot

    spec = importlib.util.find_spec("lerobot.policies")
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)

    def complete(name: str) -> Any:
        """Run the package's ``__init__`` in place (once), then answer as the complete package would."""
        with _import_lock:
            hook = package.__dict__.pop("__getattr__", None)
            if hook is not None:
                try:
                    loader.exec_module(package)
                except BaseException:
                    setattr(package, "__getattr__", hook)  # noqa: B010 - a later access tries again, as an import would
                    raise
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'lerobot.policies' has no attribute {name!r}") from None

    setattr(package, "__getattr__", complete)  # noqa: B010 - PEP 562: a module's own __getattr__
    sys.modules["lerobot.policies"] = package
    setattr(lerobot, "policies", package)  # noqa: B010 - as importing the package would
