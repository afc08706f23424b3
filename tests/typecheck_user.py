"""Not a test module: a user's script, type-checked (never run) by ``python -m mypy`` in CI, with
``disallow_untyped_calls`` and ``disallow_any_generics`` (pyproject.toml), so that a user who runs
mypy --strict on code calling gpuaug's public API gets no errors from gpuaug's signatures."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

import gpuaug as ga


def train_loop(root: str) -> None:
    augment = ga.Pipeline(ga.RandomResizedCrop(224), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
                          ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD),
                          device="cpu", seed=0, channels_last=True)
    validate = ga.Pipeline([ga.Resize(256), ga.CenterCrop(224)], dtype=torch.float16)
    others = ga.Pipeline(ga.RandomCrop(32, padding=4, fill=0.5, padding_mode="reflect"), ga.RandomVerticalFlip(0.2),
                         ga.RandomGrayscale(), ga.Resize(size=None, max_size=64), ga.RandomRotation((0, 90), center=(1, 2)))
    dataset = ga.data.ImageFolder(root, on_error="skip", target_transform=lambda y: y + 1,
                                  is_valid_file=lambda path: not path.endswith(".tmp.jpg"))
    clips = ga.data.PackedClips(root, frames=4, on_error="skip")
    loader = ga.DeviceLoader(DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=ga.data.collate),
                             pipeline=augment)
    for images, labels in loader:
        x = augment(images)
        out, params = augment(images, return_params=True)
        again = augment(images, params=params)
        print(x, out, again, labels)
    state = augment.get_rng_state()
    augment.set_rng_state(state)
    packed = ga.PackedImages.pack([torch.zeros(3, 4, 4, dtype=torch.uint8)])
    device: torch.device = ga.select_device()
    print(loader.stats, len(loader), packed, device, validate, others, clips)
