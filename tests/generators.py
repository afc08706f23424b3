"""Seeded generators of random pipelines and inputs, shared by the tests that sweep them.

- :func:`composition_ops`, :func:`more_composition_ops`: pipelines for photos, compared with
  torchvision's chain in tests/test_compositions.py;
- :func:`corner_ops`, :func:`corner_images`: the corners (1-pixel images and crops, padding then
  resizing, clips, ragged lists, one channel), compared path against path in
  tests/test_paths_agree.py;
- all of them through the CUDA path under fake tensors in tests/test_cuda_path.py.
"""

import random

import torch

import gpuaug as ga

COLOR = ["brightness", "contrast", "saturation", "hue"]


def composition_ops(rng: random.Random) -> list:
    ops, resized = [], False
    filt = rng.choice(["bilinear", "bilinear", "bicubic"])  # of the resize ops: one filter
    copying = rng.random() < 0.25  # a crop whose padding copies pixels: the only padding op then
    if copying:
        side = 40
        if rng.random() < 0.5:  # after a resize (+ a flip): it copies resized pixels, no resize follows
            side = rng.randint(12, 80)
            ops.append(ga.RandomResizedCrop((side, side + rng.randint(0, 20)), interpolation=filt) if rng.random() < 0.5
                       else ga.Resize(side, filt) if rng.random() < 0.5 else ga.Resize((side, side + 10), filt))
            ops += [ga.RandomVerticalFlip()] if rng.random() < 0.4 else []
            resized = True
        mode = rng.choice(["edge", "reflect", "symmetric"])
        size = (rng.randint(4, side), rng.randint(4, side))
        ops.append(ga.RandomCrop(size, padding=rng.randint(1, 6), padding_mode=mode))
    for _ in range(rng.randint(0, 2)):
        size = (rng.randint(8, 120), rng.randint(8, 120))
        pads = [] if copying else ["center", "random crop"]
        kinds = pads + ["hflip", "vflip"] + ([] if resized else ["resized crop", "resize"])
        kind = rng.choice(kinds)
        resized = resized or kind in ("resized crop", "resize")
        ops.append({
            "resized crop": lambda: ga.RandomResizedCrop(size, interpolation=filt),
            "resize": lambda: ga.Resize(size if rng.random() < 0.5 else size[0], filt),
            "center": lambda: ga.CenterCrop(size),
            "random crop": lambda: ga.RandomCrop(size, padding=rng.randint(0, 6), pad_if_needed=True,
                                                 fill=rng.choice([0, 0, 0.3, (0.2, 0.5, 0.9)])),
            "hflip": lambda: ga.RandomHorizontalFlip(),
            "vflip": lambda: ga.RandomVerticalFlip(),
        }[kind]())
    if rng.random() < 0.4:
        ops.append(ga.RandomRotation(rng.uniform(0, 90), rng.choice(["bilinear", "bilinear", "nearest"]),
                                     fill=rng.choice([0, 0.5])))
        if rng.random() < 0.4:  # (either flip: until 2026-12-06 only horizontal ones came after a rotation)
            ops.append(rng.choice([ga.RandomHorizontalFlip, ga.RandomVerticalFlip])())
        if rng.random() < 0.4:
            ops.append(ga.CenterCrop((rng.randint(8, 100), rng.randint(8, 100))))
    if rng.random() < 0.5:
        ops.append(ga.ColorJitter(0.4, 0.4, 0.4, rng.choice([0, 0.1, 0.5])))
    if rng.random() < 0.3:
        ops.append(ga.RandomGrayscale(0.5))
    if rng.random() < 0.5:
        ops.append(ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD))
    return ops


def more_composition_ops(rng: random.Random) -> list:
    """What :func:`composition_ops` leaves out: RandomResizedCrop's scale and ratio, ``Resize(max_size=)`` and
    ``Resize(None, max_size)``, flips with p in {0, 0.3, 1}, rotations about a center with a fill
    per channel or ``None``, and several ColorJitters (any subset of factors) and grayscales in any
    order."""
    ops, filt = [], rng.choice(["bilinear", "bicubic"])
    r = rng.random()
    if r < 0.3:
        lo, ratio = rng.uniform(0.01, 0.9), rng.uniform(0.2, 2.0)
        ops.append(ga.RandomResizedCrop((rng.randint(5, 90), rng.randint(5, 90)), scale=(lo, rng.uniform(lo, 1.0)),
                                        ratio=(ratio, ratio * rng.uniform(1.0, 3.0)), interpolation=filt))
    elif r < 0.5:
        ops.append(ga.Resize(rng.randint(10, 80), filt, max_size=rng.choice([None, 100, 150])))
    elif r < 0.6:
        ops.append(ga.Resize(None, filt, max_size=rng.randint(20, 120)))
    elif r < 0.75:
        ops.append(ga.Resize((rng.randint(5, 90), rng.randint(5, 90)), filt))
    for _ in range(rng.randint(0, 2)):
        ops.append(rng.choice([ga.RandomHorizontalFlip, ga.RandomVerticalFlip])(p=rng.choice([0.0, 0.3, 1.0])))
    if rng.random() < 0.3 and ops:
        ops.append(ga.CenterCrop((rng.randint(4, 70), rng.randint(4, 70))))
    if rng.random() < 0.5:
        center = None if rng.random() < 0.4 else (rng.uniform(-20, 90), rng.uniform(-20, 90))
        ops.append(ga.RandomRotation((rng.uniform(-180, 0), rng.uniform(0, 180)), rng.choice(["bilinear", "nearest"]),
                                     center=center, fill=rng.choice([0, 0.25, (0.1, 0.6, 0.9), None])))
        if rng.random() < 0.4:
            ops.append(rng.choice([ga.RandomHorizontalFlip, ga.RandomVerticalFlip])(p=rng.choice([0.5, 1.0])))
        if rng.random() < 0.3:
            ops.append(ga.CenterCrop((rng.randint(4, 70), rng.randint(4, 70))))
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.6:
            factors = rng.sample(COLOR, rng.randint(1, 4))
            ops.append(ga.ColorJitter(**{k: rng.uniform(0, 0.5 if k == "hue" else 0.9) for k in factors}))
        else:
            ops.append(ga.RandomGrayscale(p=rng.choice([0.0, 0.5, 1.0])))
    if rng.random() < 0.4:
        ops.append(ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD))
    return ops


def corner_ops(rng: random.Random) -> list:
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
            ops.append(rng.choice([ga.RandomHorizontalFlip, ga.RandomVerticalFlip])())
        if rng.random() < 0.3:
            ops.append(ga.CenterCrop((rng.randint(1, 30), rng.randint(1, 30))))
    if rng.random() < 0.6:
        ops.append(ga.ColorJitter(*(rng.choice([0, 0.4]) for _ in range(3)), rng.choice([0, 0.1, 0.5])))
    if rng.random() < 0.3:
        ops.append(ga.RandomGrayscale(0.5))
    return ops


def corner_images(rng: random.Random, channels: int):
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
