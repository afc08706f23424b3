"""The JPEG and WEBP codecs the data path calls, wherever they live.

torchvision 0.29 deprecates ``torchvision.io``'s image codecs for TorchCodec's ("to be removed in a
future release"). The data path takes, in this order: ``torchvision.io``'s where it still has them;
else TorchCodec's (``torchcodec.decoders``, 0.16 and later) where it is installed and loads; else
none, and PIL decodes every file on the CPU (``decode="gpu"`` then decodes in the worker). On JPEG
and WEBP all three give the same pixels (libjpeg-turbo and libwebp in each; tested on the sample
photos and on progressive, 4:4:4/4:2:2/4:2:0, gray, CMYK and EXIF-turned JPEGs), so only speed
depends on which is found, and ``import gpuaug`` on none. (TorchCodec's CUDA decoder, nvJPEG as
torchvision's, is called the same way but has not yet run on a GPU here.)
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from typing import NamedTuple

import torch
from PIL import Image
from torch import Tensor


class Codecs(NamedTuple):
    """One library's decoders, as the data path calls them.

    ``decode(data)``: a JPEG's or a still WEBP's bytes (uint8 1-D CPU tensor) -> uint8 ``(3, H, W)``
    RGB, EXIF orientation applied; a damaged file raises ``RuntimeError`` or ``ValueError``.
    ``decode_jpeg(data, device)``: JPEG bytes (one tensor, or a list of them) decoded on ``device``
    (nvJPEG on CUDA) -> one tensor or a list; ``RuntimeError`` where the device decoder refuses them.
    ``None`` where the library has none: PIL decodes on the CPU instead."""

    name: str
    decode: Callable[[Tensor], Tensor] | None
    decode_jpeg: Callable | None


PIL_ONLY = Codecs("PIL", None, None)


def torchvision_codecs() -> Codecs | None:
    """``torchvision.io``'s decoders, or None where this torchvision no longer has them."""
    try:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg
    except ImportError:
        return None
    rgb = ImageReadMode.RGB

    def decode(data: Tensor) -> Tensor:
        with quiet_torchvision_io():
            return decode_image(data, mode=rgb, apply_exif_orientation=True)

    def decode_on(data, device):
        with quiet_torchvision_io():
            return decode_jpeg(data, mode=rgb, device=device, apply_exif_orientation=True)

    return Codecs("torchvision.io", decode, decode_on)


def torchcodec_codecs() -> Codecs | None:
    """TorchCodec's decoders (which apply EXIF orientation themselves), or None where it is not
    installed or does not load (a build for another torch fails as an OSError or RuntimeError)."""
    try:
        from torchcodec.decoders import decode_image, decode_jpeg
    except Exception:
        return None
    return Codecs("torchcodec", lambda data: decode_image(data, mode="RGB"),
                  lambda data, device: decode_jpeg(data, mode="RGB", device=device))


def encode_jpeg(image: Tensor, quality: int = 90) -> Tensor:
    """uint8 ``(3, H, W)`` CPU image -> JPEG bytes (uint8 1-D), to make benchmark and test data:
    ``torchvision.io``'s encoder, else PIL's (other bytes, the same kind of file)."""
    try:
        from torchvision.io import encode_jpeg as encode
    except ImportError:
        buffer = io.BytesIO()
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, "JPEG", quality=quality)
        return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    with quiet_torchvision_io():
        return encode(image.contiguous(), quality=quality)


@contextmanager
def quiet_torchvision_io():
    """torchvision 0.29 deprecates its image codecs (for TorchCodec) with a warning on every call;
    the codecs still work, and a worker decoding thousands of files should not print thousands of
    warnings."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                                category=DeprecationWarning)
        yield


# The codecs in use (tests swap them for the others).
CODECS = torchvision_codecs() or torchcodec_codecs() or PIL_ONLY
