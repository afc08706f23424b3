"""``collate``: a DataLoader batch of decode-only items, without touching CUDA (workers)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any, NamedTuple

import torch
from torch.utils.data import default_collate

from .. import worker_memory
from ..packed import PackedImages, PackedTensors
from .datasets import BadFile, Encoded


class EncodedBatch(PackedTensors):
    """A ``decode="gpu"`` batch in one buffer: item ``i`` is an :class:`Encoded` (its JPEG bytes a
    view into ``flat``) where ``paths[i]`` is a path, else an image ``(3, H, W)`` the worker
    decoded (formats other than JPEG). :class:`gpuaug.DeviceLoader` decodes it on the device.

    Args:
        flat: 1-D uint8 tensor with every item's bytes.
        shapes: ``(n,)`` for encoded bytes, ``(3, H, W)`` for a decoded image, per item.
        paths: the file of each encoded item; None for a decoded one.
    """

    PER_ITEM = ("paths",)

    def __init__(self, flat: torch.Tensor, shapes: Sequence[Sequence[int]], paths: Sequence[str | None]):
        super().__init__(flat, shapes)
        if len(paths) != len(self.shapes):
            raise ValueError(f"expected one path per item: {len(paths)} paths for {len(self.shapes)} items")
        self.paths = tuple(paths)

    @classmethod
    def pack(cls, items: Sequence[Encoded | torch.Tensor]) -> EncodedBatch:
        tensors = [x.data if isinstance(x, Encoded) else x for x in items]
        paths = [x.path if isinstance(x, Encoded) else None for x in items]
        return cls(cls.concatenate(tensors), [tuple(t.shape) for t in tensors], paths)

    def _item(self, i: int):
        data = super()._item(i)
        path = self.paths[i]
        return data if path is None else Encoded(path, data)


class Batch(NamedTuple):
    """What :func:`collate` returns.

    ``images``: a uint8 ``(B, 3, H, W)`` tensor (clips: ``(B, T, 3, H, W)``) when all sizes agree,
    else a :class:`gpuaug.PackedImages` (a read-only sequence of ``(3, H_i, W_i)`` images, or of
    ``(T, 3, H_i, W_i)`` clips, in one buffer);
    with ``decode="gpu"``, an :class:`EncodedBatch` (JPEG bytes, and any image decoded in the
    worker, in one buffer); a list of the tensors as they came when they are not all of one
    dtype and kind (the pipeline's error names the first that differs), an empty list when every
    file of the batch was bad; ``labels``: int64 ``(B,)`` for int labels (any other kind as
    ``torch.utils.data.default_collate`` collates it: tensors stacked, dicts per key); ``bad``:
    the :class:`BadFile` records of files dropped from this batch.
    """

    images: torch.Tensor | PackedImages | EncodedBatch | list[torch.Tensor]
    labels: Any
    bad: list

    def __reduce__(self):
        # Sent by a worker in one of its reused buffers: the main process watches it, to hand the
        # buffer back when it is done with it; sent on by the main process: never handed back
        # (gpuaug.worker_memory).
        buffer = _buffer(self.images)
        slot = worker_memory.lent_slot(buffer)
        if slot is None:
            worker_memory.given_away(buffer)
            return (Batch, tuple(self))
        return (_received, (tuple(self), *slot))


def _buffer(images) -> torch.Tensor:
    return images.flat if isinstance(images, PackedTensors) else images


def _received(fields: tuple, flags: torch.Tensor, index: int) -> Batch:
    batch = Batch(*fields)
    worker_memory.received(_buffer(batch.images), flags, index)
    return batch


def collate(items) -> Batch:
    """Collate ``(image, label)`` items from the gpuaug datasets; bad files go to ``Batch.bad``.

    Images of one size are stacked, images of different sizes packed into one buffer
    (:class:`gpuaug.PackedImages`), JPEG bytes too (:class:`EncodedBatch`); in a worker, straight
    into shared memory, so the batch reaches the main process as one tensor, not one per image.

    Pinning is left to ``DataLoader(pin_memory=True)`` or :class:`gpuaug.DeviceLoader`, both in the
    main process: a forked worker must not initialise CUDA, which pinning does.

    Raises:
        TypeError: for items that are not ``(image, label)`` pairs, and, in a worker, for labels it
            could not pickle to the main process (:func:`_check_sendable`).
    """
    for i, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            what = f"a tensor of shape {tuple(item.shape)}" if isinstance(item, torch.Tensor) else \
                type(item).__name__ + (f" of {len(item)}" if isinstance(item, (tuple, list)) else "")
            raise TypeError(f"collate expects (image, label) items, as gpuaug's datasets give, got {what} at item {i}"
                            + (" (an image alone? return (image, label) from the Dataset)"
                               if isinstance(item, torch.Tensor) else ""))
        if not isinstance(item[0], (torch.Tensor, Encoded, BadFile)):  # i counts bad files too
            raise TypeError(f"collate expects (image, label) items with uint8 (3, H, W) tensors, as gpuaug's datasets "
                            f"give (torchvision.io.decode_image in your own), got {type(item[0]).__name__} at item {i}")
    good = [(img, y) for img, y in items if not isinstance(img, BadFile)]
    bad = [img for img, _ in items if isinstance(img, BadFile)]
    images = [img for img, _ in good]
    # Labels as DataLoader's default_collate makes them: ints -> int64 (B,), tensors stacked,
    # dicts and tuples collated per field, strings kept as a list. On the CPU whatever
    # torch.set_default_device says (default_collate makes int labels with no device): collate runs
    # in the workers, which must not touch CUDA.
    with torch.device("cpu"):
        labels = default_collate([y for _, y in good]) if good else torch.empty(0, dtype=torch.int64)
    _check_sendable(labels)
    batch: torch.Tensor | PackedImages | EncodedBatch | list[torch.Tensor] = images
    with worker_memory.reusing():
        if any(isinstance(i, Encoded) for i in images):
            batch = EncodedBatch.pack(images)
        elif images and all(isinstance(i, torch.Tensor) for i in images):
            if len({tuple(t.shape) for t in images}) == 1:
                out = worker_memory.output(images[0], len(images) * images[0].numel())
                out = None if out is None else out.view(len(images), *images[0].shape)
                batch = torch.stack(images, out=out)
            elif len({(t.dtype, t.dim()) for t in images}) == 1 and images[0].dim() in (3, 4):  # images or clips
                batch = PackedImages.pack(images)
    return Batch(batch, labels, bad)


class _TensorsAside(ForkingPickler):
    """The pickler a worker's queue uses, with every tensor left out (their data travels by shared
    memory, and leaving them out makes the check cost nothing for them)."""

    def persistent_id(self, obj):
        return id(obj) if isinstance(obj, torch.Tensor) else None


def _check_sendable(labels) -> None:
    """In a DataLoader worker: TypeError where ``labels`` cannot be pickled to the main process (a
    ``defaultdict(lambda: ...)`` survives ``default_collate``, and a lambda does not pickle). torch's
    worker queue would print that error, drop the batch and leave the DataLoader waiting for it
    forever; raised here, it reaches the main process as the batch's error. Int labels (a tensor)
    are not checked; 256 string labels take ~40 us (a worker decodes a photo in ~1.5 ms)."""
    if isinstance(labels, torch.Tensor) or torch.utils.data.get_worker_info() is None:
        return
    try:
        _TensorsAside(io.BytesIO()).dump(labels)
    except Exception as exc:
        raise TypeError(f"labels a DataLoader worker cannot send to the main process ({type(exc).__name__}: {exc}); "
                        f"torch would drop the batch and wait for it forever. Return labels that pickle (numbers, "
                        f"strings, tensors, and dicts, lists or tuples of them) from the Dataset") from None
