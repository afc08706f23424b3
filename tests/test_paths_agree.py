"""Random pipelines on random inputs give the same output on every kernel path.

The reference tests pin each op against torchvision on photos; this one walks the corners they do
not (1-pixel images and crops, padding (zeros or a fill) then resizing, resizing then copying padding, clips, ragged lists, one channel, every op
order the pipeline takes), drawing seeded cases and running each through the four ways a batch can
go (see ``kernel_path`` in test_reference.py). A difference is a bug in one path; an error must be
the same ValueError/TypeError on all four.
"""

import random

import pytest
import torch

import gpuaug as ga
import gpuaug.pipeline as pipeline_module
from conftest import color_gain

PATHS = ["cpu fused", "cpu chunks", "one pass", "cuda kernels"]


def _ops(rng: random.Random) -> list:
    ops = []
    filt = rng.choice(["bilinear", "bilinear", "bicubic"])  # of the resize ops: one filter
    if rng.random() < 0.2:  # a crop that copies resized pixels into its padding (no resize after it)
        size = (rng.randint(2, 50), rng.randint(2, 50))
        ops.append(ga.RandomResizedCrop(size, interpolation=filt) if rng.random() < 0.5 else ga.Resize(size, filt))
        ops += [ga.RandomVerticalFlip()] if rng.random() < 0.5 else []
        ops.append(ga.RandomCrop((rng.randint(1, 50), rng.randint(1, 50)), padding=rng.randint(0, 3), pad_if_needed=True,
                                 padding_mode=rng.choice(["edge", "reflect", "symmetric"])))
        ops += [ga.RandomHorizontalFlip()] if rng.random() < 0.5 else []
    for _ in range(0 if ops else rng.randint(0, 3)):
        size = (rng.randint(1, 50), rng.randint(1, 50))  # often larger than the image: padding
        ops.append(rng.choice([
            lambda: ga.RandomResizedCrop(size, scale=(rng.uniform(0.01, 0.5), 1.0), interpolation=filt),
            lambda: ga.Resize(size if rng.random() < 0.5 else size[0], filt),
            lambda: ga.Resize(size[0], filt, max_size=size[0] + rng.randint(1, 10)),
            lambda: ga.CenterCrop(size),
            lambda: ga.RandomCrop(size, padding=rng.randint(0, 5), pad_if_needed=True, fill=rng.choice([0, 0, 0.3])),
            lambda: ga.RandomHorizontalFlip(),
            lambda: ga.RandomVerticalFlip(),
        ])())
    if rng.random() < 0.5:
        center = rng.choice([None, (rng.uniform(-10, 50), rng.uniform(-10, 50))])
        ops.append(ga.RandomRotation(rng.uniform(0, 180), rng.choice(["bilinear", "bilinear", "nearest"]), center=center,
                                     fill=rng.choice([0, 0.5, None])))
        if rng.random() < 0.3:
            ops.append(ga.RandomHorizontalFlip())
        if rng.random() < 0.3:
            ops.append(ga.CenterCrop((rng.randint(1, 30), rng.randint(1, 30))))
    if rng.random() < 0.6:
        ops.append(ga.ColorJitter(*(rng.choice([0, 0.4]) for _ in range(3)), rng.choice([0, 0.1, 0.5])))
    if rng.random() < 0.3:
        ops.append(ga.RandomGrayscale(0.5))
    return ops


def _images(rng: random.Random, channels: int):
    dtype = rng.choice([torch.uint8, torch.float32])
    g = torch.Generator().manual_seed(rng.randint(0, 2**31))

    def image(h, w):
        t = torch.randint(0, 256, (channels, h, w), dtype=torch.uint8, generator=g)
        return t if dtype == torch.uint8 else t.float() / 255

    b = rng.randint(1, 5)
    kind = rng.choice(["batch", "list", "clips"])
    if kind == "list":
        return [image(rng.randint(1, 40), rng.randint(1, 40)) for _ in range(b)]
    h, w = rng.randint(1, 40), rng.randint(1, 40)
    batch = torch.stack([image(h, w) for _ in range(b * (2 if kind == "clips" else 1))])
    return batch.view(b, 2, channels, h, w) if kind == "clips" else batch


def _run(path, ops, images, seed, kernels, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("GPUAUG_NATIVE", "1" if path == "cpu fused" else "0")
        if path in ("one pass", "cuda kernels"):
            m.setattr(ga.cpu, "OWN_PATH", False)
        if path == "cuda kernels":  # the interpreted Triton kernels, failing loudly instead of falling back
            m.setattr(pipeline_module, "_gpu_kernels", lambda device: kernels)
            m.setattr(kernels, "guarded", lambda launch, *a, **k: launch(*a, **k))
        return ga.Pipeline(*ops, device="cpu", seed=seed)(images)


@pytest.mark.parametrize("case", range(60))
def test_every_kernel_path_gives_the_same_output(case, interpreted_gpu_kernels, monkeypatch):
    rng = random.Random(case)
    channels = rng.choice([1, 3, 3])
    ops = _ops(rng)
    if rng.random() < 0.5:
        ops.append(ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD) if channels == 3 else ga.Normalize((0.5,), (0.25,)))
    images = _images(rng, channels)
    outputs, errors = {}, {}
    for path in PATHS:
        try:
            outputs[path] = _run(path, ops, images, case, interpreted_gpu_kernels, monkeypatch)
        except (ValueError, TypeError) as e:
            errors[path] = type(e)
    assert not errors or (len(errors) == len(PATHS) and len(set(errors.values())) == 1), (errors, ops)
    if errors:
        return
    rounding = 1.0 if (images[0] if isinstance(images, list) else images).dtype == torch.uint8 else 0.0
    tol = (5 if any(isinstance(op, ga.Normalize) for op in ops) else 1) * (0.1 + rounding * color_gain(ops)) / 255
    reference = outputs["one pass"]
    for path, out in outputs.items():
        assert out.shape == reference.shape and torch.isfinite(out).all(), (path, ops)
        err = (out - reference).abs()
        if any(getattr(op, "interpolation", "") == "nearest" for op in ops):
            # A nearest pick flips where the paths' coordinates straddle a midpoint (float noise).
            assert (err > tol).float().mean() <= 2e-3, (path, (err > tol).float().mean().item(), ops)
        else:
            assert err.max() <= tol, (path, err.max().item(), ops)
