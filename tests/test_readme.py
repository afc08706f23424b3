"""The README's Python examples of gpuaug run as written (on the CPU, on a small class folder)."""

import re
import types
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader

import gpuaug as ga

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_examples_run_as_written(tmp_path, monkeypatch):
    """Each ```python block that uses gpuaug (the first one is torchvision's "before"), in order, in
    one namespace (the data-path example uses the ``augment`` of the one before), given what they
    leave to the reader: a ``train/`` class folder and a ``model``."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "ga." in b]
    assert len(blocks) >= 2
    for i, photo in enumerate(ga.sample_images(12)):
        folder = tmp_path / "train" / ("cats" if i % 2 else "dogs")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo.permute(1, 2, 0).numpy()).save(folder / f"{i}.jpg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUAUG_DEVICE", "cpu")
    seen = []

    def model(x):
        seen.append((tuple(x.shape), x.dtype))
        return types.SimpleNamespace(loss=lambda labels: (x.float().mean() * 0).sum())

    namespace = {"torch": torch, "DataLoader": DataLoader, "model": model}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert seen == [((12, 3, 224, 224), torch.float32)]  # the "after" loop (the data-path one has no model)
    assert namespace["loader"].stats.images == 12 and namespace["loader"].stats.skipped == 0
