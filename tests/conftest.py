"""Shared fixtures: real photos from scikit-image's wheel (no download) and reference helpers."""

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF

import gpuaug as ga

skimage_data = pytest.importorskip("skimage.data")

PHOTO_NAMES = ("astronaut", "coffee", "chelsea", "rocket")


# A batch a DataLoader worker cannot send (pickling it fails in its queue's feeder thread) is
# dropped, and the main process waits for it forever; with torch's timeout that is an error.
# Every test with workers passes it, so such a fault fails its test instead of hanging the run.
WORKER_TIMEOUT_S = 120


def _photo(name: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(getattr(skimage_data, name)())).permute(2, 0, 1).contiguous()


@pytest.fixture(scope="session")
def photos() -> list[torch.Tensor]:
    """Real photos as uint8 (3, H, W), ragged sizes (512x512, 400x600, 300x451, 427x640)."""
    return [_photo(n) for n in PHOTO_NAMES]


@pytest.fixture(scope="session")
def small_photos(photos) -> list[torch.Tensor]:
    """The photos at 96x128 (float32 in [0, 1]), for tests that need one size and speed."""
    return [TF.resize(TF.to_dtype(p, torch.float32, scale=True), [96, 128], antialias=True) for p in photos]


def to_float(x: torch.Tensor) -> torch.Tensor:
    return TF.to_dtype(x, torch.float32, scale=True)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.double() - b.double()).pow(2).mean().item()
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def central_disc(h: int, w: int, margin: float = 2.0) -> torch.Tensor:
    """Bool (h, w) mask of the disc inside the image, where a rotation keeps image content."""
    yy, xx = torch.meshgrid(torch.arange(h) + 0.5 - h / 2, torch.arange(w) + 0.5 - w / 2, indexing="ij")
    return (yy**2 + xx**2).sqrt() < min(h, w) / 2 - margin


def color_gain(ops) -> float:
    """How much the color ops of ``ops`` can magnify a difference in their input (max norm), at
    worst. The CPU paths resize a uint8 crop with torchvision's uint8 kernel, which rounds after
    each of its two passes (up to 1/255 off the float result the other paths keep), and the color
    ops carry that on. Brightness b multiplies it by b; contrast and saturation c blend with a mean
    or gray (weights summing to 1) by c and 1 - c: c + |1 - c|; hue's HSV shift up to 3x (measured
    on torchvision's adjust_hue: 2.998)."""
    gain = 1.0
    for op in ops:
        if isinstance(op, ga.ColorJitter):
            for r in (op.contrast, op.saturation):
                gain *= max(c + abs(1 - c) for c in r) if r else 1.0
            gain *= (op.brightness[1] if op.brightness else 1.0) * (3.0 if op.hue else 1.0)
    return gain


def route_to_kernels(monkeypatch, kernels) -> list[str]:
    """Run CPU pipelines as CUDA does (one pass) with ``kernels`` (the interpreted
    gpuaug.gpu_kernels) in place of CUDA's; a failing launch fails instead of falling back to torch
    kernels. -> the names of the kernels launched, filled as they run."""
    import gpuaug.pipeline as pipeline_module

    launched = []

    def strict(launch, *args, **kwargs):
        launched.append(launch.__name__)
        return launch(*args, **kwargs)

    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    monkeypatch.setattr(pipeline_module, "_gpu_kernels", lambda device: kernels)
    monkeypatch.setattr(kernels, "guarded", strict)
    return launched


@pytest.fixture(scope="session")
def interpreted_gpu_kernels():
    """gpuaug.gpu_kernels loaded a second time with ``TRITON_INTERPRET=1``: its Triton kernels run on
    CPU tensors, through Triton's interpreter (slow, numpy-backed, for small tests only)."""
    pytest.importorskip("triton")
    import importlib.util
    import os
    from pathlib import Path

    import gpuaug

    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are decorated, at module load
    try:
        spec = importlib.util.spec_from_file_location("gpuaug._gpu_kernels_interpreted",
                                                      Path(gpuaug.__file__).with_name("gpu_kernels.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    # Bigger tiles: fewer interpreted programs (each costs about a millisecond of Python). The
    # tile logic is the same at any size; both leave a partial last tile at 224x224.
    module.BLOCK, module.GEOMETRY_BLOCK = 4096, 16384
    module.RESAMPLE_ROW_PIXELS, module.RESAMPLE_COLUMN_TILE = 16384, (128, 128)
    return module
