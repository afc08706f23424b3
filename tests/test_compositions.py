"""Random compositions of ops against torchvision's functional chain, sample by sample.

Each case draws a pipeline (tests/generators.py: ``composition_ops``, crops that pad with zeros, a
fill or copied pixels (of the image or of a resized one), bilinear or bicubic resizes, flips, a
bilinear or nearest rotation with the crop after it, color jitter, grayscale, normalize, in any
order the pipeline takes; ``more_composition_ops``, rotation centers, ``Resize``'s ``max_size``,
RandomResizedCrop's scale and ratio and color ops in any order) and photos of random sizes, runs
it, and replays each sample's drawn parameters through ``torchvision.transforms.v2.functional``.
Float input, then uint8 input (the reference runs on its float image; the CPU's uint8 crops round
as torchvision's uint8 kernel does, a slack the color ops magnify), then both through the CUDA
kernels (Triton's interpreter), then clips and 1-channel images, then the corner cases
(``corner_ops``: 1-pixel images and crops, far-off padding and rotation centers). One resizing op per case
(several are fused into one resampling, a documented difference); rotated outputs are compared
inside the central disc (the corners' fill rule is tested in test_reference.py).
"""

import os
import random

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode, v2

import gpuaug as ga
from gpuaug.transforms.color import ColorOp
from conftest import central_disc, color_gain, route_to_kernels, to_float
from generators import COLOR, composition_ops, corner_ops, more_composition_ops

COLOR_KERNELS = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]


def _torchvision(x: torch.Tensor, ops: list, params: list, i: int, nudge: tuple[float, float] | None = None) -> torch.Tensor:
    """Sample ``i`` through torchvision's kernels with the parameters gpuaug drew for it;
    ``nudge``: (x, y) pixels added to each rotation's center (see ``_assert_close``)."""
    for op, p in zip(ops, params):
        if isinstance(op, ga.RandomResizedCrop):
            x = _resize(TF.crop(x, *(int(p[k][i]) for k in ("top", "left", "height", "width"))), list(op.size),
                        interpolation=InterpolationMode(op.interpolation), antialias=True)
            x = x.clamp(0, 1) if op.interpolation == "bicubic" else x  # gpuaug clamps the overshoot (README)
        elif isinstance(op, ga.Resize):
            size = None if op.size is None else [op.size] if isinstance(op.size, int) else list(op.size)
            x = _resize(x, size, interpolation=InterpolationMode(op.interpolation), max_size=op.max_size,
                        antialias=True)
            x = x.clamp(0, 1) if op.interpolation == "bicubic" else x
        elif isinstance(op, ga.RandomCrop):
            tv = v2.RandomCrop(op.size, padding=list(op.padding) if any(op.padding) else None,  # the same 4-form
                               pad_if_needed=op.pad_if_needed).make_params([x])  # its padding rule
            pad_left, pad_top = tv["padding"][:2]
            fill = list(op.fill) * (len(x) // len(op.fill)) if op.padding_mode == "constant" else None
            padded = TF.pad(x, tv["padding"], fill=fill, padding_mode=op.padding_mode)
            x = TF.crop(padded, int(p["top"][i]) + pad_top, int(p["left"][i]) + pad_left, *op.size)
        elif isinstance(op, ga.CenterCrop):
            x = TF.center_crop(x, list(op.size))
        elif isinstance(op, (ga.RandomHorizontalFlip, ga.RandomVerticalFlip)):
            flip = TF.horizontal_flip if isinstance(op, ga.RandomHorizontalFlip) else TF.vertical_flip
            x = flip(x) if p["flip"][i] else x
        elif isinstance(op, ga.RandomRotation):
            fill = None if op.fill is None else list(op.fill) * (len(x) // len(op.fill))
            center = None if op.center is None else list(op.center)
            if nudge is not None:  # torchvision's center=None is the image's (w / 2, h / 2)
                center = [c + d for c, d in zip(center or [x.shape[-1] / 2, x.shape[-2] / 2], nudge)]
            x = TF.rotate(x, float(p["angle"][i]), interpolation=InterpolationMode(op.interpolation), center=center,
                          fill=fill)
        elif isinstance(op, ga.ColorJitter):
            for j in p["order"][i].tolist():
                x = COLOR_KERNELS[j](x, float(p[COLOR[j]][i]))
        elif isinstance(op, ga.RandomGrayscale):
            x = TF.rgb_to_grayscale(x, len(x)) if p["gray"][i] else x
        elif isinstance(op, ga.Normalize):
            x = TF.normalize(x, list(ga.IMAGENET_MEAN), list(ga.IMAGENET_STD))
    return x


def _resize(x: torch.Tensor, size, **kwargs) -> torch.Tensor:
    """torchvision's resize of a ``(C, H, W)`` float image, computed on a channels-last copy: torch's
    antialiased kernel for contiguous float tensors is wrong for outputs one pixel wide
    (tests/test_reference.py::test_resize_to_one_column_is_pils), which the corner cases reach."""
    return TF.resize(x[None].contiguous(memory_format=torch.channels_last), size, **kwargs)[0].contiguous()


# CI runs the first CASES of each generator (the second: two thirds of it, on two paths). For a
# long sweep set GPUAUG_COMPOSITION_CASES (4000, corners left out: 15732 tests in 1799 s, 2026-12-05); one case in 7000 once
# found a defect. GPUAUG_COMPOSITION_FIRST moves the sweep to cases not run before (case numbers seed
# the draws: a nightly sweep from FIRST=10000 covers other compositions than CI's).
CASES = int(os.environ.get("GPUAUG_COMPOSITION_CASES", "120"))
FIRST = int(os.environ.get("GPUAUG_COMPOSITION_FIRST", "0"))


def _cases(n: int) -> range:
    return range(FIRST, FIRST + n)


@pytest.mark.parametrize("case", _cases(CASES))
def test_random_composition_equals_torchvision_per_sample(photos, case):
    _check_case(photos, case, composition_ops)


@pytest.mark.parametrize("path", ["cpu", "one pass"])
@pytest.mark.parametrize("case", _cases(CASES * 2 // 3))
def test_more_random_compositions_equal_torchvision_per_sample(photos, case, path, monkeypatch):
    """``more_composition_ops``, on the CPU's own path and on the one CUDA takes without Triton."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", path == "cpu")
    _check_case(photos, case, more_composition_ops)


@pytest.mark.parametrize("case", _cases(CASES // 4))
def test_random_compositions_of_clips_share_each_clips_draw(photos, case):
    """Clips of 2-3 frames (a tensor, a ragged list, PackedImages), both generators: each frame
    is torchvision's chain with its clip's params."""
    rng = random.Random(case)
    ops = (composition_ops if case % 2 else more_composition_ops)(rng)
    frames = [to_float(TF.resize(p, [rng.randint(40, 120), rng.randint(40, 120)], antialias=True)) for p in photos]
    length, layout = rng.choice([2, 3]), rng.choice(["tensor", "list", "packed"])
    clips = [torch.stack([f.roll(3 * k, -1) for k in range(length)]) for f in frames]
    if layout == "tensor":
        clips = torch.stack([TF.resize(c, list(clips[0].shape[-2:]), antialias=True) for c in clips])
    ran = _run(ops, ga.PackedImages.pack(clips) if layout == "packed" else clips, case, ragged=layout != "tensor")
    if ran is None:
        return
    out, params = ran
    assert all(v.shape[0] == len(clips) for p in params for v in p.values())  # one draw per clip
    for i in range(len(clips)):
        for t in range(length):
            _assert_close(out[i, t], clips[i][t], ops, params, i, (i, t))


@pytest.mark.parametrize("case", _cases(CASES // 4))
def test_random_compositions_of_one_channel_images(photos, case):
    """Grayscale (1-channel) photos through ``composition_ops`` (Normalize left out: its means are
    RGB's)."""
    rng = random.Random(case)
    ops = [op for op in composition_ops(rng) if not isinstance(op, ga.Normalize)]
    images = [to_float(TF.resize(TF.rgb_to_grayscale(p), [rng.randint(40, 160), rng.randint(40, 160)], antialias=True))
              for p in photos]
    ran = _run(ops, images, case, ragged=True, also=("fill has 3 values",))  # a 3-value fill for 1 channel
    if ran is None:
        return
    out, params = ran
    assert out.shape[1] == 1
    for i in range(len(images)):
        _assert_close(out[i], images[i], ops, params, i, i)


@pytest.mark.parametrize("path", ["cpu", "one pass"])
@pytest.mark.parametrize("case", _cases(CASES // 2))  # case 46 is the first to flip a plain uint8 crop
def test_random_compositions_of_uint8_images(photos, case, path, monkeypatch):
    """uint8 photos (what the workers decode), both generators, against torchvision's chain on the
    float images: CUDA's path (without Triton) resamples uint8 as floats, float rounding only; the
    CPU's resizes plain crops with torchvision's uint8 kernel, which rounds."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", path == "cpu")
    _check_case(photos, case, composition_ops if case % 2 else more_composition_ops, uint8=True, rounds=path == "cpu")


@pytest.mark.parametrize("case", _cases(CASES // 10))
def test_random_compositions_through_the_cuda_kernels(photos, case, interpreted_gpu_kernels, monkeypatch):
    """Both generators, float and uint8 input, through gpuaug.gpu_kernels (Triton's interpreter,
    ~0.6 s a case; a failing launch fails the test instead of falling back to torch kernels)."""
    launched = route_to_kernels(monkeypatch, interpreted_gpu_kernels)
    ops = _check_case(photos, case, composition_ops if case % 2 else more_composition_ops, uint8=case % 4 < 2)
    assert launched or not ops, ops  # the kernels ran where the pipeline did


@pytest.mark.parametrize("path", ["cpu", "one pass"])
@pytest.mark.parametrize("case", _cases(CASES))
def test_corner_compositions_equal_torchvision_per_sample(photos, case, path, monkeypatch):
    """``corner_ops`` (1-pixel images and crops, crops far larger than their image, padding then
    resizing, rotations about far-off centers) on photos resized to 1-40 pixels a side, a batch or
    a ragged list, float or uint8, against torchvision's chain sample by sample on the float images
    (tests/test_paths_agree.py runs them too, but only compares the paths with one another). One
    resizing op per case (the case draws again until it has at most one, as several are one
    resampling here)."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", path == "cpu")
    rng = random.Random(case)
    ops = corner_ops(rng)
    while sum(isinstance(op, (ga.Resize, ga.RandomResizedCrop)) for op in ops) > 1:
        ops = corner_ops(rng)
    sizes = [(rng.randint(1, 40), rng.randint(1, 40))] * 4 if rng.random() < 0.5 else \
        [(rng.randint(1, 40), rng.randint(1, 40)) for _ in range(4)]
    uint8 = rng.random() < 0.5
    # (In float: torch's uint8 kernel fails on a 1x1 output of a contiguous image.)
    images = [_resize(to_float(p), list(hw), antialias=True) for p, hw in zip(photos, sizes[:rng.randint(1, 4)])]
    images = [(t * 255).round().to(torch.uint8) for t in images] if uint8 else images
    images = torch.stack(images) if len(set(sizes)) == 1 else images
    # torchvision fails on these too: a resize to 0 pixels, reflect padding longer than the side.
    ran = _run(ops, images, case, ragged=isinstance(images, list), also=("a side of 0 pixels", "is longer than the image"))
    if ran is None:
        return
    out, params = ran
    slack = color_gain(ops) / 255 if uint8 and path == "cpu" else 0.0  # the CPU's uint8 crops round
    for i in range(len(images)):
        _assert_close(out[i], to_float(images[i]), ops, params, i, i, slack)


def _run(ops: list, images, case: int, ragged: bool, also: tuple[str, ...] = ()):
    """The pipeline's ``(out, params)``, or None where it refuses ``ops`` as documented: ragged
    input with no fixed output size, a crop with a fill among other ops that may pad (or a
    ValueError saying one of ``also``)."""
    try:
        pipe = ga.Pipeline(*ops, device="cpu", seed=case)
        out, params = pipe(images, return_params=True)
    except ValueError as e:
        documented = ("fixed output size" in str(e) and ragged) or "the only op" in str(e)
        assert documented or any(words in str(e) for words in also), (e, ops)
        return None
    # What was drawn passes replay's checks of what each op could apply, and replays exactly.
    assert torch.equal(pipe(images, params=params), out), ops
    return out, params


# A nearest pick flips where a source coordinate sits on a midpoint between pixels to within float
# noise (~1e-6 px): whole lines of pixels do, at angles near a multiple of 90 degrees on an image
# with one odd side and one even side. Moving torchvision's rotation center by 1e-3 px finds them:
# where that changes torchvision's own pick, either pick is right.
NUDGES = [(1e-3, 1e-3), (-1e-3, -1e-3), (1e-3, -1e-3), (-1e-3, 1e-3)]


def _assert_close(got: torch.Tensor, image: torch.Tensor, ops: list, params: list, i: int, where,
                  slack: float = 0.0) -> None:
    """Sample ``i`` against torchvision's chain on ``image``: float rounding only (0.1/255, plus
    ``slack``, scaled by Normalize's std), rotated outputs inside the central disc, nearest picks
    allowed to differ only where they sit on a midpoint (``NUDGES``)."""
    ref = _torchvision(image, ops, params, i)
    assert got.shape == ref.shape, (where, ops)
    tol = (0.1 / 255 + slack) / (min(ga.IMAGENET_STD) if isinstance(ops[-1] if ops else None, ga.Normalize) else 1)
    err = (got - ref).abs().amax(0)
    inside = torch.ones_like(err, dtype=torch.bool)
    if any(isinstance(op, ga.RandomRotation) for op in ops):
        inside = central_disc(*err.shape, margin=3.0)
    if any(getattr(op, "interpolation", "") == "nearest" for op in ops):
        # Also seen in the geometric ops' output: a nudge flips other picks too, which shifts the
        # means contrast blends with, so after the color ops a flipped pick may differ from the
        # reference by more than tol where the nudged chain does not (case 131765: 0.11/255
        # against 0.09/255). Before them the only change is the flips: the color ops magnify a
        # flip's jump by up to their gain, on top of the CPU's uint8 rounding (slack), so a flip
        # counts from float rounding / gain, in [0, 1] (case 255651: a flip of 1.74/255, on top of a
        # rounding, came out at 5.04/255 against tol's 4.64/255; it counted only from tol / gain,
        # which also missed the division by the std).
        shape = [k for k, op in enumerate(ops) if not isinstance(op, ColorOp)]
        shape_ops, shape_params = [ops[k] for k in shape], [params[k] for k in shape]
        shape_ref, shape_tol = _torchvision(image, shape_ops, shape_params, i), 0.1 / 255 / color_gain(ops)
        on_midpoint = torch.zeros_like(inside)
        for nudge in NUDGES:
            on_midpoint |= (_torchvision(image, ops, params, i, nudge) - ref).abs().amax(0) > tol
            on_midpoint |= (_torchvision(image, shape_ops, shape_params, i, nudge) - shape_ref).abs().amax(0) > shape_tol
        inside &= ~on_midpoint
    err = err[inside]
    assert err.numel() == 0 or err.max() <= tol, (where, err.max().item(), (err > tol).sum().item(), ops)


def _check_case(photos, case: int, make_ops, uint8: bool = False, rounds: bool = False) -> list | None:
    """Case ``case`` of ``make_ops`` on 4 photos at random sizes (a batch or a ragged list), float
    or ``uint8``, against torchvision's chain on the float images. ``rounds``: the path resizes
    uint8 crops with torchvision's uint8 kernel (the CPU's), 1/255 off the float result at most,
    which the color ops carry on (``color_gain``). Returns the ops, or None where the pipeline
    refused them as documented."""
    rng = random.Random(case)
    ops = make_ops(rng)
    images = [TF.resize(p, [rng.randint(40, 160), rng.randint(40, 160)], antialias=True) for p in photos]
    images = images if uint8 else [to_float(t) for t in images]
    if rng.random() < 0.5:
        images = torch.stack([TF.resize(t, list(images[0].shape[-2:]), antialias=True) for t in images])
    ran = _run(ops, images, case, ragged=isinstance(images, list))
    if ran is None:
        return None
    out, params = ran
    # Float kernels on both sides: they differ by float rounding only (0.0027/255 at most over
    # cases 0-199), so anything near a level of an 8-bit image is a real difference.
    slack = color_gain(ops) / 255 if uint8 and rounds else 0.0
    for i in range(len(images)):
        _assert_close(out[i], to_float(images[i]), ops, params, i, i, slack)
    return ops
