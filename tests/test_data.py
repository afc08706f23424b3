"""Decode-only datasets, bad files under both policies, collate and DeviceLoader, on real files."""

import io
import multiprocessing
import os
import random
import re
import struct
import threading
import time
import warnings
import zlib
from collections import defaultdict, namedtuple

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torch.utils.data import DataLoader

import gpuaug as ga
from conftest import WORKER_TIMEOUT_S
from gpuaug.data import Batch, BadFile, Encoded, EncodedBatch, ImageFiles, ImageFolder, collate
from gpuaug.profile import find_images


def _rgb(photo: torch.Tensor) -> np.ndarray:
    return photo.permute(1, 2, 0).numpy()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, photos):
    """root/<class>/<file> with real photos encoded in each format the datasets must handle."""
    root = tmp_path_factory.mktemp("images")
    (root / "cat").mkdir()
    (root / "space").mkdir()
    astro, coffee, chelsea, rocket = (_rgb(p) for p in photos)
    Image.fromarray(chelsea).save(root / "cat" / "rgb.jpg", quality=92)
    Image.fromarray(chelsea).convert("L").save(root / "cat" / "gray.png")
    Image.fromarray(chelsea).convert("P").save(root / "cat" / "palette.png")
    Image.fromarray(coffee).convert("RGBA").save(root / "cat" / "rgba.png")
    Image.fromarray(astro).convert("CMYK").save(root / "space" / "cmyk.jpg", quality=95)
    Image.fromarray(_sixteen_bit(astro[..., 0])).save(root / "space" / "gray16.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    Image.fromarray(rocket).save(root / "space" / "exif_rotated.jpg", exif=exif, quality=92)
    # what torchvision.io does not read and torchvision's (PIL) ImageFolder does: PIL decodes these
    Image.fromarray(chelsea).save(root / "cat" / "rgb.bmp")
    Image.fromarray(coffee).save(root / "cat" / "rgb.ppm")
    Image.fromarray(coffee).convert("L").save(root / "cat" / "gray.pgm")
    Image.fromarray(astro).save(root / "space" / "rgb.tif", compression="tiff_lzw")
    Image.fromarray(_sixteen_bit(astro[..., 1])).save(root / "space" / "gray16.tif")
    Image.fromarray(rocket).save(root / "space" / "rgb.webp", lossless=True)
    first = Image.fromarray(rocket).convert("P")  # <= 256 colors: GIF keeps them exactly
    # torchvision's ImageFolder skips .gif (ImageFiles reads it)
    first.save(root / "space" / "animated.gif", save_all=True, append_images=[first.rotate(90), first.rotate(180)])
    webp_frames = [Image.fromarray(rocket), Image.fromarray(rocket).rotate(90)]  # torchvision.io refuses animated WEBP
    webp_frames[0].save(root / "space" / "animated.webp", save_all=True, append_images=webp_frames[1:], lossless=True)
    (root / "space" / "notes.txt").write_text("not an image")
    return root


# Lossless files of the fixture and the pixels they were written from (a PNG of the same pixels is
# the reference's second witness: torchvision.io decodes it, PIL is not involved).
LOSSLESS = {"rgb.bmp": ("chelsea", None), "rgb.ppm": ("coffee", None), "gray.pgm": ("coffee", "L"),
            "rgb.tif": ("astronaut", None), "rgb.webp": ("rocket", None), "animated.gif": ("rocket", "P"),
            "animated.webp": ("rocket", None), "gray16.tif": ("astronaut", "16")}


def test_image_folder_layout_matches_torchvision(folder):
    from torchvision.datasets import ImageFolder as TorchvisionImageFolder

    ours = ImageFolder(folder)
    ref = TorchvisionImageFolder(str(folder))
    assert ours.classes == ref.classes == ["cat", "space"]
    assert ours.class_to_idx == ref.class_to_idx
    assert [(p, y) for p, y in ours.samples] == [(p, y) for p, y in ref.samples]


def test_is_valid_file_and_target_transform_as_torchvision_takes_them(folder):
    from torchvision.datasets import ImageFolder as TorchvisionImageFolder

    def valid(path):
        return "gray" not in os.path.basename(path)

    def shifted(y):
        return y + 10

    ours = ImageFolder(folder, is_valid_file=valid, target_transform=shifted)
    ref = TorchvisionImageFolder(str(folder), is_valid_file=valid, target_transform=shifted)
    assert ours.samples == ref.samples and len(ours) < len(ImageFolder(folder))
    assert [ours[i][1] for i in range(len(ours))] == [ref.samples[i][1] + 10 for i in range(len(ref))]
    assert ours.targets == ref.targets  # untransformed, as torchvision's
    gifs = ImageFolder(folder, is_valid_file=lambda p: p.lower().endswith(".gif"), allow_empty=True)
    assert gifs.samples and gifs.samples == ImageFolder(folder, extensions=".gif", allow_empty=True).samples
    with pytest.raises(ValueError, match="extensions and is_valid_file cannot both"):
        ImageFolder(folder, extensions=(".jpg",), is_valid_file=valid)
    with pytest.raises(FileNotFoundError, match="no files that is_valid_file takes"):
        ImageFolder(folder, is_valid_file=lambda p: False)
    with pytest.raises(TypeError, match="is_valid_file should be a callable"):
        ImageFolder(folder, is_valid_file=".jpg")
    for extensions in (5, [b".jpg"], [".jpg", None]):  # was "'int' object is not iterable", or no files found
        with pytest.raises(TypeError, match="extensions should be a suffix or a sequence of suffixes"):
            ImageFolder(folder, extensions=extensions)
    with pytest.raises(TypeError, match="target_transform should be a callable"):
        ImageFiles([], target_transform=3)


def test_a_class_folder_without_images_is_refused_as_torchvision_refuses_it(tmp_path):
    from torchvision.datasets import ImageFolder as TorchvisionImageFolder

    for name in ("cat/a.jpg", "dog/notes.txt", "eel/x.jpg"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        if name.endswith(".jpg"):
            Image.new("RGB", (4, 4)).save(tmp_path / name)
        else:
            (tmp_path / name).write_text("no image")
    (tmp_path / "fox").mkdir()
    with pytest.raises(FileNotFoundError, match="classes dog, fox"):
        TorchvisionImageFolder(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"class folder\(s\) \['dog', 'fox'\].*allow_empty=True"):
        ImageFolder(tmp_path)
    ours, ref = ImageFolder(tmp_path, allow_empty=True), TorchvisionImageFolder(str(tmp_path), allow_empty=True)
    assert ours.classes == ref.classes == ["cat", "dog", "eel", "fox"]
    assert ours.samples == ref.samples and [y for _, y in ours.samples] == [0, 2]


def test_symlink_loops_end_and_each_real_folder_is_read_once(tmp_path, photos):
    import signal

    (tmp_path / "cat" / "sub").mkdir(parents=True)
    Image.fromarray(photos[0].permute(1, 2, 0).numpy()).save(tmp_path / "cat" / "sub" / "a.jpg")
    Image.fromarray(photos[1].permute(1, 2, 0).numpy()).save(tmp_path / "cat" / "b.png")
    (tmp_path / "cat" / "sub" / "up").symlink_to("..")  # a loop: cat/sub/up/sub/up/...
    (tmp_path / "cat" / "self").symlink_to(".")

    def hang(*_):
        raise TimeoutError("ImageFolder walked a symlink loop forever")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(20)
    try:
        ds = ImageFolder(tmp_path)
        found = find_images(tmp_path, 100)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert sorted(os.path.realpath(p) for p in ds.paths) == sorted(
        str((tmp_path / "cat" / name).resolve()) for name in ("b.png", "sub/a.jpg"))
    assert found == ds.paths


def test_extensions_as_one_string_or_any_case(tmp_path):
    (tmp_path / "c").mkdir()
    for name in ("a.jpg", "b.png", "c.JPG"):
        Image.new("RGB", (4, 4)).save(tmp_path / "c" / name, format="PNG" if name.endswith("png") else "JPEG")
    names = lambda ds: [os.path.basename(p) for p in ds.paths]  # noqa: E731
    assert names(ImageFolder(tmp_path, extensions=".jpg")) == ["a.jpg", "c.JPG"]  # not every name ending in j, p, g
    assert names(ImageFolder(tmp_path, extensions=(".PNG",))) == ["b.png"]


def test_every_format_arrives_as_rgb_uint8_matching_pil(folder):
    ds = ImageFolder(folder)
    for (path, _), i in zip(ds.samples, range(len(ds))):
        img, label = ds[i]
        assert img.dtype == torch.uint8 and img.dim() == 3 and img.shape[0] == 3, path
        with Image.open(path) as im:
            if "gray16" in path:  # 16-bit: scaled to 8 bits (>> 8), not truncated to the low byte
                expected = np.repeat((np.asarray(im, dtype=np.uint16) >> 8).astype(np.uint8)[..., None], 3, -1)
            else:
                expected = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        tol = 4 if "cmyk" in path else 1  # libjpeg and PIL convert CMYK slightly differently
        assert img.permute(1, 2, 0).shape == expected.shape, path
        assert np.abs(img.permute(1, 2, 0).numpy().astype(int) - expected.astype(int)).mean() < tol, path


@pytest.mark.parametrize("name", sorted(LOSSLESS))
def test_formats_torchvision_io_does_not_read_give_their_exact_pixels(folder, photos, tmp_path, name):
    """BMP, PPM/PGM, TIFF (8 and 16 bit) through PIL, WEBP and an animated GIF (its first frame)
    through torchvision.io: each equals the pixels it was written from, as torchvision.io decodes
    them from a PNG."""
    from torchvision.io import ImageReadMode, decode_image, read_file
    from torchvision.transforms.v2.functional import to_dtype

    source, mode = LOSSLESS[name]
    rgb = _rgb(photos[["astronaut", "coffee", "chelsea", "rocket"].index(source)])
    png = tmp_path / "reference.png"
    if mode == "16":
        Image.fromarray(_sixteen_bit(rgb[..., 1])).save(png)
    elif mode:
        Image.fromarray(rgb).convert(mode).save(png)
    else:
        Image.fromarray(rgb).save(png)
    expected = to_dtype(decode_image(read_file(str(png)), mode=ImageReadMode.RGB), torch.uint8, scale=True)
    img, _ = ImageFiles([next(folder.glob(f"*/{name}"))])[0]
    assert img.dtype == torch.uint8 and img.shape == expected.shape, (img.shape, expected.shape)
    assert torch.equal(img, expected)


def _gif(frames: list[np.ndarray], **save_args) -> bytes:
    images = [Image.fromarray(f).convert("P") for f in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, "GIF", save_all=True, append_images=images[1:], **save_args)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["palettes", "comment", "one_pixel_frames", "one_frame", "transparency",
                                  "interlaced", "frame_inside_a_larger_screen"])
def test_a_gif_gives_the_first_frame_torchvision_decodes(tmp_path, photos, kind):
    """GIFs are decoded by PIL, first frame only (torchvision decodes every frame at the size of
    the screen: frames of one pixel, 15 bytes each, would each cost a whole frame of memory); it is
    the frame torchvision's own decoder gives first for the whole file."""
    from torchvision.io import ImageReadMode, decode_image

    a, b = (_rgb(p)[:64, :96] for p in photos[2:4])
    if kind == "palettes":  # frames with their own color tables, a loop and durations (extensions)
        data = _gif([a, b, a[::-1].copy()], duration=[40, 80, 120], loop=0)
    elif kind == "comment":
        data = _gif([a, b], comment=b"x" * 600)  # 600 bytes: three sub-blocks
    elif kind == "one_pixel_frames":
        tiny = b"\x2c" + struct.pack("<HHHHB", 5, 7, 1, 1, 0) + bytes([2, 2, 0x4C, 0x01, 0])
        data = _gif([a])[:-1] + tiny * 40 + b"\x3b"
    elif kind == "transparency":
        data = _gif([a, b], transparency=7, disposal=2)
    elif kind == "interlaced":
        data = _gif([a], interlace=True)
    elif kind == "frame_inside_a_larger_screen":  # the screen is 80x112, the frame 64x96 at (4, 3)
        data = bytearray(_gif([a]))
        frame = data.index(b"\x2c", 13)
        data[6:10], data[frame + 1 : frame + 5] = struct.pack("<HH", 112, 80), struct.pack("<HH", 3, 4)
        data = bytes(data)
    else:
        data = _gif([a])
    whole = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    if kind not in ("one_frame", "interlaced", "frame_inside_a_larger_screen"):
        assert whole.dim() == 4 and whole.shape[0] > 1
    (tmp_path / "x.gif").write_bytes(data)
    img, _ = ImageFiles([tmp_path / "x.gif"])[0]
    assert torch.equal(img, whole[0] if whole.dim() == 4 else whole)


def test_a_damaged_gif_decodes_the_same_every_time_or_not_at_all(photos):
    """torchvision's GIF decoder (0.29) returns uninitialised memory for some damaged GIFs: other
    pixels on each call. GIFs are decoded by PIL, which raises or gives the same pixels each time.
    1500 damaged GIFs (bytes inserted, changed or dropped), seeded, each decoded three times with
    the allocator's memory dirtied in between."""
    from gpuaug.data.decode import decode_rgb

    rng = random.Random(0)
    bases = [_gif([_rgb(photos[2])[:16, :20], _rgb(photos[3])[:16, :20]]), _gif([_rgb(photos[1])[:9, :7]] * 3),
             _gif([_rgb(photos[0])[:12, :12]], comment=b"hello")]
    tokens = [b"\x21\xfe\x01x\x00", b"\x00", b"\x21\xf9\x04\x00\x00\x00\x00\x00", b"\x2c", b"\x3b", b"\x21", b"\xff"]
    decoded = 0
    for case in range(1500):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            at, change = rng.randint(13, len(data) - 1), rng.random()
            if change < 0.4:
                data[at:at] = rng.choice(tokens)
            elif change < 0.8:
                data[at] = rng.randrange(256)
            else:
                del data[at]
        outputs = []
        for _ in range(3):
            torch.randint(0, 256, (4096,), dtype=torch.uint8)  # leaves its bytes in freed memory
            try:
                outputs.append(decode_rgb("x.gif", torch.frombuffer(bytearray(data), dtype=torch.uint8)))
            except ga.DecodeError:
                outputs.append(None)
        if outputs[0] is None:
            assert outputs == [None] * 3, f"case {case}"
        else:
            decoded += 1
            assert all(o is not None and torch.equal(outputs[0], o) for o in outputs[1:]), f"case {case}"
    assert decoded > 500


def _png(pixels: np.ndarray, color_type: int) -> bytes:
    """A 16-bit PNG of ``(H, W, C)`` uint16 ``pixels`` (color type 0 gray, 2 RGB, 4 gray+alpha, 6
    RGBA), written by hand: PIL writes no 16-bit RGB or alpha PNG."""
    h, w = pixels.shape[:2]
    rows = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _png_flavours(photo: torch.Tensor) -> dict[str, bytes]:
    rgb = Image.fromarray(_rgb(photo)[:60, :90])
    exif = Image.Exif()
    exif[0x0112] = 6
    noise = np.random.default_rng(0).integers(0, 2**16, (30, 40, 4), dtype=np.uint16)
    flavours = {
        "rgb": (rgb, {}), "gray": (rgb.convert("L"), {}), "bilevel": (rgb.convert("1"), {}),
        "palette": (rgb.convert("P"), {}), "palette_alpha": (rgb.convert("P"), {"transparency": bytes(range(256))}),
        "rgba": (rgb.convert("RGBA"), {}), "gray_alpha": (rgb.convert("LA"), {}),
        "gray_transparent": (rgb.convert("L"), {"transparency": 40}),
        "rgb_transparent": (rgb, {"transparency": (10, 20, 30)}), "exif_rotated": (rgb, {"exif": exif}),
        "gray16": (Image.fromarray(_sixteen_bit(_rgb(photo)[:60, :90, 0])), {}),
    }
    out = {}
    for name, (image, save_args) in flavours.items():
        buffer = io.BytesIO()
        image.save(buffer, "PNG", **save_args)
        out[name] = buffer.getvalue()
    out.update(rgb16=_png(noise[..., :3], 2), rgba16=_png(noise, 6), gray_alpha16=_png(noise[..., :2], 4))
    return out


PNG_FLAVOURS = ["rgb", "gray", "bilevel", "palette", "palette_alpha", "rgba", "gray_alpha", "gray_transparent",
                "rgb_transparent", "exif_rotated", "gray16", "rgb16", "rgba16", "gray_alpha16"]


@pytest.mark.parametrize("flavour", PNG_FLAVOURS)
def test_png_of_every_color_type_and_depth_decodes_as_torchvision_io(tmp_path, photos, flavour):
    """PNGs are decoded by PIL (see the next test); each color type and bit depth gives exactly
    what torchvision.io gives (mode RGB, EXIF orientation applied, 16 bits scaled to 8)."""
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import to_dtype

    data = _png_flavours(photos[2])[flavour]
    expected = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB,
                            apply_exif_orientation=True)
    expected = to_dtype(expected, torch.uint8, scale=True)
    (tmp_path / "x.png").write_bytes(data)
    img, _ = ImageFiles([tmp_path / "x.png"])[0]
    assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8
    assert img.shape == expected.shape and torch.equal(img, expected)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "TIFF", "WEBP lossy", "WEBP lossless"])
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_is_applied_in_every_format(tmp_path, photos, fmt, orientation):
    """EXIF-rotated photos come out upright whatever their format: torchvision.io ignores a WEBP's
    EXIF orientation (it applies a JPEG's and a PNG's), so a WEBP with EXIF goes to PIL, whose
    ``exif_transpose`` is the reference here."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    args = {"WEBP lossy": {"quality": 90}, "WEBP lossless": {"lossless": True}}.get(fmt, {})
    data = _encoded(photos[2][:, :48, :80], fmt.split()[0], exif=exif, **args)
    (tmp_path / "x.img").write_bytes(data)
    img, _ = ImageFiles([tmp_path / "x.img"])[0]
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert isinstance(img, torch.Tensor) and img.shape == (3, *expected.shape[:2])
    tolerance = 2 if fmt == "JPEG" else 0  # libjpeg-turbo (torchvision) and PIL's libjpeg may round apart
    assert np.abs(img.permute(1, 2, 0).numpy().astype(int) - expected).max() <= tolerance


def test_png_with_a_chunk_before_its_header_decodes_as_pil_decodes_it(tmp_path, photos):
    """The size check read a PNG's size at a fixed offset, where IHDR is when it comes first: a
    PNG with another chunk first (PIL, so torchvision's ImageFolder, reads it) was refused with
    the other chunk's bytes for a size."""
    data = _png_flavours(photos[2])["rgb"]
    text = b"Comment\x00" + b"\xff" * 16
    chunk = struct.pack(">I", len(text)) + b"tEXt" + text + struct.pack(">I", zlib.crc32(b"tEXt" + text))
    (tmp_path / "x.png").write_bytes(data[:8] + chunk + data[8:])
    img, _ = ImageFiles([tmp_path / "x.png"])[0]
    expected = np.asarray(Image.open(tmp_path / "x.png").convert("RGB"))
    assert isinstance(img, torch.Tensor) and np.array_equal(img.permute(1, 2, 0).numpy(), expected)


def test_sixteen_bit_gray_png_opened_as_mode_i_by_older_pillow_is_scaled(tmp_path, photos, monkeypatch):
    """Pillow before 10.x opens a 16-bit gray PNG as mode "I" (32-bit), not "I;16": its values are
    still 16-bit, scaled as torchvision.io's (not refused as a 32-bit image)."""
    import gpuaug.data.decode as decode_module
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import to_dtype

    data = _png_flavours(photos[2])["gray16"]
    open_image = Image.open

    def older_pillow(*args, **kwargs):
        im = open_image(*args, **kwargs)
        assert im.mode == "I;16"
        as_i = im.convert("I")
        as_i.format = im.format
        return as_i

    monkeypatch.setattr(decode_module.Image, "open", older_pillow)
    (tmp_path / "x.png").write_bytes(data)
    img, _ = ImageFiles([tmp_path / "x.png"])[0]
    expected = to_dtype(decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB),
                        torch.uint8, scale=True)
    assert isinstance(img, torch.Tensor) and torch.equal(img, expected)


def test_corrupt_png_is_a_decode_error_not_a_crash(tmp_path, photos):
    """One flipped bit in a PNG's image data: torchvision 0.29's decoder kills the process (SIGSEGV,
    "libpng error: bad adaptive filter value"), so the check runs in a child process."""
    import subprocess
    import sys

    data = bytearray(_encoded(photos[2], "PNG"))
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "corrupt.png").write_bytes(bytes(data))
    code = ("import sys; from gpuaug.data import ImageFiles; item, _ = ImageFiles([sys.argv[1]])[0]; "
            "print(type(item).__name__, item.cause)")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "corrupt.png")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-500:])
    assert run.stdout.startswith("BadFile cannot decode"), run.stdout


def _sixteen_bit(gray: np.ndarray) -> np.ndarray:
    """uint8 ``gray`` as the high byte of 16-bit pixels whose low byte differs from it (not
    ``x * 257``, whose low byte is ``x`` again): scaling (>> 8) gives ``gray``, truncating would not."""
    return gray.astype(np.uint16) * 256 + (255 - gray)


def _tiff_rgb16(pixels: np.ndarray, big_endian: bool) -> bytes:
    """An uncompressed one-strip RGB TIFF of ``(H, W, 3)`` uint16 ``pixels``, written by hand (PIL
    writes no 16-bit RGB TIFF)."""
    h, w, _ = pixels.shape
    e = ">" if big_endian else "<"
    data = pixels.astype(e + "u2").tobytes()
    # tag, type (3 short, 4 long), count, value; BitsPerSample (258) and StripOffsets (273) point past the IFD
    entries = [(256, 3, 1, w), (257, 3, 1, h), (258, 3, 3, 8 + 2 + 9 * 12 + 4), (259, 3, 1, 1), (262, 3, 1, 2),
               (273, 4, 1, 8 + 2 + 9 * 12 + 4 + 6), (277, 3, 1, 3), (278, 3, 1, h), (279, 4, 1, len(data))]
    out = (b"MM" if big_endian else b"II") + struct.pack(e + "HIH", 42, 8, len(entries))
    for tag, kind, count, value in entries:
        out += struct.pack(e + ("HHIHH" if kind == 3 and count == 1 else "HHII"), tag, kind, count, value,
                           *((0,) if kind == 3 and count == 1 else ()))
    return out + struct.pack(e + "IHHH", 0, 16, 16, 16) + data


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
def test_16_bit_rgb_tiff_is_scaled_as_torchvision_scales_16_bit_images(tmp_path, big_endian):
    from torchvision.transforms.v2.functional import to_dtype

    pixels = np.random.default_rng(1).integers(0, 2**16, (37, 53, 3), dtype=np.uint16)
    path = tmp_path / "rgb16.tif"
    path.write_bytes(_tiff_rgb16(pixels, big_endian))
    img, _ = ImageFiles([path])[0]
    expected = to_dtype(torch.from_numpy(pixels.astype(np.int32)).to(torch.uint16).permute(2, 0, 1), torch.uint8, scale=True)
    assert img.dtype == torch.uint8 and torch.equal(img, expected)


def test_jpeg_with_its_frame_header_past_64_kib_decodes_as_torchvision_decodes_it(tmp_path, photos):
    # The size check walks the whole header (a 100 kB ICC profile here); it must not refuse the photo.
    from torchvision.io import decode_jpeg

    data = _jpeg_with_large_icc_profile(photos[2])
    (tmp_path / "icc.jpg").write_bytes(data)
    img, _ = ImageFiles([tmp_path / "icc.jpg"])[0]
    expected = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    assert isinstance(img, torch.Tensor) and torch.equal(img, expected)


def test_progressive_jpeg_decodes_and_the_scan_limit_is_exact(tmp_path, photos):
    """A real progressive JPEG (10 scans) decodes as decode_jpeg decodes it; a file of
    MAX_JPEG_SCANS scans passes the check, one more scan is refused before decoding."""
    from torchvision.io import decode_jpeg

    from gpuaug.data.decode import MAX_JPEG_SCANS, check_size

    data = _encoded(photos[2], "JPEG", quality=90, progressive=True)
    (tmp_path / "progressive.jpg").write_bytes(data)
    img, _ = ImageFiles([tmp_path / "progressive.jpg"])[0]
    assert torch.equal(img, decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8)))
    check_size("limit.jpg", torch.frombuffer(bytearray(_jpeg_with_scans(photos[2], MAX_JPEG_SCANS)), dtype=torch.uint8))
    with pytest.raises(ga.DecodeError, match=f"over.jpg: too many scans \\({MAX_JPEG_SCANS + 1},"):
        check_size("over.jpg", torch.frombuffer(bytearray(_jpeg_with_scans(photos[2], MAX_JPEG_SCANS + 1)),
                                                dtype=torch.uint8))


def test_the_size_check_reads_the_frame_header_libjpeg_decodes(photos):
    """Damaged JPEG headers (fill bytes, stuffed zeros, restart and TEM markers, second SOIs,
    stray bytes, tiny segments inserted before the frame header, bytes changed or dropped): wherever
    libjpeg (torchvision's decode_jpeg) decodes the file, the header walk must have found the frame
    that libjpeg decoded, or the pixel limit checked the wrong size (0xFF 0x00 read as a segment
    did that: its next two bytes taken for a length jumped past the frame). 3000 files, seeded."""
    from torchvision.io import decode_jpeg

    from gpuaug.data.decode import jpeg_frame

    rng = random.Random(0)
    bases = [_encoded(photos[2][:, :40, :56], "JPEG", quality=90),
             _encoded(photos[1][:, :48, :32], "JPEG", quality=75, progressive=True),
             _encoded(photos[0][:, :24, :40], "JPEG", quality=90, icc_profile=bytes(3000))]
    tokens = [b"\xff\x00", b"\xff", b"\xff\xd0", b"\x01", b"\xff\x01", b"\x00", b"\xff\xff", b"\xff\xd8",
              b"\xff\xe1\x00\x02", b"\xff\xfe\x00\x05abc", b"\x12\x34"]
    decoded = 0
    for case in range(3000):
        data = bytearray(rng.choice(bases))
        sof = re.search(rb"\xff[\xc0\xc2]", data).start()
        for _ in range(rng.randint(1, 4)):
            at, change = rng.randint(2, sof), rng.random()
            if change < 0.6:
                data[at:at] = rng.choice(tokens)
            elif change < 0.8:
                data[at] = rng.choice([0xFF, 0x00, 0xD0, 0x01, rng.randrange(256)])
            else:
                del data[at]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                img = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            except RuntimeError:
                continue  # libjpeg refuses it: nothing to check
        decoded += 1
        frame = jpeg_frame(bytes(data))
        assert frame is not None and frame[1:] == tuple(img.shape[1:]), f"case {case}: walk found {frame}, libjpeg decoded {tuple(img.shape)}"
    assert decoded > 1500


def test_the_header_walk_reads_the_size_from_every_start_of_frame_marker():
    """The JPEG standard's 13 start-of-frame markers (T.81 table B.1: 0xC0-0xCF but DHT 0xC4,
    JPG 0xC8 and DAC 0xCC, as libjpeg's jdmarker.c lists them) each hold the frame's size, and the
    walk reads it from each; the other three are segments it steps over to the next frame."""
    from gpuaug.data.decode import jpeg_frame

    def segment(marker: int, height: int, width: int) -> bytes:  # length 8: precision, size, 0 components
        return bytes([0xFF, marker]) + struct.pack(">HBHHB", 8, 8, height, width, 0)

    for marker in range(0xC0, 0xD0):
        data = b"\xff\xd8" + segment(marker, 300, 400) + segment(0xC0, 30, 40)
        expected = (0xC0, 30, 40) if marker in (0xC4, 0xC8, 0xCC) else (marker, 300, 400)
        assert jpeg_frame(data) == expected, hex(marker)


def test_webp_size_reads_each_header_kind_down_to_its_last_byte(photos):
    """webp_size on every WEBP header kind (VP8X, VP8, VP8L, and a bitstream right after the RIFF
    header, which libwebp's WebPGetFeatures reads as one): the photo's own size from the shortest
    start that holds it, None one byte shorter, and None for a lossy key frame whose start code is
    damaged (libwebp refuses that file too)."""
    from torchvision.io import decode_image

    from gpuaug.data.codecs import quiet_torchvision_io
    from gpuaug.data.decode import webp_size

    photo = photos[2][:, :40, :56]

    lossy, lossless = _encoded(photo, "WEBP", quality=80), _encoded(photo, "WEBP", lossless=True)
    extended = _encoded(photo, "WEBP", quality=80, exif=b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x00\x00")
    assert (lossy[12:16], lossless[12:16], extended[12:16]) == (b"VP8 ", b"VP8L", b"VP8X")
    for data, shortest in [(extended, 30), (lossy, 30), (lossless, 25), (_bare_webp(lossy), 22), (_bare_webp(lossless), 17)]:
        assert webp_size(data) == webp_size(data[:shortest]) == (40, 56)
        assert webp_size(data[:shortest - 1]) is None
    damaged = bytearray(lossy)
    damaged[23] ^= 0xFF  # the first byte of the key frame's start code 9d 01 2a
    assert webp_size(bytes(damaged)) is None
    with pytest.raises(RuntimeError), quiet_torchvision_io():
        decode_image(torch.frombuffer(damaged, dtype=torch.uint8))


def test_the_pixel_limit_is_where_pil_refuses_images():
    """Formats whose header check_size does not find are refused by PIL's own bomb check, which
    must fall where check_size's does: MAX_PIXELS taken, one pixel more refused, by both."""
    from gpuaug.data.decode import DecodeError, MAX_PIXELS, check_size

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    def png_header(height: int, width: int) -> bytes:  # IHDR, and the start of the data: what PIL's open reads
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) \
            + chunk(b"IDAT", b"")

    for width in (MAX_PIXELS, MAX_PIXELS + 1):
        data = png_header(1, width)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            try:
                Image.open(io.BytesIO(data)).close()
                pil_refuses = False
            except Image.DecompressionBombError:
                pil_refuses = True
        assert pil_refuses == (width > MAX_PIXELS)
        if width > MAX_PIXELS:
            with pytest.raises(DecodeError, match=f"absurd dimensions 1x{width}"):
                check_size("a.png", torch.frombuffer(bytearray(data), dtype=torch.uint8))
        else:
            assert check_size("a.png", torch.frombuffer(bytearray(data), dtype=torch.uint8)) == (1, width)


def test_a_jpeg_cut_anywhere_before_its_frame_header_has_no_size_and_fails_as_damaged(photos):
    """Every start of a JPEG, up to a few bytes past its frame header: the header walk finds no
    frame (or the whole one), never reads past the bytes it has (a cut right after a marker left
    its length unread), and decoding names the file, whatever the codec says."""
    from gpuaug.data.decode import DecodeError, decode_rgb, jpeg_frame

    for data in (_encoded(photos[2][:, :40, :56], "JPEG", quality=90),
                 _encoded(photos[0][:, :24, :40], "JPEG", quality=90, progressive=True, icc_profile=bytes(300))):
        whole = jpeg_frame(data)
        assert whole is not None and whole[1:] in ((40, 56), (24, 40))
        sof = re.search(rb"\xff[\xc0\xc2]", data).start()
        for n in range(2, sof + 12):
            assert jpeg_frame(data[:n]) in (None, whole), n
            with pytest.raises(DecodeError, match=f"cut.jpg: (cannot decode|absurd)"):
                decode_rgb("cut.jpg", torch.frombuffer(bytearray(data[:n]), dtype=torch.uint8))


def test_image_files_without_labels_label_each_image_minus_one(folder):
    paths = sorted(folder.glob("*/*"))[:3]
    batch = next(iter(DataLoader(ImageFiles(paths), batch_size=3, collate_fn=collate)))
    assert torch.equal(batch.labels, torch.tensor([-1, -1, -1]))
    assert [label for _, label in ImageFiles(paths)] == [-1, -1, -1]


def test_the_size_check_reads_the_size_libwebp_decodes(photos):
    """Damaged WEBP headers (bytes changed, dropped or inserted, the first chunk's tag replaced):
    wherever libwebp (torchvision's decode_webp) decodes the file, the size checked is the size it
    decoded. PIL's open (libwebp's stricter demuxer) found no size on 46 of 826 such files, which
    then went unchecked. 3000 files, seeded."""
    from torchvision.io import decode_webp

    from gpuaug.data.decode import image_size

    rng = random.Random(0)
    bases = [_encoded(photos[2][:, :48, :64], "WEBP", quality=80), _encoded(photos[1][:, :40, :40], "WEBP", lossless=True),
             _encoded(photos[0][:, :32, :56], "WEBP", quality=50, exif=b"Exif\x00\x00" + bytes(20))]
    decoded = 0
    for case in range(3000):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            at, change = rng.randint(4, 80), rng.random()
            if change < 0.4:
                data[at] = rng.randrange(256)
            elif change < 0.6:
                data[at] ^= 1 << rng.randrange(8)
            elif change < 0.75:
                data[12:16] = rng.choice([b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"XXXX", b"ICCP"])
            elif change < 0.85:
                del data[at : at + rng.randint(1, 8)]
            else:
                data[at:at] = rng.choice([b"\x2f", b"\x9d\x01\x2a", bytes(4), b"VP8 ", b"VP8L"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchvision's deprecation of its codecs, on every call
            try:
                img = decode_webp(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            except RuntimeError:
                continue  # libwebp refuses it: nothing to check
        decoded += 1
        assert image_size(bytes(data)) == tuple(img.shape[1:]), f"case {case}"
    assert decoded > 300


def test_32_bit_images_are_a_decode_error_saying_why(tmp_path):
    Image.fromarray(np.linspace(0, 1, 64 * 48, dtype=np.float32).reshape(48, 64)).save(tmp_path / "float.tif")
    item, _ = ImageFiles([tmp_path / "float.tif"])[0]
    assert isinstance(item, BadFile) and "32-bit float" in item.cause


def _codecs(name: str):
    """The data path's decoders from one library (gpuaug.data.codecs), or a skip where it is not here."""
    from gpuaug.data import codecs
    found = {"torchvision.io": codecs.torchvision_codecs, "torchcodec": codecs.torchcodec_codecs,
             "PIL": lambda: codecs.PIL_ONLY}[name]()
    if found is None:
        pytest.skip(f"{name}'s image decoders are not installed here (or do not load)")
    return found


@pytest.mark.parametrize("library", ["torchvision.io", "torchcodec", "PIL"])
def test_every_codecs_library_decodes_torchvisions_pixels(tmp_path, photos, library, monkeypatch):
    """torchvision 0.29 deprecates its image codecs: the data path decodes JPEG and WEBP with
    torchvision.io's, else TorchCodec's, else PIL's (gpuaug.data.codecs). Each gives what
    torchvision.io's decode_image gives on every kind of JPEG and WEBP, EXIF orientation applied,
    and names a damaged file."""
    from torchvision.io import ImageReadMode, decode_image

    from gpuaug.data import codecs
    from gpuaug.data.decode import decode_rgb
    monkeypatch.setattr(codecs, "CODECS", _codecs(library))
    photo = photos[2][:, :150, :200]
    files = {f"photo{i}": _encoded(p, "JPEG", quality=90) for i, p in enumerate(photos)}
    files.update(progressive=_encoded(photo, "JPEG", quality=90, progressive=True),
                 s444=_encoded(photo, "JPEG", quality=95, subsampling=0),
                 s422=_encoded(photo, "JPEG", quality=75, subsampling=1), gray=_encoded_gray(photo),
                 webp=_encoded(photo, "WEBP", quality=80), webp_lossless=_encoded(photo, "WEBP", lossless=True))
    cmyk = io.BytesIO()
    Image.fromarray(_rgb(photo)).convert("CMYK").save(cmyk, "JPEG", quality=90)
    files["cmyk"] = cmyk.getvalue()
    for orientation in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        files[f"exif{orientation}"] = _encoded(photo, "JPEG", quality=90, exif=exif)
    for name, data in files.items():
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            expected = decode_image(encoded, mode=ImageReadMode.RGB, apply_exif_orientation=True)
        img = decode_rgb(name, encoded)
        assert img.dtype == torch.uint8 and torch.equal(img, expected), (library, name)
    for name, data in (("cut.jpg", files["photo0"][: len(files["photo0"]) // 3]), ("cut.webp", files["webp"][:300])):
        (tmp_path / name).write_bytes(data)
        item, _ = ImageFiles([tmp_path / name])[0]
        assert isinstance(item, BadFile) and item.path == str(tmp_path / name) and item.cause.startswith("cannot decode")


def test_pils_load_truncated_images_flag_is_left_to_the_process(photos, monkeypatch):
    """README: a process that sets PIL's ImageFile.LOAD_TRUNCATED_IMAGES has PIL decode a cut PNG
    as far as it goes (as torchvision's PIL-based ImageFolder then does); a cut JPEG still fails
    in torchvision.io's decoder. Without the flag both are bad files."""
    from PIL import ImageFile

    from gpuaug.data import codecs
    from gpuaug.data.decode import DecodeError, decode_rgb
    photo = photos[1][:, :120, :160]
    png, jpeg = _encoded(photo, "PNG"), _encoded(photo, "JPEG", quality=90)
    cut_png, cut_jpeg = (torch.frombuffer(bytearray(d[: len(d) // 2]), dtype=torch.uint8) for d in (png, jpeg))
    monkeypatch.setattr(codecs, "CODECS", _codecs("torchvision.io"))
    for cut in (cut_png, cut_jpeg):
        with pytest.raises(DecodeError, match="cut: cannot decode"):
            decode_rgb("cut", cut)
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    img = decode_rgb("cut", cut_png)
    assert img.shape == photo.shape and torch.equal(img[:, :40], photo[:, :40])  # its first rows are there
    with pytest.raises(DecodeError, match="cut: cannot decode"):
        decode_rgb("cut", cut_jpeg)


def test_jpeg_damaged_inside_its_scan_decodes_as_pil_recovers_it(photos, tmp_path):
    """README: a JPEG whose compressed data is damaged inside (libjpeg's "Corrupt JPEG data"
    warning, on stderr) is not a bad file: it decodes to what libjpeg recovers, PIL's pixels
    (torchvision's ImageFolder's), on each decode path."""
    good = tmp_path / "good.jpg"
    Image.fromarray(_rgb(photos[2])).save(good, quality=90)
    data = bytearray(good.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 500] = bytes(500)  # a run of zeros in the middle of the scan
    damaged = tmp_path / "damaged.jpg"
    damaged.write_bytes(bytes(data))
    expected = torch.from_numpy(np.array(Image.open(damaged).convert("RGB"))).permute(2, 0, 1)
    intact = torch.from_numpy(np.array(Image.open(good).convert("RGB"))).permute(2, 0, 1)
    assert (expected != intact).any() and (expected == intact).all(0).float().mean() > 0.3  # damaged, not lost
    img, _ = ImageFiles([damaged])[0]
    assert torch.equal(img, expected)
    (batch,) = list(ga.DeviceLoader(DataLoader(ImageFiles([damaged], decode="gpu"), batch_size=1,
                                               collate_fn=collate), device="cpu"))
    assert torch.equal(batch[0][0], expected)


def test_gpuaug_imports_and_decodes_without_any_codecs_library(tmp_path):
    """A torchvision without its image codecs (deprecated in 0.29, "to be removed in a future
    release") and no TorchCodec: gpuaug still imports, PIL decodes every file to the pixels
    torchvision.io gives (the sample photos, a JPEG folder written by PIL's encoder), and
    decode="gpu" datasets decode in the worker, as there is no device decoder to hand bytes to."""
    import subprocess
    import sys

    expected = ga.sample_images()
    torch.save(expected, tmp_path / "expected.pt")
    script = f"""
import sys
import torch, torchvision.io as tio, torchvision.transforms.v2  # (v2's JPEG augment imports the codecs)
for name in ("decode_image", "decode_jpeg", "encode_jpeg"):
    delattr(tio, name)  # as a torchvision without its codecs
sys.modules["torchcodec"] = None  # and no TorchCodec: its import fails
import gpuaug as ga
from gpuaug.bench_loader import make_jpeg_folder
from gpuaug.data import ImageFolder, codecs
assert codecs.CODECS.name == "PIL", codecs.CODECS
expected = torch.load({str(tmp_path / "expected.pt")!r})
assert all(torch.equal(a, b) for a, b in zip(ga.sample_images(), expected))
root = make_jpeg_folder({str(tmp_path / "jpegs")!r}, n=4)
for decode in ("cpu", "gpu"):
    items = [ImageFolder(root, decode=decode)[i][0] for i in range(4)]
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.shape[0] == 3 for t in items), items
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_the_codecs_are_torchvisions_where_present_else_torchcodecs():
    """The order the data path takes its decoders in (gpuaug.data.codecs): all give the same pixels,
    so only this says that the fastest present is the one taken (PIL's were taken over torchvision's
    and no pixel test could tell)."""
    import subprocess
    import sys

    import torchvision.io

    from gpuaug.data import codecs
    if hasattr(torchvision.io, "decode_image") and hasattr(torchvision.io, "decode_jpeg"):  # 0.29 still has them
        assert codecs.CODECS.name == "torchvision.io"
    if codecs.torchcodec_codecs() is None:
        pytest.skip("TorchCodec is not installed here (or does not load)")
    script = """
import torchvision.io as tio
for name in ("decode_image", "decode_jpeg", "encode_jpeg"):
    delattr(tio, name)  # as a torchvision without its codecs
from gpuaug.data import codecs
print(codecs.CODECS.name)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1] == "torchcodec", done.stdout + done.stderr[-2000:]


def test_exif_rotated_photo_arrives_upright(folder, photos):
    img, _ = ImageFiles([folder / "space" / "exif_rotated.jpg"])[0]
    stored_h, stored_w = photos[3].shape[-2:]
    assert tuple(img.shape[-2:]) == (stored_w, stored_h)


def _bad_files(tmp_path, photos):
    good = tmp_path / "good.jpg"
    Image.fromarray(_rgb(photos[2])).save(good, quality=90)
    data = good.read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 3])
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "text.jpg").write_text("this is not a JPEG\n")
    (tmp_path / "directory.jpg").mkdir()
    sof = data.index(b"\xff\xc0")  # baseline frame header: height and width follow the precision byte
    huge = data[: sof + 5] + (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big") + data[sof + 9 :]
    (tmp_path / "huge.jpg").write_bytes(huge)
    late = _jpeg_with_large_icc_profile(photos[2])
    sof = late.index(b"\xff\xc0")
    assert sof > 65536
    (tmp_path / "huge_late_header.jpg").write_bytes(late[: sof + 5] + struct.pack(">HH", 60000, 60000) + late[sof + 9 :])
    # A GIF whose frame descriptor follows 100 kB of comments (the screen size at its start is small).
    gif = _encoded(photos[2], "GIF")
    descriptor = gif.index(b"\x2c", 13)
    frame = bytearray(gif[descriptor:])
    frame[5:9] = struct.pack("<HH", 60000, 60000)
    comment = b"\x21\xfe" + (b"\xff" + b"c" * 255) * 400 + b"\x00"
    (tmp_path / "huge_late_header.gif").write_bytes(gif[:descriptor] + comment + bytes(frame))
    gif = bytearray(_encoded(photos[2], "GIF"))  # 60000x60000 in both the screen and the frame header
    gif[6:10] = gif[gif.index(b"\x2c", 13) + 5 : gif.index(b"\x2c", 13) + 9] = struct.pack("<HH", 60000, 60000)
    (tmp_path / "huge.gif").write_bytes(gif)
    bmp = bytearray(_encoded(photos[2], "BMP"))
    bmp[18:26] = struct.pack("<ii", 100000, 100000)
    (tmp_path / "huge.bmp").write_bytes(bmp)
    (tmp_path / "many_scans.jpg").write_bytes(_jpeg_with_scans(photos[2], 300))
    # 0xFF 0x00 after the SOI: libjpeg discards it and decodes the 60000x60000 frame after it.
    (tmp_path / "huge_after_stuffed_zero.jpg").write_bytes(huge[:2] + b"\xff\x00" + huge[2:])
    (tmp_path / "many_markers.jpg").write_bytes(data[:2] + b"\xff\xd0" * 20_000 + data[2:])
    # A lossless WEBP whose bitstream follows the RIFF header bare (no VP8L chunk header): libwebp
    # decodes it, PIL's open refuses it; 16383x16383 here, 268 Mpx (a 10 kB file of one color is one).
    webp = bytearray(_encoded(photos[2][:, :40, :40], "WEBP", lossless=True))
    assert webp[12:16] == b"VP8L" and webp[20] == 0x2F
    webp[21:25] = ((int.from_bytes(webp[21:25], "little") & ~((1 << 28) - 1)) | 16382 << 14 | 16382).to_bytes(4, "little")
    (tmp_path / "huge_bare.webp").write_bytes(_bare_webp(bytes(webp)))
    return good, {
        "truncated.jpg": "Image is incomplete or truncated", "empty.jpg": "empty file (0 bytes)", "text.jpg": "not an image format",
        "directory.jpg": "cannot read ([Errno 21] Is a directory", "missing.jpg": "cannot read ([Errno 2] No such file", "huge.jpg": "absurd dimensions", "huge.gif": "absurd dimensions",
        "huge.bmp": "absurd dimensions", "huge_late_header.jpg": "absurd dimensions",
        "huge_late_header.gif": "absurd dimensions", "many_scans.jpg": "too many scans",
        "huge_after_stuffed_zero.jpg": "absurd dimensions", "many_markers.jpg": "more than 10000 markers before its frame",
        "huge_bare.webp": "absurd dimensions 16383x16383",
    }


def _bare_webp(data: bytes) -> bytes:
    """A WEBP with its first chunk's header dropped (its bitstream right after the RIFF header,
    as libwebp still reads it), the RIFF size mended."""
    data = data[:12] + data[20:]
    return data[:4] + struct.pack("<I", len(data) - 8) + data[8:]


def _encoded(photo: torch.Tensor, fmt: str, **save_args) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(_rgb(photo)).save(buffer, fmt, **save_args)
    return buffer.getvalue()


def _jpeg_with_large_icc_profile(photo: torch.Tensor) -> bytes:
    """A JPEG whose frame header lies past its first 64 KiB, after a 100 kB ICC profile (as a
    camera's profile or EXIF thumbnail puts it)."""
    return _encoded(photo, "JPEG", quality=90, icc_profile=bytes(100_000))


def _jpeg_with_scans(photo: torch.Tensor, count: int) -> bytes:
    """A progressive JPEG of ``count`` scans: PIL's 10, then its smallest one repeated (libjpeg
    only warns of the bogus progression, and passes over the whole image for each)."""
    data = _encoded(photo, "JPEG", quality=90, progressive=True)
    starts = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    assert len(starts) == 10 and data.endswith(b"\xff\xd9")
    scans = [data[a:b] for a, b in zip(starts, starts[1:] + [len(data) - 2])]
    return data[:-2] + min(scans, key=len) * (count - len(scans)) + b"\xff\xd9"


BAD_FILES = ["truncated.jpg", "empty.jpg", "text.jpg", "directory.jpg", "missing.jpg", "huge.jpg", "huge.gif",
             "huge.bmp", "huge_late_header.jpg", "huge_late_header.gif", "many_scans.jpg", "huge_after_stuffed_zero.jpg",
             "many_markers.jpg", "huge_bare.webp"]


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_bad_file_raises_decode_error_naming_path_and_cause(tmp_path, photos, kind, decode):
    """decode="gpu": a JPEG that only fails to decode reaches the loader as bytes (decoded there,
    on the CPU without CUDA), other bad files are found in the worker."""
    good, causes = _bad_files(tmp_path, photos)
    ds = ImageFiles([good, tmp_path / kind], labels=[0, 1], on_error="raise", decode=decode)
    item, _ = ds[1]
    assert isinstance(item, (BadFile, Encoded) if decode == "gpu" else BadFile)  # the worker does not raise...
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=2, collate_fn=collate), device="cpu")
    with pytest.raises(ga.DecodeError) as info:  # ...the main process does, with path and cause
        list(loader)
    assert info.value.path == str(tmp_path / kind)
    # (in the cause: the message holds the path too, and "empty.jpg" held "empty" whatever the cause)
    assert causes[kind] in info.value.cause and str(info.value).startswith(str(tmp_path / kind))
    assert ".cpp" not in info.value.cause  # the codec's own words, not its source file on torchvision's build machine


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_bad_file_skipped_warned_once_and_counted(tmp_path, photos, kind, decode):
    good, _ = _bad_files(tmp_path, photos)
    ds = ImageFiles([good, tmp_path / kind, good], labels=[0, 1, 2], on_error="skip", decode=decode)
    pipe = ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", seed=0)
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=3, collate_fn=collate), pipe)
    with pytest.warns(RuntimeWarning, match=kind):
        (images, labels), = list(loader)
    assert images.shape == (2, 3, 32, 32) and labels.tolist() == [0, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per path: the second epoch is silent
        assert len(list(loader)) == 1
    assert loader.stats.skipped == 2 and loader.stats.skipped_paths == [str(tmp_path / kind)]  # each path once
    assert str(loader.stats).endswith("2 samples skipped (1 bad file)")  # was "2 files skipped": one file, twice


def test_the_datasets_on_error_is_seen_through_subset_random_split_and_concat(tmp_path, photos):
    """``random_split(ImageFolder(root, on_error="skip"), ...)``: the loader found no ``on_error`` on
    the Subset and raised at the first bad file, mid-training, against what the dataset said."""
    good, _ = _bad_files(tmp_path, photos)
    skip = ImageFiles([good, tmp_path / "text.jpg", good, tmp_path / "empty.jpg"], labels=[0, 1, 2, 3],
                      on_error="skip")
    raising = ImageFiles([good, tmp_path / "text.jpg"], on_error="raise")
    wrapped = [torch.utils.data.Subset(skip, [1, 2, 3]),
               torch.utils.data.random_split(skip, [2, 2], generator=torch.Generator().manual_seed(0))[0],
               torch.utils.data.ConcatDataset([skip, torch.utils.data.Subset(skip, [0, 1])])]
    for ds in wrapped:
        loader = ga.DeviceLoader(DataLoader(ds, batch_size=2, collate_fn=collate), device="cpu")
        assert loader.on_error == "skip"
        with pytest.warns(RuntimeWarning, match="skipping") as caught:
            n = sum(len(x) for x, _ in loader)
        assert {w.filename for w in caught} == {__file__}  # the loop's line, not gpuaug's (was loader.py)
        assert n + loader.stats.skipped == len(ds) and loader.stats.skipped >= 1
    with pytest.raises(ValueError, match=r"different on_error policies \(raise, skip\): pass on_error="):
        ga.DeviceLoader(DataLoader(torch.utils.data.ConcatDataset([skip, raising]), collate_fn=collate), device="cpu")
    mixed = ga.DeviceLoader(DataLoader(torch.utils.data.ConcatDataset([skip, raising]), collate_fn=collate),
                            device="cpu", on_error="raise")
    assert mixed.on_error == "raise"  # an explicit policy decides
    assert ga.DeviceLoader([], device="cpu").on_error == "raise"  # no dataset: raise


def test_a_gpuaug_dataset_batched_by_default_collate_is_refused_at_once(tmp_path, photos):
    """torch's default_collate stacks: it failed at the first batch of two sizes, or the first bad
    file even with on_error="skip", mid-epoch, with "stack expects each tensor to be equal size"."""
    good, _ = _bad_files(tmp_path, photos)
    ds = ImageFiles([good, tmp_path / "text.jpg"], on_error="skip")
    for dataset in (ds, torch.utils.data.Subset(ds, [0, 1]), torch.utils.data.ConcatDataset([ds, ds])):
        with pytest.raises(TypeError, match="default_collate.*collate_fn=gpuaug.data.collate"):
            ga.DeviceLoader(DataLoader(dataset, batch_size=2), device="cpu")

    class Cropped(torch.utils.data.Dataset):  # a user's wrapper whose items are one size: default_collate is fine
        def __init__(self, dataset):
            self.dataset = dataset

        def __len__(self):
            return 1

        def __getitem__(self, i):
            return self.dataset[0][0][:, :16, :16], 0

    (images, _), = list(ga.DeviceLoader(DataLoader(Cropped(ds), batch_size=1), device="cpu"))
    assert images.shape == (1, 3, 16, 16)
    looped = Cropped(ds)
    looped.dataset = looped  # a wrapper that leads back to itself: the search through wrappers ends
    assert ga.DeviceLoader(DataLoader(looped, batch_size=1), device="cpu").on_error == "raise"
    with pytest.warns(RuntimeWarning, match="text.jpg"):
        (images, _), = list(ga.DeviceLoader(DataLoader(ds, batch_size=2, collate_fn=collate), device="cpu"))
    assert len(images) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_a_fifo_or_device_named_like_an_image_is_refused_not_waited_on(tmp_path, photos, decode):
    """Opening a FIFO for reading waits for a writer, and /dev/zero never ends: both are refused
    at once, named. A writer opens the FIFO after 3 s so that code which waits fails instead of hanging."""
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)

    def unblock():
        time.sleep(3)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: nobody is waiting on it, as it should be
            pass

    threading.Thread(target=unblock, daemon=True).start()
    ds = ImageFiles([fifo, "/dev/zero"], on_error="raise", decode=decode)
    start = time.monotonic()
    (fifo_item, _), (zero_item, _) = ds[0], ds[1]
    assert time.monotonic() - start < 2
    assert isinstance(fifo_item, BadFile) and fifo_item.path == str(fifo) and "FIFO" in fifo_item.cause
    assert isinstance(zero_item, BadFile) and "character device" in zero_item.cause
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(20):
        ds[0]
    assert fds is None or len(os.listdir("/proc/self/fd")) == fds  # no descriptor left open


def test_a_file_larger_than_any_image_is_refused_before_it_is_read(tmp_path):
    """A video or an archive named like an image was read whole into the worker's memory (and the
    worker killed for it, the path lost). The file here is sparse: no disk, and nothing read."""
    from gpuaug.data.decode import MAX_FILE_BYTES, MAX_PIXELS

    assert MAX_FILE_BYTES >= 8 * MAX_PIXELS  # room for any image within the pixel limit (16-bit RGBA)
    with open(tmp_path / "movie.jpg", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    item, _ = ImageFiles([tmp_path / "movie.jpg"])[0]
    assert isinstance(item, BadFile) and item.path == str(tmp_path / "movie.jpg")
    assert item.cause.startswith(f"too large to be an image ({MAX_FILE_BYTES + 1} bytes")


def test_batch_of_only_bad_files_yields_nothing(tmp_path, photos):
    _, causes = _bad_files(tmp_path, photos)
    ds = ImageFiles([tmp_path / k for k in causes], on_error="skip")
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=3, collate_fn=collate), device="cpu")
    with pytest.warns(RuntimeWarning):
        assert list(loader) == []
    assert loader.stats.skipped == len(causes) and len(loader) == -(-len(causes) // 3)


def test_collate_stacks_equal_sizes_and_lists_ragged(photos):
    same = collate([(photos[0], 1), (photos[0], 2)])
    assert isinstance(same, Batch) and same.images.shape == (2, 3, 512, 512) and same.labels.tolist() == [1, 2]
    ragged = collate([(photos[0], 1), (BadFile("x.jpg", "broken"), 5), (photos[1], 2)])
    assert isinstance(ragged.images, ga.PackedImages) and ragged.images.flat.dim() == 1
    assert [tuple(i.shape) for i in ragged.images] == [(3, 512, 512), (3, 400, 600)]
    assert all(torch.equal(a, b) for a, b in zip(ragged.images, photos[:2]))
    assert ragged.labels.tolist() == [1, 2] and ragged.bad == [BadFile("x.jpg", "broken")]


def test_loader_stats_count_the_wait_for_data_apart_from_the_step():
    """``data_wait_s`` is the time spent waiting for the wrapped loader (30 ms a batch here), not
    the loop's own step (100 ms); ``elapsed_s`` is both; images/s over elapsed."""
    import time

    class Slow:  # any iterable is a loader
        def __iter__(self):
            for _ in range(3):
                time.sleep(0.03)
                yield torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(2)

    loader = ga.DeviceLoader(Slow(), device="cpu")
    assert str(loader.stats) == "0 batches, 0 images, 0.0 img/s, data wait 0.00 ms/batch, 0 samples skipped"  # not yet run
    for _ in loader:
        time.sleep(0.1)
    stats = loader.stats
    assert (stats.batches, stats.images) == (3, 6)
    assert 0.09 <= stats.data_wait_s < 0.25 and stats.wait_per_batch_ms >= 30  # with the step it would be >= 0.29
    assert stats.wait_per_batch_ms == pytest.approx(stats.data_wait_s * 1000 / 3)  # milliseconds per batch
    assert stats.elapsed_s >= 0.39 and stats.images_per_s == pytest.approx(6 / stats.elapsed_s)
    assert "3 batches, 6 images" in str(stats)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_dataloader_with_two_workers(folder, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} not available here")
    ds = ImageFolder(folder)
    dl = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=collate,
                    timeout=WORKER_TIMEOUT_S, multiprocessing_context=multiprocessing.get_context(method))
    pipe = ga.Pipeline(ga.RandomResizedCrop(48), ga.ColorJitter(0.2, 0.2, 0.2, 0.05), device="cpu", seed=0)
    loader = ga.DeviceLoader(dl, pipe)
    out = list(loader)
    assert sum(len(y) for _, y in out) == len(ds)
    assert all(x.shape[1:] == (3, 48, 48) and x.dtype == torch.float32 for x, _ in out)
    assert loader.stats.batches == len(loader) and loader.stats.images == len(ds)
    assert loader.stats.images_per_s > 0 and loader.stats.wait_per_batch_ms >= 0


@pytest.mark.parametrize("labels", [
    [1, 2, 3], [0.5, 1.5, 2.5], [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0])],
    [{"y": 1, "name": "a"}, {"y": 2, "name": "b"}, {"y": 3, "name": "c"}], ["a", "b", "c"],
    [(1, torch.ones(4)), (2, 2 * torch.ones(4)), (3, 3 * torch.ones(4))]], ids=["int", "float", "multi-hot", "dict",
                                                                                 "str", "tuple"])
def test_labels_of_any_kind_collate_as_default_collate_and_skip_with_their_image(labels, photos):
    """Labels follow DataLoader's default_collate; a skipped file takes its label with it."""
    items = [(photos[0], labels[0]), (BadFile("bad.jpg", "broken"), labels[1]), (photos[1], labels[2])]
    loader = ga.DeviceLoader([collate(items)], device="cpu", on_error="skip")
    with pytest.warns(RuntimeWarning, match="bad.jpg"):
        (images, got), = list(loader)
    expected = torch.utils.data.default_collate([labels[0], labels[2]])
    assert len(images) == 2 and loader.stats.images == 2

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return torch.equal(a, b)
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b)) if isinstance(a, (list, tuple)) else a == b

    assert same(got, expected), (got, expected)


class _LabelledBy(torch.utils.data.Dataset):
    """Two small images, image ``i`` labelled ``make(i)``."""

    def __init__(self, make):
        self.make = make

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return torch.full((3, 4, 4), i, dtype=torch.uint8), self.make(i)


def test_labels_a_worker_cannot_send_are_its_error_not_a_hang():
    """A label that default_collate keeps but pickle refuses (a defaultdict whose factory is a
    lambda) made torch's worker queue drop the batch and the DataLoader wait forever: collate raises
    in the worker instead, and the main process gets that TypeError. Without workers nothing is
    pickled: the labels come as they are. Labels holding tensors cross as before."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available here")  # (the datasets hold lambdas)
    fork = multiprocessing.get_context("fork")
    unsendable = _LabelledBy(lambda i: defaultdict(lambda: 0, y=i))
    with pytest.raises(TypeError, match=r"labels a DataLoader worker cannot send to the main process \(\w+Error: .*lambda"):
        list(DataLoader(unsendable, batch_size=2, num_workers=1, collate_fn=collate, timeout=WORKER_TIMEOUT_S,
                        multiprocessing_context=fork))
    (_, labels, _), = list(DataLoader(unsendable, batch_size=2, collate_fn=collate))
    assert labels["y"].tolist() == [0, 1]
    boxes = _LabelledBy(lambda i: {"boxes": torch.full((2, 4), float(i)), "name": str(i)})
    (_, labels, _), = list(DataLoader(boxes, batch_size=2, num_workers=1, collate_fn=collate, timeout=WORKER_TIMEOUT_S,
                                      multiprocessing_context=fork))
    assert torch.equal(labels["boxes"][1], torch.ones(2, 4)) and labels["name"] == ["0", "1"]


def test_packed_images_behave_as_a_read_only_list(photos):
    import copy
    import pickle

    packed = ga.PackedImages.pack(photos)
    assert len(packed) == len(photos) and packed.dtype == torch.uint8 and packed.device.type == "cpu"
    assert all(torch.equal(a, b) for a, b in zip(packed, photos))
    assert torch.equal(packed[-1], photos[-1]) and [t.shape for t in packed[1:3]] == [t.shape for t in photos[1:3]]
    for past in (len(photos), -len(photos) - 1):
        with pytest.raises(IndexError, match=f"index {past} is out of range for PackedImages of 4 items"):
            packed[past]
    with pytest.raises(TypeError, match="integers or slices, got float"):
        packed[1.0]
    assert torch.equal(packed[torch.tensor(2)], photos[2])
    for other in (pickle.loads(pickle.dumps(packed)), copy.deepcopy(packed), packed.with_flat(packed.flat.clone())):
        assert other.shapes == packed.shapes and all(torch.equal(a, b) for a, b in zip(other, photos))
        assert other.flat.data_ptr() != packed.flat.data_ptr()
    assert packed.to("cpu") is packed and packed.to(torch.device("cpu"), non_blocking=True) is packed
    for cast in ((torch.float16,), ("cpu", torch.float16)):  # Tensor.to's casts: refused, not unscaled values
        with pytest.raises(TypeError, match=r"PackedImages.to takes a device .* not a dtype, got .*torch.float16.* "
                                            r"keep their dtype \(torch.uint8\)"):
            packed.to(*cast)
    packed[0][0, 0, 0] = 7  # a view: writes reach the buffer
    assert int(packed.flat[0]) == 7
    assert "PackedImages(4 images, torch.uint8, cpu" in repr(packed)


@pytest.mark.parametrize("part", [slice(1, 3), slice(None), slice(3, 1), slice(None, None, 2), slice(None, None, -1),
                                  slice(-2, None), slice(2, 10), slice(5, 9), slice(1, 4, 3), slice(-1, None, -2)])
def test_a_slice_of_packed_items_is_packed_as_a_slice_of_a_list_is_a_list(photos, part):
    from gpuaug.data.collate import Encoded, EncodedBatch

    packed = ga.PackedImages.pack(photos)
    sliced = packed[part]
    assert type(sliced) is ga.PackedImages and sliced.shapes == tuple(tuple(t.shape) for t in photos[part])
    assert all(torch.equal(a, b) for a, b in zip(sliced, photos[part]))
    if part.step is None and len(sliced):  # one run of the buffer: a view of it
        assert sliced.flat.data_ptr() == packed[part.indices(len(photos))[0]].data_ptr()
    if len(sliced):
        pipe = ga.Pipeline(ga.RandomResizedCrop(32), ga.ColorJitter(0.3, 0.3, 0.3, 0.1), device="cpu", seed=1)
        assert torch.equal(pipe(sliced), ga.Pipeline(*pipe.ops, device="cpu", seed=1)(list(photos[part])))
    items = [Encoded(f"{i}.jpg", torch.full((10 + i,), i, dtype=torch.uint8)) if i % 2 else photos[i]
             for i in range(len(photos))]
    batch = EncodedBatch.pack(items)[part]
    assert type(batch) is EncodedBatch and batch.paths == tuple(x.path if isinstance(x, Encoded) else None
                                                                for x in items[part])
    for got, want in zip(batch, items[part]):
        assert (got.path, torch.equal(got.data, want.data)) == (want.path, True) if isinstance(want, Encoded) \
            else torch.equal(got, want)


def test_collate_in_a_worker_writes_into_shared_memory(photos, monkeypatch):
    """As torch's default_collate: the batch is made in shared memory, so sending it copies nothing."""
    assert not collate([(photos[0], 1), (photos[1], 2)]).images.flat.is_shared()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())  # as inside a worker
    ragged = collate([(photos[0], 1), (photos[1], 2)]).images
    same = collate([(photos[0], 1), (photos[0], 2)]).images
    assert ragged.flat.is_shared() and same.is_shared() and same.shape == (2, *photos[0].shape)
    assert all(torch.equal(a, b) for a, b in zip(ragged, photos[:2])) and torch.equal(same[1], photos[0])


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
@pytest.mark.parametrize("in_worker", [False, True])
def test_a_default_device_set_elsewhere_leaves_the_data_path_on_the_cpu(folder, tmp_path, decode, in_worker,
                                                                        monkeypatch):
    """Under ``torch.set_default_device`` every tensor made without a device goes there: a file's
    bytes, the labels of a batch, a worker's shared-memory bookkeeping would have gone to CUDA (in a
    worker, which must not touch CUDA). With the default on "meta" (no data: any such tensor
    fails), decoding, collating (as in a worker too) and DeviceLoader give what they give without."""
    (tmp_path / "bad.jpg").write_bytes(b"not a jpeg")
    paths = [folder / "cat" / "rgb.jpg", folder / "space" / "cmyk.jpg", folder / "cat" / "palette.png", tmp_path / "bad.jpg"]
    if in_worker:  # collate writes into shared memory there (gpuaug.worker_memory)
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())

    # JPEG bytes that pass the worker's checks and fail to decode in the loader, which then drops
    # their label from the batch's.
    broken = Encoded(str(tmp_path / "broken.jpg"), torch.tensor(list(b"\xff\xd8 not entropy data \xff\xd9"),
                                                                dtype=torch.uint8))

    def load():
        ds = ImageFiles(paths, labels=[3, 1, 4, 1], decode=decode, on_error="skip")
        batch = collate([ds[i] for i in range(len(ds))] + ([(broken, 5)] if decode == "gpu" else []))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the bad file, skipped
            (images, labels), = list(ga.DeviceLoader([batch], device="cpu", on_error="skip"))
        return list(images), labels

    want_images, want_labels = load()
    torch.set_default_device("meta")
    try:
        images, labels = load()
    finally:
        torch.set_default_device(None)
    assert labels.device.type == "cpu" and labels.tolist() == want_labels.tolist() == [3, 1, 4]
    assert all(a.device.type == "cpu" and torch.equal(a, b) for a, b in zip(images, want_images, strict=True))


def test_ragged_batches_cross_from_workers_as_one_buffer(folder):
    ds = ImageFolder(folder)
    sizes = {tuple(ds[i][0].shape) for i in range(len(ds))}
    assert len(sizes) > 1, "the test folder should hold images of several sizes"
    dl = DataLoader(ds, batch_size=len(ds), num_workers=1, collate_fn=collate, timeout=WORKER_TIMEOUT_S)
    (images, labels, bad), = list(dl)
    assert isinstance(images, ga.PackedImages) and len(images) == len(ds) and bad == []
    for i, img in enumerate(images):
        assert torch.equal(img, ds[i][0]) and img.untyped_storage().data_ptr() == images.flat.untyped_storage().data_ptr()
    assert labels.tolist() == [ds[i][1] for i in range(len(ds))]
    out = list(ga.DeviceLoader(dl, device="cpu"))[0][0]
    assert isinstance(out, ga.PackedImages) and all(torch.equal(a, b) for a, b in zip(out, images))


def test_gpu_decode_batches_cross_from_workers_as_one_buffer(folder):
    gpu, cpu = ImageFolder(folder, decode="gpu"), ImageFolder(folder, decode="cpu")
    dl = DataLoader(gpu, batch_size=len(gpu), num_workers=1, collate_fn=collate, timeout=WORKER_TIMEOUT_S)
    (images, labels, bad), = list(dl)
    assert isinstance(images, EncodedBatch) and len(images) == len(gpu) and bad == []
    for i, item in enumerate(images):
        want = gpu[i][0]
        if isinstance(want, Encoded):  # the JPEGs' bytes, with their paths
            assert isinstance(item, Encoded) and item.path == want.path and torch.equal(item.data, want.data)
        else:  # other formats, decoded in the worker
            assert isinstance(item, torch.Tensor) and torch.equal(item, want)
    assert {type(x) for x in images} == {Encoded, torch.Tensor}
    assert labels.tolist() == gpu.labels
    # Decoded by DeviceLoader (on the CPU here: the same libjpeg as the workers' decode="cpu").
    out = list(ga.DeviceLoader(dl, device="cpu"))[0][0]
    ref = list(ga.DeviceLoader(DataLoader(cpu, batch_size=len(cpu), collate_fn=collate), device="cpu"))[0][0]
    assert len(out) == len(ref) and all(torch.equal(a, b) for a, b in zip(out, ref))


def test_encoded_batch_checks_its_paths():
    with pytest.raises(ValueError, match="one path per item: 1 paths for 2 items"):
        EncodedBatch(torch.zeros(5, dtype=torch.uint8), [(2,), (3,)], ["a.jpg"])


def test_gpu_decode_falls_back_to_cpu_without_cuda(folder):
    cpu = ImageFolder(folder, decode="cpu")
    gpu = ImageFolder(folder, decode="gpu")
    kinds = [type(gpu[i][0]) for i in range(len(gpu))]
    assert Encoded in kinds and torch.Tensor in kinds  # JPEGs stay encoded, PNGs are decoded in the worker
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = list(ga.DeviceLoader(DataLoader(cpu, batch_size=8, collate_fn=collate), device=device))
    b = list(ga.DeviceLoader(DataLoader(gpu, batch_size=8, collate_fn=collate), device=device))
    for x, y in zip(a[0][0], b[0][0]):
        assert x.shape == y.shape
        assert (x.float() - y.float()).abs().mean() < 3  # nvJPEG may round differently from libjpeg


def test_gpu_decode_of_a_corrupt_jpeg_names_the_path(tmp_path, photos):
    good, _ = _bad_files(tmp_path, photos)
    data = good.read_bytes()
    # Its header whole (so the worker hands it on: Pillow 12 could not open the file cut at byte 600
    # and sent it to the CPU decoder), its scan zeroed, its EOI kept.
    scan = data.index(b"\xff\xda") + 20
    (tmp_path / "garbled.jpg").write_bytes(data[:scan] + bytes(len(data) - scan - 2) + b"\xff\xd9")
    ds = ImageFiles([good, tmp_path / "garbled.jpg"], decode="gpu", on_error="raise")
    assert isinstance(ds[1][0], Encoded)
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=2, collate_fn=collate), device="cpu")
    try:
        batches = list(loader)
    except ga.DecodeError as e:
        assert e.path == str(tmp_path / "garbled.jpg")
    else:  # libjpeg may decode zeroed scans as gray without error; then both images arrive
        assert sum(len(y) for _, y in batches) == 2


def test_one_damaged_jpeg_does_not_send_its_whole_batch_to_the_cpu(tmp_path, photos, monkeypatch):
    """decode="gpu": a damaged file fails the device's batched decode; the batch then decodes file
    by file on the device, and only what the device refuses goes to libjpeg on the CPU (which may
    read it, or names it as bad). Before, one such file sent every image of its batch through the
    main process's CPU decoder. A stand-in for the CUDA decoder, which refuses the damaged files."""
    from types import SimpleNamespace

    import gpuaug.data.loader as loader_module
    from gpuaug.data import codecs
    from gpuaug.data.decode import decode_rgb

    good = [_encoded(p[:, :64, :80], "JPEG", quality=90) for p in photos]
    scan = good[0].index(b"\xff\xda")  # cut in the middle of the scan data, an EOI put back (for the device)
    truncated = good[0][: (scan + len(good[0])) // 2] + b"\xff\xd9"  # libjpeg reads it (gray where cut)
    ds = ImageFiles([tmp_path / f"{i}.jpg" for i in range(6)], decode="gpu", on_error="skip")
    for i, data in enumerate(good[:2] + [truncated] + good[2:] + [good[1]]):
        (tmp_path / f"{i}.jpg").write_bytes(data)
    device_calls = []

    def stand_in(data, device):
        device_calls.append(len(data) if isinstance(data, list) else 1)
        if isinstance(data, list) or bytes(data.numpy()) == truncated:
            raise RuntimeError("nvjpeg: the stand-in refuses a batch with a damaged file, and that file")
        return decode_rgb("device", data)

    monkeypatch.setattr(codecs, "CODECS", codecs.CODECS._replace(decode_jpeg=stand_in))
    loader = ga.DeviceLoader([], device="cpu", on_error="skip")
    loader.device = SimpleNamespace(type="cuda")
    monkeypatch.setattr(loader, "_copy", lambda t: t)
    cpu_calls = []
    monkeypatch.setattr(loader_module, "decode_rgb", lambda path, data: cpu_calls.append(path) or decode_rgb(path, data))
    items = [(i, ds[i][0]) for i in range(6)]
    assert all(isinstance(x, Encoded) for _, x in items)  # the workers' part: bytes, checked
    decoded = loader._decode(items)
    assert [i for i, _ in decoded] == [0, 1, 2, 3, 4, 5]
    for i, img in decoded:
        assert torch.equal(img, decode_rgb("x", torch.frombuffer(bytearray((tmp_path / f"{i}.jpg").read_bytes()),
                                                                 dtype=torch.uint8)))
    assert device_calls == [6, 1, 1, 1, 1, 1, 1]  # the batch, then each file once on the device
    assert cpu_calls == [str(tmp_path / "2.jpg")]  # only the file the device refused
    assert loader.stats.skipped == 0


def test_gpu_decode_leaves_exif_turned_and_cut_jpegs_to_the_cpu_decoder(tmp_path, photos):
    """torchvision's CUDA JPEG decoder ignores apply_exif_orientation (0.26, measured on an H200:
    an EXIF-rotated photo arrived unrotated): decode="gpu" hands the device only upright JPEGs and
    decodes the others in the worker, as torchvision's CPU decoder turns them."""
    from torchvision.io import ImageReadMode, decode_jpeg

    photo = photos[2][:, :50, :70]
    paths = []
    for orientation in (None, 1, 2, 3, 4, 5, 6, 7, 8):
        exif = Image.Exif()
        if orientation is not None:
            exif[0x0112] = orientation
        paths.append(tmp_path / f"o{orientation}.jpg")
        paths[-1].write_bytes(_encoded(photo, "JPEG", exif=exif))
    damaged = bytearray(paths[-1].read_bytes())
    at = damaged.index(b"Exif\0\0") + 6
    damaged[at: at + 8] = b"XXXXXXXX"  # no TIFF header: EXIF that PIL cannot read
    paths.append(tmp_path / "damaged_exif.jpg")
    paths[-1].write_bytes(bytes(damaged))
    ds = ImageFiles(paths, decode="gpu")
    for i, path in enumerate(paths):
        item, _ = ds[i]
        expected = decode_jpeg(torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8),
                               mode=ImageReadMode.RGB, apply_exif_orientation=True)
        if i < 2 or path.name == "damaged_exif.jpg" and isinstance(item, Encoded):
            # for the device, which decodes upright: where torchvision's CPU decoder does too
            assert isinstance(item, Encoded) and expected.shape == photo.shape, path.name
        else:
            assert isinstance(item, torch.Tensor) and torch.equal(item, expected), path.name
    assert ds[7][0].shape == (3, 70, 50)  # orientation 6: turned
    # nvJPEG decoded a JPEG cut short without an error (H200, torchvision 0.26), where libjpeg
    # refuses it: a JPEG that does not end with EOI is decoded in the worker too.
    upright = paths[0].read_bytes()
    (tmp_path / "cut.jpg").write_bytes(upright[: len(upright) // 3])
    (tmp_path / "trailing.jpg").write_bytes(upright + b"camera maker's trailer")
    odd = ImageFiles([tmp_path / "cut.jpg", tmp_path / "trailing.jpg"], decode="gpu")
    assert isinstance(odd[0][0], BadFile) and odd[0][0].path.endswith("cut.jpg")
    assert torch.equal(odd[1][0], decode_jpeg(torch.frombuffer(bytearray(upright), dtype=torch.uint8),
                                              mode=ImageReadMode.RGB))


def _encoded_gray(photo: torch.Tensor) -> bytes:
    """A one-component (grayscale) JPEG of ``photo``."""
    buffer = io.BytesIO()
    Image.fromarray(_rgb(photo)).convert("L").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_gpu_decode_matches_libjpeg_and_names_each_bad_jpeg(tmp_path, photos, device):
    """decode="gpu" on every kind of JPEG (4:2:0, 4:4:4, progressive, gray, CMYK, EXIF-rotated,
    restart markers) gives libjpeg's image within nvJPEG's rounding; damaged and hostile JPEGs are
    refused in the worker or at the device and named, the good ones of their batch still arrive,
    and the device works on after them. On a machine without CUDA the bytes decode on the CPU."""
    from torchvision.io import ImageReadMode, decode_jpeg

    good = {"420.jpg": _encoded(photos[0][:, :120, :160], "JPEG", quality=90),
            "444.jpg": _encoded(photos[1][:, :96, :130], "JPEG", quality=90, subsampling=0),
            "progressive.jpg": _encoded(photos[2][:, :100, :90], "JPEG", quality=85, progressive=True),
            "gray.jpg": _encoded_gray(photos[3][:, :80, :64]),
            "restarts.jpg": _encoded(photos[0][:, 100:180, 50:170], "JPEG", quality=90, restart_marker_blocks=2)}
    cmyk = io.BytesIO()
    Image.fromarray(_rgb(photos[1])[:64, :72]).convert("CMYK").save(cmyk, "JPEG", quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6
    good.update({"cmyk.jpg": cmyk.getvalue(), "exif_rotated.jpg": _encoded(photos[2][:, :50, :70], "JPEG", exif=exif)})
    for name, data in good.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "bad").mkdir()
    _bad_files(tmp_path / "bad", photos)
    data = (tmp_path / "bad" / "good.jpg").read_bytes()
    (tmp_path / "bad" / "garbled.jpg").write_bytes(data[:600] + bytes(range(256)) * ((len(data) - 600) // 256))
    bad = ["truncated.jpg", "huge.jpg", "huge_late_header.jpg", "many_scans.jpg", "huge_after_stuffed_zero.jpg",
           "many_markers.jpg", "garbled.jpg"]
    paths = [tmp_path / n for n in good] + [tmp_path / "bad" / n for n in bad]
    ds = ImageFiles(paths, labels=list(range(len(paths))), decode="gpu", on_error="skip")
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=len(paths), collate_fn=collate), device=device)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        (images, labels), = list(loader)
    arrived = dict(zip(labels.tolist(), images))
    refused = set(loader.stats.skipped_paths)
    for i, name in enumerate(good):
        expected = decode_jpeg(torch.frombuffer(bytearray(good[name]), dtype=torch.uint8), mode=ImageReadMode.RGB,
                               apply_exif_orientation=True)
        assert i in arrived, f"{name} did not arrive"
        assert arrived[i].device.type == device and arrived[i].shape == expected.shape, name
        assert (arrived[i].cpu().float() - expected.float()).abs().mean() < 3, name  # nvJPEG's rounding
    for n in bad[:-1]:
        assert str(tmp_path / "bad" / n) in refused, f"{n} was not refused"
    assert refused <= {str(tmp_path / "bad" / n) for n in bad}
    assert torch.ones(4, device=device).sum().item() == 4  # the device still works


def test_bad_arguments():
    with pytest.raises(ValueError, match="on_error"):
        ImageFiles([], on_error="ignore")
    with pytest.raises(ValueError, match="decode"):
        ImageFiles([], decode="tpu")
    with pytest.raises(ValueError, match="labels"):
        ImageFiles(["a.jpg"], labels=[1, 2])
    for not_a_tensor in (Image.new("RGB", (8, 8)), np.zeros((8, 8, 3), np.uint8), "a.jpg"):
        with pytest.raises(TypeError, match=f"uint8 \\(3, H, W\\) tensors.*got {type(not_a_tensor).__name__} at item 0"):
            collate([(not_a_tensor, 0)])
    # the item's place in the batch as it came: a bad file before it counts (it said item 0 here)
    with pytest.raises(TypeError, match="got str at item 1"):
        collate([(BadFile("a.jpg", "damaged"), 0), ("b.jpg", 1)])
    for item, words in ((torch.zeros(3, 4, 4, dtype=torch.uint8), r"a tensor of shape \(3, 4, 4\) at item 0 \(an image alone"),
                        (3, "got int at item 0"), ((torch.zeros(3, 4, 4, dtype=torch.uint8), 0, "x"), "got tuple of 3 at item 0")):
        with pytest.raises(TypeError, match=f"collate expects \\(image, label\\) items.*{words}"):
            collate([item])
    with pytest.raises(TypeError, match="pipeline should be a gpuaug.Pipeline.*got str"):
        ga.DeviceLoader([], pipeline="RandomResizedCrop(224)", device="cpu")
    for dataset in (ImageFiles([]), torch.utils.data.TensorDataset(torch.zeros(2, 3, 4, 4))):  # failed at the first batch
        with pytest.raises(TypeError, match=r"DeviceLoader wraps a DataLoader.*got \w+: a dataset, batch it first"):
            ga.DeviceLoader(dataset, device="cpu")
    with pytest.raises(TypeError, match="DeviceLoader wraps a DataLoader.*got int: 5"):
        ga.DeviceLoader(5, device="cpu")

    class Batches(torch.utils.data.IterableDataset):  # an IterableDataset may yield batches (webdataset's .batched())
        def __iter__(self):
            yield torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2)

    assert [x.shape for x, _ in ga.DeviceLoader(Batches(), device="cpu")] == [(2, 3, 4, 4)]
    with pytest.raises(TypeError, match="images as tensors.*got str at item 1"):
        next(iter(ga.DeviceLoader([([torch.zeros(3, 4, 4, dtype=torch.uint8), "b.jpg"], torch.zeros(2))], device="cpu")))
    with pytest.raises(TypeError, match="list of image files"):
        ImageFiles("a.jpg")  # would be five "files": 'a', '.', 'j', 'p', 'g'
    with pytest.raises(FileNotFoundError):
        ImageFolder("/nonexistent/folder")
    for prefetch in (0, True, 1.5):  # True was taken as 1
        with pytest.raises(ValueError, match="prefetch"):
            ga.DeviceLoader([], device="cpu", prefetch=prefetch)
    for batch, words in (({"image": torch.zeros(1, 3, 4, 4)}, "got dict"),
                         ((torch.zeros(1, 3, 4, 4),), "a tuple of 1 items"),
                         (torch.zeros(2, 3, 4, 4), r"a tensor of shape \(2, 3, 4, 4\)"),
                         # a list collate of 2 images, no labels: was taken as (images, labels)
                         ([torch.zeros(3, 4, 4), torch.zeros(3, 5, 4)], r"a list of 2 images \(C, H, W\) and no labels"),
                         ((torch.zeros(1, 4, 4), torch.zeros(1, 5, 4)), r"a tuple of 2 images \(C, H, W\) and no labels")):
        with pytest.raises(TypeError, match=f"expects batches of \\(images, labels\\).*{words}"):
            next(iter(ga.DeviceLoader([batch], device="cpu")))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_loader_on_cuda_overlaps_and_matches_cpu(folder):
    ds = ImageFolder(folder, decode="gpu")
    pipe = ga.Pipeline(ga.RandomResizedCrop(64), device="cuda", seed=0)
    out = list(ga.DeviceLoader(DataLoader(ds, batch_size=4, collate_fn=collate, pin_memory=True), pipe, prefetch=2))
    assert sum(len(y) for _, y in out) == len(ds)
    assert all(x.device.type == "cuda" and y.device.type == "cuda" for x, y in out)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_loader_on_cuda_without_pipeline_keeps_ragged_batches_packed(folder):
    out = list(ga.DeviceLoader(DataLoader(ImageFolder(folder), batch_size=4, collate_fn=collate), device="cuda"))
    assert any(isinstance(x, ga.PackedImages) for x, _ in out)
    assert all(t.device.type == "cuda" for x, _ in out for t in (x if isinstance(x, ga.PackedImages) else [x]))


def test_dropping_a_sample_drops_its_label_in_every_form():
    from gpuaug.data.loader import _select

    keep = [0, 2]
    assert _select([10, 11, 12], keep) == [10, 12] and _select(("a", "b", "c"), keep) == ["a", "c"]
    assert torch.equal(_select(torch.tensor([[1], [2], [3]]), keep), torch.tensor([[1], [3]]))
    fields = _select([torch.tensor([1, 2, 3]), ("x", "y", "z")], keep)  # default_collate's per-field list
    assert torch.equal(fields[0], torch.tensor([1, 3])) and fields[1] == ["x", "z"]
    assert _select({"y": [5, 6, 7]}, keep) == {"y": [5, 7]}
    Pair = namedtuple("Pair", "box name")  # default_collate keeps a namedtuple's type
    pair = _select(Pair(torch.tensor([[1, 1], [2, 2], [3, 3]]), ["x", "y", "z"]), keep)
    assert type(pair) is Pair and torch.equal(pair.box, torch.tensor([[1, 1], [3, 3]])) and pair.name == ["x", "z"]


def test_device_loader_reads_the_wrapped_loaders_attributes(folder):
    """Code written for a DataLoader keeps working: ``loader.sampler.set_epoch`` (DistributedSampler),
    ``loader.dataset``, ``loader.batch_size``; a name neither has is still an AttributeError."""
    from torch.utils.data.distributed import DistributedSampler

    ds = ImageFolder(folder)
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=2, sampler=sampler, collate_fn=collate), device="cpu")
    assert loader.dataset is ds and loader.batch_size == 2 and loader.sampler is sampler
    firsts = []
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        firsts.append(list(sampler))
    assert firsts[0] != firsts[1]  # the epoch reached the sampler
    with pytest.raises(AttributeError, match="DeviceLoader .nor the DataLoader it wraps. has no attribute 'no_such_thing'"):
        loader.no_such_thing
    assert hasattr(loader.loader, "_index_sampler") and not hasattr(loader, "_index_sampler")  # private names stay its own
