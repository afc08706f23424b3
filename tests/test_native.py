"""The fused CPU color kernel's own contract: argument checks, the fallback where it cannot be
built, and agreement with the torch kernels on programs the pipeline never writes. Its results
against torchvision are checked in test_reference.py (the ``cpu fused`` runs)."""

import re

import pytest
import torch
import torchvision.transforms.v2.functional as TF

import gpuaug as ga
from gpuaug import native
from gpuaug.functional import color as gaF

needs_kernel = pytest.mark.skipif(not native.available(), reason="no C compiler here")


def _args(n=2, C=3, S=2):
    x = torch.rand(n, C, 8, 8, generator=torch.Generator().manual_seed(0))
    out = torch.empty(n, C, 8, 8)
    ops = torch.full((n, S), native.OP_BRIGHTNESS, dtype=torch.int32)
    return x, out, torch.arange(n), ops, torch.full((n, S), 0.5)


@needs_kernel
def test_program_steps_match_the_torch_kernels():
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    # Two contrast steps in one program (two ColorJitters): each takes the mean of its own input.
    ops = torch.tensor([[2, 4, 2, 3, 1]] * 4, dtype=torch.int32)
    factors = torch.tensor([[1.7, 0.3, 0.4, 1.5, 1.2]] * 4)
    out = torch.empty_like(x)
    native.color_program(x, out, torch.tensor([3, 1, 0, 2]), ops, factors)
    ref = gaF.adjust_brightness(gaF.adjust_saturation(gaF.adjust_contrast(gaF.adjust_hue(
        gaF.adjust_contrast(x, 1.7), 0.3), 0.4), 1.5), 1.2)
    assert (out[[3, 1, 0, 2]] - ref).abs().max() < 1e-5


@needs_kernel
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("hw", [(16, 16), (7, 9), (23, 37)])
def test_contrast_means_count_every_pixel(channels, hw):
    """The kernel sums an image's gray 16 pixels at a time in tiles of 512: the pixels past the
    last multiple of 16 are summed apart (63 pixels: 15 of them; 851: 3, in a second tile), and
    a 16x16 image has none. Against torchvision's kernel, to float rounding (the pipeline's tests
    allow 2/255, which a mean off in a few pixels stays within)."""
    x = torch.rand(3, channels, *hw, generator=torch.Generator().manual_seed(2))
    factors = torch.tensor([[0.2], [1.6], [0.7]])
    out = torch.empty_like(x)
    native.color_program(x, out, torch.arange(3), torch.full((3, 1), native.OP_CONTRAST, dtype=torch.int32), factors)
    ref = torch.stack([TF.adjust_contrast(image, float(f)) for image, f in zip(x, factors)])
    assert (out - ref).abs().max() < 1e-5


@needs_kernel
@pytest.mark.parametrize("change,message", [
    (lambda a: a.__setitem__(0, a[0].double()), "x should be a torch.float32"),
    (lambda a: a.__setitem__(3, a[3].long()), "ops should be a torch.int32"),
    (lambda a: a.__setitem__(1, torch.empty(2, 3, 4, 4)), "shapes do not match"),
    (lambda a: a.__setitem__(2, torch.tensor([0, 2])), r"index should be in \[0, 2\)"),
    (lambda a: a.__setitem__(0, torch.rand(2, 2, 8, 8)), "shapes do not match"),
    (lambda a: a.__setitem__(1, torch.empty(2, 8, 8, 3).permute(0, 3, 1, 2)), "out should be contiguous"),
])
def test_bad_arguments_are_refused_before_the_call(change, message):
    args = list(_args())
    change(args)
    with pytest.raises((TypeError, ValueError), match=message):
        native.color_program(*args)


@needs_kernel
def test_the_final_normalize_takes_both_stats_or_neither():
    x, out, index, ops, factors = _args()
    mean, inv_std = torch.tensor(ga.IMAGENET_MEAN), 1 / torch.tensor(ga.IMAGENET_STD)
    native.color_program(x, out, index, ops, factors, mean.view(1, 3, 1, 1), inv_std)  # any shape of 3 values
    expected = (gaF.adjust_brightness(gaF.adjust_brightness(x, 0.5), 0.5) - mean.view(3, 1, 1)) * inv_std.view(3, 1, 1)
    assert (out - expected).abs().max() < 1e-5
    for bad_mean, bad_inv_std in ((mean, None), (None, inv_std), (mean[:2], inv_std), (mean, torch.ones(4))):
        with pytest.raises(ValueError, match="mean and inv_std should both be None or both hold 3 values"):
            native.color_program(x, out, index, ops, factors, bad_mean, bad_inv_std)


@needs_kernel
def test_too_many_steps_are_refused_and_the_most_allowed_run():
    x, out, index, _, _ = _args()
    ops = torch.zeros(2, native.MAX_STEPS + 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="at most 64 color steps"):
        native.color_program(x, out, index, ops, torch.zeros(2, native.MAX_STEPS + 1))
    x, out, index, ops, factors = _args(S=native.MAX_STEPS)  # 64 brightness steps, each 1.01
    native.color_program(x, out, index, ops, factors.fill_(1.01))
    assert torch.allclose(out, (x * 1.01 ** native.MAX_STEPS).clamp(0, 1), atol=1e-5)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("GPUAUG_NATIVE", "0")
    assert not native.available()
    with pytest.raises(RuntimeError, match="not available"):
        native.color_program(*_args())


def test_no_compiler_warns_once_and_the_pipeline_falls_back(monkeypatch, tmp_path, photos):
    monkeypatch.delenv("GPUAUG_NATIVE", raising=False)
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("GPUAUG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    pipe = ga.Pipeline(ga.RandomResizedCrop(64), ga.ColorJitter(0.4, 0.4, 0.4, 0.1), device="cpu", seed=3)
    with pytest.warns(RuntimeWarning, match="could not build the fused CPU kernels") as caught:
        out = pipe(photos)  # the first call builds the kernels
    assert [w.filename for w in caught] == [__file__]  # the user's call, not a line of gpuaug's
    assert not native.available()
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv("CC")
    if native.available():  # the fused kernel gives the same result
        assert (pipe.manual_seed(3)(photos) - out).abs().max() < 1e-5


def test_a_compiler_on_the_path_or_in_cc_builds_the_kernels(monkeypatch, tmp_path):
    """Without CC, a compiler on the PATH (cc, gcc, clang) builds the kernels; CC may carry flags,
    as make's does ("gcc -m64": CC taken as one program name failed). The kernel tests skip where
    nothing builds, so this one fails instead where a compiler is there to be found."""
    import shutil

    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if found is None:
        pytest.skip("no C compiler on the PATH")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("GPUAUG_CACHE_DIR", str(tmp_path / "plain"))
    assert native._build().is_file()
    monkeypatch.setenv("CC", f"{found} -O1")
    monkeypatch.setenv("GPUAUG_CACHE_DIR", str(tmp_path / "flags"))
    assert native._build().is_file()


def test_without_cc_each_of_cc_gcc_clang_is_found_alone(monkeypatch, tmp_path):
    """Without CC the first of cc, gcc, clang on the PATH is used: each is found where it is the
    only one (a machine with clang alone, say)."""
    import shutil

    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if found is None:
        pytest.skip("no C compiler on the PATH")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("GPUAUG_CACHE_DIR", str(tmp_path))
    for name in ("cc", "gcc", "clang"):
        asked = []
        monkeypatch.setattr(native.shutil, "which", lambda n, name=name: asked.append(n) or (found if n == name else None))
        assert native._build().is_file(), name
        assert asked[-1] == name
    monkeypatch.setattr(native.shutil, "which", lambda n: None)
    with pytest.raises(RuntimeError, match=r"^no C compiler found \(set CC\)$"):
        native._build()


def test_a_compiler_that_fails_is_named_with_the_end_of_its_error(monkeypatch, tmp_path):
    """A compiler that fails (with and without -march=native) raises naming it and (the last 500
    characters of) its own error text, which the fallback warning passes on."""
    script = tmp_path / "broken-cc"
    script.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "broken 1.0"; exit 0; }\n'
                      'echo "In function main:" >&2; echo "broken: unknown flag -O3" >&2; exit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("GPUAUG_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="^" + re.escape(f"{script} failed: In function main:\nbroken: unknown flag -O3") + "$"):
        native._build()
    assert list((tmp_path / "cache").iterdir()) == []  # no temporary file left


@needs_kernel
def test_build_is_cached_on_disk(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("GPUAUG_CACHE_DIR", str(tmp_path))
    assert native.available()
    built = sorted(p.name for p in tmp_path.iterdir())
    assert len(built) == 1 and built[0].startswith("kernels-") and built[0].endswith(".so")
    monkeypatch.setattr(native, "_state", {})
    assert native.available()
    assert sorted(p.name for p in tmp_path.iterdir()) == built  # reused, no temp files left


@pytest.mark.parametrize("native_on", [True, False])
def test_channels_last_equals_torchs_copy(monkeypatch, native_on):
    if not native_on:
        monkeypatch.setenv("GPUAUG_NATIVE", "0")
    elif not native.available():
        pytest.skip("no C compiler here")
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(0, 256, (2, 3, 37, 53), dtype=torch.uint8, generator=g)
    decoded = torch.randint(0, 256, (37, 53, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1)  # as decode_jpeg
    gray = torch.randint(0, 256, (1, 37, 53), dtype=torch.uint8, generator=g)
    for image in (batch[1], batch[1, :, 5:30, 7:50], decoded, decoded[:, 3:20, 4:40], gray[:, 2:9, 1:5]):
        out = native.channels_last(image)
        assert out.shape == (1, *image.shape) and out.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(out[0], image)
    for wrong in (batch[0].float(), batch[:1], batch[0, 0]):  # float; (1, C, H, W); (H, W)
        with pytest.raises(TypeError, match="expected a \\(C, H, W\\) uint8 CPU image"):
            native.channels_last(wrong)


@needs_kernel
def test_channels_last_sends_planar_rgb_rows_to_the_c_kernel_and_the_rest_to_torch(monkeypatch):
    """layout.c reads three planes of contiguous rows: planar RGB (a crop of a stacked batch, one
    row or one column too) goes to it, anything else (rows with a step, channels-last memory as
    decoded, gray, empty) to torch's copy; all equal the image."""
    lib, calls = native._library(), []

    class Spy:
        def __getattr__(self, name):
            return getattr(lib, name)

        def gpuaug_planar_to_hwc3(self, *args):
            calls.append(args[1:3])
            return lib.gpuaug_planar_to_hwc3(*args)

    monkeypatch.setitem(native._state, "lib", Spy())
    g = torch.Generator().manual_seed(1)
    batch = torch.randint(0, 256, (2, 3, 37, 53), dtype=torch.uint8, generator=g)
    decoded = torch.randint(0, 256, (37, 53, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1)
    cases = [(batch[1], True), (batch[1, :, 5:30, 7:50], True), (batch[0, :, 4:5], True), (batch[0, :, :, 6:7], True),
             (batch[1, :, :, ::2], False), (decoded, False), (batch[1, :1], False), (batch[1, :, :0], False)]
    for image, to_kernel in cases:
        calls.clear()
        out = native.channels_last(image)
        assert out.shape == (1, *image.shape) and out.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(out[0], image)
        assert calls == ([tuple(image.shape[1:])] if to_kernel else []), (tuple(image.shape), image.stride())
