"""The call-shape facts on a GPU: does a row's output depend on the call width, and what a call costs at 1..16 rows.

    python benchmarks/cuda_call_shape.py                  # needs only torch and a CUDA device
    python benchmarks/cuda_call_shape.py --image 224 --repeats 20

Needs torch and this checkout (no lerobot or simulator), so it runs on a bare GPU machine. Two models with
random weights under lerobench's deterministic numerics (cuDNN benchmark off, deterministic algorithms, TF32
off, "highest" float32 matmul precision): an MLP on a 39-D state and an ACT-like image policy (a ResNet-style
conv stack on two cameras, a transformer encoder over the feature tokens, a linear head for a 10-step chunk).
Prints, per width w = 1..16: the largest difference of rows 0..w-1 from the same rows computed alone, from the
same rows in a call of 16, and forwards vs reversed; then the median CUDA time of a call at 1..16 rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's lerobench, installed or not
from lerobench.policies.numerics import deterministic_torch  # noqa: E402 - after the path it is found on


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.an = nn.BatchNorm2d(cout)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.skip = nn.Conv2d(cin, cout, 1, stride, bias=False) if (cin, stride) != (cout, 1) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.b(torch.relu(self.an(self.a(x))))) + self.skip(x))


class ActLike(nn.Module):
    """ResNet18-shaped backbone per camera, a transformer encoder over the tokens, a chunk head."""

    def __init__(self, cameras: int = 2, dim: int = 256):
        super().__init__()
        self.cameras = cameras
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        chans = [(64, 64, 1), (64, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
                 (256, 512, 2), (512, 512, 1)]
        self.body = nn.Sequential(*[_Block(a, b, s) for a, b, s in chans])
        self.proj = nn.Conv2d(512, dim, 1)
        layer = nn.TransformerEncoderLayer(dim, 8, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4)
        self.state = nn.Linear(39, dim)
        self.head = nn.Linear(dim, 10 * 4)

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        b = images.shape[0]
        feats = self.proj(self.body(self.stem(images.flatten(0, 1))))  # (b * cams, dim, h, w)
        tokens = feats.flatten(2).transpose(1, 2).reshape(b, -1, feats.shape[1])
        tokens = torch.cat([self.state(state)[:, None], tokens], dim=1)
        return self.head(self.encoder(tokens)[:, 0]).view(b, 10, 4)


def _models(device: str) -> dict[str, tuple[nn.Module, dict[str, torch.Tensor]]]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    state = torch.randn(16, 39, generator=gen)
    images = torch.rand(16, 2, 3, ARGS.image, ARGS.image, generator=gen)
    mlp = nn.Sequential(nn.Linear(39, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4), nn.Tanh())
    return {"mlp": (mlp.to(device).eval(), {"x": state.to(device)}),
            "act-like": (ActLike().to(device).eval(), {"images": images.to(device), "state": state.to(device)})}


def _run(model: nn.Module, inputs: dict[str, torch.Tensor], index: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        args = [v[index] for v in inputs.values()]
        return model(*args).double().cpu()


def main() -> None:
    deterministic_torch()  # sets CUBLAS_WORKSPACE_CONFIG too: before the first CUDA call
    device = ARGS.device
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    print(f"# torch {torch.__version__}, {name}, images 2 x {ARGS.image}^2, median of {ARGS.repeats}")
    models = _models(device)
    print("| model | width | max diff from width 1 | max diff from width 16 | forwards vs reversed |")
    print("|---|---|---|---|---|")
    for label, (model, inputs) in models.items():
        alone = torch.cat([_run(model, inputs, torch.tensor([i])) for i in range(16)])
        full = _run(model, inputs, torch.arange(16))
        same1, same16 = [], []
        for w in range(1, 17):
            fwd = _run(model, inputs, torch.arange(w))
            bwd = _run(model, inputs, torch.arange(w).flip(0)).flip(0)
            d1, d16 = (fwd - alone[:w]).abs().max().item(), (fwd - full[:w]).abs().max().item()
            same1 += [w] if d1 == 0 else []
            same16 += [w] if d16 == 0 else []
            print(f"| {label} | {w} | {d1:.3g} | {d16:.3g} | {(fwd - bwd).abs().max().item():.3g} |", flush=True)
        print(f"# {label}: widths equal to width 1: {same1}; equal to width 16: {same16}")
    print("| model | rows | ms per call | rows/s |\n|---|---|---|---|")
    for label, (model, inputs) in models.items():
        for rows in range(1, 17):
            index = torch.arange(rows)
            times = []
            for k in range(ARGS.repeats + 2):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                started = time.perf_counter()
                with torch.inference_mode():
                    model(*[v[index] for v in inputs.values()])
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                if k >= 2:  # warm-up
                    times.append(time.perf_counter() - started)
            t = statistics.median(times)
            print(f"| {label} | {rows} | {t * 1e3:.2f} | {rows / t:.0f} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=10)
    ARGS = parser.parse_args()
    main()
