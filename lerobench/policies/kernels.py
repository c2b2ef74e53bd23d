"""CPU kernels that compute a row the same way at any intra-op thread count, so a lone row may use every core.

Why: a one-row call on one thread leaves the other cores idle at batch 1 (Meta-World ACT at 480²: 1.29x the
unpadded run's wall time on 2 cores, issue 34), and more threads changed a row's bits in two places:

- **MKL's gemm** splits its reduction by the thread count (ACT's transformer: 5e-7). MKL's conditional
  numerical reproducibility in strict mode (``MKL_CBWR=AUTO,STRICT``) keeps most shapes identical at any
  count and costs nothing measurable (2048² sgemm 93.7 vs 94.1 ms); it is read once, when MKL starts, so
  the ``lerobench`` command sets it at its start unless the user did (``system.strict_mkl_default``); importing
  lerobench or calling ``lerobench.evaluate`` changes nothing (``mkl_mode`` only reads it). It does not cover
  every shape (some two-row products still change), so the counts a policy uses are checked on the policy
  itself (``policies/call_threads.py``), never assumed.
- **Torch's choice of convolution kernel**: a 1×1 convolution of a small batch runs on the native im2col
  path with one thread and on oneDNN with more, which sum in another order. ``PinnedKernels`` computes every
  1×1, stride-1, unpadded, ungrouped convolution (the projections of ACT's and the diffusion policy's
  encoders) as one matrix product per sample: the same kernel at every thread count. The 3×3 convolutions
  run on oneDNN at every count and were identical at 1 to 4 threads.
- **MKL's strict mode does not hold for small products**: over 2 or 3 rows (every other row count from 1 to 227
  tried held), or a 4x512 by 512x16 product (the diffusion policy's last layer), the sums still changed with
  the count. Inside a call every matrix product of fewer than ``SMALL_PRODUCT`` multiply-adds runs on one MKL
  thread: its one-thread result at every count, for a product too small to gain from threads.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

_MKL_CBWR_BRANCH_OFF, _MKL_CBWR_AUTO, _MKL_CBWR_STRICT, _MKL_CBWR_ALL = 1, 2, 0x10000, -1


def mkl_mode() -> str:
    """MKL's reproducibility mode in this process, read without changing it: ``strict``, ``default`` or as MKL says.

    ``strict`` (``MKL_CBWR=AUTO,STRICT``) is what the ``lerobench`` command runs in (``system.strict_mkl_default``
    at its start, before MKL starts); ``lerobench.evaluate`` leaves the caller's process as it is (MKL cannot be
    switched back once it has started, so a run must not switch it), and its worker processes inherit the
    caller's environment: the same mode everywhere in one run. ``none``: this torch has no MKL.
    """
    import torch

    if not torch.backends.mkl.is_available():
        return "none"
    try:
        get = _torch_library().mkl_serv_cbwr_get
        get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
        value = get(_MKL_CBWR_ALL)
    except (OSError, AttributeError):  # another build of torch: MKL's setting is not reachable
        return "unknown"
    return {_MKL_CBWR_AUTO | _MKL_CBWR_STRICT: "strict", _MKL_CBWR_BRANCH_OFF: "default"}.get(value, f"cbwr {value}")


def _torch_library() -> ctypes.CDLL:
    """The CPU library of torch, which carries its MKL (MKL's own settings are reached through it)."""
    import torch

    return ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))


def _unit_stride(value: Any, unit: int) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value in ("valid", "same")  # a 1x1 kernel pads nothing either way
    if isinstance(value, int):
        return value == unit
    return all(v == unit for v in value)


SMALL_PRODUCT = 1 << 24
"""Multiply-adds below which a matrix product runs on one MKL thread inside a call (about 0.3 ms of one core)."""


def _small(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], linear: Any, biased: set[Any]) -> bool:
    """Whether a matrix product's multiply-adds are below ``SMALL_PRODUCT`` (False if the operands are unclear)."""
    operands = list(args) + [kwargs[k] for k in ("input", "weight", "mat1", "mat2", "batch1", "batch2", "other")
                             if k in kwargs]
    if func in biased:  # addmm / baddbmm: (bias, a, b)
        operands = operands[1:]
    if len(operands) < 2 or not all(hasattr(t, "dim") for t in operands[:2]):
        return False
    a, b = operands[0], operands[1]
    if a.dim() == 0 or b.dim() == 0:
        return False
    outputs = b.shape[0] if func is linear else b.shape[-1]  # linear's weight is (out, in)
    return int(a.numel()) * int(outputs) < SMALL_PRODUCT


_MKL: Any = None


class _one_mkl_thread:  # noqa: N801 - used as a context manager, like contextlib's
    """MKL on one thread in this OS thread for the block (``mkl_set_num_threads_local``); a no-op without MKL."""

    def __enter__(self) -> None:
        global _MKL
        if _MKL is None:
            try:
                library = _torch_library()
                library.MKL_Set_Num_Threads_Local.restype = ctypes.c_int
                library.MKL_Set_Num_Threads_Local.argtypes = [ctypes.c_int]
                _MKL = library.MKL_Set_Num_Threads_Local
            except (OSError, AttributeError):
                _MKL = False
        self._before = _MKL(1) if _MKL else None

    def __exit__(self, *exc: object) -> None:
        if self._before is not None:
            _MKL(self._before)


_PINNED: Any = None


def pinned_kernels() -> Any:
    """A context manager: inside it, this thread's kernels do not follow the intra-op thread count.

    A ``TorchFunctionMode`` (thread-local): every 1×1 ``conv1d``/``conv2d`` with stride 1, no padding or
    dilation and one group becomes ``weight @ input`` per sample (``torch.mm``), and every matrix product of
    fewer than ``SMALL_PRODUCT`` multiply-adds runs on one MKL thread. What is left is checked per policy.
    """
    global _PINNED
    if _PINNED is None:
        import torch
        from torch.overrides import TorchFunctionMode

        convolutions = {torch.conv1d, torch.conv2d, torch.nn.functional.conv1d, torch.nn.functional.conv2d}
        linear = torch.nn.functional.linear
        biased = {torch.addmm, torch.baddbmm}
        products = {linear, torch.mm, torch.matmul, torch.addmm, torch.bmm, torch.baddbmm,
                    torch.Tensor.__matmul__, torch.Tensor.matmul, torch.Tensor.mm, torch.Tensor.bmm}

        class PinnedKernels(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                                   kwargs: dict[str, Any] | None = None) -> Any:
                kwargs = kwargs or {}
                if func in convolutions:
                    out = _pointwise_conv(torch, args, kwargs)
                    if out is not None:
                        return out
                elif func in products and _small(func, args, kwargs, linear, biased):
                    with _one_mkl_thread():
                        return func(*args, **kwargs)
                return func(*args, **kwargs)

        _PINNED = PinnedKernels
    return _PINNED()


def _pointwise_conv(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A 1×1 convolution as one matrix product per sample, or None if the call is not one."""
    x, weight = args[0], args[1]
    given = dict(zip(("bias", "stride", "padding", "dilation", "groups"), args[2:], strict=False))
    given.update(kwargs)
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor) and weight.dim() == x.dim()
            and weight.dim() in (3, 4) and all(k == 1 for k in weight.shape[2:])):
        return None
    if not (_unit_stride(given.get("stride"), 1) and _unit_stride(given.get("padding"), 0)
            and _unit_stride(given.get("dilation"), 1) and given.get("groups", 1) == 1):
        return None
    n, channels = x.shape[0], x.shape[1]
    matrix = weight.reshape(weight.shape[0], channels)
    flat = x.reshape(n, channels, -1)
    if weight.shape[0] * flat[0].numel() < SMALL_PRODUCT:
        with _one_mkl_thread():
            out = torch.stack([torch.mm(matrix, flat[i]) for i in range(n)])
    else:
        out = torch.stack([torch.mm(matrix, flat[i]) for i in range(n)])
    bias = given.get("bias")
    if bias is not None:
        out = out + bias.reshape(1, -1, 1)
    return out.reshape(n, weight.shape[0], *x.shape[2:])
