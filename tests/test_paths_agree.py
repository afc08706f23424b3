"""Random pipelines on random inputs give the same output on every kernel path.

The reference tests pin each op against torchvision on photos; this one walks the corners they do
not (1-pixel images and crops, padding (zeros or a fill) then resizing, resizing then copying padding, clips, ragged lists, one channel, every op
order the pipeline takes), drawing seeded cases and running each through the four ways a batch can
go (see ``kernel_path`` in test_reference.py). A difference is a bug in one path; an error must be
the same ValueError/TypeError on all four.
"""

import random

import pytest
import torch

import gpuaug as ga
from conftest import color_gain, route_to_kernels
from generators import corner_images, corner_ops

PATHS = ["cpu fused", "cpu chunks", "one pass", "cuda kernels"]


def _run(path, ops, images, seed, kernels, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("GPUAUG_NATIVE", "1" if path == "cpu fused" else "0")
        if path in ("one pass", "cuda kernels"):
            m.setattr(ga.cpu, "OWN_PATH", False)
        if path == "cuda kernels":  # the interpreted Triton kernels, failing loudly instead of falling back
            route_to_kernels(m, kernels)
        return ga.Pipeline(*ops, device="cpu", seed=seed)(images)


@pytest.mark.parametrize("case", range(60))
def test_every_kernel_path_gives_the_same_output(case, interpreted_gpu_kernels, monkeypatch):
    rng = random.Random(case)
    channels = rng.choice([1, 3, 3])
    ops = corner_ops(rng)
    if rng.random() < 0.5:
        ops.append(ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD) if channels == 3 else ga.Normalize((0.5,), (0.25,)))
    images = corner_images(rng, channels)
    outputs, errors = {}, {}
    for path in PATHS:
        try:
            outputs[path] = _run(path, ops, images, case, interpreted_gpu_kernels, monkeypatch)
        except (ValueError, TypeError) as e:
            errors[path] = type(e)
    assert not errors or (len(errors) == len(PATHS) and len(set(errors.values())) == 1), (errors, ops)
    if errors:
        return
    rounding = 1.0 if (images[0] if isinstance(images, list) else images).dtype == torch.uint8 else 0.0
    tol = (5 if any(isinstance(op, ga.Normalize) for op in ops) else 1) * (0.1 + rounding * color_gain(ops)) / 255
    reference = outputs["one pass"]
    for path, out in outputs.items():
        assert out.shape == reference.shape and torch.isfinite(out).all(), (path, ops)
        err = (out - reference).abs()
        if any(getattr(op, "interpolation", "") == "nearest" for op in ops):
            # A nearest pick flips where the paths' coordinates straddle a midpoint (float noise).
            assert (err > tol).float().mean() <= 2e-3, (path, (err > tol).float().mean().item(), ops)
        else:
            assert err.max() <= tol, (path, err.max().item(), ops)


def test_torch_compile_of_the_cuda_code_path_matches_eager(photos, monkeypatch):
    """The code CUDA runs (``OWN_PATH`` off), under ``torch.compile`` on the CPU: replayed params
    give eager's output, and drawing inside the compiled call (its draws are graph breaks) gives
    what an eager pipeline of the same seed gives. tests/test_cuda.py checks the same on a GPU;
    this keeps the traced code working in CI."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    torch._dynamo.reset()
    batch = torch.stack([torch.nn.functional.interpolate(p[None].float(), size=(120, 160))[0] for p in photos])
    batch = batch.to(torch.uint8)

    def pipeline(seed):
        return ga.Pipeline(ga.RandomResizedCrop(64), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
                           ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD),
                           device="cpu", seed=seed)

    eager = pipeline(2)
    expected, params = eager(batch, return_params=True)
    compiled = torch.compile(eager)
    assert (compiled(batch, params=params) - expected).abs().max() < 1e-4
    assert (torch.compile(pipeline(5))(batch) - pipeline(5)(batch)).abs().max() < 1e-4


def test_torch_compile_runs_ragged_batches_eagerly_without_recompiling(photos, monkeypatch):
    """A ragged batch's sizes are Python values the plan branches on: compiled, each new set of
    sizes recompiled the whole call (seconds a batch; 8 recompiles, then 2.6x slower than eager for
    good). A compiled pipeline runs ragged input eagerly: batches of new sizes compile nothing, and
    give eager's output."""
    from torch._dynamo.testing import CompileCounter

    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    torch._dynamo.reset()
    pipe = ga.Pipeline(ga.RandomResizedCrop(24), ga.RandomHorizontalFlip(), ga.ColorJitter(0.4, 0.4, 0.4, 0.1),
                       device="cpu", seed=0)
    counter = CompileCounter()
    compiled = torch.compile(pipe, backend=counter)
    for k in range(4):  # four sets of sizes, as batches of decoded photos come
        ragged = [p[:, k * 7: 60 + k * 5 + 3 * i, : 70 + k + i] for i, p in enumerate(photos)]
        for images in (ragged, ga.PackedImages.pack(ragged)):
            expected, params = pipe(images, return_params=True)
            assert torch.equal(compiled(images, params=params), expected)
    assert counter.frame_count == 0  # no graph was compiled for ragged input


@pytest.mark.parametrize("ops", [
    (lambda: (ga.Resize(100), ga.CenterCrop(64))),
    (lambda: (ga.Resize(90, max_size=130), ga.RandomRotation(10), ga.CenterCrop(50))),
    (lambda: (ga.RandomCrop(100, padding=4, padding_mode="reflect"), ga.Resize((50, 60)))),
], ids=["resize, center crop", "resize max_size, rotation, center crop", "reflect-padded crop, resize"])
def test_torch_compile_traces_the_size_rules_of_a_one_size_batch_without_graph_breaks(photos, monkeypatch, ops):
    """Resize's output size, CenterCrop's start and RandomCrop's bounds are host-side rules of the
    input size; for a batch of one size the traced call reads them as constants. Resize's scale
    bound once went through numpy arrays, which dynamo cannot trace: 8 graphs for Resize +
    CenterCrop. Now one graph, plus one for the code after the draws' break (``_draw``), whether
    the pipeline ran eagerly first (replayed params) or was compiled before any call (its rows
    kept by no earlier call: CenterCrop's start was first computed in the traced plan, 7 graphs)."""
    from torch._dynamo.testing import CompileCounter

    from gpuaug.transforms import _base
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    batch = torch.stack([torch.nn.functional.interpolate(p[None].float(), size=(120, 160))[0] for p in photos])
    batch = batch.to(torch.uint8)
    for first in ("compiled", "eager"):
        torch._dynamo.reset()
        monkeypatch.setattr(_base, "_ONE_ROWS", {})  # no row kept from an earlier call
        pipe, counter = ga.Pipeline(*ops(), device="cpu", seed=0), CompileCounter()
        compiled = torch.compile(pipe, backend=counter)
        if first == "compiled":
            outputs = [compiled(batch) for _ in range(2)]
            expected = ga.Pipeline(*ops(), device="cpu", seed=0)
            assert all((out - expected(batch)).abs().max() < 1e-4 for out in outputs)
        else:
            expected, params = pipe(batch, return_params=True)
            for _ in range(2):
                assert (compiled(batch, params=params) - expected).abs().max() < 1e-4
        assert counter.frame_count <= 2, first


@pytest.mark.parametrize("default", ["device meta", "dtype float64"])
@pytest.mark.parametrize("path", PATHS)
def test_a_default_device_or_dtype_set_elsewhere_changes_nothing(path, default, photos, interpreted_gpu_kernels,
                                                                  monkeypatch):
    """``torch.set_default_device`` puts every tensor made without a device there, and
    ``torch.set_default_dtype`` makes every float tensor made without a dtype of it. A CPU pipeline
    made its host tensors so: under ``set_default_device("cuda")`` the fused C kernels were handed
    device memory (a segfault: here "meta", which holds no data, gave one too), and workers would
    have touched CUDA; under float64 the draws were float64 (another stream of params for the same
    seed) and the fused color kernels refused their factors (TypeError). Each path, each kind of
    input, gives what it gives without."""
    small = [p[:, : 60 + 9 * i, : 80 + 7 * i] for i, p in enumerate(photos)]
    batch = torch.stack([p[:, :60, :80] for p in small])
    inputs = {"list": small, "packed": ga.PackedImages.pack(small), "batch": batch, "clips": batch.view(2, 2, 3, 60, 80),
              "float": batch.float() / 255, "one channel": batch[:, :1]}
    pipelines = {
        "README": lambda: [ga.RandomResizedCrop(32), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
                           ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.5), ga.Normalize((0.5,), (0.25,))],
        "CIFAR": lambda: [ga.RandomCrop(48, padding=4, padding_mode="reflect"), ga.RandomHorizontalFlip()],
        "validation": lambda: [ga.Resize(40), ga.CenterCrop(32)],
        "fill, bicubic": lambda: [ga.RandomCrop(50, padding=7, fill=0.3), ga.Resize((30, 20), "bicubic"),
                                  ga.RandomRotation(20, fill=0.2)],
    }
    runs = [(name, kind) for name in pipelines for kind in inputs
            if not (name == "validation" and kind in ("list", "packed"))]  # no fixed output size
    expected = {(name, kind): _run(path, pipelines[name](), inputs[kind], 3, interpreted_gpu_kernels, monkeypatch)
                for name, kind in runs}
    if default == "device meta":
        torch.set_default_device("meta")
    else:
        torch.set_default_dtype(torch.float64)
    try:
        got = {(name, kind): _run(path, pipelines[name](), inputs[kind], 3, interpreted_gpu_kernels, monkeypatch)
               for name, kind in runs}
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(torch.float32)
    for key, out in got.items():
        assert out.device.type == "cpu" and torch.equal(out, expected[key]), key
