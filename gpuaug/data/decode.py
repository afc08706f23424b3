"""Reading and decoding one image file to uint8 ``(3, H, W)``, with errors that name the file."""

from __future__ import annotations

import struct
import warnings
from contextlib import contextmanager

import torch
from torchvision.io import ImageReadMode, decode_image, read_file
from torchvision.transforms.v2.functional import to_dtype

# Larger images are refused before decoding (PIL's decompression-bomb limit is 89.5 Mpx; twice it).
MAX_PIXELS = 178_956_970


@contextmanager
def quiet_torchvision_io():
    """torchvision 0.29 deprecates its image codecs (for TorchCodec) with a warning on every call;
    the codecs still work, and a worker decoding thousands of files should not print thousands of
    warnings."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                                category=DeprecationWarning)
        yield


class DecodeError(ValueError):
    """A file could not be read or decoded; ``path`` and ``cause`` say which and why."""

    def __init__(self, path: str, cause: str = ""):
        super().__init__(f"{path}: {cause}" if cause else path)
        self.path, self.cause = path, cause

    def __reduce__(self):
        return type(self), (self.path, self.cause)


def is_jpeg(data: torch.Tensor) -> bool:
    """Whether encoded bytes (uint8 1-D) start with the JPEG SOI marker."""
    return data.numel() >= 3 and data[:3].tolist() == [0xFF, 0xD8, 0xFF]


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` read from a PNG or JPEG header without decoding; None if not found."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                i += 1 if marker == 0xFF else 2
                continue
            length = struct.unpack(">H", data[i + 2 : i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return height, width
            i += 2 + length
    return None


def read_bytes(path: str) -> torch.Tensor:
    """The file's bytes as uint8 1-D; raises :class:`DecodeError` naming the path."""
    try:
        with quiet_torchvision_io():
            data = read_file(str(path))
    except (OSError, RuntimeError) as e:
        raise DecodeError(str(path), f"cannot read ({e})") from None
    if data.numel() == 0:
        raise DecodeError(str(path), "empty file (0 bytes)")
    return data


def check_size(path: str, data: torch.Tensor, max_pixels: int = MAX_PIXELS) -> None:
    size = image_size(data[:65536].numpy().tobytes())
    if size is not None and (size[0] * size[1] > max_pixels or 0 in size):
        raise DecodeError(str(path), f"absurd dimensions {size[0]}x{size[1]} (more than {max_pixels} pixels or zero)")


def decode_rgb(path: str, data: torch.Tensor) -> torch.Tensor:
    """Decode encoded bytes to uint8 ``(3, H, W)``: grayscale, palette, RGBA and CMYK become RGB,
    16-bit images are scaled (not truncated) to 8 bits, EXIF-rotated photos come out upright."""
    check_size(path, data)
    try:
        with quiet_torchvision_io():
            img = decode_image(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)
    except (RuntimeError, ValueError) as e:
        raise DecodeError(str(path), f"cannot decode ({str(e).splitlines()[0][:200]})") from None
    if img.dtype != torch.uint8:
        img = to_dtype(img, torch.uint8, scale=True)
    return img


def load_rgb(path: str) -> torch.Tensor:
    """Read and decode one file to uint8 ``(3, H, W)``; :class:`DecodeError` names the path."""
    return decode_rgb(str(path), read_bytes(path))
