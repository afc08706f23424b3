"""``PackedImages``: a batch of images of different sizes in one flat buffer.

A DataLoader batch of ragged images is usually a list of tensors: each one crosses from the
worker to the main process as its own shared-memory segment, is pinned on its own, and is copied
to the GPU on its own (three host operations per image, in the process that drives the GPU).
Packed, the batch is one buffer: one segment, one pin, one copy, and the pipeline's CUDA kernels
read it in place. :func:`gpuaug.data.collate` packs ragged batches this way (and JPEG bytes for
GPU decoding, :class:`gpuaug.data.EncodedBatch`, on the same base).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import torch
from torch import Tensor

from . import worker_memory


class PackedTensors(Sequence):
    """Tensors of one dtype and different shapes, stored back to back (each C-contiguous) in one
    1-D tensor ``flat``: a read-only sequence whose item ``i`` is a view into ``flat``, made on
    access. The base of :class:`PackedImages`; ``NDIMS`` lists the dimensions items may have, all
    items alike (None: any).

    Args:
        flat: 1-D tensor holding every item's elements.
        shapes: each item's shape, in order.
    """

    NDIMS: tuple[int, ...] | None = None
    SHAPES = "one shape per item"  # what shapes must be, for errors
    PER_ITEM: tuple[str, ...] = ()  # a subclass's attributes holding one value per item (sliced with the items)

    def noun(self) -> str:
        """What the repr counts."""
        return "items"

    def __init__(self, flat: Tensor, shapes: Sequence[Sequence[int]]):
        if not isinstance(flat, Tensor) or flat.dim() != 1:
            raise ValueError(f"expected a 1-D tensor for flat, got "
                             f"{tuple(flat.shape) if isinstance(flat, Tensor) else type(flat).__name__}")
        rows = tuple(tuple(int(d) for d in s) for s in shapes)
        if self.NDIMS is not None and (len({len(s) for s in rows}) > 1 or any(len(s) not in self.NDIMS for s in rows)):
            raise ValueError(f"expected {self.SHAPES} in shapes, got {rows}")
        if any(d < 0 for s in rows for d in s):  # a negative size could still add up to flat's length
            raise ValueError(f"expected sizes >= 0 in shapes, got {rows}")
        offsets, total = [], 0
        for s in rows:
            offsets.append(total)
            total += math.prod(s)
        if total != flat.numel():
            raise ValueError(f"shapes hold {total} elements, flat has {flat.numel()}")
        self.flat, self.shapes, self.offsets = flat, rows, tuple(offsets)

    @staticmethod
    def concatenate(tensors: Sequence[Tensor]) -> Tensor:
        """``tensors`` flattened into one 1-D tensor (one copy). In a DataLoader worker it is
        allocated in shared memory, as torch's ``default_collate`` does for a stacked batch, so
        sending it to the main process copies nothing more."""
        for i, t in enumerate(tensors):
            if t.dtype != tensors[0].dtype or t.device != tensors[0].device:
                raise ValueError(f"expected tensors of one dtype and device to pack: item 0 is {tensors[0].dtype} "
                                 f"on {tensors[0].device}, item {i} is {t.dtype} on {t.device}")
        out = worker_memory.output(tensors[0], sum(t.numel() for t in tensors))
        return torch.cat([t.reshape(-1) for t in tensors], out=out)

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, i):
        if isinstance(i, slice):  # of the same type, as a list's slice is a list
            indices = range(*i.indices(len(self)))
            if indices.step == 1 or len(indices) <= 1:  # one run of the buffer: a view of it
                return self._run(indices.start, indices.start + len(indices))
            return self._gathered(list(indices))
        try:
            i = operator.index(i)  # an int, or a 0-d integer tensor
        except TypeError:
            raise TypeError(f"{type(self).__name__} indices should be integers or slices, got {type(i).__name__}") from None
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} is out of range for {type(self).__name__} of {len(self)} items")
        return self._item(i % len(self))

    def _run(self, start: int, stop: int):
        """Items ``[start, stop)``, over a view of ``flat`` (no copy)."""
        start = min(max(start, 0), len(self))
        stop = min(max(stop, start), len(self))
        lo = self.offsets[start] if start < len(self) else self.flat.numel()
        hi = self.offsets[stop] if stop < len(self) else self.flat.numel()
        part = object.__new__(type(self))
        part.__dict__.update(self.__dict__, flat=self.flat[lo:hi], shapes=self.shapes[start:stop],
                             offsets=tuple(o - lo for o in self.offsets[start:stop]),
                             **{name: getattr(self, name)[start:stop] for name in self.PER_ITEM})
        return part

    def _gathered(self, indices: list[int]):
        """Items at ``indices`` (a strided slice), in a new buffer (one copy)."""
        views = [self.flat[self.offsets[j]: self.offsets[j] + math.prod(self.shapes[j])] for j in indices]
        part = object.__new__(type(self))
        shapes, offsets, total = [self.shapes[j] for j in indices], [], 0
        for shape in shapes:
            offsets.append(total)
            total += math.prod(shape)
        part.__dict__.update(self.__dict__, flat=torch.cat(views), shapes=tuple(shapes), offsets=tuple(offsets),
                             **{name: tuple(getattr(self, name)[j] for j in indices) for name in self.PER_ITEM})
        return part

    def _item(self, i: int):
        """Item ``i``: a view of its elements in ``flat`` (subclasses may wrap it)."""
        shape = self.shapes[i]
        return self.flat[self.offsets[i]: self.offsets[i] + math.prod(shape)].view(shape)

    @property
    def device(self) -> torch.device:
        return self.flat.device

    @property
    def dtype(self) -> torch.dtype:
        return self.flat.dtype

    def to(self, device, non_blocking: bool = False):
        """The same items on ``device`` (a ``torch.device``, a string such as ``"cuda:0"``, or a
        GPU index): one copy of ``flat`` (none if already there). Only the device changes: unlike
        ``Tensor.to`` this takes no dtype, as a cast would keep 0-255 pixel values (or JPEG bytes)
        unscaled; gpuaug converts them itself (the pipeline scales pixels, DeviceLoader decodes
        JPEG bytes)."""
        if isinstance(device, torch.dtype) or isinstance(non_blocking, torch.dtype):
            raise TypeError(f"{type(self).__name__}.to takes a device (and non_blocking), not a dtype, got "
                            f"{device!r}{'' if non_blocking is False else f', {non_blocking!r}'}: the items keep their "
                            f"dtype ({self.dtype}); gpuaug's pipeline (or DeviceLoader, for JPEG bytes) converts them")
        flat = self.flat.to(device, non_blocking=non_blocking)
        return self if flat is self.flat else self.with_flat(flat)

    def pin_memory(self):
        """Page-locked copy, one buffer (``DataLoader(pin_memory=True)`` calls this)."""
        return self.with_flat(self.flat.pin_memory())

    def with_flat(self, flat: Tensor):
        """The same items over another buffer of the same size (a copy of ``flat`` elsewhere),
        without checking the shapes again."""
        if not isinstance(flat, Tensor) or flat.shape != self.flat.shape:
            raise ValueError(f"expected a buffer of shape {tuple(self.flat.shape)}, got "
                             f"{tuple(flat.shape) if isinstance(flat, Tensor) else type(flat).__name__}")
        packed = object.__new__(type(self))
        packed.__dict__.update(self.__dict__, flat=flat)
        return packed

    def __reduce__(self):
        # Pickled in the main process, perhaps for another one: its worker must not reuse the buffer.
        worker_memory.given_away(self.flat)
        return _restore, (type(self), self.__dict__)  # one tensor between processes, not one per item

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} {self.noun()}, {self.dtype}, {self.device}, shapes={list(self.shapes)})"


def _restore(cls, state: dict):
    packed = object.__new__(cls)
    packed.__dict__.update(state)
    return packed


class PackedImages(PackedTensors):
    """Images ``(C, H_i, W_i)`` of one dtype, stored back to back (each C-contiguous) in one 1-D
    tensor ``flat``; or clips ``(T, C, H_i, W_i)`` the same way.

    It is a read-only sequence: ``packed[i]`` is image (or clip) ``i`` as a view into ``flat``,
    ``len``, iteration and ``list(packed)`` work as on a list of images, and
    :class:`gpuaug.Pipeline` takes it wherever it takes a list (of clips: one draw per clip).
    Views are made on access, not stored.

    Args:
        flat: 1-D tensor with ``sum(C * H_i * W_i)`` (clips: ``sum(T_i * C * H_i * W_i)``) elements.
        shapes: one ``(C, H_i, W_i)`` per image, or one ``(T_i, C, H_i, W_i)`` per clip, in order.
    """

    NDIMS = (3, 4)
    SHAPES = "one (C, H, W) per image or one (T, C, H, W) per clip, not a mix,"

    @classmethod
    def pack(cls, images: Sequence[Tensor]) -> PackedImages:
        """Concatenate ``(C, H_i, W_i)`` images (or ``(T, C, H_i, W_i)`` clips) into one buffer
        (one copy; in a DataLoader worker, in shared memory)."""
        if isinstance(images, Tensor):  # (its truth value was torch's "ambiguous" RuntimeError)
            raise TypeError(f"expected a list of images (or clips) to pack, got one tensor of shape "
                            f"{tuple(images.shape)}: a batch of one size needs no packing (the pipeline takes it as "
                            f"it is), or pack list(batch)")
        if not images:
            raise ValueError("expected at least one image to pack, got none")
        for i, t in enumerate(images):
            if not isinstance(t, Tensor):
                raise TypeError(f"expected (C, H, W) image tensors or (T, C, H, W) clips to pack: item {i} is "
                                f"{type(t).__name__}")
            if t.dim() not in cls.NDIMS or t.dim() != images[0].dim():
                raise ValueError(f"expected (C, H, W) images or (T, C, H, W) clips, all alike, to pack: item {i} is "
                                 f"{tuple(t.shape)}")
        return cls(cls.concatenate(images), [tuple(t.shape) for t in images])

    def noun(self) -> str:
        return "clips" if self.clips else "images"

    @property
    def clips(self) -> bool:
        """Whether the items are clips ``(T, C, H, W)``."""
        return bool(self.shapes) and len(self.shapes[0]) == 4

    def frames(self) -> PackedImages:
        """Clips as their frames, in order: the same buffer, one ``(C, H, W)`` item per frame."""
        if not self.clips:
            return self
        return PackedImages(self.flat, [s[1:] for s in self.shapes for _ in range(s[0])])
