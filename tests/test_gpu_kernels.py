"""The CUDA kernels' own contract (gpuaug.gpu_kernels: the fused color program and the warp),
run without a GPU through Triton's interpreter: agreement with the torch kernels, on programs the
pipeline never writes too, every dtype, channel count and memory layout, argument checks, the
fallback when a launch fails, and compilation for the GPUs we target. Their results against
torchvision are checked in test_reference.py (the ``cuda kernels`` runs); on a real GPU,
tests/test_cuda.py runs them compiled."""

import numpy as np
import pytest
import torch

import gpuaug as ga
import gpuaug.pipeline as pipeline_module
from gpuaug import native
from gpuaug.functional import color as gaF
from gpuaug.functional import geometry as gaG
from conftest import route_to_kernels


@pytest.fixture
def kernel(interpreted_gpu_kernels, monkeypatch):
    monkeypatch.setattr(interpreted_gpu_kernels, "_state", {})
    return interpreted_gpu_kernels


@pytest.fixture
def nan_empty(monkeypatch):
    """``torch.empty`` filled with NaN: a kernel that reads memory nobody wrote shows it."""
    empty = torch.empty

    def filled(*args, **kwargs):
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", filled)


def _args(n=2, C=3, S=2, shape=(8, 8)):
    x = torch.rand(n, C, *shape, generator=torch.Generator().manual_seed(0))
    ops = torch.full((n, S), native.OP_BRIGHTNESS, dtype=torch.int32)
    return x, torch.empty_like(x), ops, torch.full((n, S), 0.5)


@pytest.mark.parametrize("dtype,contrast_steps", [(torch.float32, None), (torch.float16, None),
                                                  (torch.bfloat16, None), (torch.float32, 2), (torch.float32, 7)])
def test_program_steps_match_the_torch_kernels(kernel, dtype, contrast_steps, nan_empty):
    x = torch.rand(4, 3, 70, 130, generator=torch.Generator().manual_seed(1))  # 9100 px: tiles, the last partial
    # Two contrast steps in one program (two ColorJitters): each takes the mean of its own input;
    # rows differ per sample, as the pipeline's do.
    ops = torch.tensor([[2, 4, 2, 3, 1], [1, 3, 4, 2, 0], [4, 0, 0, 0, 2], [0, 0, 0, 0, 0]], dtype=torch.int32)
    factors = torch.tensor([[1.7, 0.3, 0.4, 1.5, 1.2], [0.6, 0.0, -0.45, 1.3, 9.0], [0.5, 0, 0, 0, 0.2], [0.0] * 5])
    mean, inv_std = torch.tensor(ga.IMAGENET_MEAN), 1 / torch.tensor(ga.IMAGENET_STD)
    out = torch.empty(x.shape, dtype=dtype)
    kernel.color_program(x.to(dtype), out, ops, factors, mean, inv_std, contrast_steps)  # (2: the most a row has)
    xin = x.to(dtype).float()
    refs = [
        gaF.adjust_brightness(gaF.adjust_saturation(gaF.adjust_contrast(gaF.adjust_hue(
            gaF.adjust_contrast(xin[0:1], 1.7), 0.3), 0.4), 1.5), 1.2),
        gaF.adjust_contrast(gaF.adjust_hue(gaF.adjust_saturation(gaF.adjust_brightness(xin[1:2], 0.6), 0.0), -0.45), 1.3),
        gaF.adjust_contrast(gaF.adjust_hue(xin[2:3], 0.5), 0.2),
        xin[3:4],
    ]
    ref = gaF.normalize(torch.cat(refs), mean, std=torch.tensor(ga.IMAGENET_STD))
    tol = 1e-5 if dtype == torch.float32 else 5e-2  # one rounding of the output, in [-2.2, 2.7]
    assert (out.float() - ref).abs().max() < tol


def test_one_channel_takes_blends_only(kernel):
    x = torch.rand(3, 1, 24, 24, generator=torch.Generator().manual_seed(2))
    ops = torch.tensor([[3, 4, 2, 1]] * 3, dtype=torch.int32)  # saturation and hue do nothing here
    factors = torch.tensor([[0.0, 0.3, 0.5, 1.4]] * 3)
    out = torch.empty_like(x)
    kernel.color_program(x, out, ops, factors)
    assert (out - gaF.adjust_brightness(gaF.adjust_contrast(x, 0.5), 1.4)).abs().max() < 1e-6


def test_no_steps_only_normalize(kernel):
    x, out, _, _ = _args()
    kernel.color_program(x, out, torch.zeros(2, 0, dtype=torch.int32), torch.zeros(2, 0),
                         torch.tensor([0.5, 0.4, 0.3]), torch.tensor([2.0, 3.0, 4.0]))
    assert (out - (x - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) * torch.tensor([2.0, 3.0, 4.0]).view(1, 3, 1, 1)).abs().max() < 1e-6


def test_agrees_with_the_fused_cpu_kernel(kernel):
    if not native.available():
        pytest.skip("no C compiler here")
    pipe = ga.Pipeline(ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.3), device="cpu", seed=5)
    params = [op.make_params(ga.transforms._base.Draw(6, torch.device("cpu"), torch.Generator().manual_seed(3),
                                                      ga.transforms._base.Sizes(uniform=(20, 30))))
              for op in pipe.ops]
    programs = [op.program(p) for op, p in zip(pipe.ops, params)]
    ops, factors = torch.cat([p[0] for p in programs], 1), torch.cat([p[1] for p in programs], 1)
    x = torch.rand(6, 3, 20, 30, generator=torch.Generator().manual_seed(4))
    a, b = torch.empty_like(x), torch.empty_like(x)
    kernel.color_program(x, a, ops, factors)
    native.color_program(x, b, torch.arange(6), ops, factors)
    assert (a - b).abs().max() < 1e-5


@pytest.mark.parametrize("change,error,message", [
    (lambda a: a.__setitem__(0, a[0].to(torch.uint8)), TypeError, "expected float images"),
    (lambda a: a.__setitem__(0, torch.rand(2, 2, 8, 8)), ValueError, r"C in \{1, 3\}"),
    (lambda a: a.__setitem__(1, torch.empty(2, 3, 4, 4)), ValueError, "out should be contiguous with x's shape"),
    (lambda a: a.__setitem__(1, torch.empty(2, 8, 8, 3).permute(0, 3, 1, 2)), ValueError, "out should be contiguous"),
    (lambda a: a.__setitem__(2, a[2].long()), TypeError, "ops should be int32"),
    (lambda a: a.__setitem__(3, torch.zeros(2, 3)), ValueError, r"ops and factors should both be \(B=2, S\)"),
])
def test_bad_arguments_are_refused_before_the_launch(kernel, change, error, message):
    args = list(_args())
    change(args)
    with pytest.raises(error, match=message):
        kernel.color_program(*args)
    x, out, ops, factors = _args()
    with pytest.raises(ValueError, match="mean and inv_std"):
        kernel.color_program(x, out, ops, factors, torch.zeros(3), None)
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match=f"contrast_steps should be an int >= 0 or None, got {bad!r}"):
            kernel.color_program(x, out, ops, factors, None, None, bad)


def test_usable_only_on_cuda_and_not_when_disabled(kernel, monkeypatch):
    assert not kernel.usable(torch.device("cpu"))
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    assert kernel.usable(torch.device("cuda"))  # a question about the setup: nothing touches CUDA
    monkeypatch.setenv("GPUAUG_TRITON", "0")
    assert not kernel.usable(torch.device("cuda"))


def test_a_failing_launch_warns_once_and_the_pipeline_uses_torch_kernels(kernel, monkeypatch, photos):
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    ops = [ga.RandomResizedCrop(48), ga.RandomRotation(20), ga.ColorJitter(0.4, 0.4, 0.4, 0.1),
           ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    expected = ga.Pipeline(*ops, device="cpu", seed=1)(photos)  # the torch kernels (no gpu_kernels on the CPU)

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel image is available for execution on the device")

    for name in ("resample_axes", "warp_affine", "color_program"):
        monkeypatch.setattr(kernel, name, broken)
    monkeypatch.setattr(pipeline_module, "_gpu_kernels", lambda device: kernel if kernel.usable("cuda") else None)
    with pytest.warns(RuntimeWarning, match="Triton kernels failed.*no kernel image") as caught:
        out = ga.Pipeline(*ops, device="cpu", seed=1)(photos)
    assert [w.filename for w in caught if "Triton" in str(w.message)] == [__file__]  # once, at the user's call
    assert torch.equal(out, expected)
    assert not kernel.usable(torch.device("cuda"))  # off for the process: no warning per batch


@pytest.mark.parametrize("kernels", ["triton", "torch"])
def test_float16_pipeline_within_4_of_255_of_float32(kernel, monkeypatch, photos, kernels):
    """tests/test_cuda.py's first check (CUDA's default float16 against float32 on the CPU), with
    the kernels CUDA runs: the Triton ones (interpreted) and, where they fail, the torch ones, both
    in float16 on the README's ops. Measured (2026-12-04, 224x224 out of the 4 photos x 4): 0.43/255
    at most through Triton, 0.63/255 through torch."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)  # on the CPU device: the torch kernels
    if kernels == "triton":
        route_to_kernels(monkeypatch, kernel)
    ops = lambda: [ga.RandomResizedCrop(64), ga.RandomHorizontalFlip(), ga.RandomRotation(15),  # noqa: E731
                   ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.2), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    reference, params = ga.Pipeline(*ops(), device="cpu", seed=0)(photos * 2, return_params=True)
    half = ga.Pipeline(*ops(), device="cpu", dtype=torch.float16, seed=0)(photos * 2, params=params)
    assert half.dtype == torch.float16
    err = (half.float() - reference).abs() * min(ga.IMAGENET_STD)  # in units of the [0, 1] image
    assert err.max() < 4 / 255 and err.mean() < 0.2 / 255, (err.max(), err.mean())


@pytest.fixture(params=[(0, False), (1, False), (0, True), (1, True)],
                ids=["rows first", "columns first", "rows first, columns across", "columns first, columns across"])
def first_axis(request, kernel, monkeypatch):
    """Both orders of the resampling's passes (``RESAMPLE_FIRST_AXIS``), and the column pass's tile
    held either way (``RESAMPLE_COLUMNS_ACROSS``): the same result."""
    monkeypatch.setattr(kernel, "RESAMPLE_FIRST_AXIS", request.param[0])
    monkeypatch.setattr(kernel, "RESAMPLE_COLUMNS_ACROSS", request.param[1])
    return request.param[0]


def _axes(n: int, src: int, out: int, seed: int) -> torch.Tensor:
    """``(n, 2, 8)`` axis maps of random crops resized from ``src`` to ``out`` pixels, some
    mirrored, some reaching past the image: padding outside ``valid``, zero-weight taps, and
    (every other sample) a filter window past the image, of which ``content`` holds the pixels."""
    g = torch.Generator().manual_seed(seed)
    length = torch.randint(out // 3, src + 1, (n, 2), generator=g).float()
    start = (torch.rand(n, 2, generator=g) * (src - length + 8)).floor() - 4
    scale = length / out * torch.where(torch.rand(n, 2, generator=g) < 0.3, -1.0, 1.0)
    offset = torch.where(scale < 0, start + length, start)
    content = (start.clamp(min=0), (start + length).clamp(max=src))
    padded = (torch.arange(n) % 2 == 1).view(n, 1)
    window = (torch.where(padded, start, content[0]), torch.where(padded, start + length, content[1]))
    valid = (torch.rand(n, 2, generator=g) * 3).floor(), out - (torch.rand(n, 2, generator=g) * 3).floor()
    return torch.stack([scale, offset, *window, *valid, *content], -1)


def _reference(x, axes, size, taps, antialias=True, pad_mode="constant", pad_output=False, cubic=False):
    """The torch path: axis_taps for each axis, then resample_separable."""
    (h, w), (H, W) = size, x.shape[-2:]
    rows, cols = (gaG.axis_taps(*axes[:, a, :2].unbind(1), axes[:, a, 2:4].unbind(1), axes[:, a, 4:6].unbind(1),
                                length, source, k, antialias, axes[:, a, 6:8].unbind(1), pad_mode, pad_output, cubic)
                  for a, length, source, k in ((0, h, H, taps[0]), (1, w, W, taps[1])))
    return gaG.resample_separable(x.float(), rows, cols).contiguous()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16])
@pytest.mark.parametrize("channels", [1, 3])
def test_resampling_matches_axis_taps_and_the_torch_resampling(kernel, dtype, channels, nan_empty, first_axis):
    g = torch.Generator().manual_seed(8)
    x = torch.randint(0, 256, (4, channels, 61, 61), generator=g, dtype=torch.uint8)
    x = x if dtype == torch.uint8 else (x.to(dtype) / 255)
    axes = _axes(4, 61, 24, seed=9)
    taps = (gaG.tap_count(61 / 8), gaG.tap_count(61 / 8) + 1)  # any count that covers the filter
    scale = 1 / 255 if dtype == torch.uint8 else 1.0
    out = kernel.resample_axes(x, axes, (24, 24), taps, torch.float32, scale)
    assert out.shape == (4, channels, 24, 24) and out.is_contiguous() and out.dtype == torch.float32
    ref = _reference(x.float() * scale, axes, (24, 24), taps)
    assert (out - ref).abs().max() < 1e-5
    half = kernel.resample_axes(x, axes, (24, 24), taps, torch.float16, scale)
    assert (half.float() - ref).abs().max() < 2e-3


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric"])
def test_resampling_copies_output_pixels_into_the_outputs_padding(kernel, mode, first_axis):
    """``pad_output`` (a crop that copies pixels after a resize): an output pixel outside ``valid``
    is the output pixel inside that the mode copies there, as ``axis_taps`` computes it; the
    pixels inside are those of the map without it."""
    x = torch.rand(4, 3, 61, 61, generator=torch.Generator().manual_seed(14))
    axes = _axes(4, 61, 24, seed=15)
    axes[..., 4], axes[..., 5] = 5.0, 19.0  # 5 output pixels of padding on each side: shorter than the 14 inside
    taps = (gaG.tap_count(61 / 8),) * 2
    out = kernel.resample_axes(x, axes, (24, 24), taps, torch.float32, 1.0, True, mode, True)
    ref = _reference(x, axes, (24, 24), taps, True, mode, True)
    assert (out - ref).abs().max() < 1e-5
    plain = kernel.resample_axes(x, axes, (24, 24), taps, torch.float32)
    assert torch.equal(out[..., 5:19, 5:19], plain[..., 5:19, 5:19]) and plain[..., :5, :].abs().max() == 0
    mirror = {"edge": [5] * 5, "reflect": [10, 9, 8, 7, 6], "symmetric": [9, 8, 7, 6, 5]}[mode]
    assert torch.equal(out[..., :5, 5:19], out[..., mirror, 5:19])  # the rows above, copied as the mode says
    with pytest.raises(ValueError, match="pad_output needs a pad_mode that copies"):
        kernel.resample_axes(x, axes, (24, 24), taps, torch.float32, 1.0, True, "constant", True)
    with pytest.raises(ValueError, match="pad_output needs a pad_mode that copies"):
        _reference(x, axes, (24, 24), taps, True, "constant", True)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16])
def test_bicubic_resampling_matches_axis_taps(kernel, dtype, first_axis):
    """``cubic``: the bicubic filter (negative lobes: taps of negative weight are read too), down
    (61 -> 24) and up (20 -> 24), padding and mirrored maps included."""
    g = torch.Generator().manual_seed(17)
    for src, axes in ((61, _axes(4, 61, 24, seed=18)), (20, _axes(4, 20, 24, seed=19))):
        # The window is the whole crop (as the pipeline plans it: every output pixel's center inside),
        # not _axes' clamped one: a filter whose center lies outside its window sums its negative
        # lobes alone, to about 0 (the triangle's is 0, and that pixel padding).
        ends = torch.stack([axes[..., 1], axes[..., 1] + axes[..., 0] * 24])
        axes[..., 2], axes[..., 3] = ends.amin(0), ends.amax(0)
        x = torch.randint(0, 256, (4, 3, src, src), generator=g, dtype=torch.uint8)
        x = x if dtype == torch.uint8 else (x.to(dtype) / 255)
        scale = 1 / 255 if dtype == torch.uint8 else 1.0
        taps = (gaG.tap_count(src / 8, cubic=True),) * 2
        out = kernel.resample_axes(x, axes, (24, 24), taps, torch.float32, scale, True, "constant", False, True)
        ref = _reference(x.float() * scale, axes, (24, 24), taps, cubic=True)
        assert (out - ref).abs().max() < 1e-5
        bilinear = _reference(x.float() * scale, axes, (24, 24), taps)
        assert (ref - bilinear).abs().max() > 0.05 and (ref.amin() < 0 or ref.amax() > 1)  # another filter: overshoot


@pytest.mark.parametrize("case", ["uint8", "float16 bicubic", "reflect padding", "ragged"])
def test_taps_past_the_unrolled_count_loop_per_sample_bit_for_bit(kernel, case, nan_empty, first_axis, monkeypatch):
    """A batch whose largest downscale needs more than ``RESAMPLE_UNROLLED_TAPS`` taps: the kernel
    unrolls that many and loops over each sample's own rest (its scale's ``tap_count``). The same
    bits as every tap unrolled (the taps left out weigh 0), and the torch resampling's result, with
    samples from 160 -> 10 (16x: 34 taps, 66 bicubic) to upscaled."""
    g = torch.Generator().manual_seed(21)
    src, out, cubic = 160, 10, case == "float16 bicubic"
    axes = _axes(4, src, out, seed=22)
    axes[1, :, 0] = axes[1, :, 0].sign() * 0.7  # one sample upscaled: 2 taps of its own (4 bicubic)
    if cubic:  # the window is the whole crop, as the pipeline plans it (see the bicubic test)
        ends = torch.stack([axes[..., 1], axes[..., 1] + axes[..., 0] * out])
        axes[..., 2], axes[..., 3] = ends.amin(0), ends.amax(0)
    x = torch.randint(0, 256, (4, 3, src, src), generator=g, dtype=torch.uint8)
    x, scale = (x.half() / 255, 1.0) if cubic else (x, 1 / 255)
    taps = (gaG.tap_count(src / out, cubic=cubic),) * 2
    assert min(taps) > kernel.RESAMPLE_UNROLLED_TAPS
    mode = "reflect" if case == "reflect padding" else "constant"
    given = kernel.pack_images(list(x), torch.device("cpu")) if case == "ragged" else x

    def resample():
        return kernel.resample_axes(given, axes, (out, out), taps, torch.float32, scale, True, mode, False, cubic)

    looped = resample()
    monkeypatch.setattr(kernel, "RESAMPLE_UNROLLED_TAPS", 128)
    assert torch.equal(looped, resample())
    ref = _reference(x.float() * scale, axes, (out, out), taps, True, mode, False, cubic)
    assert (looped - ref).abs().max() < 1e-5


def test_resampling_without_antialias_any_layout_and_shapes(kernel, first_axis):
    x = torch.rand(2, 3, 40, 30, generator=torch.Generator().manual_seed(10))
    axes = _axes(2, 30, 16, seed=11)
    axes[:, 0, 3] = axes[:, 0, 3].clamp(max=40)
    size, taps = (20, 16), (3, 3)
    ref = _reference(x, axes, size, taps, antialias=False)
    channels_last = x.contiguous(memory_format=torch.channels_last)
    assert (kernel.resample_axes(channels_last, axes, size, taps, torch.float32, antialias=False) - ref).abs().max() < 1e-5
    padded = torch.cat([x, torch.zeros(2, 3, 40, 9)], -1)[..., :30]  # a view with a wider row stride
    assert (kernel.resample_axes(padded, axes, size, taps, torch.float32, antialias=False) - ref).abs().max() < 1e-5
    with pytest.raises(ValueError, match=r"axes should be float32 of shape \(B=2, 2, 8\)"):
        kernel.resample_axes(x, axes[:, :, :6], size, taps, torch.float32)


def test_resampling_reads_a_packed_ragged_list_as_its_padded_batch(kernel, nan_empty, first_axis):
    g = torch.Generator().manual_seed(12)
    images = [torch.randint(0, 256, (3, 50, 61), generator=g, dtype=torch.uint8),
              torch.randint(0, 256, (61, 44, 3), generator=g, dtype=torch.uint8).permute(2, 0, 1),  # as decoded
              torch.randint(0, 256, (3, 70, 90), generator=g, dtype=torch.uint8)[:, 5:45, 10:70],  # a crop view
              torch.randint(0, 256, (3, 33, 40), generator=g, dtype=torch.uint8)]
    padded = torch.zeros(4, 3, 61, 61, dtype=torch.uint8)
    for i, t in enumerate(images):
        padded[i, :, :t.shape[1], :t.shape[2]] = t
    crops = _axes(4, 33, 20, seed=13)  # crops inside the smallest image
    whole = torch.tensor([[[s / 20, 0, 0, s, 0, 20, 0, s] for s in t.shape[1:]] for t in images])  # to every edge
    for axes, taps in ((crops, (6, 6)), (whole, (8, 8))):
        expected = kernel.resample_axes(padded, axes, (20, 20), taps, torch.float32, 1 / 255)
        assert (expected - _reference(padded.float() / 255, axes, (20, 20), taps)).abs().max() < 1e-5
        # A list as given, the same made contiguous (one concatenation, with and without the sizes
        # the pipeline passes), and the one buffer gpuaug.data.collate makes (ga.PackedImages).
        contiguous = [t.contiguous() for t in images]
        hw = np.array([t.shape[1:] for t in images], dtype=np.int64)
        for given, sizes in ((images, None), (contiguous, None), (contiguous, hw), (ga.PackedImages.pack(images), None)):
            packed = kernel.pack_images(given, torch.device("cpu"), sizes)
            assert packed.shape == (4, 3, 61, 61) and packed.flat.numel() == sum(t.numel() for t in images)
            assert torch.equal(kernel.resample_axes(packed, axes, (20, 20), taps, torch.float32, 1 / 255), expected)
    with pytest.raises(ValueError, match=r"hw should be \(4, 2\) rows, one per image, got shape \(3, 2\)"):
        kernel.pack_images(contiguous, torch.device("cpu"), hw[:3])


def _matrices(n: int, h: int, w: int) -> torch.Tensor:
    """Rotations of all sizes, with flips and shifts that push part of the output off the image."""
    g = torch.Generator().manual_seed(5)
    m = gaG.rotation_matrix(torch.empty(n).uniform_(-180, 180, generator=g), h, w)
    flips = gaG.flip_matrix(torch.rand(n, generator=g) < 0.5, torch.rand(n, generator=g) < 0.5, n, "cpu")
    m = m @ flips
    m[:, :2, 2] = torch.empty(n, 2).uniform_(-0.6, 0.6, generator=g)
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("channels,fill,blend", [(3, None, True), (3, None, False), (3, (0.2, 0.5, 1.0), True),
                                                 (1, (0.7,), True), (1, None, False)])
def test_warp_matches_the_torch_warp(kernel, dtype, channels, fill, blend):
    x = torch.rand(5, channels, 37, 52, generator=torch.Generator().manual_seed(6))
    m = _matrices(5, 37, 52)
    fill_t = None if fill is None else torch.tensor(fill)
    out = kernel.warp_affine(x.to(dtype), m, fill_t, blend)
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    ref = gaG.warp_affine(x.to(dtype).float(), m, fill_t, blend)
    assert (out.float() - ref).abs().max() < (1e-5 if dtype == torch.float32 else 2e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fill", [None, (0.2, 0.5, 1.0)])
def test_nearest_warp_matches_the_torch_warp(kernel, dtype, fill):
    """NEAREST: the source pixel nearest the coordinates, the fill where it is outside. The two
    compute the coordinates in other orders: a pixel may differ where two source pixels are
    within float noise of a tie (none of these random maps has one, but allow 0.1%)."""
    x = torch.rand(5, 3, 37, 52, generator=torch.Generator().manual_seed(16)).to(dtype)
    m = _matrices(5, 37, 52)
    fill_t = None if fill is None else torch.tensor(fill)
    out = kernel.warp_affine(x, m, fill_t, True, True)
    ref = gaG.warp_affine(x, m, fill_t, True, True)
    assert out.dtype == dtype and out.shape == x.shape
    differ = (out.float() - ref.float()).abs().amax(1) > 0
    assert differ.float().mean() < 1e-3
    assert fill is None or (out[:, 0] == 0.2).float().mean() > 0.05  # the fill, whole, where outside
    values = torch.cat([x.flatten(), torch.tensor(fill or [0.0]).to(dtype)]).float().unique()
    assert torch.isin(out.float().flatten(), values).all()  # every output value is a source pixel or the fill


@pytest.mark.parametrize("group_rows", [2, 4])
@pytest.mark.parametrize("block", [256, 1024])
def test_warp_pixel_groups_give_what_row_order_gives(kernel, monkeypatch, nan_empty, group_rows, block):
    """WARP_GROUP_ROWS only changes which thread computes which pixel (tiles 32 wide of 2x16 or
    4x8 groups instead of row order): the output is the same, bit for bit, every pixel written
    (sizes that leave partial tiles and groups; bilinear and nearest, fill, 1 and 3 channels)."""
    g = torch.Generator().manual_seed(9)
    for (h, w), channels, nearest in (((37, 52), 3, False), ((5, 3), 1, True), ((70, 33), 3, True)):
        x = torch.rand(3, channels, h, w, generator=g).to(torch.float16)
        m, fill = _matrices(3, h, w), torch.rand(channels, generator=g)
        monkeypatch.setattr(kernel, "GEOMETRY_BLOCK", block)
        monkeypatch.setattr(kernel, "WARP_GROUP_ROWS", 1)
        rows = kernel.warp_affine(x, m, fill, True, nearest)
        monkeypatch.setattr(kernel, "WARP_GROUP_ROWS", group_rows)
        grouped = kernel.warp_affine(x, m, fill, True, nearest)
        assert not grouped.isnan().any() and torch.equal(grouped, rows), (h, w)


def test_warp_reads_a_transposed_layout(kernel):
    """resample_separable returns a transposed view; the kernel reads it through its strides."""
    x = torch.rand(3, 3, 52, 37, generator=torch.Generator().manual_seed(7)).transpose(-1, -2)  # (3, 3, 37, 52)
    m = _matrices(3, 37, 52)
    assert (kernel.warp_affine(x, m) - gaG.warp_affine(x.contiguous(), m)).abs().max() < 1e-5


@pytest.mark.parametrize("limit", [3, 4, 7])
def test_batches_past_the_grid_limit_launch_in_parts(kernel, monkeypatch, limit, nan_empty):
    """CUDA grids hold at most 65535 programs along y, where the kernels put the samples (or
    sample x channel planes): a larger batch (50000 CIFAR images x 3 planes) is launched in parts.
    Here the limit is made small; every kernel gives what it gives in one launch, a ragged list too."""
    g = torch.Generator().manual_seed(21)
    x = torch.randint(0, 256, (7, 3, 29, 33), generator=g, dtype=torch.uint8)
    images = [torch.randint(0, 256, (3, 20 + 3 * i, 25 + i), generator=g, dtype=torch.uint8) for i in range(7)]
    axes, ragged_axes, taps = _axes(7, 29, 12, seed=22), _axes(7, 20, 12, seed=23), (4, 4)
    ops = torch.randint(0, 5, (7, 4), generator=g, dtype=torch.int32)
    factors = torch.rand(7, 4, generator=g) * 1.5 - 0.25
    m = _matrices(7, 12, 12)
    mean, inv_std = torch.tensor(ga.IMAGENET_MEAN), 1 / torch.tensor(ga.IMAGENET_STD)

    def run():
        resampled = kernel.resample_axes(x, axes, (12, 12), taps, torch.float32, 1 / 255)
        ragged = kernel.resample_axes(kernel.pack_images(images, torch.device("cpu")), ragged_axes, (12, 12), taps,
                                      torch.float32, 1 / 255)
        warped = kernel.warp_affine(resampled, m, torch.tensor([0.1, 0.5, 0.9]))
        colored = kernel.color_program(warped, torch.empty_like(warped), ops, factors, mean, inv_std)
        return resampled, ragged, warped, colored

    whole = run()
    monkeypatch.setattr(kernel, "MAX_GRID_Y", limit)
    launches = []
    for name in ("_resample_kernel", "_warp_kernel", "_color_kernel"):
        launcher = getattr(kernel, name)

        class Counting:
            def __init__(self, launcher, name):
                self.launcher, self.name = launcher, name

            def __getitem__(self, grid):
                launches.append((self.name, grid[1]))
                return self.launcher[grid]

        monkeypatch.setattr(kernel, name, Counting(launcher, name))
    parts = run()
    for a, b in zip(whole, parts):
        assert torch.equal(a, b)
    assert max(y for _, y in launches) <= limit
    assert sum(y for name, y in launches if name == "_warp_kernel") == 7
    assert sum(y for name, y in launches if name == "_resample_kernel") == 4 * 7 * 3  # 2 passes x 2 calls


def test_warp_bad_arguments(kernel):
    x = torch.rand(2, 3, 8, 8)
    with pytest.raises(ValueError, match=r"expected \(B=2, 3, 3\) matrices"):
        kernel.warp_affine(x, torch.eye(3).expand(3, 3, 3))
    with pytest.raises(ValueError, match="fill should hold 3 values"):
        kernel.warp_affine(x, torch.eye(3).expand(2, 3, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="expected float images"):
        kernel.warp_affine(x.to(torch.uint8), torch.eye(3).expand(2, 3, 3))


@pytest.mark.parametrize("arch", [80, 90])  # A100, H100/H200
def test_kernels_compile_for_the_gpus_we_target(arch):
    """The interpreter above checks what the kernels compute, not that Triton's compiler takes
    them: compile both to a cubin (ptxas runs; no GPU needed) for every dtype and channel count."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gpuaug import gpu_kernels

    target = GPUTarget("cuda", arch, 32)
    for dtype in ("fp16", "bf16", "fp32"):
        for channels in (1, 3):
            images = {"src": f"*{dtype}", "out": f"*{dtype}"}
            program = {"ops": "*i32", "factors": "*fp32", "partials": "*fp32"}
            kernels = [
                (gpu_kernels._color_kernel,
                 {**images, **program, "mean": "*fp32", "inv_std": "*fp32", "pixels": "i32", "tiles": "i32"},
                 {"STEPS": 5, "CHANNELS": channels, "NORMALIZE": True, "TILES": 64}),
                (gpu_kernels._contrast_sum_kernel,
                 {"src": f"*{dtype}", **program, "pixels": "i32", "tiles": "i32", "occurrence": "i32"},
                 {"STEPS": 5, "CHANNELS": channels, "TILES": 64}),
                # Triton passes int arguments equal to 1 as constexprs (a contiguous row's stride).
                (gpu_kernels._resample_kernel,
                 {"src": "*u8" if dtype == "fp16" else f"*{dtype}", "out": f"*{dtype}", "axes": "*fp32", "table": "*i64",
                  "P": "i32", "Q": "i32", "limit": "i32", "stride_n": "i32", "stride_c": "i32", "stride_p": "i32",
                  "scale": "fp32"},
                 {"CHANNELS": channels, "TAPS": 5, "AXIS": channels % 2, "RAGGED": False, "ANTIALIAS": dtype != "bf16",
                  "PAD": {"fp16": 0, "bf16": 2, "fp32": 3}[dtype], "PAD_OUTPUT": dtype == "fp32", "CUBIC": dtype != "bf16",
                  "FIRST": dtype != "fp16", "COLUMNS_ACROSS": dtype != "bf16", "stride_q": 1,
                  "MORE_TAPS": dtype == "fp16", "LOOP_TAPS": gpu_kernels.RESAMPLE_LOOP_TAPS}),
                (gpu_kernels._resample_kernel,
                 {"src": "*u8" if dtype == "fp16" else f"*{dtype}", "out": f"*{dtype}", "axes": "*fp32", "table": "*i64",
                  "P": "i32", "Q": "i32", "limit": "i32", "stride_n": "i32", "stride_c": "i32", "stride_p": "i32",
                  "stride_q": "i32", "scale": "fp32"},
                 {"CHANNELS": channels, "TAPS": 5, "AXIS": {"fp16": 0, "bf16": 1, "fp32": channels % 2}[dtype],
                  "RAGGED": True, "ANTIALIAS": True, "PAD": channels % 2, "PAD_OUTPUT": channels == 1,
                  "CUBIC": channels == 3, "FIRST": True, "COLUMNS_ACROSS": dtype == "bf16", "MORE_TAPS": channels == 3,
                  "LOOP_TAPS": 1 + (dtype == "fp32")}),
                (gpu_kernels._warp_kernel,
                 {**images, "matrix": "*fp32", "fill": "*fp32", "H": "i32", "W": "i32", "stride_n": "i32",
                  "stride_c": "i32", "stride_h": "i32", "stride_w": "i32"},
                 {"CHANNELS": channels, "FILL": True, "BLEND": True, "NEAREST": dtype == "bf16", "GROUP_ROWS": 1}),
                (gpu_kernels._warp_kernel,
                 {**images, "matrix": "*fp32", "fill": "*fp32", "H": "i32", "W": "i32", "stride_n": "i32",
                  "stride_c": "i32", "stride_h": "i32", "stride_w": "i32"},
                 {"CHANNELS": channels, "FILL": False, "BLEND": channels == 3, "NEAREST": dtype == "fp32",
                  "GROUP_ROWS": 2 if channels == 3 else 4}),
            ]
            for fn, signature, constants in kernels:
                # As given, then with every int argument 1: Triton passes such a value as a
                # constexpr (a plain int in the kernel), which some tensor methods refuse.
                ones = {name: 1 for name, kind in signature.items() if kind == "i32"}
                for extra in ({}, ones) if channels == 3 else ({},):
                    tile = dict(zip(("BLOCK_P", "BLOCK_Q"), gpu_kernels.resample_tiles(500)[constants["AXIS"]])) \
                        if fn is gpu_kernels._resample_kernel else {"BLOCK": gpu_kernels.BLOCK}
                    consts = {**constants, **extra, **tile}
                    sig = {**signature, **{name: "constexpr" for name in consts}}
                    warps = gpu_kernels.RESAMPLE_WARPS if fn is gpu_kernels._resample_kernel else 4
                    compiled = triton.compile(ASTSource(fn, sig, constexprs=consts), target=target,
                                              options={"num_warps": warps})
                    assert len(compiled.asm["cubin"]) > 0


def test_guarded_lets_bad_arguments_and_out_of_memory_through(kernel):
    def fails(error):
        def launch():
            raise error
        return launch

    for error in (ValueError("bad"), TypeError("bad"), torch.OutOfMemoryError("CUDA out of memory")):
        with pytest.raises(type(error)):
            kernel.guarded(fails(error))
    assert not kernel._state.get("broken")
    assert kernel.guarded(lambda: 7) == 7


def test_each_launch_is_made_on_its_tensors_device(monkeypatch):
    """Triton launches on torch's current CUDA device and its stream, not on its tensors' device:
    a pipeline on cuda:1 called where cuda:0 is current (select_device's LOCAL_RANK or pid rule
    makes nothing current) would run on cuda:0's stream, unordered with the cuda:1 work that
    wrote its input. Fake cuda:1 tensors (no GPU here); the kernels replaced by recorders of the
    device current at each launch (a real two-GPU run: tests/test_cuda.py)."""
    fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")
    pytest.importorskip("triton")
    from gpuaug import gpu_kernels

    current, launches = [0], []

    class device:  # torch.cuda.device as the kernels' module calls it, on a machine with 2 GPUs
        def __init__(self, d):
            self.index = torch.device(d).index

        def __enter__(self):
            self.before, current[0] = current[0], self.index

        def __exit__(self, *exc):
            current[0] = self.before

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                devices = {a.device for a in args if isinstance(a, torch.Tensor)}
                launches.append((self.name, current[0], devices))
            return launch

    monkeypatch.setattr(torch.cuda, "device", device)
    for name in ("_resample_kernel", "_warp_kernel", "_color_kernel", "_contrast_sum_kernel"):
        monkeypatch.setattr(gpu_kernels, name, Recorder(name))
    cuda1 = torch.device("cuda", 1)
    try:
        mode = fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            x = torch.empty(2, 3, 40, 50, dtype=torch.uint8, device=cuda1)
    except Exception as error:  # an older torch asks the driver for fake CUDA tensors
        pytest.skip(f"this torch build cannot make fake CUDA tensors: {error}")
    with mode:
        axes = torch.empty(2, 2, 8, device=cuda1)
        y = gpu_kernels.resample_axes(x, axes, (16, 16), (4, 4), torch.float16)
        ragged = gpu_kernels.pack_images([x[0], x[1, :, :30]], cuda1)
        gpu_kernels.resample_axes(ragged, axes, (16, 16), (4, 4), torch.float16)
        y = gpu_kernels.warp_affine(y, torch.empty(2, 3, 3, device=cuda1))
        ops = torch.full((2, 2), native.OP_CONTRAST, dtype=torch.int32, device=cuda1)
        gpu_kernels.color_program(y, torch.empty_like(y), ops, torch.empty(2, 2, device=cuda1))
    assert current == [0]
    names = [name for name, _, _ in launches]
    assert names.count("_resample_kernel") == 4 and "_warp_kernel" in names and "_contrast_sum_kernel" in names
    for name, on, devices in launches:
        assert devices == {cuda1} and on == 1, f"{name} launched with cuda:{on} current, its tensors on {devices}"
