"""Deterministic torch numerics for policy calls, and the record that tells two runs' numerics apart.

Why each setting: cuDNN's benchmark mode times several kernels at the first call and keeps the fastest, so
two runs may compute with different kernels; TF32 (and float32 matmul precision below "highest") trades
mantissa bits for speed on Ampere+ GPUs; some CUDA kernels (scatter/index adds, some backward convs) use
atomics whose order varies. All of these change a row's bits from one run to the next. So does the CPU's
intra-op thread count (ACT: 9.8e-7 between 1 and 2 threads, ``benchmarks/call_shape.py``; the MLP did not
change): CPU calls at a call width run on ``width.call_pool`` with kernels that do not follow the count
(``kernels.py``), and use more than one thread only where the policy was checked to keep one thread's bits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from lerobench import environment


def deterministic_torch() -> None:
    """Switch torch to deterministic numerics for this process.

    Idempotent; where torch has no deterministic kernel it warns, never fails.
    """
    environment.set_default(environment.CUBLAS_WORKSPACE, ":4096:8")  # cuBLAS determinism; read at CUDA init
    import torch

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)


@contextlib.contextmanager
def preserved_torch_state() -> Iterator[None]:
    """Put back every torch-global setting ``deterministic_torch`` changes (and threads, grad mode), whatever happens.

    For callers that share the process with other torch work (``lerobench.evaluate`` in a training loop). A
    no-op when torch is not imported: a torch policy loaded inside then leaves it loaded, but unchanged for
    nobody else.
    """
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    saved_env = environment.get(environment.CUBLAS_WORKSPACE)
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn
    cudnn_flags = (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32)
    matmul_tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = cudnn_flags
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
        torch.set_float32_matmul_precision(precision)
        environment.restore(environment.CUBLAS_WORKSPACE, saved_env)


def numerics_record(device: Any, dtype: Any, call_width: int) -> dict[str, Any]:
    """What ``results.json`` ``config.numerics`` holds for a torch policy: enough to tell numerics apart.

    ``threads`` is the intra-op thread count whose bits a model call gives: one on the CPU at any call width > 0
    (other counts are used only where checked equal, ``config.batch_invariance.threads``); ``mkl`` is MKL's
    reproducibility mode (``kernels.mkl_mode``), which changes the bits too.
    """
    import torch

    from lerobench.policies.kernels import mkl_mode
    from lerobench.policies.width import CALL_INTRA_OP_THREADS

    dev = torch.device(device)
    return {
        "torch": torch.__version__,
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "cuda": torch.version.cuda if dev.type == "cuda" else None,
        "dtype": str(dtype).replace("torch.", ""),
        "call_width": call_width,
        "threads": CALL_INTRA_OP_THREADS if dev.type == "cpu" and call_width > 0 else torch.get_num_threads(),
        "mkl": mkl_mode() if dev.type == "cpu" else None,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
