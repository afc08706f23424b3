"""Bad input and bad arguments: a clear TypeError/ValueError saying what was expected and what came."""

import os
import re

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from PIL import Image

import gpuaug as ga
from conftest import to_float


def pipe(*ops):
    return ga.Pipeline(*(ops or (ga.RandomResizedCrop(32),)), device="cpu", seed=0)


@pytest.mark.parametrize(
    "images,error,words",
    [
        (torch.zeros(2, 3, 8, 8, dtype=torch.int32), TypeError, "uint8 or float"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.uint16), TypeError, "got torch.uint16 (16-bit images: torchvision's v2.functional.to_dtype"),
        (torch.zeros(3, 8, 8, dtype=torch.uint8), ValueError, "(B, C, H, W)"),
        (torch.zeros(3, 8, 8, dtype=torch.uint8), ValueError, "one image? x[None] makes a batch of one"),
        (torch.zeros(1, 8, 8, dtype=torch.uint8), ValueError, "got a tensor of shape (1, 8, 8) (one image? x[None]"),
        (torch.zeros(2, 4, 8, 8, dtype=torch.uint8), ValueError, "1 or 3 channels"),
        (torch.zeros(2, 8, 9, 3, dtype=torch.uint8), ValueError, "channels last? .permute(0, 3, 1, 2)"),
        (torch.zeros(2, 8, 9, 1, dtype=torch.uint8), ValueError, "got 8 (shape (2, 8, 9, 1)) (channels last? "
         ".permute(0, 3, 1, 2)"),  # gray
        (torch.zeros(2, 4, 8, 9, 3, dtype=torch.uint8), ValueError, "shape (2, 4, 8, 9, 3)) (channels last? "
         ".permute(0, 1, 4, 2, 3) makes (B, T, C, H, W))"),
        ([torch.zeros(8, 9, 3, dtype=torch.uint8)] * 2, ValueError, "shape (8, 9, 3)) (channels last? each image's "
         ".permute(2, 0, 1)"),
        (ga.PackedImages.pack([torch.zeros(8, 9, 3, dtype=torch.uint8), torch.zeros(7, 9, 3, dtype=torch.uint8)]),
         ValueError, "(channels last? each image's .permute(2, 0, 1)"),
        (torch.zeros(2, 4, 8, 8, dtype=torch.uint8), ValueError, "got 4 (shape (2, 4, 8, 8)) (RGBA? keep the color"),
        (torch.zeros(0, 3, 8, 8, dtype=torch.uint8), ValueError, "non-empty"),
        (torch.zeros(2, 3, 0, 8, dtype=torch.uint8), ValueError, "non-zero height"),
        (torch.zeros(2, 3, 8, 0, dtype=torch.uint8), ValueError, "non-zero height and width"),
        # the shape given, not the batch of one it is checked as
        ([torch.zeros(3, 0, 8, dtype=torch.uint8), torch.zeros(3, 5, 8, dtype=torch.uint8)], ValueError,
         "non-zero height and width, got shape (3, 0, 8)"),
        (torch.zeros(2, 4, 3, 0, 8, dtype=torch.uint8), ValueError, "non-zero height and width, got shape (2, 4, 3, 0, 8)"),
        (torch.zeros(0, 4, 3, 8, 8, dtype=torch.uint8), ValueError, "non-empty batch of clips, got shape (0, 4, 3, 8, 8)"),
        # a packed image may be empty (a Tensor may): the pipeline refuses it
        (ga.PackedImages(torch.zeros(12, dtype=torch.uint8), [(3, 1, 4), (3, 0, 4)]), ValueError,
         "non-zero height and width, got shapes [(3, 0, 4), (3, 1, 4)]"),
        ([torch.zeros(0, 3, 8, 8, dtype=torch.uint8), torch.zeros(0, 3, 8, 9, dtype=torch.uint8)], ValueError,
         "one (non-zero) frame count, got [0, 0]"),
        (torch.zeros(2, 0, 3, 8, 8, dtype=torch.uint8), ValueError, "at least one frame"),
        ([], ValueError, "non-empty"),
        ([torch.zeros(3, 8, 8, dtype=torch.uint8), "x.jpg"], TypeError, "item 1 is str"),
        (np.zeros((2, 8, 8, 3), np.uint8), TypeError, "got ndarray (a numpy array: torch.from_numpy(a), then .permute(0, 3, 1, 2)"),
        ([np.zeros((8, 8, 3), np.uint8)], TypeError, "item 0 is ndarray (a numpy array: torch.from_numpy(a), then .permute(2, 0, 1)"),
        (Image.new("RGB", (8, 8)), TypeError, "got Image (PIL images: torchvision.transforms.v2.functional.pil_to_tensor"),
        ([torch.zeros(8, 8, dtype=torch.uint8)], ValueError, "item 0 has shape"),
        ([torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(3, 3, 8, 8, dtype=torch.uint8)], ValueError,
         "one (non-zero) frame count"),
        ([torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(3, 8, 9)], ValueError, "one dtype"),
        ([torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(3, 8, 0, dtype=torch.uint8)], ValueError, "non-zero height"),
        ([torch.zeros(3, 0, 8, dtype=torch.uint8)], ValueError, "non-zero height"),
        ([torch.zeros(5, 8, 8, dtype=torch.uint8)], ValueError, "1 or 3 channels"),
        ("images.jpg", TypeError, "got str"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.uint8, device="meta"), ValueError, "meta device"),
        ([torch.zeros(3, 8, 8, dtype=torch.uint8, device="meta")], ValueError, "meta device (shape (3, 8, 8))"),
        (ga.PackedImages(torch.zeros(0, dtype=torch.uint8), []), ValueError, "non-empty"),
        (ga.data.EncodedBatch(torch.zeros(4, dtype=torch.uint8), [(4,)], ["a.jpg"]), TypeError,
         "got EncodedBatch (encoded bytes): decode it first"),
        (ga.PackedImages.pack([torch.zeros(3, 8, 8, dtype=torch.int32)] * 2), TypeError, "uint8 or float"),
        (ga.PackedImages.pack([torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(3, 3, 8, 9, dtype=torch.uint8)]),
         ValueError, "one (non-zero) frame count"),
        (ga.PackedImages.pack([torch.zeros(0, 3, 8, 8, dtype=torch.uint8), torch.zeros(0, 3, 8, 9, dtype=torch.uint8)]),
         ValueError, "frame count"),
        (ga.PackedImages.pack([torch.zeros(4, 8, 8, dtype=torch.uint8)] * 2), ValueError, "1 or 3 channels"),
        (ga.PackedImages.pack([torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(1, 8, 9, dtype=torch.uint8)]),
         ValueError, "one channel count"),
        (ga.PackedImages.pack([torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(1, 8, 9, dtype=torch.uint8)]),
         ValueError, "decode with torchvision.io.ImageReadMode.RGB"),
        ([torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(1, 8, 9, dtype=torch.uint8)],
         ValueError, "grayscale files among color ones? decode with torchvision.io.ImageReadMode.RGB"),
        (ga.PackedImages.pack([torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(3, 0, 9, dtype=torch.uint8)]),
         ValueError, "non-zero height"),
    ],
)
def test_bad_images(images, error, words):
    with pytest.raises(error, match=None) as info:
        pipe()(images)
    assert words in str(info.value)


def test_bad_packed_images():
    x = torch.zeros(3, 4, 5, dtype=torch.uint8)
    for make, words in [(lambda: ga.PackedImages(torch.zeros(2, 60), [(3, 4, 5)]), "1-D tensor for flat"),
                        (lambda: ga.PackedImages(torch.zeros(59), [(3, 4, 5)]), "hold 60 elements, flat has 59"),
                        (lambda: ga.PackedImages(torch.zeros(60), [(3, 20)]), "one (C, H, W) per image"),
                        # -24 + 36 elements: taken, then torch's "invalid shape dimension -2" at the first view
                        (lambda: ga.PackedImages(torch.zeros(12), [(3, -2, 4), (3, 3, 4)]), "sizes >= 0 in shapes, got ((3, -2, 4)"),
                        (lambda: ga.PackedImages.pack([]), "at least one image"),
                        (lambda: ga.PackedImages.pack([x, x[0]]), "item 1 is (4, 5)"),
                        (lambda: ga.PackedImages.pack([x, x[None]]), "item 1 is (1, 3, 4, 5)"),
                        (lambda: ga.PackedImages(torch.zeros(120), [(3, 4, 5), (1, 3, 4, 5)]), "not a mix"),
                        (lambda: ga.PackedImages.pack([x, x.float()]), "one dtype and device"),
                        (lambda: ga.PackedImages.pack([x, x]).with_flat(torch.zeros(7)), "buffer of shape (120,)")]:
        with pytest.raises(ValueError) as info:
            make()
        assert words in str(info.value)
    with pytest.raises(TypeError, match="image tensors .* to pack: item 1 is ndarray"):
        ga.PackedImages.pack([x, x.numpy()])
    with pytest.raises(TypeError, match=r"a list of images .* got one tensor of shape \(2, 3, 4, 5\)"):
        ga.PackedImages.pack(torch.stack([x, x]))  # was torch's "Boolean value of Tensor ... is ambiguous"


def test_packed_images_of_one_size_are_read_as_their_stacked_batch_one_image_too():
    """A PackedImages whose images share a size is a batch, one image included; a zero side among
    color images is named without the hint for gray files among color ones."""
    gen = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 12, 16), dtype=torch.uint8, generator=gen) for _ in range(3)]
    for batch in (images, images[:1]):
        out, ref = (ga.Pipeline(ga.RandomResizedCrop(8), ga.RandomHorizontalFlip(), device="cpu", seed=0)(given)
                    for given in (ga.PackedImages.pack(batch), torch.stack(batch)))
        assert torch.equal(out, ref)
    with pytest.raises(ValueError) as info:
        pipe()(ga.PackedImages.pack([images[0], images[0][:, :0]]))
    assert "non-zero height" in str(info.value) and "ImageReadMode.RGB" not in str(info.value)


def test_ragged_list_without_fixed_output_size():
    ragged = [torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(3, 10, 12, dtype=torch.uint8)]
    for p in (pipe(ga.ColorJitter(0.1)), pipe(ga.Resize(6)), pipe(ga.RandomHorizontalFlip())):
        with pytest.raises(ValueError, match="fixed output size"):
            p(ragged)
    assert pipe(ga.Resize(6), ga.CenterCrop(4))(ragged).shape == (2, 3, 4, 4)


def test_normalize_channel_mismatch():
    with pytest.raises(ValueError, match="3 channels of mean/std, images have 1"):
        pipe(ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD))(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))
    for mean, std in ((ga.IMAGENET_MEAN, 0.5), (0.5, ga.IMAGENET_STD)):  # three values on either side count
        with pytest.raises(ValueError, match="3 channels of mean/std, images have 1"):
            pipe(ga.Normalize(mean, std))(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))


def test_bad_replayed_params():
    p = pipe()
    x = torch.zeros(2, 3, 40, 40, dtype=torch.uint8)
    _, params = p(x, return_params=True)
    with pytest.raises(ValueError, match=f"one dict per op \\({len(params)}\\).*got a list of {2 * len(params)}"):
        p(x, params=params * 2)
    with pytest.raises(ValueError, match="one dict per op .* got dict"):
        p(x, params=params[0])
    with pytest.raises(ValueError, match="first dimension 3"):
        p(torch.zeros(3, 3, 40, 40, dtype=torch.uint8), params=params)
    rotate = ga.Pipeline(ga.RandomResizedCrop(32), ga.RandomRotation(10), device="cpu")
    with pytest.raises(ValueError, match=r"params\[1\] for RandomRotation should have keys \['angle'\]"):
        rotate(x, params=ga.Pipeline(ga.RandomResizedCrop(32), ga.ColorJitter(0.2), device="cpu")(x, return_params=True)[1])
    _, params = rotate(x, return_params=True)
    with pytest.raises(ValueError, match=r"\['angle'\] should be a tensor of shape \(2,\)"):
        rotate(x, params=[params[0], {"angle": params[1]["angle"][:, None]}])
    as_float64 = [params[0], {"angle": params[1]["angle"].double()}]  # cast to what the pipeline draws
    assert torch.equal(rotate(x, params=as_float64), rotate(x, params=params))


def test_replayed_params_no_op_could_draw_for_these_images_are_refused():
    """Replay reads CPU params and refuses values the kernels cannot apply to the images given:
    a crop box drawn on larger images went past the plan's filter taps (the bound is the image
    size) and gave pixels that were neither torchvision's nor anything else (148/255 off)."""
    from torchvision.transforms.v2 import functional as F

    big, small = torch.rand(2, 3, 40, 50), torch.rand(2, 3, 20, 20)
    crop = ga.Pipeline(ga.RandomResizedCrop(24, scale=(0.9, 1.0)), device="cpu", seed=0)
    _, params = crop(big, return_params=True)
    # Drawn boxes remember their images' sizes (checked from host values, so on a GPU too) ...
    for other in (small, torch.rand(2, 3, 60, 70)):
        with pytest.raises(ValueError, match=r"RandomResizedCrop were drawn for images of other sizes \(sample 0: "
                                             r"drawn for 40x50, given \d+x\d+\)"):
            crop(other, params=params)
    # ... and copies of them (which do not) are read on the CPU: a box past its image is refused.
    copies = [{k: v.clone() for k, v in p.items()} for p in params]
    with pytest.raises(ValueError, match=r"RandomResizedCrop, sample 0: top=.*inside its image.*image is 20x20"):
        crop(small, params=copies)
    # Edited to other boxes that fit (the last one exactly), replay gives torchvision's resized crop.
    boxes = torch.tensor([[3.0, 4.0, 10.0, 16.0], [0.0, 0.0, 20.0, 20.0]])
    edited = [dict(zip(("top", "left", "height", "width"), boxes.T))]
    out = crop(small, params=edited)
    for i, (top, left, h, w) in enumerate(boxes.int().tolist()):
        expected = F.resized_crop(small[i], top, left, h, w, [24, 24], antialias=True)
        assert (out[i] - expected).abs().max() < 1e-5
    for bad in ([0.0, 1.0, 20.0, 20.0], [0.5, 0.0, 10.0, 10.0], [0.0, 0.0, 0.0, 10.0], [0.0, 0.0, 10.0, 0.0],
                [-1.0, 0.0, 10.0, 10.0], [0.0, -1.0, 10.0, 10.0], [0.0, 0.0, 10.0, 10.5]):
        box = boxes.clone()
        box[1] = torch.tensor(bad)
        with pytest.raises(ValueError, match=r"RandomResizedCrop, sample 1: .*image is 20x20"):
            crop(small, params=[dict(zip(("top", "left", "height", "width"), box.T))])

    padded = ga.Pipeline(ga.RandomCrop(16, padding=2, padding_mode="reflect"), device="cpu")
    corner = {"top": torch.tensor([-2.0, 6.0]), "left": torch.tensor([0.0, 6.0])}  # the extremes of 20x20 + 2
    assert padded(small, params=[corner]).shape == (2, 3, 16, 16)
    for top in (-3.0, 7.0, 1.5):
        with pytest.raises(ValueError, match=rf"RandomCrop, sample 1: top={top}.*image is 20x20"):
            padded(small, params=[{"top": torch.tensor([0.0, top]), "left": torch.tensor([0.0, 0.0])}])

    jitter = ga.Pipeline(ga.RandomRotation(10), ga.ColorJitter(0.4, 0.4, 0.4, 0.1), device="cpu", seed=0)
    _, params = jitter(small, return_params=True)
    fine = {"brightness": 3.0, "hue": -0.5}  # past the op's ranges, inside the kernels' (torchvision's)
    for key, value, message in [("brightness", -0.1, ">= 0"), ("saturation", float("nan"), ">= 0"),
                                ("hue", 0.51, "hue in"), ("order", 0, "permutation")] + \
            [(k, v, None) for k, v in fine.items()]:
        edited = [dict(p) for p in params]
        edited[1][key] = params[1][key].clone()
        edited[1][key][1] = value
        if message is None:
            assert jitter(small, params=edited).isfinite().all()
        else:
            with pytest.raises(ValueError, match=rf"ColorJitter, sample 1: .*{message}"):
                jitter(small, params=edited)
    with pytest.raises(ValueError, match="RandomRotation, sample 0: angle=inf; a finite angle"):
        jitter(small, params=[{"angle": torch.tensor([float("inf"), 0.0])}, params[1]])

    # Clips: one draw per clip, checked against that clip's size (ragged: each its own).
    clips = ga.PackedImages.pack([torch.rand(2, 3, 40, 50), torch.rand(2, 3, 20, 20)])
    _, params = crop(clips, return_params=True)
    assert torch.equal(crop(clips, params=params), crop(clips, params=params))
    swapped = ga.PackedImages.pack([torch.rand(2, 3, 20, 20), torch.rand(2, 3, 40, 50)])
    with pytest.raises(ValueError, match=r"drawn for images of other sizes \(sample 0: drawn for 40x50, given 20x20"):
        crop(swapped, params=params)
    with pytest.raises(ValueError, match=r"RandomResizedCrop, sample 0: .*image is 20x20"):
        crop(swapped, params=[{k: v.clone() for k, v in p.items()} for p in params])
    # A ragged list: the size named is the bad sample's own image's (here the last one's).
    ragged = [torch.rand(3, 20, 20), torch.rand(3, 40, 50)]
    _, params = crop(ragged, return_params=True)
    with pytest.raises(ValueError, match=r"RandomResizedCrop, sample 1: .*image is 20x20"):
        crop(ragged[::-1], params=[{k: v.clone() for k, v in p.items()} for p in params])
    padded_params = padded(small, return_params=True)[1]
    with pytest.raises(ValueError, match="RandomCrop were drawn for images of other sizes"):
        padded(torch.rand(2, 3, 24, 20), params=padded_params)


# torchvision raises these for the same mistakes; we must raise the same exception type.
BAD_ARGS = [
    ("Resize", (256.0,), {}),  # a float is no shorter side (gpuaug made it a (256, 256) resize)
    ("Resize", (2.5,), {}),
    ("RandomCrop", (8,), {"padding": ()}),  # an empty padding is an error, not "no padding"
    ("RandomRotation", (-5,), {}),
    ("RandomRotation", ((1, 2, 3),), {}),
    ("RandomRotation", ("abc",), {}),
    ("ColorJitter", (), {"hue": 0.7}),
    ("ColorJitter", (), {"hue": (-0.6, 0.1)}),
    ("ColorJitter", (), {"hue": (-0.1, 0.6)}),
    ("ColorJitter", (), {"hue": (0.2, 0.1)}),
    ("ColorJitter", (), {"brightness": -1}),
    ("ColorJitter", (), {"contrast": (2.0, 1.0)}),
    ("ColorJitter", (), {"saturation": (-0.5, 1.0)}),
    ("ColorJitter", (), {"brightness": "a lot"}),
    ("RandomHorizontalFlip", (1.5,), {}),
    ("RandomVerticalFlip", (-0.1,), {}),
    ("RandomGrayscale", (2,), {}),
    ("RandomResizedCrop", (224,), {"scale": 0.5}),
    ("RandomResizedCrop", (224,), {"ratio": 1.0}),
    ("RandomResizedCrop", ((1, 2, 3),), {}),
    ("CenterCrop", ((1, 2, 3),), {}),
    ("RandomHorizontalFlip", ("0.5",), {}),
    ("Resize", (None,), {}),
    ("RandomCrop", (32,), {"padding": (1, 2, 3)}),
    ("RandomCrop", (32,), {"padding": 2.5}),
    ("RandomCrop", (32,), {"padding": 4, "padding_mode": "wrap"}),
    ("RandomCrop", ((1, 2, 3),), {}),
]


@pytest.mark.parametrize("name,args,kwargs", BAD_ARGS)
def test_bad_op_arguments_raise_what_torchvision_raises(name, args, kwargs):
    with pytest.raises((TypeError, ValueError)) as tv_error:
        getattr(v2, name)(*args, **kwargs)
    with pytest.raises(type(tv_error.value)):
        getattr(ga, name)(*args, **kwargs)


@pytest.mark.parametrize(
    "make,error",
    [
        (lambda: ga.RandomResizedCrop(224, scale=(0.9, 0.1)), ValueError),
        (lambda: ga.RandomResizedCrop(224, scale=(-0.1, 1.0)), ValueError),  # torchvision: "math domain error" in some draws
        (lambda: ga.RandomResizedCrop(224, ratio=(0.0, 1.0)), ValueError),  # torchvision: log(0) at its draw
        (lambda: ga.RandomResizedCrop(0), ValueError),
        (lambda: ga.Resize(-3), ValueError),
        (lambda: ga.Resize(0), ValueError),  # torchvision takes it, then fails when resizing
        (lambda: ga.Resize([256.0]), ValueError),  # torchvision takes it, then fails when resizing
        (lambda: ga.Resize([[128, 96]]), ValueError),  # was taken as (128, 96); torchvision fails when resizing
        (lambda: ga.Resize([(256,)]), ValueError),
        (lambda: ga.RandomCrop([True, 8]), ValueError),  # was a (1, 8) crop
        (lambda: ga.Pipeline(ga.RandomHorizontalFlip(), device="cpu", channels_last="no"), TypeError),  # was True
        (lambda: ga.Resize((8, True)), ValueError),
        (lambda: ga.Resize((2.5, 3.5)), ValueError),
        (lambda: ga.Normalize((0.5, 0.5), (0.5, 0.5, 0.5)), ValueError),
        (lambda: ga.Normalize((0.5,), (0.0,)), ValueError),
        (lambda: ga.Normalize((0.5,), (float("nan"),)), ValueError),  # NaN passes "<= 0" checks: every output NaN
        (lambda: ga.Normalize((0.5,), (float("inf"),)), ValueError),
        (lambda: ga.Normalize((float("nan"),), (0.5,)), ValueError),
        (lambda: ga.Pipeline(ga.RandomHorizontalFlip(), device="meta")(torch.zeros(1, 3, 4, 4)), ValueError),
        (lambda: ga.RandomRotation(10, fill="red"), TypeError),
        (lambda: ga.Pipeline(v2.RandomHorizontalFlip(), device="cpu"), TypeError),
        (lambda: ga.Pipeline(ga.Normalize((0.5,), (0.5,)), ga.ColorJitter(0.1), device="cpu"), ValueError),
        (lambda: ga.Pipeline(ga.RandomRotation(10), ga.Resize(32), device="cpu"), ValueError),
        (lambda: ga.Pipeline(ga.RandomRotation(10), ga.CenterCrop(32), ga.RandomHorizontalFlip(), device="cpu"),
         ValueError),
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", dtype=torch.int32), TypeError),
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", seed="42"), TypeError),
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", seed=1.5), TypeError),
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu").manual_seed(None), TypeError),
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", seed=2**64), ValueError),  # past torch's range:
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu").manual_seed(-(2**63) - 1), ValueError),  # at once
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="cpu").to(torch.int32), TypeError),
        (lambda: ga.Pipeline(ga.RandomResizedCrop(32), device="tpu"), ValueError),
        (lambda: ga.Resize(256, interpolation=v2.InterpolationMode.NEAREST), ValueError),  # bilinear or bicubic
        (lambda: ga.Resize(256, interpolation=v2.InterpolationMode.BICUBIC, antialias=False), ValueError),
        (lambda: ga.RandomResizedCrop(224, interpolation=v2.InterpolationMode.BICUBIC, antialias=None), ValueError),
        (lambda: ga.Pipeline(ga.Resize(256), ga.RandomResizedCrop(224, interpolation=v2.InterpolationMode.BICUBIC),
                             device="cpu"), ValueError),  # one resampling: one filter
        (lambda: ga.RandomResizedCrop(224, interpolation=v2.InterpolationMode.NEAREST), ValueError),
        (lambda: ga.RandomRotation(15, v2.InterpolationMode.BICUBIC), ValueError),  # bilinear or nearest only
        (lambda: ga.RandomRotation(15, "nearest-exact"), ValueError),
        (lambda: ga.Pipeline(ga.RandomRotation(15), ga.RandomRotation(10, v2.InterpolationMode.NEAREST), device="cpu"),
         ValueError),  # two rotations are one warp: one interpolation
        (lambda: ga.RandomRotation(15, expand=True), ValueError),
        (lambda: ga.RandomRotation(15, fill=255), ValueError),  # torchvision's white for uint8: here 1.0
        (lambda: ga.Normalize((123.675, 116.28, 103.53), (58.395, 57.12, 57.375)), ValueError),  # 0-255 scale
        (lambda: ga.Normalize((0.485, 0.456, 0.406), (58.395, 57.12, 57.375)), ValueError),  # only the mean / 255
        (lambda: ga.RandomRotation(15, fill=(0.5, -0.1, 0.5)), ValueError),
        (lambda: ga.RandomRotation(15, center=(3, 4, 5)), ValueError),  # torchvision's: (x, y)
        (lambda: ga.RandomRotation(15, center=3), TypeError),
        (lambda: ga.RandomRotation(15, center=(3, float("nan"))), ValueError),
        (lambda: ga.Resize(256, max_size=256), ValueError),  # torchvision's: the bound must pass the shorter side
        (lambda: ga.Resize((200, 300), max_size=400), ValueError),  # torchvision's: max_size needs an int size
        (lambda: ga.Resize(None), ValueError),  # torchvision's: size=None needs max_size
        (lambda: ga.Resize(None, max_size=0), ValueError),
        (lambda: ga.Resize(None, max_size=320.5), ValueError),
        (lambda: ga.Pipeline(ga.Resize(None, max_size=320), device="cpu")(torch.zeros(1, 3, 2, 999, dtype=torch.uint8)),
         ValueError),  # a 0-pixel side (torchvision: a RuntimeError from inside torch)
        (lambda: ga.Resize(256, antialias="yes"), TypeError),
        (lambda: ga.RandomCrop(32, padding=-2), ValueError),  # torchvision's negative padding crops
        (lambda: ga.Pipeline(ga.Resize(40), ga.RandomCrop(32, padding=4, padding_mode="reflect"), ga.Resize(24),
                             device="cpu"), ValueError),  # copies of a resize's output, resized again: not one map
        (lambda: ga.Pipeline(ga.RandomResizedCrop(40), ga.RandomHorizontalFlip(), ga.RandomCrop(32, padding=4,
                             padding_mode="edge"), ga.RandomResizedCrop(24), device="cpu"), ValueError),
        (lambda: ga.Pipeline(ga.RandomCrop(40, padding=4, padding_mode="edge"), ga.CenterCrop(44), device="cpu"),
         ValueError),  # a second op that may pad: larger than the 40 before it
        (lambda: ga.Pipeline(ga.RandomCrop(40, padding=4, padding_mode="edge"), ga.Resize(48), ga.CenterCrop(44),
                             device="cpu"), ValueError),  # may pad: the size before it depends on the input's
        (lambda: ga.Pipeline(ga.Resize((50, 60)), ga.RandomCrop((44, 32), padding=2, padding_mode="reflect"),
                             ga.RandomCrop(40, pad_if_needed=True), device="cpu"), ValueError),  # pads where needed: 40 > 32
        (lambda: ga.Pipeline(ga.RandomCrop(40, padding=4, padding_mode="edge"), ga.RandomCrop(32, padding=2),
                             device="cpu"), ValueError),
        (lambda: ga.RandomCrop(32, padding=4, fill=128), ValueError),  # torchvision's 0-255 for uint8: 128 / 255
        (lambda: ga.RandomCrop(32, padding=4, fill="gray"), TypeError),
        (lambda: ga.RandomCrop(32, padding=4, fill=(0.5, 1.5, 0.5)), ValueError),
        (lambda: ga.Pipeline(ga.RandomCrop(40, padding=4, fill=0.5), ga.CenterCrop(48), device="cpu"),
         ValueError),  # CenterCrop pads with zeros: two padding values in one map
        (lambda: ga.Pipeline(ga.RandomCrop(40, padding=4), ga.RandomCrop(32, padding=2, fill=0.5), device="cpu"),
         ValueError),
        (lambda: ga.Pipeline(ga.RandomRotation(10), ga.RandomCrop(32), device="cpu"), ValueError),
        # torchvision takes these, then fails when drawing (RuntimeError) or draws inf/nan factors
        (lambda: ga.RandomRotation((10, -10)), ValueError),
        (lambda: ga.RandomRotation(float("nan")), ValueError),
        (lambda: ga.RandomRotation(float("inf")), ValueError),
        (lambda: ga.ColorJitter(brightness=float("inf")), ValueError),
        (lambda: ga.ColorJitter(saturation=(0.5, float("inf"))), ValueError),
        (lambda: ga.RandomResizedCrop(8, scale=(0.5, float("inf"))), ValueError),
        (lambda: ga.RandomResizedCrop(8, ratio=(float("nan"), 1.0)), ValueError),
        (lambda: ga.RandomResizedCrop(8, scale=("0.1", "1")), TypeError),
    ],
)
def test_bad_construction(make, error):
    with pytest.raises(error):
        make()


def test_ops_are_not_called_alone():
    with pytest.raises(TypeError, match="gpuaug.Pipeline"):
        ga.RandomHorizontalFlip()(torch.zeros(1, 3, 4, 4))


@pytest.mark.parametrize("fill", [(0.1, 0.2), (0, 0)])  # a zero fill is checked too
def test_rotation_fill_channel_mismatch(fill):
    p = pipe(ga.RandomRotation(10, fill=fill))
    with pytest.raises(ValueError, match="fill has 2 values, images have 3"):
        p(torch.zeros(1, 3, 8, 8, dtype=torch.uint8))


def test_random_crop_fill_channel_mismatch_and_what_is_allowed():
    p = pipe(ga.RandomCrop(8, padding=2, fill=(0.1, 0.2)))
    with pytest.raises(ValueError, match="RandomCrop fill has 2 values, images have 3"):
        p(torch.zeros(1, 3, 8, 8, dtype=torch.uint8))
    # Allowed: a fill crop after a resize (as a copying one), fill in a mode that ignores it
    # (as torchvision's does), fill on a crop that never pads, and crops no larger than the
    # fixed size before them (they cannot pad) with a fill or copying crop.
    pipe(ga.Resize(40), ga.RandomCrop(32, padding=4, fill=0.5), ga.RandomRotation(10), ga.CenterCrop(40))
    assert "fill" not in repr(pipe(ga.RandomCrop(32, padding=4, fill=0.5, padding_mode="edge")))
    pipe(ga.RandomCrop(32, fill=0.5), ga.CenterCrop(30))
    pipe(ga.RandomCrop(40, padding=4, fill=0.5), ga.CenterCrop((40, 32)), ga.RandomCrop(30, pad_if_needed=True))
    pipe(ga.RandomResizedCrop(48), ga.CenterCrop(44), ga.RandomCrop(40, padding=4, padding_mode="reflect"))
    pipe(ga.Resize((50, 60)), ga.RandomCrop(40, pad_if_needed=True), ga.RandomCrop(36, padding=2, padding_mode="edge"))


def test_select_device(monkeypatch):
    monkeypatch.delenv("GPUAUG_DEVICE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert ga.select_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("GPUAUG_DEVICE", "cpu")
    assert ga.select_device() == torch.device("cpu")
    assert ga.select_device("meta") == torch.device("meta")  # the argument wins over the env
    monkeypatch.setenv("GPUAUG_DEVICE", "meta")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert ga.select_device() == torch.device("meta")  # the env wins over torchrun's LOCAL_RANK
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("GPUAUG_DEVICE", "gpu0")
    with pytest.raises(ValueError, match="GPUAUG_DEVICE"):
        ga.select_device()
    monkeypatch.setenv("GPUAUG_DEVICE", " meta\n")  # spaces around it: taken (was a ValueError)
    assert ga.select_device() == torch.device("meta")
    monkeypatch.setenv("GPUAUG_DEVICE", "  ")  # blank: as unset (was a ValueError)
    blank = ga.select_device()
    monkeypatch.delenv("GPUAUG_DEVICE")
    assert blank == ga.select_device()
    for kind in ("mps", "xpu"):  # another backend this machine lacks: named, not torch's NotImplementedError
        if not getattr(torch, kind).is_available():
            with pytest.raises(ValueError, match=f"asks for {kind} but this machine has none"):
                ga.Pipeline(ga.RandomHorizontalFlip(), device=kind)
    with monkeypatch.context() as m:  # a backend that is present is taken as asked
        m.setattr(torch.mps, "is_available", lambda: True)
        assert ga.select_device("mps") == torch.device("mps")
    assert ga.select_device("hpu") == torch.device("hpu")  # no torch.hpu to ask: left to the device's own library
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            ga.Pipeline(ga.RandomHorizontalFlip(), device="cuda")
        monkeypatch.setenv("LOCAL_RANK", "3")
        assert ga.select_device() == torch.device("cpu")
    else:
        monkeypatch.setenv("LOCAL_RANK", "0")
        assert ga.select_device() == torch.device("cuda", 0)
        monkeypatch.setenv("LOCAL_RANK", "x")
        with pytest.raises(ValueError, match="LOCAL_RANK"):
            ga.select_device()


def test_select_device_rule_with_gpus(monkeypatch):
    """The CUDA half of the rule, on any machine: CUDA is faked as present with 4 devices
    (select_device only names a device, it does not touch one)."""
    monkeypatch.delenv("GPUAUG_DEVICE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert ga.select_device() == torch.device("cuda", os.getpid() % 4)
    for rank in range(4):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        assert ga.select_device() == torch.device("cuda", rank)  # torchrun's rank wins over the pid
    monkeypatch.setenv("GPUAUG_DEVICE", "cuda:1")
    assert ga.select_device() == torch.device("cuda", 1)  # the env wins over the rank
    assert ga.select_device("cuda:2") == torch.device("cuda", 2)  # the argument over everything
    with pytest.raises(ValueError, match="only 4 CUDA device"):
        ga.select_device("cuda:4")
    monkeypatch.delenv("GPUAUG_DEVICE")
    for bad, words in (("4", "LOCAL_RANK=4 but only 4 CUDA device"), ("-1", r"LOCAL_RANK=-1 is not a GPU index \(expected 0 to 3\)"),
                       ("x", "LOCAL_RANK should be an integer")):
        monkeypatch.setenv("LOCAL_RANK", bad)
        with pytest.raises(ValueError, match=words):
            ga.select_device()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # each rank shown its own GPU alone
    for rank in ("0", "1", "3"):  # (rank 1, the first past the one GPU, too)
        monkeypatch.setenv("LOCAL_RANK", rank)
        assert ga.select_device() == torch.device("cuda", 0), rank


def test_normalize_follows_a_loaded_or_edited_std():
    norm = ga.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    x = torch.full((1, 3, 2, 2), 0.75)
    pipe = ga.Pipeline(norm, device="cpu")
    assert torch.allclose(pipe(x), torch.ones(1, 3, 2, 2))
    assert norm.inv_std is norm.inv_std  # 1 / std computed once while std is unchanged
    norm.load_state_dict({"mean": torch.tensor([0.5, 0.5, 0.5]), "std": torch.tensor([0.5, 0.5, 0.5])})
    assert torch.allclose(pipe(x), torch.full((1, 3, 2, 2), 0.5))
    with torch.no_grad():
        norm.std[0] = 0.125
    assert torch.allclose(pipe(x)[0, 0], torch.full((2, 2), 2.0))


def test_to_and_half_set_the_dtype_and_keep_buffers_float32():
    x = torch.randint(0, 256, (4, 3, 40, 50), dtype=torch.uint8)
    ops = lambda: (ga.RandomResizedCrop(16), ga.ColorJitter(0.4, 0.4, 0.4, 0.1),  # noqa: E731
                   ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD))
    for cast, dtype in ((lambda p: p.half(), torch.float16), (lambda p: p.bfloat16(), torch.bfloat16),
                        (lambda p: p.double(), torch.float64), (lambda p: p.to("cpu", torch.float16), torch.float16),
                        (lambda p: p.to(dtype=torch.bfloat16), torch.bfloat16)):
        p = ga.Pipeline(*ops(), device="cpu", seed=3)
        assert cast(p) is p and p.dtype == dtype and p.device == torch.device("cpu")
        assert p.ops[-1].mean.dtype == p.ops[-1].std.dtype == torch.float32
        expected = ga.Pipeline(*ops(), device="cpu", seed=3, dtype=dtype)(x)
        out = p(x)
        assert out.dtype == dtype and torch.equal(out, expected)
    p = ga.Pipeline(*ops(), device="cpu", dtype=torch.float16).float()
    assert p(x).dtype == torch.float32
    assert p.to("meta").device == torch.device("meta") and p.dtype == torch.float32
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            p.to("cuda")
    model = torch.nn.Sequential(ga.Pipeline(*ops(), device="cpu", seed=3), torch.nn.Identity()).half()
    assert model[0].ops[-1].mean.dtype == torch.float32  # an enclosing module's cast leaves the constants float32
    assert torch.equal(model[0](x), ga.Pipeline(*ops(), device="cpu", seed=3)(x))


def test_torchvision_keyword_arguments_with_their_supported_values():
    """Code ported from torchvision that names BILINEAR (and the other defaults) builds the same op."""
    bilinear = v2.InterpolationMode.BILINEAR
    pairs = [(ga.RandomResizedCrop(224, (0.2, 1.0), (0.5, 2.0), bilinear, antialias=True),
              ga.RandomResizedCrop(224, scale=(0.2, 1.0), ratio=(0.5, 2.0))),
             (ga.Resize([256], bilinear, None, True), ga.Resize(256)),
             (ga.RandomRotation(15, bilinear, False, None, 0.5), ga.RandomRotation(15, fill=0.5)),
             (ga.RandomRotation(15, interpolation="bilinear"), ga.RandomRotation(15)),
             (ga.Normalize((0.5,), (0.2,), inplace=True), ga.Normalize((0.5,), (0.2,))),
             (ga.Resize(100, antialias=None), ga.Resize(100, antialias=False))]  # torchvision: None is False
    for ported, ours in pairs:
        assert repr(ported) == repr(ours)


def test_color_jitter_ranges_equal_torchvisions():
    """A number v gives [max(0, 1 - v), 1 + v] (hue [-v, v]), as torchvision's: past 1 the lower end
    is clipped to 0, not refused."""
    for args in ((0.4, 0.4, 0.4, 0.1), (1.0, 1.5, 3, 0.5), ((0.2, 1.8), (1, 1), 0, (-0.2, 0.3))):
        ours, theirs = ga.ColorJitter(*args), v2.ColorJitter(*args)
        for name in ("brightness", "contrast", "saturation", "hue"):
            expected = getattr(theirs, name)
            assert getattr(ours, name) == (None if expected is None else tuple(expected)), (args, name)


@pytest.mark.parametrize("mistake", ["0-255 floats", "normalized", "nan"])
def test_float_images_far_outside_0_1_are_refused(photos, mistake):
    """The usual slips with float input (no /255, normalizing before the pipeline) made silently wrong
    images, in any image of the batch (image 0 is read whole, the others on a grid); values
    resampling can overshoot to stay accepted."""
    image = to_float(photos[1])
    bad = {"0-255 floats": image * 255, "normalized": v2.functional.normalize(image, ga.IMAGENET_MEAN, ga.IMAGENET_STD),
           "nan": image.masked_fill(image > 0.9, float("nan"))}[mistake]
    pipe = ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", seed=0)
    for given in (bad[None], [bad, image], bad[None, None]):  # batch, list (image 0 is read), clip
        with pytest.raises(ValueError, match=r"expected float images in \[0, 1\]") as info:
            pipe(given)
        assert ("NaN values" in str(info.value)) == (mistake == "nan")  # not "values in [nan, nan]"
    for given, which in ((torch.stack([image, image, bad]), "image 2"), ([image, bad], "image 1"),
                         ([image, image, bad[:, :100]], "image 2"), (torch.stack([image, bad])[None], "clip 0, frame 1"),
                         (ga.PackedImages.pack([image, bad[:, :100]]), "image 1")):  # not image 0: the one named
        with pytest.raises(ValueError, match=r"expected float images in \[0, 1\].*\(" + which + r"\b") as info:
            pipe(given)
        assert ("NaN values" in str(info.value)) == (mistake == "nan")
    overshoot = v2.functional.resize(image, [150, 225], interpolation=v2.InterpolationMode.BICUBIC, antialias=True)
    assert overshoot.max() > 1 or overshoot.min() < 0  # bicubic rings past [0, 1] at edges
    assert pipe(overshoot[None]).shape == (1, 3, 32, 32)


def test_the_float_range_taken_is_the_readmes_minus_half_to_one_and_a_half(photos):
    """README: input within [-0.5, 1.5] is taken as it is, past it refused, at either end and in
    image 0 (read whole) or another (read on a grid): a pixel block past the bound, not one pixel,
    as the grid may miss one."""
    pipe = ga.Pipeline(ga.RandomResizedCrop(32), device="cpu", seed=0)
    image = to_float(photos[0])[:, :64, :64].clone()
    for value, taken in ((1.5, True), (1.51, False), (-0.5, True), (-0.51, False)):  # the bounds are taken
        edited = image.clone()
        edited[:, :32, :32] = value
        for given in (edited[None], [image, edited]):
            if taken:
                assert pipe(given).shape[-2:] == (32, 32)
            else:
                with pytest.raises(ValueError, match=r"expected float images in \[0, 1\]"):
                    pipe(given)


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf"), -float("inf")])
def test_a_nan_the_grid_misses_is_refused_where_a_crop_reads_it(photos, bad_value):
    """Images but the first are checked on a grid before the pipeline runs; one NaN (or infinite)
    pixel off that grid, read by an image's crop, made a NaN output. The output is checked: the
    error names the image (clip and frame); a bad pixel no crop reads changes nothing, and an
    output overflowing float16 (a tiny Normalize std, as torchvision's) is no input's fault."""
    image = to_float(photos[1])[:, :120, :160]
    bad = image.clone()
    bad[1, 37, 51] = bad_value  # off the 16x16 grid (every 8th pixel of 120x160)
    resize = ga.Pipeline(ga.Resize((40, 50)), device="cpu", seed=0)
    for given, which in ((torch.stack([image, image, bad]), "image 2"), ([image, bad[:, :100]], "image 1"),
                         (torch.stack([image, bad])[None], "clip 0, frame 1"),
                         (ga.PackedImages.pack([image, image[:, :90], bad]), "image 2")):
        with pytest.raises(ValueError, match=rf"got NaN or infinite values \({which}, in the part the pipeline read"):
            resize(given)
    crop = ga.Pipeline(ga.CenterCrop(20), device="cpu")  # reads rows 50-69: not the bad pixel
    assert torch.equal(crop(torch.stack([image, bad])), crop(torch.stack([image, image])))
    tiny_std = ga.Pipeline(ga.Resize((40, 50)), ga.Normalize((0.5,) * 3, (1e-30,) * 3), device="cpu", dtype=torch.float16)
    assert not tiny_std(torch.stack([image, image])).isfinite().all()


def test_random_crop_larger_than_the_image_says_so_as_torchvision():
    """torchvision's message, at the call (it depends on the image): here for the largest image of
    a ragged list."""
    images = [torch.zeros(3, 40, 40, dtype=torch.uint8), torch.zeros(3, 20, 50, dtype=torch.uint8)]
    with pytest.raises(ValueError) as theirs:
        v2.RandomCrop(32, padding=4)(images[1])
    with pytest.raises(ValueError) as ours:
        ga.Pipeline(ga.RandomCrop(32, padding=4), device="cpu")(images)
    assert str(ours.value) == str(theirs.value) == (
        "Required crop size (32, 32) is larger than padded input image size (28, 58).")
    assert ga.Pipeline(ga.RandomCrop(32, pad_if_needed=True), device="cpu")(images).shape == (2, 3, 32, 32)


def test_random_crop_shows_its_padding_in_torchvisions_four_value_order():
    assert ga.RandomCrop(10, padding=[1, 2]).padding == (1, 2, 1, 2)  # (left, top, right, bottom)
    assert ga.RandomCrop(10, padding=(1, 2, 3, 4)).padding == (1, 2, 3, 4)
    assert "padding=(1, 2, 3, 4)" in repr(ga.RandomCrop(10, padding=(1, 2, 3, 4)))


def test_reprs_name_an_interpolation_other_than_the_default_and_only_then():
    bicubic, bilinear, nearest = (v2.InterpolationMode.BICUBIC, v2.InterpolationMode.BILINEAR,
                                  v2.InterpolationMode.NEAREST)
    for make in (lambda **kw: ga.Resize(100, **kw), lambda **kw: ga.RandomResizedCrop(10, **kw)):
        assert "interpolation" not in repr(make()) and "interpolation" not in repr(make(interpolation=bilinear))
        assert ", interpolation=bicubic, antialias=True)" in repr(make(interpolation=bicubic))
    assert "interpolation" not in repr(ga.RandomRotation(10, interpolation=bilinear))
    assert "interpolation=nearest" in repr(ga.RandomRotation(10, interpolation=nearest))


def test_resize_repr_names_max_size_only_when_given():
    assert repr(ga.Resize(100)) == "Resize(size=100, antialias=True)"
    assert repr(ga.Resize(100, max_size=150)) == "Resize(size=100, max_size=150, antialias=True)"
    assert repr(ga.Resize(None, max_size=150)) == "Resize(size=None, max_size=150, antialias=True)"


def test_reflect_padding_longer_than_the_image_is_refused():
    """torch's reflect pad needs pads shorter than the side (symmetric: not longer); torchvision
    fails inside torch with a RuntimeError, here a ValueError before anything runs."""
    x = torch.zeros(1, 3, 6, 40, dtype=torch.uint8)
    with pytest.raises(RuntimeError):
        v2.RandomCrop(8, padding=6, padding_mode="reflect")(x[0])
    with pytest.raises(ValueError, match="reflect padding"):
        ga.Pipeline(ga.RandomCrop(8, padding=6, padding_mode="reflect"), device="cpu")(x)
    assert ga.Pipeline(ga.RandomCrop(8, padding=6, padding_mode="symmetric"), device="cpu")(x).shape == (1, 3, 8, 8)
    assert ga.Pipeline(ga.RandomCrop(8, padding=5, padding_mode="reflect"), device="cpu")(x).shape == (1, 3, 8, 8)


# Odd argument values, each tried where an op takes it: torchvision refuses some at construction.
_ODD_VALUES = [0, 1, 3, -1, 2.5, 256.0, True, None, "3", (3,), [3], (3, 4), (3.0, 4.0), (1, 2, 3), (1, 2, 3, 4),
               (), float("nan"), float("inf"), (0.5, 0.2), (-1, 2)]
_ODD_SLOTS = [  # (op, how the value is passed)
    ("Resize", lambda v: ((v,), {})), ("CenterCrop", lambda v: ((v,), {})),
    ("RandomResizedCrop", lambda v: ((v,), {})), ("RandomCrop", lambda v: ((v,), {})),
    ("RandomCrop", lambda v: ((8,), {"padding": v})), ("Resize", lambda v: ((8,), {"max_size": v})),
    ("RandomResizedCrop", lambda v: ((8,), {"scale": v})), ("RandomResizedCrop", lambda v: ((8,), {"ratio": v})),
    ("RandomRotation", lambda v: ((v,), {})), ("RandomRotation", lambda v: ((10,), {"center": v})),
    ("RandomHorizontalFlip", lambda v: ((v,), {})), ("RandomGrayscale", lambda v: ((v,), {})),
    ("ColorJitter", lambda v: ((v,), {})), ("ColorJitter", lambda v: ((), {"hue": v})),
    ("Normalize", lambda v: ((v, (0.2,)), {})),
]
# Where gpuaug takes what torchvision refuses, and why that is no silent change of meaning.
_LENIENT = {("Normalize", 0), ("Normalize", 1), ("Normalize", True)}  # a bare number: one mean for every channel


@pytest.mark.parametrize("name, slot", _ODD_SLOTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(_ODD_SLOTS)])
def test_odd_arguments_torchvision_refuses_are_refused(name, slot):
    """Every odd value torchvision's constructor refuses, gpuaug's refuses too (a TypeError or
    ValueError; the other way round is documented: gpuaug refuses early what torchvision takes and
    fails on later). Where both take a size, it means the same size: ``Resize(256.0)`` was a
    (256, 256) resize here, where torchvision refuses a float shorter side."""
    import warnings

    for value in _ODD_VALUES:
        args, kwargs = slot(value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchvision warns of reversed ranges
            try:
                tv = getattr(v2, name)(*args, **kwargs)
            except (TypeError, ValueError, OverflowError):  # CenterCrop(inf): int(inf)
                tv = None
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "RandomResizedCrop.*no crop fits", UserWarning)  # scale (3, 4)
                ours = getattr(ga, name)(*args, **kwargs)
        except (TypeError, ValueError):
            continue
        assert tv is not None or (name, value) in _LENIENT, (name, args, kwargs, ours)
        if name in ("CenterCrop", "RandomResizedCrop", "RandomCrop") and args == (value,):
            assert tuple(ours.size) == tuple(tv.size), (name, value)
        if name == "Resize" and args == (value,):
            assert (tv.size == [ours.size]) if isinstance(ours.size, int) else list(tv.size) == list(ours.size), value


@pytest.mark.parametrize("code, mode", [(0, "nearest"), (2, "bilinear"), (3, "bicubic")])
def test_interpolation_as_pils_int_codes_as_torchvision_takes_them(code, mode):
    """torchvision takes PIL's int codes for interpolation (0 nearest, 2 bilinear, 3 bicubic): so
    does gpuaug, where the op has that mode; elsewhere the ValueError names the code given."""
    made = 0
    for name in ("Resize", "RandomResizedCrop", "RandomRotation"):
        v2_op = getattr(v2, name)(8, interpolation=code)  # torchvision takes every one
        try:
            op = getattr(ga, name)(8, interpolation=code)
        except ValueError as e:
            assert f"interpolation={code}" in str(e)
            continue
        made += 1
        assert op.interpolation == mode == v2.InterpolationMode(mode).value
        assert v2_op.interpolation in (code, v2.InterpolationMode(mode))
    assert made >= 1


def test_a_bool_or_a_list_is_not_an_interpolation_code():
    """A bool is refused: False is 0 to Python, and torchvision's kernels run it as PIL's code 0,
    NEAREST (True as 1, LANCZOS), which nobody means by a bool. A list is refused with the same
    ValueError, not the TypeError of looking it up as a code."""
    for value in (False, True, [2]):
        for name in ("Resize", "RandomRotation"):
            with pytest.raises(ValueError, match=re.escape(f"got interpolation={value!r}")):
                getattr(ga, name)(8, interpolation=value)


@pytest.mark.parametrize("value, error", [("abc", TypeError), (None, TypeError), ({"r": 0.5}, TypeError),
                                          ([0.5, "a", 0.5], TypeError), ([], ValueError), (True, TypeError),
                                          ([0.5, True, 0.5], TypeError), (np.array([True]), TypeError),
                                          (torch.tensor([True, False, True]), TypeError), (0.5 + 0.1j, TypeError)])
@pytest.mark.parametrize("slot", ["mean", "std"])
def test_normalize_names_the_argument_that_is_not_numbers(value, error, slot):
    """Normalize's mean and std: a string, None, a dict or an empty list is refused at construction
    with the argument's name and what came (torch's own message, ``new(): invalid data type 'str'``,
    named neither; an empty pair failed only at the first call). Booleans and complex numbers too:
    torch took ``True`` as a mean or std of 1.0 (torchvision refuses a bool)."""
    args = {"mean": (0.5, 0.5, 0.5), "std": (0.2, 0.2, 0.2)}
    args[slot] = value
    with pytest.raises(error, match=rf"^{slot} should .*{re.escape(repr(value)[:5])}"):
        ga.Normalize(**args)


@pytest.mark.parametrize("text", [b"ab", bytearray(b"ab"), "ab"])
@pytest.mark.parametrize("name, slot", _ODD_SLOTS + [("RandomRotation", lambda v: ((10,), {"fill": v})),
                                                     ("Normalize", lambda v: (((0.5,), v), {}))],
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(_ODD_SLOTS)] + ["RandomRotation-fill", "Normalize-std"])
def test_text_is_never_a_size_range_or_fill(name, slot, text):
    """``bytes`` are a sequence of ints to Python: ``RandomCrop(b"ab")`` was a (97, 98) crop and
    ``RandomRotation(b"ab")`` turned by 97-98 degrees (torchvision takes both too). Every slot
    refuses text with a TypeError or ValueError."""
    args, kwargs = slot(text)
    with pytest.raises((TypeError, ValueError)):
        getattr(ga, name)(*args, **kwargs)


@pytest.mark.parametrize("value", [1j, (1j, 2j), [0.5, 1j], ("a", "b")])
@pytest.mark.parametrize("name, slot", _ODD_SLOTS + [("RandomRotation", lambda v: ((10,), {"fill": v})),
                                                     ("Normalize", lambda v: (((0.5,), v), {}))],
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(_ODD_SLOTS)] + ["RandomRotation-fill", "Normalize-std"])
def test_complex_numbers_and_words_get_gpuaugs_message(name, slot, value):
    """A complex number is a ``numbers.Number``: ``RandomCrop(1j)`` met ``math.isfinite``'s "must be
    real number, not complex", ``ColorJitter(1j)`` and ``RandomRotation(1j)`` a "'<' not supported",
    ``ColorJitter((1j, 2j))`` float()'s message, none naming the argument. Now gpuaug's own
    TypeError/ValueError, as for any other value that is not one."""
    args, kwargs = slot(value)
    with pytest.raises((TypeError, ValueError)) as caught:
        getattr(ga, name)(*args, **kwargs)
    assert not str(caught.value).startswith(("must be real", "'<' not supported", "float() argument",
                                              "could not convert")), str(caught.value)


def test_an_op_class_instead_of_an_op_says_to_make_one():
    with pytest.raises(TypeError, match=r"got the class RandomHorizontalFlip: make one, RandomHorizontalFlip\(\.\.\.\)"):
        ga.Pipeline(ga.RandomResizedCrop(8), ga.RandomHorizontalFlip, device="cpu")


def test_another_librarys_transform_names_gpuaugs_namesake():
    """Code ported from torchvision or kornia that keeps one of their transforms (or their
    container) in a Pipeline is told which gpuaug op to use."""
    import kornia.augmentation as K

    for op, words in ((v2.RandomResizedCrop(8), "torchvision's; gpuaug's own is ga.RandomResizedCrop"),
                      (K.RandomHorizontalFlip(), "kornia's; gpuaug's own is ga.RandomHorizontalFlip"),
                      (v2.Compose([v2.RandomHorizontalFlip()]), "list gpuaug's ops in the Pipeline instead of a "
                                                                "torchvision Compose"),
                      (v2.GaussianBlur(3), "torchvision's; gpuaug's ops are listed in the README's op table")):
        with pytest.raises(TypeError, match=r"^Pipeline expects gpuaug ops, got " + type(op).__name__) as caught:
            ga.Pipeline(ga.RandomResizedCrop(8), op, device="cpu")
        assert str(caught.value).endswith(f"({words})" if "list" in words or "table" in words else
                                          f"({words}, with torchvision's arguments)"), str(caught.value)


@pytest.mark.parametrize("make", [
    lambda i, f: ga.RandomResizedCrop(i(24), scale=(f(0.5), f(1)), ratio=(f(0.75), f(1.25))),
    lambda i, f: ga.CenterCrop(i(16)),
    lambda i, f: ga.CenterCrop((i(16), i(20))),
    lambda i, f: ga.Resize(i(20)),
    lambda i, f: ga.RandomCrop(i(16), padding=i(2)),
    lambda i, f: ga.RandomCrop(16, padding=(i(1), i(2)), fill=f(0.5)),
    lambda i, f: ga.RandomRotation(f(15), center=(i(3), f(4.5)), fill=f(0.5)),
    lambda i, f: ga.ColorJitter(f(0.5), (f(0.5), f(1.5)), hue=f(0.25)),
    lambda i, f: ga.RandomGrayscale(f(0.5)),
], ids=["RandomResizedCrop", "CenterCrop", "CenterCrop-hw", "Resize", "RandomCrop", "RandomCrop-seq", "RandomRotation",
        "ColorJitter", "RandomGrayscale"])
def test_numpy_numbers_are_taken_as_the_python_numbers_they_equal(make):
    """A size or range from a numpy array (a config, ``np.random.choice``): ``RandomResizedCrop(np.int64(24))``
    was "type numpy.int64 doesn't define __trunc__ method", ``RandomCrop(16, padding=np.int64(2))``
    torchvision's "Padding must be an int ..., got 2"; torchvision takes the former."""
    x = torch.randint(0, 256, (4, 3, 30, 40), dtype=torch.uint8)
    with_numpy = ga.Pipeline(make(np.int64, np.float32), device="cpu", seed=0)(x)
    assert torch.equal(with_numpy, ga.Pipeline(make(int, float), device="cpu", seed=0)(x))


@pytest.mark.parametrize("name", ["RandomResizedCrop", "CenterCrop", "RandomCrop", "Resize"])
def test_a_float_size_is_truncated_or_refused_as_torchvision_does(name):
    """torchvision's crops take one float size and truncate it (``int(24.7)``: 24x24); its Resize
    refuses one. gpuaug's float branch was untested (a mutant that broke it passed)."""
    for size in (24.7, 24.0, np.float32(30.5)):
        try:
            expected = tuple(getattr(v2, name)(size).size)
        except ValueError:
            with pytest.raises(ValueError, match="size"):
                getattr(ga, name)(size)
            continue
        assert getattr(ga, name)(size).size == expected == (int(size),) * 2
