"""Each op against torchvision.transforms.v2.functional on real photos.

Degenerate ranges pin a parameter (brightness=(1.3, 1.3), degrees=(30, 30), p=1.0, ...) and the
output must equal torchvision's kernel for that parameter; random ranges are checked sample by
sample against the kernel called with that sample's drawn parameter.
"""

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2

import gpuaug as ga
import gpuaug.functional as gaF
import gpuaug.pipeline as pipeline_module
from conftest import central_disc, psnr, route_to_kernels, to_float

# The bar for color ops is 2/255 in float32; on float input both sides are float kernels
# that agree to rounding (every color case passes at 0.01/255 on all four paths), so the bar here
# is 0.1/255: a real difference shows.
COLOR_TOL = 0.1 / 255


def run(ops, images, **kw):
    return ga.Pipeline(*ops, device="cpu", seed=kw.pop("seed", 0), **kw)(images, return_params=True)


@pytest.fixture(params=["cpu fused", "cpu chunks", "one pass", "cuda kernels"])
def kernel_path(request, monkeypatch):
    """Run a test every way a batch can go: as the CPU runs it (chunks; plain resized crops of
    uint8 images by torchvision's own uint8 kernel, other maps by float resampling of each image's
    read area; the color ops as one fused C kernel); the same with torch color kernels (chunks
    grouped by color passes, empty passes skipped: the CPU's path where no C compiler is found);
    as CUDA does without Triton (the whole batch in one pass, float resampling, torch kernels);
    and as CUDA does with Triton (one pass, resampling, warp and color by gpuaug.gpu_kernels, run
    by Triton's CPU interpreter; a kernel failure fails the test, no fallback)."""
    path = request.param
    if path == "cpu fused" and not ga.native.available():
        pytest.skip("the fused CPU color kernel could not be built here")
    if path != "cpu fused":
        monkeypatch.setenv("GPUAUG_NATIVE", "0")
    if path in ("one pass", "cuda kernels"):
        monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    calls = []
    if path == "cuda kernels":
        calls = route_to_kernels(monkeypatch, request.getfixturevalue("interpreted_gpu_kernels"))
    yield path
    assert path != "cuda kernels" or calls, "no Triton kernel was called"


def resized_crop_reference(img, top, left, height, width, size, path):
    """torchvision's resized crop of a uint8 photo, as the pipeline computes it on ``path``: on
    the CPU paths with torchvision's uint8 kernel (rounded to integers, as a torchvision user
    gets it), on the one-pass (CUDA) path in float."""
    if path in ("one pass", "cuda kernels"):
        return TF.resized_crop(to_float(img), top, left, height, width, size, antialias=True)
    return to_float(TF.resized_crop(img, top, left, height, width, size, antialias=True))


def rotated_crop_reference(img, crop, rot, i, size, path):
    """torchvision's resized crop of sample ``i``'s box (:func:`resized_crop_reference`), then its
    rotation (bilinear, fill 0)."""
    ref = resized_crop_reference(img, *(int(crop[k][i]) for k in ("top", "left", "height", "width")), list(size), path)
    return TF.rotate(ref, float(rot["angle"][i]), interpolation=InterpolationMode.BILINEAR, fill=0)


# ---- resize / crop ----------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [1.3, 2.0, 3.0, 4.5, 6.0])
def test_resize_psnr_against_torchvision_antialias(photos, factor):
    scores = []
    for img in photos:
        H, W = img.shape[-2:]
        size = [round(H / factor), round(W / factor)]
        ours = ga.Pipeline(ga.Resize(size), device="cpu")(img[None])[0]
        ref = TF.resize(to_float(img), size, antialias=True)
        scores.append(psnr(ours, ref))
    assert min(scores) >= 34, scores
    assert sum(scores) / len(scores) >= 40, scores


def test_plain_bilinear_fails_the_psnr_bar(photos):
    """The PSNR bar is discriminating: unfiltered bilinear sampling does not pass it."""
    img = photos[0]
    size = [img.shape[-2] // 4, img.shape[-1] // 4]
    plain = ga.Pipeline(ga.Resize(size, antialias=False), device="cpu")(img[None])[0]
    assert psnr(plain, TF.resize(to_float(img), size, antialias=True)) < 34
    assert (plain - TF.resize(to_float(img), size, antialias=False)).abs().max() < 1e-4


@pytest.mark.parametrize("size", [(150, 1), (350, 1), (1, 1), (41, 1)])
def test_resize_to_one_column_is_pils(photos, size, kernel_path):
    """An output one pixel wide whose height changes: torch's antialiased kernel for contiguous
    float tensors (what torchvision's resize runs on a float image; torch 2.14) gives wrong values
    there, 0.14-0.57 off on these photos, while its uint8 kernel and PIL (which antialias=True is
    made to match) agree. The reference is PIL's bilinear resize of each channel in float ("F"):
    gpuaug gives it on every path (torchvision's uint8 kernel's rounding on the CPU paths), and
    a 1x1 output too, where torch's uint8 kernel fails on a contiguous image (an internal assert)."""
    from PIL import Image

    img = photos[0][:, :200, :150].contiguous()
    pil = torch.stack([torch.from_numpy(np.array(Image.fromarray(c.numpy(), mode="F").resize(
        size[::-1], Image.BILINEAR))) for c in to_float(img)])
    ours = ga.Pipeline(ga.Resize(size), device="cpu")(img[None])[0]
    if kernel_path in ("one pass", "cuda kernels"):
        assert (ours - pil).abs().max() < 1e-4
    else:
        assert (ours - pil).abs().max() <= 1 / 255 + 1e-4
        tv_uint8 = TF.resize(img[None].contiguous(memory_format=torch.channels_last), list(size), antialias=True)[0]
        assert torch.equal(ours, to_float(tv_uint8))
    if size[0] not in (1, 200):  # the torch kernel this test stands in for (fixed upstream: say so in the README)
        assert (TF.resize(to_float(img).contiguous(), list(size), antialias=True) - pil).abs().max() > 0.1


@pytest.mark.parametrize("size, max_size", [(256, None), ([256], None), ((200, 300), None), ((600, 700), None),
                                            (256, 300), (None, 320)])  # [s]: the shorter side, as s
def test_resize_matches_torchvision(photos, size, max_size, kernel_path):
    for img in photos:
        ours = ga.Pipeline(ga.Resize(size, max_size=max_size), device="cpu")(img[None])[0]
        ref = TF.resize(to_float(img), size if size is None or isinstance(size, int) else list(size),
                        max_size=max_size, antialias=True)
        assert ours.shape == ref.shape
        if kernel_path in ("one pass", "cuda kernels"):
            assert (ours - ref).abs().max() < 1e-4
        else:  # torchvision's uint8 kernel (fixed-point weights): within 1/255 of its float result
            assert (ours - ref).abs().max() <= 1 / 255 + 1e-4
            assert (ours - to_float(TF.resize(img, list(ref.shape[-2:]), antialias=True))).abs().max() < 1e-6


@pytest.mark.parametrize("size, max_size", [(256, None), (7, None), ([100], 150), (None, 64), ((30, 40), None)])
def test_resize_output_sizes_over_a_batch_of_many_sizes_are_torchvisions(size, max_size):
    """A photo batch has about as many sizes as images: Resize computes its output sizes in one
    numpy pass over them. Each is the size torchvision computes (the longer side truncated,
    max_size's second scaling, repeated sizes, both orientations); a side that would be 0 pixels
    is a ValueError naming the image's size."""
    from torchvision.transforms.v2.functional._geometry import _compute_resized_output_size

    from gpuaug.transforms._base import Sizes
    rng = np.random.default_rng(0)
    sizes = [tuple(int(v) for v in rng.integers(20, 2000, 2)) for _ in range(300)] + [(375, 500), (500, 375), (375, 500)]
    op = ga.Resize(size, max_size=max_size)
    got = op.output_sizes(Sizes(per_image=sizes))
    want = [tuple(_compute_resized_output_size(hw, size if size is None or isinstance(size, list) else
                                               list(size) if isinstance(size, tuple) else [size], max_size))
            for hw in sizes]
    assert (got.per_image or [got.uniform] * len(sizes)) == want
    if size is None:  # the shorter side 64 * 20 / 1999 -> 0 pixels (64 * 40 / 1999 -> 1 before it: taken)
        with pytest.raises(ValueError, match=r"of a 20x1999 image gives a side of 0 pixels"):
            op.output_sizes(Sizes(per_image=[(300, 400), (40, 1999), (20, 1999)]))


@pytest.mark.parametrize("size", [(9, 12), (40, 31)])
def test_center_crop_of_a_batch_of_many_sizes_cuts_where_torchvision_does(size, kernel_path):
    """CenterCrop's start over a ragged batch is one numpy pass over its sizes: each image's crop
    (rounding half to even where the room is odd, padding where the image is smaller) is the one
    torchvision's center_crop cuts. Pixel values are all different, so a crop one pixel off fails."""
    rng = np.random.default_rng(1)
    shapes = [tuple(int(v) for v in rng.integers(5, 60, 2)) for _ in range(40)] + [(9, 12), (10, 13), (11, 14)]
    images = [(torch.arange(h * w, dtype=torch.float32).view(1, h, w) + 1) / (h * w + 1) for h, w in shapes]
    out = ga.Pipeline(ga.CenterCrop(size), device="cpu")(images)
    for i, img in enumerate(images):
        assert torch.equal(out[i], TF.center_crop(img, list(size))), shapes[i]


def test_kept_size_rules_of_one_size_batches_follow_each_size_and_setting():
    """A batch of one size reads Resize's output size and CenterCrop's start from rows kept for
    the process per (rule, settings, size): ops whose settings change between calls, given
    batches of other sizes, still cut and scale where torchvision does."""
    resize, crop = ga.Resize(20), ga.CenterCrop((9, 12))
    pipe = ga.Pipeline(resize, crop, device="cpu")
    for size, max_size, cut, (h, w) in [(20, None, (9, 12), (30, 41)), (20, None, (9, 12), (41, 30)),
                                        (23, None, (9, 12), (30, 41)), (23, 25, (9, 12), (30, 41)),
                                        (23, 25, (10, 11), (30, 41)), (20, None, (9, 12), (30, 41))]:
        resize.size, resize.max_size, crop.size = size, max_size, cut
        img = (torch.arange(3 * h * w, dtype=torch.float32).view(3, h, w) % 251) / 250
        ref = TF.center_crop(TF.resize(img, [size], max_size=max_size, antialias=True), list(cut))
        assert (pipe(img[None])[0] - ref).abs().max() < 1e-4, (size, max_size, cut, (h, w))


def test_random_resized_crop_per_sample(photos, kernel_path):
    out, params = run([ga.RandomResizedCrop((224, 192))], photos, seed=3)
    p = params[0]
    for i, img in enumerate(photos):
        t, l, h, w = (int(p[k][i]) for k in ("top", "left", "height", "width"))
        assert 0 <= t and t + h <= img.shape[-2] and 0 <= l and l + w <= img.shape[-1]
        ref = resized_crop_reference(img, t, l, h, w, [224, 192], kernel_path)
        assert (out[i] - ref).abs().max() < 1e-4


def _always_fallback(size, ratio) -> ga.RandomResizedCrop:
    """A RandomResizedCrop whose area no try fits (scale above 1): every crop is torchvision's
    fallback. It warns (a scale above 1 is more often percentages than meant)."""
    with pytest.warns(UserWarning, match=r"scale=\(1.5, 2.0\).*no crop fits a minimum above 1.*Percentages") as caught:
        crop = ga.RandomResizedCrop(size, scale=(1.5, 2.0), ratio=ratio)
    assert caught[0].filename == __file__
    return crop


@pytest.mark.parametrize("ratio", [(2.0, 3.0), (0.2, 0.3), (0.5, 2.0)])
def test_random_resized_crop_fallback_is_torchvisions_center_crop(photos, kernel_path, ratio):
    # An impossible area (> the image) forces the fallback: the photos are all narrower than ratio
    # 2, wider than 0.3, and inside (0.5, 2).
    out, params = run([_always_fallback(64, ratio)], photos)
    for i, img in enumerate(photos):
        tv = v2.RandomResizedCrop(64, scale=(1.5, 2.0), ratio=ratio).make_params([img])  # deterministic here
        t, l, h, w = (tv[k] for k in ("top", "left", "height", "width"))
        assert [int(params[0][k][i]) for k in ("top", "left", "height", "width")] == [t, l, h, w]
        ref = resized_crop_reference(img, t, l, h, w, [64, 64], kernel_path)
        assert (out[i] - ref).abs().max() < 1e-4


def test_random_resized_crop_fallback_of_one_size_batches_follows_each_size_and_ratio():
    """A batch of one size keeps its fallback crop on the op: one op given batches of other sizes,
    and its ratio changed between calls, gives each the crop torchvision's make_params gives."""
    op = _always_fallback(4, (2.0, 3.0))
    pipe = ga.Pipeline(op, device="cpu", seed=0)
    for ratio, (h, w) in [((2.0, 3.0), (30, 40)), ((2.0, 3.0), (50, 20)), ((0.2, 0.3), (30, 40)), ((2.0, 3.0), (30, 40))]:
        op.ratio = ratio
        _, params = pipe(torch.zeros(2, 1, h, w, dtype=torch.uint8), return_params=True)
        tv = v2.RandomResizedCrop(4, scale=(1.5, 2.0), ratio=ratio).make_params([torch.zeros(1, h, w)])
        for i in range(2):
            got = [int(params[0][k][i]) for k in ("top", "left", "height", "width")]
            assert got == [tv[k] for k in ("top", "left", "height", "width")], (ratio, (h, w), got, tv)


@pytest.mark.parametrize("ratio", [(3 / 4, 4 / 3), (2.0, 3.0), (0.2, 0.3), (0.5, 0.5), (1.0, 1.0)])
def test_random_resized_crop_fallback_of_a_ragged_batch_is_torchvisions(ratio):
    """The fallback of a ragged batch is computed on the host in one numpy pass: each image's crop
    is the one torchvision's make_params gives it, on sizes whose ratio falls below, inside and
    above the range and on its edges (rounding half to even: 3x5 at ratio 0.5 is 2.5 -> 2)."""
    rng = torch.Generator().manual_seed(0)
    sizes = [tuple(int(v) for v in torch.randint(1, 400, (2,), generator=rng)) for _ in range(60)]
    sizes += [(1, 1), (1, 399), (399, 1), (3, 5), (5, 3), (4, 3), (3, 4), (10, 5), (5, 10), (7, 7)]
    images = [torch.zeros(1, h, w, dtype=torch.uint8) for h, w in sizes]
    _, params = ga.Pipeline(_always_fallback(4, ratio), device="cpu", seed=0)(images, return_params=True)
    for i, img in enumerate(images):
        tv = v2.RandomResizedCrop(4, scale=(1.5, 2.0), ratio=ratio).make_params([img])  # no try fits: the fallback
        got = [int(params[0][k][i]) for k in ("top", "left", "height", "width")]
        assert got == [tv[k] for k in ("top", "left", "height", "width")], (sizes[i], got, tv)


def test_random_resized_crop_draws_like_torchvision(photos):
    """Sampled crops follow torchvision's distribution: area fraction and ratio inside the ranges."""
    img = photos[0]
    _, params = run([ga.RandomResizedCrop(32)], img[None].expand(512, -1, -1, -1))
    p = params[0]
    area = p["height"] * p["width"] / (img.shape[-2] * img.shape[-1])
    ratio = p["width"] / p["height"]
    assert area.min() > 0.06 and area.max() <= 1.0 and 0.4 < area.mean() < 0.65
    assert ratio.min() > 0.7 and ratio.max() < 1.4


@pytest.mark.parametrize("shape,scale,ratio", [
    ((400, 600), (0.08, 1.0), (3 / 4, 4 / 3)), ((30, 600), (0.08, 1.0), (3 / 4, 4 / 3)),
    ((400, 600), (0.0, 1.0), (3 / 4, 4 / 3)), ((2, 50), (0.08, 1.0), (10.0, 60.0))],
    ids=["photo", "strip (fallback often)", "scale from 0 (torchvision takes it)", "two rows (tries 1 pixel high)"])
def test_random_resized_crop_distribution_equals_torchvision(shape, scale, ratio):
    """Two-sample Kolmogorov-Smirnov tests, 4000 crops each, against torchvision's own make_params:
    area fraction, log aspect, and where the crop sits in the room it has."""
    from scipy.stats import ks_2samp

    img, n = torch.zeros(3, *shape, dtype=torch.uint8), 4000
    torch.manual_seed(0)
    tv = v2.RandomResizedCrop(32, scale=scale, ratio=ratio)
    theirs = torch.tensor([[float(p[k]) for k in ("top", "left", "height", "width")]
                           for p in (tv.make_params([img]) for _ in range(n))]).unbind(1)
    _, params = run([ga.RandomResizedCrop(32, scale=scale, ratio=ratio)], img[None].expand(n, -1, -1, -1), seed=1)
    ours = tuple(params[0][k].float() for k in ("top", "left", "height", "width"))

    def features(top, left, h, w):
        H, W = shape
        return [h * w / (H * W), torch.log(w / h), top / (H - h + 1), left / (W - w + 1)]

    for name, a, b in zip(("area", "log aspect", "top", "left"), features(*theirs), features(*ours)):
        result = ks_2samp(a.numpy(), b.numpy())
        assert result.pvalue > 1e-3, (name, result)


def test_flip_rotation_jitter_and_grayscale_draws_equal_torchvisions():
    """4000 draws each against torchvision's own: two-sample Kolmogorov-Smirnov tests on the
    rotation angle and each ColorJitter factor (its ``make_params``), chi-square tests on the
    order of the four adjustments (its ``fn_idx``) and on how often each ``p`` op acts (flips
    counted on a 1x2 image, grayscale on a red pixel, through torchvision's own forward)."""
    from scipy.stats import chi2_contingency, ks_2samp

    n, img = 4000, torch.zeros(3, 8, 8, dtype=torch.uint8)
    torch.manual_seed(0)
    jitter, rotation = v2.ColorJitter(0.4, (0.5, 1.2), 0.3, 0.1), v2.RandomRotation((-10, 25))
    theirs = [jitter.make_params([img]) for _ in range(n)]
    theirs_angle = [rotation.make_params([img])["angle"] for _ in range(n)]
    row = torch.tensor([[[10, 20]], [[0, 0]], [[0, 0]]], dtype=torch.uint8)  # (3, 1, 2): two shades of red
    column = row.transpose(1, 2).contiguous()
    theirs_acts = {
        "hflip": sum(bool(v2.RandomHorizontalFlip(0.3)(row)[0, 0, 0] == 20) for _ in range(n)),
        "vflip": sum(bool(v2.RandomVerticalFlip(0.7)(column)[0, 0, 0] == 20) for _ in range(n)),
        "gray": sum(bool(v2.RandomGrayscale(0.2)(row)[1, 0, 0] != 0) for _ in range(n)),
    }
    ops = [ga.RandomHorizontalFlip(0.3), ga.RandomVerticalFlip(0.7), ga.RandomRotation((-10, 25)),
           ga.ColorJitter(0.4, (0.5, 1.2), 0.3, 0.1), ga.RandomGrayscale(0.2)]
    _, (hflip, vflip, angle, ours, gray) = run(ops, img[None].expand(n, -1, -1, -1), seed=1)

    pairs = [("angle", theirs_angle, angle["angle"])] + [
        (name, [p[f"{name}_factor"] for p in theirs], ours[name]) for name in ("brightness", "contrast", "saturation", "hue")]
    for name, a, b in pairs:
        result = ks_2samp(torch.tensor(a, dtype=torch.float64).numpy(), b.double().numpy())
        assert result.pvalue > 1e-3, (name, result)

    def counts(orders):  # how often each of the 24 orders was drawn
        codes = [int("".join(map(str, o))) for o in orders]
        return [codes.count(c) for c in sorted(set(codes))]

    theirs_orders = counts(p["fn_idx"].tolist() for p in theirs)
    ours_orders = counts(ours["order"].tolist())
    assert len(theirs_orders) == len(ours_orders) == 24
    assert chi2_contingency([theirs_orders, ours_orders]).pvalue > 1e-3
    for name, drawn in (("hflip", hflip["flip"]), ("vflip", vflip["flip"]), ("gray", gray["gray"])):
        acted = int(drawn.sum())
        table = [[theirs_acts[name], n - theirs_acts[name]], [acted, n - acted]]
        assert chi2_contingency(table).pvalue > 1e-3, (name, table)


@pytest.mark.parametrize("size", [(200, 150), (700, 300)])
def test_center_crop_matches_torchvision_including_padding(photos, size):
    for img in photos:
        ours = ga.Pipeline(ga.CenterCrop(size), device="cpu")(img[None])[0]
        ref = TF.center_crop(to_float(img), list(size))
        assert (ours - ref).abs().max() < 1e-4


def test_resize_then_center_crop_on_a_ragged_list(photos, kernel_path):
    """The validation transform: on the CPU paths, a uint8 image is resized whole by torchvision's
    uint8 kernel and cropped, as torchvision does it (so its very integers); in float elsewhere."""
    out = ga.Pipeline(ga.Resize(256), ga.CenterCrop(224), device="cpu")(photos)
    for i, img in enumerate(photos):
        ref = TF.center_crop(TF.resize(to_float(img), 256, antialias=True), [224, 224])
        if kernel_path in ("one pass", "cuda kernels"):
            assert (out[i] - ref).abs().max() < 1e-4
        else:
            assert (out[i] - ref).abs().max() <= 1 / 255 + 1e-4
            assert (out[i] - to_float(TF.center_crop(TF.resize(img, 256, antialias=True), [224, 224]))).abs().max() < 1e-6


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_bicubic_resized_crops_and_resize_per_sample(photos, kernel_path, dtype):
    """interpolation=BICUBIC (antialiased): resized crops per sample, down and up, and the validation
    transform, on every path in float, clamped to [0, 1] (as torchvision computes a uint8 image on
    CUDA; its CPU uint8 kernel clamps between its two passes too, and it does not clamp a float
    image's overshoot: the README states both)."""
    bicubic = InterpolationMode.BICUBIC
    images = photos * 2 if dtype == torch.uint8 else [to_float(p) for p in photos * 2]

    overshoot = []

    def reference(img, resize):
        ref = resize(to_float(img) if dtype == torch.uint8 else img)
        overshoot.append(bool(ref.amin() < 0 or ref.amax() > 1))
        return ref.clamp(0, 1)

    ops = [ga.RandomResizedCrop((120, 150), scale=(0.02, 1.0), interpolation=bicubic), ga.RandomHorizontalFlip()]
    out, params = run(ops, images, seed=17)
    scales = []
    for i, img in enumerate(images):
        box = [int(params[0][k][i]) for k in ("top", "left", "height", "width")]
        scales.append(box[2] / 120)
        ref = reference(img, lambda t: TF.resized_crop(t, *box, [120, 150], interpolation=bicubic, antialias=True))
        ref = TF.horizontal_flip(ref) if params[1]["flip"][i] else ref
        assert (out[i] - ref).abs().max() < 1e-4, (i, box)
    assert min(scales) < 1 < max(scales)  # up and down
    assert out.amin() >= 0 and out.amax() <= 1 and sum(overshoot) > len(images) // 2  # clamped where it overshot
    out = ga.Pipeline(ga.Resize(100, interpolation=bicubic), ga.CenterCrop(96), device="cpu")(images)
    for i, img in enumerate(images):
        ref = reference(img, lambda t: TF.center_crop(TF.resize(t, 100, interpolation=bicubic, antialias=True), [96, 96]))
        assert (out[i] - ref).abs().max() < 1e-4, i


def random_crop_reference(img, top, left, kwargs):
    """torchvision's RandomCrop transform for a corner given in image coordinates: its own padding
    rule (make_params' ``padding``, deterministic), F.pad with zeros, then F.crop."""
    tv = v2.RandomCrop(**kwargs)
    pad_left, pad_top, pad_right, pad_bottom = tv.make_params([img])["padding"]
    padded = TF.pad(to_float(img), [pad_left, pad_top, pad_right, pad_bottom], fill=0,
                    padding_mode=kwargs.get("padding_mode", "constant"))
    (h, w), (ph, pw) = tv.size, padded.shape[-2:]
    assert 0 <= top + pad_top <= ph - h and 0 <= left + pad_left <= pw - w, "a corner torchvision cannot draw"
    return TF.crop(padded, top + pad_top, left + pad_left, h, w)


RANDOM_CROPS = [dict(size=32, padding=4), dict(size=(300, 460), padding=(8, 3)), dict(size=(224, 224)),
                dict(size=(520, 700), pad_if_needed=True),
                dict(size=(260, 300), padding=(1, 2, 3, 4), pad_if_needed=True),
                dict(size=(300, 460), padding=(8, 3), padding_mode="reflect"),
                dict(size=(320, 470), padding=(9, 12, 12, 30), padding_mode="symmetric"),
                dict(size=(320, 470), padding=5, pad_if_needed=True, padding_mode="edge")]


@pytest.mark.parametrize("kwargs", RANDOM_CROPS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_random_crop_per_sample(photos, kernel_path, kwargs):
    """Ragged photos, each its own corner, through every kernel path: torchvision's pad + crop."""
    images = photos * 3
    out, params = run([ga.RandomCrop(**kwargs), ga.RandomHorizontalFlip()], images, seed=2)
    for i, img in enumerate(images):
        ref = random_crop_reference(img, int(params[0]["top"][i]), int(params[0]["left"][i]), kwargs)
        if params[1]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert out[i].shape == ref.shape and (out[i] - ref).abs().max() < 1e-4, i


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_random_crop_of_a_stacked_batch_per_sample(small_photos, kernel_path, mode):
    """The CIFAR recipe on a (B, 3, 32, 32) uint8 batch (the CPU gathers its pixels: no resampling)."""
    images = torch.stack([TF.resize(TF.center_crop(p, [96, 96]), [32, 32], antialias=True) for p in small_photos] * 8)
    images = TF.to_dtype(images, torch.uint8, scale=True)
    kwargs = dict(size=32, padding=4, padding_mode=mode)
    out, params = run([ga.RandomCrop(**kwargs), ga.RandomHorizontalFlip(), ga.RandomVerticalFlip()], images, seed=13)
    for i, img in enumerate(images):
        ref = random_crop_reference(img, int(params[0]["top"][i]), int(params[0]["left"][i]), kwargs)
        ref = TF.horizontal_flip(ref) if params[1]["flip"][i] else ref
        ref = TF.vertical_flip(ref) if params[2]["flip"][i] else ref
        assert (out[i] - ref).abs().max() < 1e-6, i


def test_random_crop_after_resize_and_before_rotation(photos, kernel_path):
    """The CIFAR-style crop composes with a resize before it and a rotation after it."""
    out, params = run([ga.Resize((64, 80)), ga.RandomCrop(56, padding=6), ga.RandomRotation((25, 25))], photos, seed=4)
    for i, img in enumerate(photos):
        resized = TF.resize(img, [64, 80], antialias=True)
        crop = random_crop_reference(resized, int(params[1]["top"][i]), int(params[1]["left"][i]),
                                     dict(size=56, padding=6))
        ref = TF.rotate(crop, 25.0, interpolation=InterpolationMode.BILINEAR)
        disc = central_disc(56, 56)
        assert (out[i] - ref)[:, disc].abs().max() < 2 / 255, i


@pytest.mark.parametrize("resize", [(20, 24), (150, 170)], ids=["down", "up"])
def test_padding_then_resize_filters_the_zeros_in_as_torchvision(small_photos, kernel_path, resize):
    """A crop that pads (RandomCrop's padding, a CenterCrop larger than the image) and then a resize:
    torchvision's filter mixes the zero border into the pixels next to it; the output must too (and
    the mirrored border of reflect padding)."""
    images = [TF.to_dtype(TF.center_crop(p, [60, 70]), torch.uint8, scale=True) for p in small_photos]
    out, params = run([ga.RandomCrop((72, 90), padding=(10, 8)), ga.Resize(resize)], images, seed=6)
    reflect = ga.RandomCrop((72, 90), padding=(10, 8), padding_mode="reflect")
    mirrored, m_params = run([reflect, ga.Resize(resize)], images, seed=6)
    centered = ga.Pipeline(ga.CenterCrop((100, 90)), ga.Resize(resize), device="cpu")(images)
    for i, img in enumerate(images):
        crop = random_crop_reference(img, int(params[0]["top"][i]), int(params[0]["left"][i]),
                                     dict(size=(72, 90), padding=(10, 8)))
        assert (out[i] - TF.resize(crop, list(resize), antialias=True)).abs().max() < 1e-4, i
        ref = TF.resize(TF.center_crop(to_float(img), [100, 90]), list(resize), antialias=True)
        assert (centered[i] - ref).abs().max() < 1e-4, i
        crop = random_crop_reference(img, int(m_params[0]["top"][i]), int(m_params[0]["left"][i]),
                                     dict(size=(72, 90), padding=(10, 8), padding_mode="reflect"))
        assert (mirrored[i] - TF.resize(crop, list(resize), antialias=True)).abs().max() < 1e-4, i


@pytest.mark.parametrize("fill", [0.2, (51 / 255, 128 / 255, 230 / 255)], ids=["one value", "per channel"])
def test_random_crop_fill_per_sample(small_photos, kernel_path, fill):
    """RandomCrop's fill: torchvision pads the uint8 image with it (in 0-255 there, in [0, 1] here),
    crops, and any resize after filters the fill into the border; a rotation after it has its own."""
    images = [TF.to_dtype(TF.center_crop(p, [60, 70]), torch.uint8, scale=True) for p in small_photos] * 2
    tv_fill = [round(f * 255) for f in ((fill,) if isinstance(fill, float) else fill)]
    kwargs = dict(size=(64, 80), padding=(10, 8), pad_if_needed=True)

    def reference(img, top, left):
        tv = v2.RandomCrop(**kwargs, fill=tv_fill)
        pad_left, pad_top, pad_right, pad_bottom = tv.make_params([img])["padding"]
        padded = TF.pad(img, [pad_left, pad_top, pad_right, pad_bottom], fill=tv_fill)
        return to_float(TF.crop(padded, top + pad_top, left + pad_left, 64, 80))

    crop = ga.RandomCrop(**kwargs, fill=fill)
    out, params = run([crop, ga.RandomHorizontalFlip()], images, seed=10)
    resized, r_params = run([crop, ga.Resize((20, 24))], images, seed=11)
    rotated, o_params = run([crop, ga.RandomRotation((30, 30), fill=0.7)], images, seed=12)
    centred, c_params = run([crop, ga.CenterCrop((56, 70))], images, seed=13)  # smaller: no padding of its own
    for i, img in enumerate(images):
        ref = TF.center_crop(reference(img, int(c_params[0]["top"][i]), int(c_params[0]["left"][i])), [56, 70])
        assert (centred[i] - ref).abs().max() < 1e-4, i
        ref = reference(img, int(params[0]["top"][i]), int(params[0]["left"][i]))
        ref = TF.horizontal_flip(ref) if params[1]["flip"][i] else ref
        assert (out[i] - ref).abs().max() < 1e-4, i
        ref = TF.resize(reference(img, int(r_params[0]["top"][i]), int(r_params[0]["left"][i])), [20, 24], antialias=True)
        assert (resized[i] - ref).abs().max() < 1e-4, i
        ref = TF.rotate(reference(img, int(o_params[0]["top"][i]), int(o_params[0]["left"][i])), 30.0,
                        interpolation=InterpolationMode.BILINEAR, fill=[0.7])
        assert (rotated[i] - ref).abs().max() < 1e-4, i  # the whole image: both fills
    assert (out == torch.tensor(fill).view(-1, 1, 1)).all(1).float().mean() > 0.05  # the fill is there


@pytest.mark.parametrize("kwargs", [dict(fill=0.3), dict(fill=(0.2, 0.5, 0.9)), dict(padding_mode="edge"),
                                    dict(padding_mode="reflect"), dict(padding_mode="symmetric")],
                         ids=["fill", "fill per channel", "edge", "reflect", "symmetric"])
def test_a_crop_that_never_pads_leaves_the_zeros_another_padded_with(small_photos, kernel_path, kwargs):
    """A pad_if_needed crop with a fill or a copying mode, after a CenterCrop larger than some
    images (torchvision pads those with zeros) and no smaller than the crop: it never pads, so its
    fill or mode shows nowhere, and what it cuts of the CenterCrop's padding is zeros (gpuaug once
    gave its fill, or copies of pixels, there)."""
    images = [TF.to_dtype(TF.center_crop(p, list(hw)), torch.uint8, scale=True)
              for p, hw in zip(small_photos, [(50, 60), (90, 100), (70, 130), (40, 44)])] * 2
    crop = ga.RandomCrop((48, 56), pad_if_needed=True, **kwargs)
    out, params = run([ga.CenterCrop((80, 90)), crop, ga.RandomHorizontalFlip()], images, seed=14)
    zeros = 0
    for i, img in enumerate(images):
        ref = TF.crop(TF.center_crop(to_float(img), [80, 90]), int(params[1]["top"][i]), int(params[1]["left"][i]), 48, 56)
        ref = TF.horizontal_flip(ref) if params[2]["flip"][i] else ref
        assert (out[i] - ref).abs().max() < 1e-4, i
        zeros += (ref == 0).all(0).sum().item()
    assert zeros > 1000  # the crops cut into the CenterCrop's padding


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric"])
def test_copying_padding_read_from_the_whole_image_by_small_crops(small_photos, kernel_path, mode):
    """Small crops of a widely padded image land partly or wholly in the padding, where the mode
    copies pixels from anywhere in the image (not only from the crop): torchvision's pad + crop, and
    a resized crop after it."""
    images = [TF.to_dtype(TF.center_crop(p, [40, 50]), torch.uint8, scale=True) for p in small_photos] * 3
    kwargs = dict(size=(9, 7), padding=(30, 25), padding_mode=mode)
    out, params = run([ga.RandomCrop(**kwargs), ga.RandomHorizontalFlip()], images, seed=8)
    inside = 0
    for i, img in enumerate(images):
        top, left = int(params[0]["top"][i]), int(params[0]["left"][i])
        inside += top >= 0 and left >= 0 and top + 9 <= 40 and left + 7 <= 50
        ref = random_crop_reference(img, top, left, kwargs)
        ref = TF.horizontal_flip(ref) if params[1]["flip"][i] else ref
        assert (out[i] - ref).abs().max() < 1e-4, (i, top, left)
    assert inside < len(images) // 2  # most crops reach into the padding
    kwargs = dict(size=(60, 70), padding=(20, 25), padding_mode=mode)
    out, params = run([ga.RandomCrop(**kwargs), ga.RandomResizedCrop((16, 20), scale=(0.05, 0.3))], images, seed=9)
    for i, img in enumerate(images):
        crop = random_crop_reference(img, int(params[0]["top"][i]), int(params[0]["left"][i]), kwargs)
        box = [int(params[1][k][i]) for k in ("top", "left", "height", "width")]
        assert (out[i] - TF.resized_crop(crop, *box, [16, 20], antialias=True)).abs().max() < 1e-4, (i, box)


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric"])
def test_copying_padding_after_a_resize_copies_resized_pixels(small_photos, kernel_path, mode):
    """A crop that copies pixels after a resize pads the resized image, as torchvision runs it
    (resize, pad, crop): its padding holds copies of resized pixels, through flips and a crop after
    it; after a resized crop, and before a centre crop and a rotation (whose fill rule covers the
    whole output)."""
    images = [TF.to_dtype(TF.center_crop(p, [60 + 7 * i, 70 + 5 * i]), torch.uint8, scale=True)
              for i, p in enumerate(small_photos)] * 2
    kwargs = dict(size=(36, 44), padding=(12, 9), padding_mode=mode)  # left/right 12, top/bottom 9
    ops = [ga.Resize((40, 48)), ga.RandomCrop(**kwargs), ga.RandomHorizontalFlip(), ga.RandomVerticalFlip(),
           ga.RandomCrop((30, 40))]
    out, params = run(ops, images, seed=14)
    padded = 0
    for i, img in enumerate(images):
        top, left = int(params[1]["top"][i]), int(params[1]["left"][i])
        padded += top < 0 or left < 0 or top + 36 > 40 or left + 44 > 48
        ref = random_crop_reference(TF.resize(to_float(img), [40, 48], antialias=True), top, left, kwargs)
        ref = TF.horizontal_flip(ref) if params[2]["flip"][i] else ref
        ref = TF.vertical_flip(ref) if params[3]["flip"][i] else ref
        ref = TF.crop(ref, int(params[4]["top"][i]), int(params[4]["left"][i]), 30, 40)
        assert (out[i] - ref).abs().max() < 1e-4, (i, top, left)
    assert padded >= len(images) // 2
    kwargs = dict(size=(9, 7), padding=(30, 25), padding_mode=mode)  # crops mostly in the padding, some wholly
    out, params = run([ga.Resize((40, 50)), ga.RandomCrop(**kwargs), ga.RandomHorizontalFlip()], images, seed=16)
    outside = 0
    for i, img in enumerate(images):
        top, left = int(params[1]["top"][i]), int(params[1]["left"][i])
        outside += top + 9 <= 0 or left + 7 <= 0 or top >= 40 or left >= 50
        ref = random_crop_reference(TF.resize(to_float(img), [40, 50], antialias=True), top, left, kwargs)
        ref = TF.horizontal_flip(ref) if params[2]["flip"][i] else ref
        assert (out[i] - ref).abs().max() < 1e-4, (i, top, left)
    assert outside >= 2
    kwargs = dict(size=32, padding=6, padding_mode=mode)
    ops = [ga.RandomResizedCrop((30, 36), scale=(0.2, 1.0)), ga.RandomCrop(**kwargs), ga.CenterCrop(28),
           ga.RandomRotation((20, 20))]  # a CenterCrop smaller than the crop before it: no padding of its own
    out, params = run(ops, images, seed=15)
    for i, img in enumerate(images):
        box = [int(params[0][k][i]) for k in ("top", "left", "height", "width")]
        crop = TF.resized_crop(to_float(img), *box, [30, 36], antialias=True)
        ref = random_crop_reference(crop, int(params[1]["top"][i]), int(params[1]["left"][i]), kwargs)
        ref = TF.rotate(TF.center_crop(ref, [28, 28]), 20.0, interpolation=InterpolationMode.BILINEAR, fill=[0.0])
        assert (out[i] - ref).abs().max() < 1e-4, (i, box)


@pytest.mark.parametrize("kwargs,shape", [(dict(size=32, padding=4), (40, 48)),
                                          (dict(size=(20, 30), padding=(0, 5), pad_if_needed=True), (24, 28)),
                                          (dict(size=(20, 24), padding=(1, 2, 3, 4)), (30, 30))])
def test_random_crop_corner_is_uniform_over_torchvisions_range(kwargs, shape):
    """Every corner torchvision can draw, uniformly (chi-square over 6000 draws), and nothing else."""
    from scipy.stats import chisquare

    img, n = torch.zeros(3, *shape, dtype=torch.uint8), 6000
    tv = v2.RandomCrop(**kwargs)
    torch.manual_seed(0)
    theirs = [tv.make_params([img]) for _ in range(400)]
    pad_left, pad_top = theirs[0]["padding"][:2]
    _, params = run([ga.RandomCrop(**kwargs)], img[None].expand(n, -1, -1, -1), seed=1)
    for axis, pad, key in ((0, pad_top, "top"), (1, pad_left, "left")):
        ours = params[0][key].long() + pad  # in torchvision's padded coordinates
        span = {p[key] for p in theirs}
        assert len(span) > 2, span  # a range to test
        assert set(ours.tolist()) == set(range(min(span), max(span) + 1)) == span, key
        counts = torch.bincount(ours - min(span)).numpy()
        assert chisquare(counts).pvalue > 1e-3, (key, counts)


# ---- flips and rotation ---------------------------------------------------------------------


# Where a default differs from torchvision's on purpose (README: "Ops"); any other must be its.
DEFAULTS_OF_OUR_OWN = {("RandomRotation", "interpolation"): "bilinear (torchvision: nearest)",
                       **{("ColorJitter", k): "0 (torchvision: None, the same: no change)"
                          for k in ("brightness", "contrast", "saturation", "hue")}}


@pytest.mark.parametrize("name", ["RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomRotation",
                                  "RandomHorizontalFlip", "RandomVerticalFlip", "RandomGrayscale", "ColorJitter",
                                  "Normalize"])
def test_defaults_are_torchvisions(name):
    import inspect

    ours, theirs = (inspect.signature(getattr(module, name)).parameters for module in (ga, v2))
    for arg, their in theirs.items():
        assert arg in ours, f"{name} lacks torchvision's {arg}"
        if (name, arg) not in DEFAULTS_OF_OUR_OWN:
            assert ours[arg].default == their.default, (name, arg, ours[arg].default, their.default)
    # and applied: a flip left at its default flips about half a batch, as torchvision's p=0.5
    if name in ("RandomHorizontalFlip", "RandomVerticalFlip", "RandomGrayscale"):
        _, params = ga.Pipeline(getattr(ga, name)(), device="cpu", seed=0)(torch.rand(4000, 1, 2, 2), return_params=True)
        drawn = next(iter(params[0].values())).float().mean().item()
        assert abs(drawn - getattr(v2, name)().p) < 0.03


def test_flips_with_p1(photos):
    img = photos[1]
    h = ga.Pipeline(ga.RandomHorizontalFlip(1.0), device="cpu")(img[None])[0]
    v = ga.Pipeline(ga.RandomVerticalFlip(1.0), device="cpu")(img[None])[0]
    assert (h - TF.horizontal_flip(to_float(img))).abs().max() < 1e-5
    assert (v - TF.vertical_flip(to_float(img))).abs().max() < 1e-5


def test_flip_after_resized_crop_per_sample(photos, kernel_path):
    out, params = run([ga.RandomResizedCrop(128), ga.RandomHorizontalFlip(0.5)], photos * 4, seed=5)
    crop, flip = params
    assert 0 < int(flip["flip"].sum()) < len(photos) * 4
    for i, img in enumerate(photos * 4):
        box = (int(crop[k][i]) for k in ("top", "left", "height", "width"))
        ref = resized_crop_reference(img, *box, [128, 128], kernel_path)
        if flip["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert (out[i] - ref).abs().max() < 1e-4


@pytest.mark.parametrize("angle", [30.0, -12.5, 90.0, 170.0])
def test_rotation_matches_torchvision(small_photos, angle, kernel_path):
    x = torch.stack(small_photos)
    out = ga.Pipeline(ga.RandomRotation((angle, angle)), device="cpu")(x)
    disc = central_disc(*x.shape[-2:])
    for i in range(len(x)):
        ref = TF.rotate(x[i], angle, interpolation=InterpolationMode.BILINEAR, fill=0)
        assert (out[i] - ref).abs().amax(0)[disc].max() < 1e-4
        assert (out[i] - ref).abs().max() < 1e-3  # corners too: torchvision's fill rule


def test_functional_warp_affine_rotates_as_torchvision_per_sample(small_photos):
    """The public kernels: ``warp_affine`` with ``rotation_matrix``, by their defaults (bilinear,
    torchvision's fill rule), each sample its own angle."""
    x = torch.stack(small_photos)
    angles = torch.tensor([30.0, -12.5, 90.0, 170.0, 3.0])[: len(x)]
    fill = torch.tensor([0.2, 0.5, 0.8])
    for f in (None, fill):
        out = gaF.warp_affine(x, gaF.rotation_matrix(angles, *x.shape[-2:]), f)
        for i in range(len(x)):
            ref = TF.rotate(x[i], float(angles[i]), interpolation=InterpolationMode.BILINEAR,
                            fill=0 if f is None else f.tolist())
            assert (out[i] - ref).abs().max() < 1e-3


@pytest.mark.parametrize("center", [(10, 20), (100.5, 90), (-30, 50)])
@pytest.mark.parametrize("odd", [False, True], ids=["even sizes", "odd sizes"])
def test_rotation_about_a_center_matches_torchvision(small_photos, kernel_path, center, odd):
    """torchvision's ``center`` ((x, y) pixels of the rotated image), then a flip (its matrix
    composes with the rotation's shift) and per sample angles; odd sizes too, whose image
    center is not a whole pixel."""
    x = torch.stack(small_photos * 2)
    if odd:
        x = x[..., :95, :127]
    out, (rot, flip) = run([ga.RandomRotation(40, center=center, fill=0.3), ga.RandomHorizontalFlip()], x, seed=3)
    assert 0 < int(flip["flip"].sum()) < len(x)
    for i in range(len(x)):
        ref = TF.rotate(x[i], float(rot["angle"][i]), interpolation=InterpolationMode.BILINEAR,
                        center=list(center), fill=0.3)
        if flip["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert (out[i] - ref).abs().max() < 1e-3  # the whole image: torchvision's fill rule


def test_rotation_fill_none_is_torchvisions_plain_zero_padding(small_photos, kernel_path):
    """torchvision's fill=None: bilinear sampling with zero padding and no fill rule, which at
    fill=0 darkens the edge pixels once more; both as torchvision's, and not the same."""
    x = torch.stack(small_photos)
    none = ga.Pipeline(ga.RandomRotation((33, 33), fill=None), device="cpu")(x)
    zero = ga.Pipeline(ga.RandomRotation((33, 33), fill=0), device="cpu")(x)
    for i in range(len(x)):
        ref = TF.rotate(x[i], 33.0, interpolation=InterpolationMode.BILINEAR, fill=None)
        assert (none[i] - ref).abs().max() < 1e-3
    assert (none - zero).abs().max() > 0.05


def _nearest_ties(h: int, w: int, angle: float, center=None) -> torch.Tensor:
    """``(h, w)`` bool: the output pixels whose source coordinate (float64, from torchvision's own
    inverse matrix) lies within 1e-3 px of the midpoint of two source pixels. There float noise
    picks the nearest pixel (torchvision's CPU and CUDA grids can pick differently, too)."""
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    shift = [0.0, 0.0] if center is None else [center[0] - w / 2, center[1] - h / 2]
    a, b, c, d, e, f = _get_inverse_affine_matrix(shift, -angle, [0.0, 0.0], 1.0, [0.0, 0.0])
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5 - h / 2,
                          torch.arange(w, dtype=torch.float64) + 0.5 - w / 2, indexing="ij")
    source_x, source_y = a * x + b * y + c + w / 2 - 0.5, d * x + e * y + f + h / 2 - 0.5
    return ((source_x - source_x.floor() - 0.5).abs() < 1e-3) | ((source_y - source_y.floor() - 0.5).abs() < 1e-3)


@pytest.mark.parametrize("fill", [0, 0.3, None])
def test_rotation_nearest_matches_torchvision_per_sample(small_photos, kernel_path, fill):
    """interpolation=NEAREST (torchvision's default): each output pixel is the source pixel nearest
    its source coordinate, the fill where that is outside; per sample angles, a flip after it,
    a center; exact but where two source pixels tie."""
    x = torch.stack(small_photos * 2)
    nearest = InterpolationMode.NEAREST
    tv_fill = None if fill is None else [fill]
    for center in (None, (30, 70)):
        ops = [ga.RandomRotation(180, interpolation=nearest, center=center, fill=fill), ga.RandomHorizontalFlip()]
        out, (rot, flip) = run(ops, x, seed=21)
        assert 0 < int(flip["flip"].sum()) < len(x)
        for i in range(len(x)):
            angle = float(rot["angle"][i])
            ref = TF.rotate(x[i], angle, interpolation=nearest, center=None if center is None else list(center),
                            fill=tv_fill)
            ties = _nearest_ties(96, 128, angle, center)
            if flip["flip"][i]:
                ref, ties = TF.horizontal_flip(ref), ties.flip(-1)
            assert ties.float().mean() < 0.01
            assert (out[i] - ref).abs().amax(0)[~ties].max() < 1e-6, (i, angle)
    # Degenerate angles: exact where nothing ties (a quarter turn of an image with an odd and an
    # even side ties everywhere: float noise picks there, which the README says).
    for angle in (90.0, -30.0):
        out = ga.Pipeline(ga.RandomRotation((angle, angle), interpolation=nearest, fill=fill), device="cpu")(x)
        ties = _nearest_ties(96, 128, angle)
        assert ties.float().mean() < 0.01
        for i in range(len(x)):
            ref = TF.rotate(x[i], angle, interpolation=nearest, fill=tv_fill)
            assert (out[i] - ref).abs().amax(0)[~ties].max() < 1e-6, (i, angle)


@pytest.mark.parametrize("fill", [(0.2, 0.5, 0.9), (0.0, 1.0, 1.0)])  # (and the range's ends)
def test_rotation_fill_per_channel(small_photos, kernel_path, fill):
    x = small_photos[0]
    out = ga.Pipeline(ga.RandomRotation((40, 40), fill=fill), device="cpu")(x[None])[0]
    ref = TF.rotate(x, 40, interpolation=InterpolationMode.BILINEAR, fill=list(fill))
    assert (out - ref).abs().max() < 1e-3
    assert out[:, 0, 0].tolist() == pytest.approx(fill, abs=1e-4)


def test_rotation_per_sample_after_crop_and_flips(photos, kernel_path):
    ops = [ga.RandomResizedCrop((160, 128)), ga.RandomHorizontalFlip(), ga.RandomVerticalFlip(), ga.RandomRotation(25)]
    out, (crop, hflip, vflip, rot) = run(ops, photos * 3, seed=11)
    assert 0 < int((hflip["flip"] & vflip["flip"]).sum()) and 0 < int((hflip["flip"] ^ vflip["flip"]).sum())
    disc = central_disc(160, 128)
    for i, img in enumerate(photos * 3):
        ref = resized_crop_reference(img, *(int(crop[k][i]) for k in ("top", "left", "height", "width")), [160, 128],
                                     kernel_path)
        if hflip["flip"][i]:
            ref = TF.horizontal_flip(ref)
        if vflip["flip"][i]:
            ref = TF.vertical_flip(ref)
        ref = TF.rotate(ref, float(rot["angle"][i]), interpolation=InterpolationMode.BILINEAR, fill=0)
        assert (out[i] - ref).abs().amax(0)[disc].max() < 1e-4


def test_flips_after_a_rotation_per_sample(photos, kernel_path):
    """Flips after RandomRotation ride on its matrix (no pass of their own): each sample equals
    torchvision's rotate, then its flips, with that sample's draws. (Until 2026-12-06 the composition
    sweeps put only horizontal flips after a rotation.)"""
    ops = [ga.RandomResizedCrop((120, 96)), ga.RandomRotation(30), ga.RandomVerticalFlip(), ga.RandomHorizontalFlip(0.7)]
    out, (crop, rot, vflip, hflip) = run(ops, photos * 3, seed=4)
    assert 0 < int(vflip["flip"].sum()) < len(out) and 0 < int(hflip["flip"].sum()) < len(out)
    disc = central_disc(120, 96)
    for i, img in enumerate(photos * 3):
        ref = rotated_crop_reference(img, crop, rot, i, (120, 96), kernel_path)
        if vflip["flip"][i]:
            ref = TF.vertical_flip(ref)
        if hflip["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert (out[i] - ref).abs().amax(0)[disc].max() < 1e-4, i


@pytest.mark.parametrize("crops", [[(90, 120)], [(130, 170)], [(101, 133), (60, 61)]],
                         ids=["inside", "padded", "two crops, odd"])
def test_center_crop_after_rotation_cuts_the_rotated_image(photos, kernel_path, crops):
    """torchvision's idiom to hide the corners: rotate (+ flip), then CenterCrop; color after it."""
    ops = [ga.RandomResizedCrop((120, 160)), ga.RandomRotation(30), ga.RandomHorizontalFlip(),
           *(ga.CenterCrop(c) for c in crops), ga.ColorJitter(contrast=(0.6, 0.6))]
    out, (crop, rot, flip, *_) = run(ops, photos * 2, seed=4)
    assert out.shape[-2:] == crops[-1]
    for i, img in enumerate(photos * 2):
        ref = rotated_crop_reference(img, crop, rot, i, (120, 160), kernel_path)
        if flip["flip"][i]:
            ref = TF.horizontal_flip(ref)
        for c in crops:
            ref = TF.center_crop(ref, list(c))
        ref = TF.adjust_contrast(ref, 0.6)
        assert (out[i] - ref).abs().max() < 1e-3  # the whole image: torchvision's fill rule and padding


# ---- color ------------------------------------------------------------------------------------

COLOR_CASES = [
    (dict(brightness=(1.3, 1.3)), lambda x: TF.adjust_brightness(x, 1.3)),
    (dict(brightness=(0.4, 0.4)), lambda x: TF.adjust_brightness(x, 0.4)),
    (dict(contrast=(1.6, 1.6)), lambda x: TF.adjust_contrast(x, 1.6)),
    (dict(contrast=(0.3, 0.3)), lambda x: TF.adjust_contrast(x, 0.3)),
    (dict(saturation=(1.8, 1.8)), lambda x: TF.adjust_saturation(x, 1.8)),
    (dict(saturation=(0.0, 0.0)), lambda x: TF.adjust_saturation(x, 0.0)),
    (dict(hue=(0.2, 0.2)), lambda x: TF.adjust_hue(x, 0.2)),
    (dict(hue=(-0.45, -0.45)), lambda x: TF.adjust_hue(x, -0.45)),
    (dict(hue=(0.5, 0.5)), lambda x: TF.adjust_hue(x, 0.5)),
]


@pytest.mark.parametrize("kwargs,reference", COLOR_CASES)
def test_color_jitter_single_adjustment(small_photos, kwargs, reference, kernel_path):
    x = torch.stack(small_photos)
    out = ga.Pipeline(ga.ColorJitter(**kwargs), device="cpu")(x)
    for i in range(len(x)):
        assert (out[i] - reference(x[i])).abs().max() <= COLOR_TOL


@pytest.mark.parametrize("name", ["adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue"])
def test_functional_color_kernels_per_sample_and_scalar(small_photos, name):
    x = torch.stack(small_photos * 2)
    factors = torch.tensor([0.0, 0.3, 0.7, 1.0, 1.2, 1.6, 2.5, 0.9])
    if name == "adjust_hue":
        factors = torch.linspace(-0.5, 0.5, 8)
    ours, reference = getattr(gaF, name), getattr(TF, name)
    out = ours(x, factors)
    for i in range(len(x)):
        assert (out[i] - reference(x[i], float(factors[i]))).abs().max() <= COLOR_TOL
    assert (ours(x, float(factors[5])) - reference(x, float(factors[5]))).abs().max() <= COLOR_TOL
    gray = TF.rgb_to_grayscale(x)  # one channel: saturation and hue change nothing, as in torchvision
    assert (ours(gray, factors) - torch.stack([reference(g, float(f)) for g, f in zip(gray, factors)])).abs().max() <= COLOR_TOL


def test_rgb_to_grayscale_kernel(small_photos):
    x = torch.stack(small_photos)
    assert (gaF.rgb_to_grayscale(x) - TF.rgb_to_grayscale(x)).abs().max() <= 1e-6
    gray = TF.rgb_to_grayscale(x)  # one channel: the image, as new memory (the kernels' contract)
    out = gaF.rgb_to_grayscale(gray)
    assert torch.equal(out, TF.rgb_to_grayscale(gray)) and out.data_ptr() != gray.data_ptr()


def test_adjust_hue_kernel_on_ties_and_grays():
    # Six levels per channel: many pixels have two or three channels equal (ties pick the max
    # channel in torchvision's order) or no chroma at all; every hue sector is hit.
    x = torch.randint(0, 6, (8, 3, 32, 32), generator=torch.Generator().manual_seed(0)).float() / 5
    for factor in (-0.5, -0.45, -0.2, -0.01, 0.0, 0.1, 1 / 3, 0.5):
        assert (gaF.adjust_hue(x, factor) - TF.adjust_hue(x, factor)).abs().max() <= 1e-5
    factors = torch.linspace(-0.5, 0.5, 8)
    out = gaF.adjust_hue(x, factors)
    for i in range(len(x)):
        assert (out[i] - TF.adjust_hue(x[i], float(factors[i]))).abs().max() <= 1e-5


def test_hue_on_ties_and_grays_through_the_pipeline(kernel_path):
    x = torch.randint(0, 6, (8, 3, 32, 32), generator=torch.Generator().manual_seed(0)).float() / 5
    for factor in (-0.5, -0.2, 0.0, 1 / 3, 0.5):
        out = ga.Pipeline(ga.ColorJitter(hue=(factor, factor)), device="cpu")(x)
        assert (out - TF.adjust_hue(x, factor)).abs().max() <= 1e-5


def test_color_jitter_per_sample_order_and_factors(small_photos, kernel_path):
    x = torch.stack(small_photos * 8)
    out, params = run([ga.ColorJitter(0.4, 0.4, 0.4, 0.1)], x, seed=2)
    p = params[0]
    kernels = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    names = ["brightness", "contrast", "saturation", "hue"]
    assert len({tuple(o) for o in p["order"].tolist()}) > 8  # orders differ between samples
    for i in range(len(x)):
        ref = x[i]
        for op in p["order"][i].tolist():
            ref = kernels[op](ref, float(p[names[op]][i]))
        assert (out[i] - ref).abs().max() <= COLOR_TOL


def test_color_jitter_subset_keeps_per_sample_order(small_photos, kernel_path):
    x = torch.stack(small_photos * 4)
    out, params = run([ga.ColorJitter(contrast=0.5, hue=0.2)], x, seed=4)
    p = params[0]
    assert torch.all(p["brightness"] == 1) and torch.all(p["saturation"] == 1)
    for i in range(len(x)):
        ref = x[i]
        for op in p["order"][i].tolist():
            if op == 1:
                ref = TF.adjust_contrast(ref, float(p["contrast"][i]))
            elif op == 3:
                ref = TF.adjust_hue(ref, float(p["hue"][i]))
        assert (out[i] - ref).abs().max() <= COLOR_TOL


def test_grayscale_p1_and_one_channel_images(small_photos, kernel_path):
    x = torch.stack(small_photos)
    out = ga.Pipeline(ga.RandomGrayscale(1.0), device="cpu")(x)
    for i in range(len(x)):
        assert (out[i] - TF.rgb_to_grayscale(x[i], num_output_channels=3)).abs().max() <= COLOR_TOL
    gray = TF.rgb_to_grayscale(x)
    jitter = ga.Pipeline(ga.ColorJitter(0.3, 0.3, 0.3, 0.3), ga.RandomGrayscale(1.0), device="cpu", seed=1)
    out, params = jitter(gray, return_params=True)
    p = params[0]
    for i in range(len(x)):  # saturation and hue do nothing to one channel, as in torchvision
        ref = TF.adjust_contrast(TF.adjust_brightness(gray[i], float(p["brightness"][i])), float(p["contrast"][i]))
        if p["order"][i].tolist().index(1) < p["order"][i].tolist().index(0):
            ref = TF.adjust_brightness(TF.adjust_contrast(gray[i], float(p["contrast"][i])), float(p["brightness"][i]))
        assert (out[i] - ref).abs().max() <= COLOR_TOL


@pytest.mark.parametrize("mean,std", [(ga.IMAGENET_MEAN, ga.IMAGENET_STD), ((0.5,), (0.25,)),
                                      (ga.IMAGENET_MEAN, (0.25,)), ((0.5,), ga.IMAGENET_STD)],
                         ids=["per channel", "one value", "one std", "one mean"])
def test_normalize(small_photos, kernel_path, mean, std):
    """One value of mean or std serves every channel, as torchvision broadcasts it."""
    x = torch.stack(small_photos)
    out = ga.Pipeline(ga.Normalize(mean, std), device="cpu")(x)
    assert (out - TF.normalize(to_float(x), list(mean), list(std))).abs().max() < 1e-5


def test_functional_normalize_with_std_or_its_inverse_is_torchvisions(small_photos):
    """``gpuaug.functional.normalize`` takes ``std`` (a user's call) or ``inv_std`` (what Normalize
    passes): both give torchvision's, and one of the two must come (a 1.05 / std passed every test)."""
    x = to_float(torch.stack(small_photos))
    mean, std = torch.tensor(ga.IMAGENET_MEAN), torch.tensor(ga.IMAGENET_STD)
    ref = TF.normalize(x, list(ga.IMAGENET_MEAN), list(ga.IMAGENET_STD))
    assert (gaF.normalize(x, mean, std=std) - ref).abs().max() < 1e-5
    assert (gaF.normalize(x, mean, inv_std=1 / std.double()) - ref).abs().max() < 1e-5
    for both_or_neither in (dict(std=std, inv_std=1 / std), {}):
        with pytest.raises(TypeError, match="normalize takes one of std and inv_std"):
            gaF.normalize(x, mean, **both_or_neither)


def test_full_pipeline_per_sample_against_torchvision_chain(photos, kernel_path):
    ops = [ga.RandomResizedCrop(224), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
           ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    batch = photos * 3
    out, (crop, flip, rot, jit, _) = run(ops, batch, seed=7)
    kernels = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    names = ["brightness", "contrast", "saturation", "hue"]
    disc = central_disc(224, 224)
    for i, img in enumerate(batch):
        ref = resized_crop_reference(img, *(int(crop[k][i]) for k in ("top", "left", "height", "width")), [224, 224],
                                     kernel_path)
        if flip["flip"][i]:
            ref = TF.horizontal_flip(ref)
        ref = TF.rotate(ref, float(rot["angle"][i]), interpolation=InterpolationMode.BILINEAR, fill=0)
        for op in jit["order"][i].tolist():
            ref = kernels[op](ref, float(jit[names[op]][i]))
        ref = TF.normalize(ref, list(ga.IMAGENET_MEAN), list(ga.IMAGENET_STD))
        err = (out[i] - ref).abs().amax(0)
        assert err[disc].max() <= COLOR_TOL / min(ga.IMAGENET_STD)


def test_packed_images_give_what_their_list_gives(photos, kernel_path):
    """The one-buffer batch gpuaug.data.collate makes (ga.PackedImages) against the list it packs,
    which the test above checks against torchvision sample by sample; one size: a plain batch."""
    def ops():
        return [ga.RandomResizedCrop(64), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
                ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    clips = [torch.stack([p, p.flip(-1)]) for p in photos]  # clips of different sizes: one draw per clip
    for batch in (photos * 2, [photos[1]] * 3, clips, [clips[0]] * 2):
        want, params = run(ops(), batch, seed=5)
        got = ga.Pipeline(*ops(), device="cpu")(ga.PackedImages.pack(batch), params=params)
        assert torch.equal(got, want)


def test_crop_boxes_find_plain_crops_only(photos, monkeypatch):
    """The CPU's uint8 path takes only maps that are a plain crop resized (+ flip), or a
    whole-pixel part of one."""
    found, original = [], pipeline_module.crop_boxes
    monkeypatch.setattr(pipeline_module, "crop_boxes", lambda *args: found.append(original(*args)) or found[-1])
    img = photos[1]  # 400 x 600
    _, params = run([ga.RandomResizedCrop(96), ga.RandomHorizontalFlip(1.0)], [img], seed=2)
    (top, height, flip_y, *_), (left, width, flip_x, *_) = found[-2], found[-1]
    p = params[0]
    assert [int(top), int(left), int(height), int(width)] == [int(p[k][0]) for k in ("top", "left", "height", "width")]
    assert bool(flip_x) and not bool(flip_y)
    run([ga.Resize((100, 150))], [img])
    assert [int(t) for t in found[-2][:2]] == [0, 400] and [int(t) for t in found[-1][:2]] == [0, 600]
    # A crop of a resized image: the resized image's size and the crop's place in it
    run([ga.Resize(256), ga.CenterCrop(224)], [img])
    assert [int(t) for t in found[-2][:2]] + [int(t) for t in found[-2][3:5]] == [0, 400, 256, 16]
    assert [int(t) for t in found[-1][:2]] + [int(t) for t in found[-1][3:5]] == [0, 600, 384, 80]
    run([ga.Resize(255), ga.CenterCrop(224)], [img])  # 255 x 382 (torchvision truncates 382.5), odd margins
    assert [int(t) for t in found[-2][3:5]] == [255, 16] and [int(t) for t in found[-1][3:5]] == [382, 79]
    assert all(bool(axis[-1].all()) for axis in found)  # each of these: a plain crop
    run([ga.CenterCrop(700)], [img])  # padding: not a plain crop
    assert not found[-2][-1].any() and not found[-1][-1].any()
    run([ga.Resize((100, 150)), ga.RandomCrop(120, pad_if_needed=True)], [img])  # padding after the resize
    assert not found[-2][-1].any()
    run([ga.Resize((100, 150)), ga.RandomCrop(120, pad_if_needed=True)], [img, photos[0]])  # 512x512: pads less
    assert found[-2][-1].tolist() == [False, False] and found[-1][-1].tolist() == [True, True]


def _floats(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_single_taps_takes_maps_that_only_move_pixels():
    """The CPU gathers pixels where each output pixel reads one source pixel whole (a crop, a
    flip, padding); any map that blends (a resize, a half-pixel shift) keeps its taps."""
    from gpuaug.functional.geometry import single_taps

    def taps(scale, offset, window, valid):
        f = _floats
        return gaF.axis_taps(f(scale), f(offset), (f(window[0]), f(window[1])), (f(valid[0]), f(valid[1])), 5, 40,
                             gaF.tap_count(1.5))

    # the crop [10, 15), that crop mirrored, and [10, 13) after 2 pixels of padding
    index, weight = single_taps(*taps([1, -1, 1], [10, 15, 8], ([10, 10, 10], [15, 15, 13]), ([0, 0, 2], [5, 5, 5])))
    assert index[:2].tolist() == [[10, 11, 12, 13, 14], [14, 13, 12, 11, 10]] and index[2, 2:].tolist() == [10, 11, 12]
    assert weight.tolist() == [[1.0] * 5, [1.0] * 5, [0.0, 0.0, 1.0, 1.0, 1.0]]
    assert single_taps(*taps([1.5], [0], ([0], [40]), ([0], [5]))) is None  # a resize
    assert single_taps(*taps([1], [0.5], ([0], [40]), ([0], [5]))) is None  # half a pixel: two taps of 0.5
    index = torch.tensor([[[3, 4, 5]]])
    assert single_taps(index, torch.tensor([[[1.0, 1.0, 0.0]]])) is None  # two whole reads
    assert single_taps(index, torch.tensor([[[0.5, 0.0, 0.0]]])) is None  # one read, not whole


@pytest.mark.parametrize("box", [(0, 0, 50, 60), (10, 20, 30, 40), (46, 0, 50, 128), (-5, -7, 50, 60),
                                 (80, 100, 40, 50), (-10, -10, 200, 300), (200, 0, 10, 10)])
def test_crop_or_pad_is_torchvisions_crop_and_a_view_inside(small_photos, box):
    """``gpuaug.functional.crop_or_pad`` against ``F.crop`` (which pads with 0 past the image),
    and a view of the images (no copy) where the window lies inside, its edges included."""
    x = torch.stack(small_photos)  # 96 x 128
    out = gaF.crop_or_pad(x, *box)
    assert torch.equal(out, TF.crop(x, *box))
    top, left, height, width = box
    inside = top >= 0 and left >= 0 and top + height <= 96 and left + width <= 128
    assert (out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == inside


@pytest.mark.parametrize("cubic", [False, True])
def test_axis_taps_index_only_source_pixels(cubic):
    """Every tap's index lies in ``[0, src_size)``, the taps past the filter (weight 0) included:
    the resampling gathers all of them, and one past the source would read another image's
    pixels or memory outside the batch (0 times a NaN read there is NaN)."""
    f = _floats
    # a 3.7x downscale of the whole axis, a mirrored one, a 2x upscale of its last 20 pixels
    scale, offset = f([3.7, -3.7, 0.5]), f([0.0, 111.0, 90.0])
    index, weight = gaF.axis_taps(scale, offset, (f([0, 0, 90]), f([111, 111, 110])), (f([0, 0, 0]), f([30, 30, 40])),
                                  40, 111, gaF.tap_count(3.7, cubic=cubic), cubic=cubic)
    assert int(index.min()) == 0 and int(index.max()) == 110
    expected = torch.ones(3, 40)
    expected[:2, 30:] = 0  # outside valid: padding
    assert torch.allclose(weight.sum(-1), expected, atol=1e-5)


@pytest.mark.parametrize("overshoot", [1e-6, 0.01, 0.5])
def test_color_ops_stay_finite_on_accepted_float_input_outside_0_1(kernel_path, overshoot):
    """Float input is accepted within [-0.5, 1.5] (resampled [0, 1] images overshoot a little).
    torchvision's adjust_hue gives NaN on some such pixels (a max channel of 0 with one below it,
    as (-e, -e, 0): it divides by the max); gpuaug must not (a NaN would spread through Normalize into a training loss)."""
    levels = torch.tensor([-overshoot, 0.0, 0.5, 1.0, 1 + overshoot])
    x = levels[torch.cartesian_prod(*[torch.arange(5)] * 3)].T.reshape(1, 3, 5, 25)  # every channel mix
    x = torch.cat([x, x.flip(-1)])
    assert torch.isnan(TF.adjust_hue(x, 0.2)).any()  # what this guards against
    for ops in ([ga.ColorJitter(hue=(0.2, 0.2))], [ga.ColorJitter(0.4, 0.4, 0.4, 0.5), ga.RandomGrayscale(0.5)]):
        out = ga.Pipeline(*ops, ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device="cpu", seed=0)(x)
        assert torch.isfinite(out).all(), ops
