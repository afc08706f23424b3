"""``collate``: a DataLoader batch of decode-only items, without touching CUDA (workers)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..packed import PackedImages, worker_output
from .datasets import BadFile


class Batch(NamedTuple):
    """What :func:`collate` returns.

    ``images``: a uint8 ``(B, 3, H, W)`` tensor when all sizes agree, else a
    :class:`gpuaug.PackedImages` (a read-only sequence of ``(3, H_i, W_i)`` images in one buffer),
    or a list when some items are :class:`Encoded` JPEGs (``decode="gpu"``); ``labels``: int64
    ``(B,)``; ``bad``: the :class:`BadFile` records of files dropped from this batch.
    """

    images: torch.Tensor | PackedImages | list
    labels: torch.Tensor
    bad: list


def collate(items) -> Batch:
    """Collate ``(image, label)`` items from the gpuaug datasets; bad files go to ``Batch.bad``.

    Images of one size are stacked, images of different sizes packed into one buffer
    (:class:`gpuaug.PackedImages`); in a worker, either is written straight into shared memory, so
    the batch reaches the main process as one tensor, not one per image.

    Pinning is left to ``DataLoader(pin_memory=True)`` or :class:`gpuaug.DeviceLoader`, both in the
    main process: a forked worker must not initialise CUDA, which pinning does.
    """
    good = [(img, y) for img, y in items if not isinstance(img, BadFile)]
    bad = [img for img, _ in items if isinstance(img, BadFile)]
    images = [img for img, _ in good]
    labels = torch.tensor([int(y) for _, y in good], dtype=torch.int64)
    tensors = [i for i in images if isinstance(i, torch.Tensor)]
    if images and len(tensors) == len(images):
        if len({tuple(t.shape) for t in tensors}) == 1:
            out = worker_output(tensors[0], len(tensors) * tensors[0].numel())
            out = None if out is None else out.view(len(tensors), *tensors[0].shape)
            images = torch.stack(tensors, out=out)
        elif len({(t.dtype, t.dim()) for t in tensors}) == 1 and tensors[0].dim() == 3:
            images = PackedImages.pack(tensors)
    return Batch(images, labels, bad)
