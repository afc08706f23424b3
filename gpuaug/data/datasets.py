"""Decode-only datasets: a worker reads a file and decodes it to uint8 ``(3, H, W)``, nothing else.

Workers never touch CUDA. A file that cannot be used does not raise in the worker: the item comes
back as a :class:`BadFile`, and :class:`gpuaug.DeviceLoader` applies the ``on_error`` policy in the
main process (``"raise"``: :class:`DecodeError` naming the path and the cause; ``"skip"``: the
sample is dropped, the path warned once and counted).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import torch
from torch.utils.data import Dataset

from . import codecs
from .decode import DecodeError, check_size, decode_rgb, device_decodable, read_bytes

# torchvision's ImageFolder list, so both take the same files; GIF, AVIF and others decode too when
# named in ``extensions`` (decode.py reads every format PIL reads).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_POLICIES = ("raise", "skip")
_DECODERS = ("cpu", "gpu")


def checked_policy(on_error) -> str:
    """A dataset's ``on_error``: ``"raise"`` or ``"skip"``, applied by :class:`gpuaug.DeviceLoader`."""
    if on_error not in _POLICIES:
        raise ValueError(f"on_error should be one of {_POLICIES}, got {on_error!r}")
    return on_error


@dataclass
class BadFile:
    """Stands in a batch for a file that could not be read or decoded."""

    path: str
    cause: str

    def error(self) -> DecodeError:
        return DecodeError(self.path, self.cause)


@dataclass
class Encoded:
    """A JPEG's bytes (uint8 1-D), to be decoded on the device by the loader (``decode="gpu"``)."""

    path: str
    data: torch.Tensor


class ImageFiles(Dataset):
    """Images from a list of paths, decoded to uint8 ``(3, H, W)``, with optional labels.

    Args:
        paths: image files.
        labels: one label per path (an int, or anything ``default_collate`` takes), or None (-1).
        decode: ``"cpu"`` decodes in the worker; ``"gpu"`` returns JPEG bytes for the loader to decode
            on the device (other formats are still decoded in the worker, and so is every file
            where no library with a device decoder is found: :mod:`gpuaug.data.codecs`).
        on_error: ``"raise"`` or ``"skip"``, applied by :class:`gpuaug.DeviceLoader`.
        target_transform: called on each label in the worker, as torchvision's datasets do.

    Items: ``(image, label)``, image a uint8 ``(3, H, W)`` tensor, an :class:`Encoded` or a :class:`BadFile`.
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]], labels: Sequence[Any] | None = None,
                 decode: str = "cpu", on_error: str = "raise", target_transform: Callable[[Any], Any] | None = None):
        if decode not in _DECODERS:
            raise ValueError(f"decode should be one of {_DECODERS}, got {decode!r}")
        self.on_error = checked_policy(on_error)
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise TypeError(f"paths should be a list of image files, got one {type(paths).__name__}: {paths!r} "
                            f"(ImageFiles([path]) for one file, ImageFolder(root) for a folder)")
        self.paths = [str(p) for p in paths]
        if labels is not None and len(labels) != len(self.paths):
            raise ValueError(f"labels should have one entry per path: {len(labels)} labels for {len(self.paths)} paths")
        self.labels = list(labels) if labels is not None else [-1] * len(self.paths)
        if target_transform is not None and not callable(target_transform):
            raise TypeError(f"target_transform should be a callable (or None), got {type(target_transform).__name__}")
        self.decode, self.target_transform = decode, target_transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        path = self.paths[index]
        item: Encoded | torch.Tensor | BadFile
        try:
            data = read_bytes(path)
            # Without a device decoder (no codecs library: gpuaug.data.codecs) the worker decodes.
            if self.decode == "gpu" and codecs.CODECS.decode_jpeg is not None and device_decodable(data):
                check_size(path, data)
                item = Encoded(path, data)
            else:
                item = decode_rgb(path, data)
        except DecodeError as e:
            item = BadFile(e.path, e.cause)
        label = self.labels[index]
        return item, label if self.target_transform is None else self.target_transform(label)


def find_files(root, extensions: str | Sequence[str] = IMG_EXTENSIONS,
               is_valid_file: Callable[[str], bool] | None = None) -> list[str]:
    """Files under ``root`` whose names end with one of ``extensions`` (any case), or whose paths
    ``is_valid_file`` takes where it is given, sorted by folder then name. Symlinked folders are
    followed, as torchvision's ImageFolder does, but each real folder only once: a link loop
    (``a/up -> ..``) would otherwise never end."""
    suffixes = tuple(e.lower() for e in ((extensions,) if isinstance(extensions, str) else extensions))

    def accept(dirpath: str, name: str) -> bool:
        return name.lower().endswith(suffixes) if is_valid_file is None else bool(is_valid_file(os.path.join(dirpath, name)))

    seen, found = set(), []
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        found.append((dirpath, sorted(f for f in files if accept(dirpath, f))))
    return [os.path.join(d, f) for d, names in sorted(found) for f in names]


class ImageFolder(ImageFiles):
    """torchvision's class-folder layout (``root/<class>/<image>``), decode-only.

    ``classes`` (sorted folder names) and ``class_to_idx`` are torchvision's; files are taken by
    extension (``extensions``, default ``IMG_EXTENSIONS``, torchvision's list; add ``".gif"`` and
    the like to take more), or by ``is_valid_file(path)`` instead, as torchvision's (not both), in
    sorted order (:func:`find_files`: a folder reached twice through symlinks is read once).
    A class folder without images is a ``FileNotFoundError`` naming it, as torchvision's; with
    ``allow_empty=True`` it stays a class (its index kept) without samples. Other args as
    :class:`ImageFiles`; there is no ``transform``: the pipeline augments the batch.
    """

    def __init__(self, root: str | os.PathLike[str], decode: str = "cpu", on_error: str = "raise",
                 extensions: str | Sequence[str] | None = None, allow_empty: bool = False,
                 target_transform: Callable[[Any], Any] | None = None,
                 is_valid_file: Callable[[str], bool] | None = None):
        if extensions is not None and is_valid_file is not None:  # torchvision's make_dataset refuses both too
            raise ValueError("extensions and is_valid_file cannot both be given: is_valid_file decides alone")
        if is_valid_file is not None and not callable(is_valid_file):
            raise TypeError(f"is_valid_file should be a callable taking a path (or None), got "
                            f"{type(is_valid_file).__name__}")
        extensions = IMG_EXTENSIONS if extensions is None else extensions
        if not isinstance(extensions, str) and not (isinstance(extensions, Sequence)
                                                    and all(isinstance(e, str) for e in extensions)):
            raise TypeError(f"extensions should be a suffix or a sequence of suffixes ('.jpg', ...), got "
                            f"{type(extensions).__name__}: {extensions!r}")
        wanted = "files that is_valid_file takes" if is_valid_file else f"image files with extensions {extensions!r}"
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"ImageFolder root {str(root)!r} is not a directory")
        self.root = root
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"no class folders found in {str(root)!r}")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        found = {c: find_files(root / c, extensions, is_valid_file) for c in self.classes}
        samples = [(path, self.class_to_idx[c]) for c in self.classes for path in found[c]]
        if not samples:
            raise FileNotFoundError(f"no {wanted} found in {str(root)!r}")
        empty = [c for c in self.classes if not found[c]]
        if empty and not allow_empty:  # torchvision's rule: a class without images is a mistake in the data
            raise FileNotFoundError(f"no {wanted} in the class folder(s) {empty} of "
                                    f"{str(root)!r} (allow_empty=True keeps them as classes without images)")
        self.samples = samples
        super().__init__([p for p, _ in samples], [y for _, y in samples], decode=decode, on_error=on_error,
                         target_transform=target_transform)
        self.targets = self.labels
