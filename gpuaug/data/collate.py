"""``collate``: a DataLoader batch of decode-only items, without touching CUDA (workers)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .datasets import BadFile


class Batch(NamedTuple):
    """What :func:`collate` returns.

    ``images``: a uint8 ``(B, 3, H, W)`` tensor when all sizes agree, else a list of ``(3, H, W)``
    tensors (and :class:`Encoded` JPEGs with ``decode="gpu"``); ``labels``: int64 ``(B,)``;
    ``bad``: the :class:`BadFile` records of files dropped from this batch.
    """

    images: torch.Tensor | list
    labels: torch.Tensor
    bad: list


def collate(items) -> Batch:
    """Collate ``(image, label)`` items from the gpuaug datasets; bad files go to ``Batch.bad``.

    Pinning is left to ``DataLoader(pin_memory=True)`` or :class:`gpuaug.DeviceLoader`, both in the
    main process: a forked worker must not initialise CUDA, which pinning does.
    """
    good = [(img, y) for img, y in items if not isinstance(img, BadFile)]
    bad = [img for img, _ in items if isinstance(img, BadFile)]
    images = [img for img, _ in good]
    labels = torch.tensor([int(y) for _, y in good], dtype=torch.int64)
    tensors = [i for i in images if isinstance(i, torch.Tensor)]
    if images and len(tensors) == len(images) and len({tuple(t.shape) for t in tensors}) == 1:
        images = torch.stack(tensors)
    return Batch(images, labels, bad)
