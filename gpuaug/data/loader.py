"""``DeviceLoader``: batches from a DataLoader to the device, decoded and augmented, ready to train on."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset, IterableDataset, Subset, default_collate

from ..device import select_device
from ..packed import PackedImages
from ..pipeline import Pipeline  # for the annotations (typing.get_type_hints reads them)
from ..transforms._base import move
from ..user_warnings import warn
from . import codecs
from .collate import Batch
from .clips import ClipDataset
from .datasets import BadFile, Encoded, ImageFiles, checked_policy
from .decode import DecodeError, decode_rgb


@dataclass
class LoaderStats:
    """Counters of one :class:`DeviceLoader`, over all its epochs so far: ``skipped`` counts every
    skip (a bad file each epoch), ``skipped_paths`` names each bad file once, in the order met."""

    batches: int = 0
    images: int = 0
    skipped: int = 0
    data_wait_s: float = 0.0  # time the training loop waited on the DataLoader
    elapsed_s: float = 0.0
    skipped_paths: list[str] = field(default_factory=list)

    @property
    def wait_per_batch_ms(self) -> float:
        return 1000 * self.data_wait_s / max(self.batches, 1)

    @property
    def images_per_s(self) -> float:
        return self.images / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def __str__(self) -> str:
        return (f"{self.batches} batches, {self.images} images, {self.images_per_s:.1f} img/s, "
                f"data wait {self.wait_per_batch_ms:.2f} ms/batch, {_count(self.skipped, 'sample')} skipped"
                + (f" ({_count(len(self.skipped_paths), 'bad file')})" if self.skipped else ""))


class DeviceLoader:
    """Wrap a DataLoader: each batch is moved to the device (non-blocking), JPEG bytes are decoded
    there (``decode="gpu"``), the pipeline is applied, and ``(images, labels)`` come out ready.

    On CUDA the copy, decode and augmentation of the next ``prefetch`` batches run on a side stream
    while the current batch trains; on the CPU it is plain and synchronous.

    Args:
        loader: a DataLoader (or any iterable) yielding :class:`gpuaug.data.Batch` (from
            :func:`gpuaug.data.collate`) or ``(images, labels)``.
        pipeline: a :class:`gpuaug.Pipeline`, or None to yield the uint8 images as they are.
        device: where to put the batches; default: the pipeline's device, else :func:`gpuaug.select_device`.
        prefetch: batches prepared ahead on CUDA (>= 1).
        on_error: ``"raise"`` or ``"skip"`` for unreadable files; default: the dataset's ``on_error``,
            seen through torch's wrappers (``Subset``, ``random_split``'s, ``ConcatDataset``, and
            any wrapper that keeps its dataset as ``.dataset`` or ``.datasets``), else ``"raise"``.
    """

    def __init__(self, loader: Iterable[Any], pipeline: Pipeline | Callable[..., Any] | None = None,
                 device: str | int | torch.device | None = None, prefetch: int = 2, on_error: str | None = None):
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 1:
            raise ValueError(f"prefetch should be an int >= 1, got {prefetch!r}")
        # A map-style dataset iterates by index, one sample at a time (an IterableDataset may yield batches).
        one_by_one = isinstance(loader, Dataset) and not isinstance(loader, IterableDataset)
        if not isinstance(loader, Iterable) or one_by_one:
            hint = (": a dataset, batch it first: DataLoader(dataset, batch_size=..., collate_fn=gpuaug.data.collate)"
                    if one_by_one else f": {loader!r:.60}")
            raise TypeError(f"DeviceLoader wraps a DataLoader (or any iterable of batches), got "
                            f"{type(loader).__name__}{hint}")
        if pipeline is not None and not callable(pipeline):
            raise TypeError(f"pipeline should be a gpuaug.Pipeline (or None), got {type(pipeline).__name__}: "
                            f"{pipeline!r}")
        self.loader, self.pipeline, self.prefetch = loader, pipeline, prefetch
        if device is None and isinstance(on := getattr(pipeline, "device", None), torch.device):
            self.device = on
        else:
            self.device = select_device(device)
        dataset = getattr(loader, "dataset", None)
        if getattr(loader, "collate_fn", None) is default_collate and any(
                isinstance(d, (ImageFiles, ClipDataset)) for d in _inner_datasets(dataset, any_wrapper=False)):
            raise TypeError("this DataLoader batches a gpuaug dataset with torch's default_collate, which cannot "
                            "batch images of different sizes nor the BadFile records of unreadable files (it would "
                            "fail at the first one, whatever on_error says): pass collate_fn=gpuaug.data.collate")
        policies = {d.on_error for d in _inner_datasets(dataset) if getattr(d, "on_error", None) is not None}
        if on_error is None and len(policies) > 1:
            raise ValueError(f"the datasets inside this {type(dataset).__name__} have different on_error policies "
                             f"({', '.join(sorted(policies))}): pass on_error= to DeviceLoader")
        self.on_error = checked_policy(on_error or (policies.pop() if policies else "raise"))
        self.stats = LoaderStats()
        self._warned: set[str] = set()

    def __len__(self) -> int:
        if not isinstance(self.loader, Sized):
            raise TypeError(f"the wrapped {type(self.loader).__name__} has no len()")
        return len(self.loader)

    def __getattr__(self, name: str):
        """The wrapped loader's public attributes (``dataset``, ``sampler``, ``batch_size``, ...), so
        code written for a DataLoader (``loader.sampler.set_epoch(epoch)``) runs unchanged."""
        loader = self.__dict__.get("loader")
        if name.startswith("_") or loader is None or not hasattr(loader, name):
            raise AttributeError(f"{type(self).__name__} (nor the {type(loader).__name__} it wraps) has no "
                                 f"attribute {name!r}")
        return getattr(loader, name)

    def __iter__(self):
        start = time.perf_counter()
        try:
            if self.device.type == "cuda":
                yield from self._iter_cuda()
            else:
                for batch in self._timed(iter(self.loader)):
                    ready = self._prepare(batch)
                    if ready is not None:
                        yield ready
        finally:
            self.stats.elapsed_s += time.perf_counter() - start

    def _timed(self, it):
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.stats.data_wait_s += time.perf_counter() - t
            yield batch

    def _iter_cuda(self):
        stream = torch.cuda.Stream(self.device)
        pending: deque = deque()
        batches = self._timed(iter(self.loader))

        def submit() -> bool:
            batch = next(batches, None)
            if batch is None:
                return False
            with torch.cuda.stream(stream):
                ready = self._prepare(batch)
                event = torch.cuda.Event()
                event.record(stream)
            pending.append((ready, event))
            return True

        while len(pending) < self.prefetch and submit():
            pass
        while pending:
            ready, event = pending.popleft()
            main = torch.cuda.current_stream(self.device)
            main.wait_event(event)
            submit()
            if ready is not None:
                images, labels = ready
                held = [images.flat] if isinstance(images, PackedImages) else images if isinstance(images, list) else [images]
                for t in [*held, *_tensors(labels)]:
                    t.record_stream(main)  # the side stream must not reuse this memory early
                yield ready

    def _bad(self, bad: BadFile) -> None:
        if self.on_error == "raise":
            raise bad.error()
        self.stats.skipped += 1
        if bad.path not in self._warned:  # once a path: the list stays bounded over any number of epochs
            self._warned.add(bad.path)
            self.stats.skipped_paths.append(bad.path)
            warn(f"gpuaug: skipping {bad.path}: {bad.cause}")

    def _prepare(self, batch):
        if isinstance(batch, Batch):
            images, labels, bad = batch
        elif isinstance(batch, (tuple, list)) and len(batch) == 2 and not _two_images(batch):
            (images, labels), bad = batch, []
        else:
            raise TypeError(f"DeviceLoader expects batches of (images, labels) or gpuaug.data.Batch "
                            f"(collate_fn=gpuaug.data.collate), got {_describe(batch)}")
        for b in bad:
            self._bad(b)
        images, keep = self._to_device(images)
        if len(images) == 0:
            return None  # every file of this batch was bad: nothing to train on
        if keep is not None:
            labels = _select(labels, keep)
        labels = _map_tensors(labels, self._copy)
        if self.pipeline is not None:
            images = self.pipeline(images)
        self.stats.batches += 1
        self.stats.images += len(images)
        return images, labels

    def _to_device(self, images):
        """Move (and decode) images; returns them and the kept indices (None if all kept)."""
        if isinstance(images, torch.Tensor):
            return self._copy(images), None
        if isinstance(images, PackedImages):  # one buffer: one pin, one copy
            return images.with_flat(self._copy(images.flat)), None
        images = list(images)  # an EncodedBatch makes its views once
        for i, x in enumerate(images):
            if not isinstance(x, (torch.Tensor, Encoded)):
                raise TypeError(f"DeviceLoader expects images as tensors (uint8 (3, H, W), or a batch), got "
                                f"{type(x).__name__} at item {i}")
        out: list[torch.Tensor] = []
        kept: list[int] = []
        encoded = [(i, x) for i, x in enumerate(images) if isinstance(x, Encoded)]
        decoded = dict(self._decode(encoded)) if encoded else {}
        for i, x in enumerate(images):
            img = decoded.get(i) if isinstance(x, Encoded) else self._copy(x)
            if img is not None:
                out.append(img)
                kept.append(i)
        keep = None if len(kept) == len(images) else kept
        if out and len({tuple(t.shape) for t in out}) == 1:
            return torch.stack(out), keep
        return out, keep

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        """Non-blocking copy to the device. On CUDA an unpinned CPU tensor is pinned first (here, in
        the main process), so the copy really overlaps; DataLoader(pin_memory=True) does that in its
        own thread instead, which is cheaper for the loop."""
        if self.device.type == "cuda" and t.device.type == "cpu" and not t.is_pinned():
            t = t.pin_memory()
        return move(t, self.device)

    def _decode(self, encoded):
        """Decode JPEG bytes on the device, all at once. A damaged file fails the whole call: then
        each file is decoded on the device alone, and one that fails there on the CPU (libjpeg,
        which may read what nvJPEG refuses); a file that fails both is a bad file. So one bad file
        costs its batch one more call per file on the device, not a CPU decode of every image."""
        on_device = self.device.type == "cuda"
        if on_device and (images := self._decode_on_device([e.data for _, e in encoded])) is not None:
            return [(i, img) for (i, _), img in zip(encoded, images)]
        results = []
        for i, e in encoded:
            img = self._decode_on_device(e.data) if on_device else None
            if img is None:
                try:
                    img = self._copy(decode_rgb(e.path, e.data))
                except DecodeError as err:
                    self._bad(BadFile(err.path, err.cause))
                    continue
            results.append((i, img))
        return results

    def _decode_on_device(self, data):
        """JPEG bytes (one uint8 tensor, or a list of them) decoded on the device, or None where its
        decoder refuses them (one damaged file fails a whole list) or there is none (no codecs
        library: :mod:`gpuaug.data.codecs`)."""
        decode_jpeg = codecs.CODECS.decode_jpeg
        if decode_jpeg is None:
            return None
        try:
            return decode_jpeg(data, self.device)
        except RuntimeError:
            return None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _two_images(batch) -> bool:
    """Whether a pair is two ``(C, H, W)`` images (a list collate of a batch of 2 without labels),
    not ``(images, labels)``: a batch's images are never one 3-D tensor."""
    return all(isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[0] in (1, 3) for t in batch)


def _describe(batch) -> str:
    if isinstance(batch, (tuple, list)) and _two_images(batch):
        return f"a {type(batch).__name__} of 2 images (C, H, W) and no labels"
    if isinstance(batch, (tuple, list)):
        return f"a {type(batch).__name__} of {len(batch)} items"
    if isinstance(batch, torch.Tensor):
        return f"a tensor of shape {tuple(batch.shape)}"
    return type(batch).__name__


def _inner_datasets(dataset, any_wrapper: bool = True, depth: int = 0):
    """``dataset`` and those it wraps: a ``random_split`` of an ``ImageFolder(root, on_error="skip")``
    must skip as the dataset says. Through torch's Subset (random_split's, ``.dataset``) and
    ConcatDataset (``.datasets``), whose items are their datasets' as made; with ``any_wrapper``
    through any that keeps them so (ChainDataset, a user's wrapper, which may change the items:
    crop them to one size, say)."""
    if dataset is None or depth > 16:
        return
    yield dataset
    if not any_wrapper and not isinstance(dataset, (Subset, ConcatDataset)):
        return
    inner = getattr(dataset, "datasets", None)
    for d in inner if isinstance(inner, (list, tuple)) else [getattr(dataset, "dataset", None)]:
        yield from _inner_datasets(d, any_wrapper, depth + 1)


def _select(labels, keep: list[int]):
    """The labels of the kept samples: a tensor's rows, a list's items, each field of a dict/tuple."""
    if isinstance(labels, torch.Tensor):
        return labels[torch.tensor(keep, dtype=torch.long, device="cpu")]
    if isinstance(labels, dict):
        return {k: _select(v, keep) for k, v in labels.items()}
    if isinstance(labels, (list, tuple)) and not any(isinstance(v, (torch.Tensor, dict, list, tuple)) for v in labels):
        return [labels[i] for i in keep]  # per sample: default_collate's strings, or a plain list of numbers
    if isinstance(labels, (list, tuple)):  # else its lists and tuples are per field
        fields = [_select(v, keep) for v in labels]
        return type(labels)(*fields) if hasattr(labels, "_fields") else type(labels)(fields)
    return labels


def _map_tensors(labels, fn):
    """``fn`` applied to every tensor in nested dicts, lists and tuples."""
    if isinstance(labels, torch.Tensor):
        return fn(labels)
    if isinstance(labels, dict):
        return {k: _map_tensors(v, fn) for k, v in labels.items()}
    if isinstance(labels, tuple) and hasattr(labels, "_fields"):
        return type(labels)(*(_map_tensors(v, fn) for v in labels))
    if isinstance(labels, (list, tuple)):
        return type(labels)(_map_tensors(v, fn) for v in labels)
    return labels


def _tensors(labels) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    _map_tensors(labels, found.append)
    return found
