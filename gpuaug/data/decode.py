"""Reading and decoding one image file to uint8 ``(3, H, W)``, with errors that name the file.

JPEG and still WEBP are decoded by ``torchvision.io`` (or where it no longer has its codecs,
TorchCodec's, else PIL's: :mod:`gpuaug.data.codecs`); PNG, GIF, animated WEBP, WEBP with EXIF
metadata (torchvision.io ignores its orientation) and every other format PIL reads (BMP, PPM/PGM,
TIFF, AVIF, ...: what torchvision's own PIL-based ImageFolder opens) by PIL, which ships with
torchvision. On valid files the pixels are the same either way (tested on every PNG color type and
bit depth, on GIFs with transparency, interlacing, local color tables and frames smaller than
their screen, and on lossy, lossless and RGBA WEBPs), but torchvision's decoders (0.29) fail on
damaged ones where PIL raises or decodes them the same way every time: its PNG decoder kills the
process (SIGSEGV) on a single flipped bit in the image data, and its GIF decoder returns
uninitialised memory for some damaged GIFs (different pixels on each call). PIL also decodes only
a GIF's first frame, where torchvision's decodes every frame at the size of the screen (70,000
one-pixel frames, 1 MB of file, on a 4000x4000 screen would ask for 3 TB).
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import struct
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from . import codecs

# Larger images are refused before decoding (PIL's decompression-bomb limit is 89.5 Mpx; twice it).
MAX_PIXELS = 178_956_970
# Larger files are refused before reading: no image within MAX_PIXELS needs more (uncompressed
# 16-bit RGBA is 8 bytes a pixel; 64 MiB more for metadata). A video or an archive named like an
# image would otherwise be read whole into a worker's memory.
MAX_FILE_BYTES = 8 * MAX_PIXELS + (64 << 20)
# JPEGs with more scans are refused before decoding: libjpeg passes over the whole image once per
# scan, so a small file of repeated scans takes minutes (a 250 kB one of 5000, 56 s here). Real
# progressive files have about 10; 256 is NVIDIA nvImageCodec's default limit for the same attack.
MAX_JPEG_SCANS = 256
# JPEGs with more markers before their frame header are refused: real files have tens (a large
# ICC profile or XMP packet split into 64 kB segments, a few hundred); each costs a Python step.
MAX_JPEG_MARKERS = 10_000
_SOF_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_FILL = re.compile(rb"\xff+")


class DecodeError(ValueError):
    """A file could not be read or decoded; ``path`` and ``cause`` say which and why."""

    def __init__(self, path: str, cause: str = ""):
        super().__init__(f"{path}: {cause}" if cause else path)
        self.path, self.cause = path, cause

    def __reduce__(self):
        return type(self), (self.path, self.cause)


_JPEG = b"\xff\xd8\xff"  # the SOI marker and the first marker's 0xFF
_PNG = b"\x89PNG\r\n\x1a\n"


def is_jpeg(data: torch.Tensor) -> bool:
    """Whether encoded bytes (uint8 1-D) start with the JPEG SOI marker."""
    return data[:3].numpy().tobytes() == _JPEG


def device_decodable(data: torch.Tensor) -> bool:
    """Whether bytes (uint8 1-D) are a JPEG that ``decode="gpu"`` hands to the device decoder:
    one that ends with its EOI marker and is not EXIF-turned (:func:`exif_turned`). Measured on an
    H200 (torchvision 0.26, nvJPEG): a JPEG cut to a third of its bytes decoded there without an
    error, where libjpeg refuses it. The others are decoded in the worker, by the CPU's rules."""
    return is_jpeg(data) and data[-2:].numpy().tobytes() == b"\xff\xd9" and not exif_turned(data)


def exif_turned(data: torch.Tensor) -> bool:
    """Whether JPEG bytes (uint8 1-D) carry an EXIF orientation other than upright (1), or EXIF that
    PIL cannot read. Such a file is decoded on the CPU with ``decode="gpu"`` too: torchvision's CUDA
    decoder ignores ``apply_exif_orientation`` (0.26 measured on an H200: a 50x70 photo tagged 6 came
    out 50x70, where its CPU decoder gives 70x50). Reads the header only."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PIL's "Corrupt EXIF data" and bomb warnings
            with Image.open(io.BytesIO(data.numpy().tobytes())) as im:
                return im.getexif().get(0x0112, 1) != 1
    except Exception:  # damaged metadata: the CPU decoder (torchvision's own rules) takes the file
        return True


def _is_webp(data: bytes) -> bool:
    """Whether a file starts as a RIFF WEBP."""
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"


def decoded_by_codecs(data: bytes) -> bool:
    """Whether this file is decoded by the codecs library (``torchvision.io``, or TorchCodec: JPEG,
    a still WEBP without EXIF), by its first 21 bytes; the rest go to PIL (see the module's docstring)."""
    return data[:3] == _JPEG or (_is_webp(data) and not _webp_for_pil(data))


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` read from the header without decoding (PNG, JPEG and WEBP parsed here,
    any other format from PIL's lazy open, which reads only the header); None if not found in
    ``data`` (the file, or its start)."""
    if data[:8] == _PNG and data[12:16] == b"IHDR" and len(data) >= 24:  # else PIL finds it, as it decodes it
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    if data[:2] == _JPEG[:2]:
        frame = jpeg_frame(data)
        return None if frame is None else frame[1:]
    if _is_webp(data):
        return webp_size(data)
    try:
        with _pil_quiet(), Image.open(io.BytesIO(data)) as im:
            return im.height, im.width
    except Image.DecompressionBombError:  # PIL's limit is MAX_PIXELS too
        raise
    except Exception:  # not an image PIL knows, or a header cut at the 64 KiB read: the decoder will say
        return None


def jpeg_frame(data: bytes) -> tuple[int, int, int] | None:
    """A JPEG's frame header: ``(marker, height, width)``, its SOF marker (0xC0 baseline, 0xC2
    progressive, ...); None if not found in ``data`` (the file, or its start), or if a scan, the end
    or a second SOI comes first (libjpeg refuses such a file). The segments are walked over by their
    lengths up to the frame header; the scan data is never read.

    Markers are found as libjpeg's ``next_marker`` finds them, so that both read the same frame
    header: bytes other than 0xFF between segments are skipped, a run of 0xFF is fill, and 0xFF 0x00
    is discarded, not a segment (read as one, its next two bytes would be taken for a length and the
    walk could jump past the frame header that libjpeg then decodes, unchecked). Raises ValueError
    past :data:`MAX_JPEG_MARKERS` markers (each costs a Python step here; libjpeg has no limit)."""
    i, end = 2, len(data)
    for _ in range(MAX_JPEG_MARKERS):
        i = data.find(b"\xff", i)
        if i < 0:
            return None
        fill = _FILL.match(data, i)
        assert fill is not None  # data[i] is 0xff
        i = fill.end()
        if i >= end:
            return None
        marker = data[i]
        i += 1
        if marker in (0x00, 0x01) or 0xD0 <= marker <= 0xD7:  # discarded, TEM, RSTn: no length follows
            continue
        if marker in (0xD8, 0xD9, 0xDA) or i + 2 > end:
            return None
        if marker in _SOF_MARKERS:
            if i + 7 > end:
                return None
            height, width = struct.unpack(">HH", data[i + 3 : i + 7])  # after the length and the precision byte
            return marker, height, width
        i += max(struct.unpack(">H", data[i : i + 2])[0], 2)  # the length counts its own two bytes
    raise ValueError(f"more than {MAX_JPEG_MARKERS} markers before its frame header (real JPEGs have tens)")


def webp_size(data: bytes) -> tuple[int, int] | None:
    """A RIFF WEBP's ``(height, width)`` as libwebp's ``WebPGetFeatures`` (what torchvision's
    decoder calls) reads it, or None where it finds none. PIL's open is stricter (libwebp's demuxer):
    on damaged files libwebp still decodes, it failed, and the size went unchecked. With a VP8X
    header the canvas (a still image decodes only where its bitstream matches it), else the first
    chunk's bitstream: ``VP8 `` or ``VP8L``, or any other chunk read as a bare bitstream, as libwebp
    reads it."""
    chunk = data[12:16]
    if chunk == b"VP8X":  # 24-bit width - 1 and height - 1 after its size and flags
        if len(data) < 30:
            return None
        width, height = (int.from_bytes(data[i : i + 3], "little") + 1 for i in (24, 27))
        return height, width
    bits = data[20:30] if chunk in (b"VP8 ", b"VP8L") else data[12:22]  # the first 10 bytes of the bitstream
    # A bare bitstream is lossless where it has VP8L's signature byte and version 0 (VP8LCheckSignature).
    if chunk == b"VP8L" or (chunk != b"VP8 " and len(bits) >= 5 and bits[0] == 0x2F and bits[4] >> 5 == 0):
        if len(bits) < 5 or bits[0] != 0x2F:
            return None
        packed = int.from_bytes(bits[1:5], "little")  # 14 bits of width - 1, then 14 of height - 1
        return (packed >> 14 & 0x3FFF) + 1, (packed & 0x3FFF) + 1
    if len(bits) < 10 or bits[3:6] != b"\x9d\x01\x2a":  # VP8: a key frame's start code, then 14-bit sizes
        return None
    width, height = (int.from_bytes(bits[i : i + 2], "little") & 0x3FFF for i in (6, 8))
    return height, width


def read_bytes(path: str) -> torch.Tensor:
    """The file's bytes as uint8 1-D (read straight into the tensor); raises :class:`DecodeError`
    naming the path, with the OS's reason (``[Errno 21] Is a directory``, ...). Only regular files
    (or links to them) of at most :data:`MAX_FILE_BYTES` are read: a FIFO or a device named like an
    image is refused, not waited on (opening a FIFO blocks until a writer comes; ``/dev/zero`` never
    ends), and a larger file is refused before it is read."""
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer (no effect on files).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            if not stat.S_ISREG(info.st_mode):
                raise DecodeError(str(path), f"cannot read (not a regular file but a {_file_kind(info.st_mode)})")
            if info.st_size > MAX_FILE_BYTES:
                raise DecodeError(str(path), f"too large to be an image ({info.st_size} bytes; one of "
                                             f"{MAX_PIXELS} pixels needs at most {MAX_FILE_BYTES})")
            data = torch.empty(info.st_size, dtype=torch.uint8, device="cpu")
            with open(fd, "rb", closefd=False) as f:
                size = f.readinto(data.numpy().data) if len(data) else 0
        finally:
            os.close(fd)
    except OSError as e:
        raise DecodeError(str(path), f"cannot read ({e})") from None
    if size == 0:
        raise DecodeError(str(path), "empty file (0 bytes)")
    return data[:size]  # shorter where the file shrank since its size was read


def _file_kind(mode: int) -> str:
    """What a non-regular file is, in words, from its ``st_mode``."""
    kinds = [(stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")]
    return next((name for test, name in kinds if test(mode)), f"file of mode {oct(stat.S_IFMT(mode))}")


def check_size(path: str, data: torch.Tensor, max_pixels: int = MAX_PIXELS) -> tuple[int, int] | None:
    """Refuse, before decoding, a file whose header claims more than ``max_pixels`` pixels (or
    zero), a JPEG of more than :data:`MAX_JPEG_SCANS` scans, and one of more than
    :data:`MAX_JPEG_MARKERS` markers before its frame header: :class:`DecodeError` naming the path.
    Returns the ``(height, width)`` the header gives, or None where no header was found (not an
    image torchvision or PIL reads, or one damaged before its size: the decoder will say)."""
    try:
        header = data[:65536].numpy().tobytes()
        size = image_size(header)
        if size is None and data.numel() > len(header) and decoded_by_codecs(header[:21]):
            # The header lies further in (after a JPEG's ICC profile or EXIF thumbnail), and
            # torchvision's decoders have no limit of their own (PIL's have: see _decode_with_pil).
            header = data.numpy().tobytes()
            size = image_size(header)
    except Image.DecompressionBombError as e:
        raise DecodeError(str(path), f"absurd dimensions ({e})") from None
    except ValueError as e:  # a JPEG whose frame header is too far in to look for
        raise DecodeError(str(path), f"cannot decode ({e})") from None
    if size is not None and (size[0] * size[1] > max_pixels or 0 in size):
        raise DecodeError(str(path), f"absurd dimensions {size[0]}x{size[1]} (more than {max_pixels} pixels or zero)")
    if header[:3] == _JPEG:
        # Only where a few bytes of a scan can stand for many blocks (progressive end-of-band runs,
        # arithmetic coding): a Huffman-coded sequential scan spends bits on every block, so its
        # work grows with the file's size, as any image's does; nothing to count there (baseline
        # photos, most of a dataset, skip the pass over their bytes).
        frame = jpeg_frame(header)
        if frame is None or frame[0] not in (0xC0, 0xC1):
            whole = header if len(header) == data.numel() else data.numpy().tobytes()
            # Its start-of-scan markers: entropy-coded data cannot hold one (a 0xFF there is followed
            # by 0x00 or a restart marker); a thumbnail's or a profile's bytes may add a few.
            if (scans := whole.count(b"\xff\xda")) > MAX_JPEG_SCANS:
                raise DecodeError(str(path), f"too many scans ({scans}, more than {MAX_JPEG_SCANS}): decoding "
                                             f"would pass over the image {scans} times (real progressive JPEGs "
                                             f"have about 10)")
    return size


def decode_rgb(path: str, data: torch.Tensor) -> torch.Tensor:
    """Decode encoded bytes to uint8 ``(3, H, W)``: grayscale, palette, RGBA and CMYK become RGB,
    16-bit images are scaled (not truncated) to 8 bits, EXIF-rotated photos come out upright, an
    animated GIF or WEBP gives its first frame (as PIL, and so torchvision's ImageFolder, does;
    only that frame is decoded)."""
    check_size(path, data)
    decode = codecs.CODECS.decode
    if decode is None or not decoded_by_codecs(data[:21].numpy().tobytes()):
        return _decode_with_pil(path, data)
    try:
        return decode(data)
    except (RuntimeError, ValueError) as e:
        raise DecodeError(str(path), f"cannot decode ({_codec_message(e)})") from None


# torchvision's codecs raise "decode_jpeg, /__w/vision/.../decode_jpeg.cpp:171, Image is
# incomplete or truncated": the function and its build machine's source line, then the cause
# (TorchCodec's too: "decode_rows, /__w/torchcodec/.../DecodeJpeg.cpp:287, Image is ...").
_CODEC_SOURCE = re.compile(r"^(\w+), \S+\.(?:cpp|cc|c|h):\d+, ")


def _codec_message(e: Exception) -> str:
    """The first line of a decoder's error (its type where it has no message), without a
    torchvision codec's C++ source location: ``decode_jpeg: Image is incomplete or truncated``."""
    line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return _CODEC_SOURCE.sub(r"\1: ", line)[:200]


def _webp_for_pil(magic: bytes) -> bool:
    """Whether a file's first 21 bytes are those of a WEBP that PIL decodes: its VP8X header flags
    an animation (torchvision.io refuses those; PIL gives their first frame) or EXIF metadata
    (torchvision.io ignores a WEBP's EXIF orientation; PIL's ``exif_transpose`` applies it, as
    torchvision.io does for JPEG and PNG). PIL's pixels are torchvision's otherwise."""
    return _is_webp(magic) and magic[12:16] == b"VP8X" and len(magic) > 20 and bool(magic[20] & 0x0A)


def _decode_with_pil(path: str, data: torch.Tensor) -> torch.Tensor:
    """PNG, GIF (its first frame), animated WEBP, WEBP with EXIF and the formats torchvision.io
    does not read, through PIL, to what :func:`decode_rgb` gives. PIL refuses more than
    :data:`MAX_PIXELS` pixels itself (twice its warning limit), wherever the header lies."""
    try:
        with _pil_quiet(), Image.open(io.BytesIO(data.numpy().tobytes())) as opened:
            png = opened.format == "PNG"
            im = ImageOps.exif_transpose(opened)
            # 16-bit gray (a PNG's is mode "I" in older Pillow): scaled as torchvision's to_dtype scales it (>> 8)
            if im.mode.startswith("I;16") or (im.mode == "I" and png):
                gray = (np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8)
                rgb = np.repeat(gray[..., None], 3, axis=-1)  # a new, writable array
            elif im.mode in ("I", "F"):  # 32-bit: no range that says what white is
                raise DecodeError(str(path), f"cannot decode (32-bit {'float' if im.mode == 'F' else 'integer'} "
                                             f"pixels, mode {im.mode!r}: convert it to an 8- or 16-bit image)")
            else:
                rgb = np.array(im.convert("RGB"))  # a copy: PIL's own buffer is read-only
    except DecodeError:
        raise
    except Image.DecompressionBombError as e:
        raise DecodeError(str(path), f"absurd dimensions ({e})") from None
    except UnidentifiedImageError:  # its message names an in-memory buffer: <_io.BytesIO object at 0x...>
        raise DecodeError(str(path), "cannot decode (not an image format torchvision or PIL reads)") from None
    except Exception as e:  # PIL raises many kinds (OSError, SyntaxError, struct.error, ...) on bad files
        raise DecodeError(str(path), f"cannot decode ({_codec_message(e)})") from None
    return torch.from_numpy(rgb).permute(2, 0, 1)  # channels-last in memory, as torchvision.io decodes


@contextmanager
def _pil_quiet():
    """PIL warns of a possible decompression bomb past 89.5 Mpx; :func:`check_size` has its own limit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def load_rgb(path: str) -> torch.Tensor:
    """Read and decode one file to uint8 ``(3, H, W)``; :class:`DecodeError` names the path."""
    return decode_rgb(str(path), read_bytes(path))
