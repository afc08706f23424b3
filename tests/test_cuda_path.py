"""The CUDA code path, traced without a GPU: fake CUDA tensors (``FakeTensorMode``) carry shapes,
dtypes and devices but no data, so every op of a real CUDA call runs except the kernels.

That checks what the per-batch path must never do on CUDA, on every machine (CI has no GPU):
read a device value on the host (``.item()``, ``.tolist()``, ``bool(t)``: fake tensors refuse
them) or copy host memory to the device with a blocking copy (``cudaMemcpy`` + stream sync, which
stalls the host until the GPU catches up). tests/test_cuda.py checks the same on a real GPU.
"""

import random
from contextlib import nullcontext

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import gpuaug as ga
import gpuaug.pipeline as pipeline_module
from gpuaug import gpu_kernels
from generators import composition_ops, corner_images, corner_ops, more_composition_ops

fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")


def _fake_cuda_works() -> bool:
    """Fake CUDA tensors, made and copied from the host, without a driver (older torch, 2.8
    say, asks the driver for the copy: 'Found no NVIDIA driver')."""
    try:
        with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
            return torch.empty(1, device="cuda").device.type == "cuda" and torch.ones(3).to("cuda").is_cuda
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _fake_cuda_works(), reason="this torch build cannot make fake CUDA tensors")


class _BlockingCopies(TorchDispatchMode):
    """Records every copy between host and device that is not ``non_blocking`` (``found``), and
    whether each copy from the device to the host blocked (``to_host``)."""

    def __init__(self):
        super().__init__()
        self.found, self.to_host = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src, dst, blocking = args[0].device, torch.device(kwargs.get("device") or args[0].device), not kwargs.get("non_blocking", False)
        elif func is torch.ops.aten.copy_.default:
            src, dst, blocking = args[1].device, args[0].device, not (len(args) > 2 and args[2])
        else:
            return func(*args, **kwargs)
        if src.type != "cpu" and dst.type == "cpu":
            self.to_host.append(blocking)
        if src.type != dst.type and blocking:
            self.found.append(f"{func.__name__} {src} -> {dst}, shape {tuple(args[0].shape)}")
        return func(*args, **kwargs)


class _TritonStub:
    """Stands in for gpuaug.gpu_kernels (fake tensors cannot be launched on): checks what the
    pipeline hands the kernels and records the calls."""

    def __init__(self):
        self.calls = []

    def guarded(self, launch, *args, **kwargs):
        self.calls.append(launch.__name__)
        return launch(*args, **kwargs)

    @staticmethod
    def color_program(x, out, ops, factors, mean, inv_std, contrast_steps):
        assert isinstance(contrast_steps, int) and 0 <= contrast_steps <= ops.shape[1]
        for t in (x, out, ops, factors) + ((mean, inv_std) if mean is not None else ()):
            assert t.device.type == "cuda", t.device
        assert x.is_contiguous() and out.shape == x.shape and out.dtype == x.dtype
        assert ops.dtype == torch.int32 and factors.dtype == torch.float32 and ops.shape == factors.shape
        assert ops.shape[0] == x.shape[0]
        return out

    pack_images = staticmethod(gpu_kernels.pack_images)  # plain torch: traced for blocking copies too

    @staticmethod
    def resample_axes(x, axes, size, taps, dtype, scale=1.0, antialias=True, pad_mode="constant",
                      pad_output=False, cubic=False):
        src = x.flat if isinstance(x, gpu_kernels.Packed) else x
        assert src.device.type == axes.device.type == "cuda" and axes.shape == (x.shape[0], 2, 8)
        assert axes.dtype == torch.float32 and all(isinstance(v, int) for v in (*size, *taps))
        if isinstance(x, gpu_kernels.Packed):
            assert x.table.device.type == "cuda" and x.table.shape == (x.shape[0], 6)
        return torch.empty(x.shape[0], x.shape[1], *size, dtype=dtype, device=src.device)

    @staticmethod
    def warp_affine(x, matrix, fill=None, blend=True, nearest=False):
        assert x.device.type == matrix.device.type == "cuda" and matrix.shape == (x.shape[0], 3, 3)
        assert fill is None or fill.device.type == "cuda"
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _stand_in_cuda(monkeypatch, kernels: str) -> _TritonStub | None:
    """Pipelines accept CUDA as a device and draw from the (fake) default generator; with
    ``kernels="triton kernels"`` the Triton launches go to a stub (returned)."""
    monkeypatch.setattr(pipeline_module, "select_device", lambda device: torch.device(device))
    monkeypatch.setattr(pipeline_module.Pipeline, "_get_generator", lambda self: None)
    stub = _TritonStub() if kernels == "triton kernels" else None
    monkeypatch.setattr(pipeline_module, "_gpu_kernels", lambda device: stub)
    return stub


@pytest.fixture(params=["torch kernels", "triton kernels"])
def fake_cuda(monkeypatch, request):
    """A context manager for fake mode, with CUDA accepted as a device and the (fake) default
    generator; ops are built before entering it (their argument checks read values). Runs each
    test with the torch kernels and with the Triton kernels' launches stubbed out."""
    stub = _stand_in_cuda(monkeypatch, request.param)
    yield lambda: fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)
    if stub is not None:
        assert "color_program" in stub.calls and "resample_axes" in stub.calls


def ops():
    return [ga.RandomResizedCrop(64), ga.RandomHorizontalFlip(), ga.RandomVerticalFlip(), ga.RandomRotation(15, fill=0.5),
            ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.2), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]


def test_fake_mode_catches_what_it_should():
    """The harness itself: a blocking copy is recorded and a host read raises."""
    with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.ones(3, device="cuda")
        with _BlockingCopies() as copies:
            x + torch.ones(3).to("cuda")
            x + torch.ones(3).to("cuda", non_blocking=True)
        assert len(copies.found) == 1
        with pytest.raises(Exception, match="DataDependentOutput|_local_scalar_dense"):
            bool(x.sum() > 0)


@pytest.mark.parametrize("layout", ["batch", "ragged list", "packed", "packed on the host", "clips", "packed clips",
                                    "float batch"])
def test_cuda_path_has_no_host_sync(photos, fake_cuda, layout):
    batch = torch.stack([p[:, :200, :240] for p in photos])
    ragged_clips = ga.PackedImages.pack([torch.stack([p, p]) for p in photos[:2]])
    images = {"batch": batch, "ragged list": photos, "clips": batch.view(2, 2, 3, 200, 240),
              "packed clips": ragged_clips, "float batch": batch.float() / 255}.get(layout, ga.PackedImages.pack(photos))
    steps = ops()
    with fake_cuda():
        pipe = ga.Pipeline(*steps, device="cuda", seed=0)
        if layout not in ("float batch", "packed on the host"):  # a CPU batch is moved by the pipeline, non-blocking
            images = [t.to("cuda") for t in images] if isinstance(images, list) else images.to("cuda")
        with _BlockingCopies() as copies:
            out, params = pipe(images, return_params=True)
            pipe(images, params=params)  # replay too
    assert copies.found == []
    assert out.device.type == "cuda" and out.dtype == torch.float16
    assert out.shape[-3:] == (3, 64, 64) and out.shape[0] == (2 if "clips" in layout else 4)


@pytest.mark.parametrize("layout", ["batch", "clips"])
def test_on_a_device_the_ops_after_the_resampling_draw_once_it_is_launched(photos, monkeypatch, layout):
    """The host draws the rotation's and the color ops' params (and plans the warp and the color
    program) while the device runs the resampling, the call's largest kernel: after its launch, from
    the same generator in the same order (test_paths_agree: the same output as the CPU's)."""
    stub = _stand_in_cuda(monkeypatch, "triton kernels")
    events, launch = [], stub.guarded
    monkeypatch.setattr(stub, "guarded", lambda kernel, *a, **k: (events.append(kernel.__name__), launch(kernel, *a, **k))[1])
    steps = ops()
    for op in steps:
        def recorded(draw, make_params=op.make_params, name=type(op).__name__):
            events.append(name)
            return make_params(draw)
        monkeypatch.setattr(op, "make_params", recorded)
    batch = torch.stack([p[:, :200, :240] for p in photos])
    with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        pipe = ga.Pipeline(*steps, device="cuda", seed=0)
        out, params = pipe((batch if layout == "batch" else batch.view(2, 2, 3, 200, 240)).to("cuda"), return_params=True)
    assert events == ["RandomResizedCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "resample_axes",
                      "RandomRotation", "ColorJitter", "RandomGrayscale", "Normalize", "warp_affine", "color_program"]
    assert len(params) == len(steps) and params[3]["angle"].shape == (out.shape[0],)


def test_crop_params_replayed_on_images_of_other_sizes_are_refused_without_reading_them(photos, fake_cuda):
    """On a GPU replayed params are not read (a host sync); drawn crop boxes carry the sizes of
    the images they were drawn for as host values, so a replay on other images is refused there
    too (a box past its image gave wrong pixels: up to 148/255 off on the CPU, where it is now
    refused by its values)."""
    batch = torch.stack([p[:, :200, :240] for p in photos])
    steps = ops()
    with fake_cuda():
        pipe = ga.Pipeline(*steps, device="cuda", seed=0)
        drawn_on, shorter = batch.to("cuda"), batch[:, :, :100].to("cuda")
        one_shorter = [p[:, : (150 if i == 2 else 200), :240].to("cuda") for i, p in enumerate(photos)]
        with _BlockingCopies() as copies:
            _, params = pipe(drawn_on, return_params=True)
            with pytest.raises(ValueError, match=r"drawn for 200x240, given 100x240"):
                pipe(shorter, params=params)
            with pytest.raises(ValueError, match=r"sample 2: drawn for 200x240, given 150x240"):
                pipe(one_shorter, params=params)
    assert copies.found == []


@pytest.mark.parametrize("steps", [lambda: [ga.Resize(80), ga.CenterCrop((64, 72)), ga.ColorJitter(hue=0.2)],
                                   lambda: [ga.Resize((90, 100)), ga.RandomRotation(20), ga.CenterCrop((64, 72)),
                                            ga.ColorJitter(hue=0.2)],
                                   lambda: [ga.Resize((60, 70)), ga.RandomRotation(20), ga.CenterCrop((64, 72)),
                                            ga.ColorJitter(hue=0.2)],
                                   lambda: [ga.Resize((60, 70)), ga.RandomCrop((64, 72), padding=4, pad_if_needed=True),
                                            ga.RandomHorizontalFlip(), ga.ColorJitter(hue=0.2)],
                                   lambda: [ga.RandomCrop((64, 72), padding=4, pad_if_needed=True, fill=0.5),
                                            ga.RandomHorizontalFlip(), ga.ColorJitter(hue=0.2)]],
                         ids=["resize, crop", "rotation, crop", "rotation, padding crop", "random padded crop",
                              "filled padding crop"])
def test_cuda_path_resize_and_center_crop_have_no_host_sync(photos, fake_cuda, steps):
    steps = steps()
    with fake_cuda():
        pipe = ga.Pipeline(*steps, device="cuda", seed=0, channels_last=True)
        images = [p.to("cuda") for p in photos]
        with _BlockingCopies() as copies:
            out = pipe(images)
    assert copies.found == []
    assert out.shape == (4, 3, 64, 72) and out.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("kernels", ["torch kernels", "triton kernels"])
@pytest.mark.parametrize("case", range(60))  # case 48 pads with a fill
def test_random_compositions_have_no_host_sync(photos, monkeypatch, case, kernels):
    """The generators of tests/generators.py (padding modes, fills, bicubic, nearest, rotation centers, 1-pixel images, 1 channel, clips,
    float input), given on the device, on the host, or packed: no host read, no blocking copy,
    or a documented ValueError. A sweep of 1500 cases ran clean (2026-12-04)."""
    _stand_in_cuda(monkeypatch, kernels)
    rng = random.Random(case)
    steps = (composition_ops, more_composition_ops, corner_ops)[case % 3](rng)
    if case % 3 == 2:
        images = corner_images(rng, rng.choice([1, 3, 3]))
    else:
        images = [p[:, : rng.randint(40, 160), : rng.randint(40, 160)] for p in photos]
        images = torch.stack([p[:, :40, :40] for p in images]) if rng.random() < 0.5 else images
    layout = rng.choice(["device", "host", "packed"])
    if layout == "packed" and isinstance(images, list):
        images = ga.PackedImages.pack(images)
    with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        pipe = ga.Pipeline(*steps, device="cuda", seed=0)
        if layout == "device":
            images = [t.to("cuda") for t in images] if isinstance(images, list) else images.to("cuda")
        with _BlockingCopies() as copies:
            try:
                out, params = pipe(images, return_params=True)
                pipe(images, params=params)
            except ValueError as e:
                refused = e
            else:
                refused = None
    if refused is not None:  # as documented (the CPU refuses it too)
        documented = ("fixed output size", "the only op", "longer than the image", "side of 0 pixels")
        assert any(m in str(refused) for m in documented), (refused, steps)
        return
    assert copies.found == [], (copies.found, steps)
    assert out.device.type == "cuda"


@pytest.mark.parametrize("layout", ["batch", "ragged list", "packed", "replayed params"])
def test_a_cpu_pipeline_waits_for_what_comes_from_the_gpu(photos, monkeypatch, layout):
    """CUDA images (or params drawn on CUDA) given to a CPU pipeline reach the host by blocking
    copies: a non-blocking copy to the host returns before the data lands, and the CPU kernels
    would read whatever the buffer held."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)  # the torch kernels, which fake tensors run
    steps, batch = ops(), torch.stack([p[:, :200, :240] for p in photos])
    packed = ga.PackedImages.pack(photos)
    with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        pipe = ga.Pipeline(*steps, device="cpu", seed=0)
        images, params = {"batch": batch.to("cuda"), "ragged list": [p.to("cuda") for p in photos],
                          "packed": packed.to("cuda")}.get(layout, batch), None
        if layout == "replayed params":
            params = [{k: v.to("cuda") for k, v in p.items()} for p in pipe(batch, return_params=True)[1]]
        with _BlockingCopies() as copies:
            out = pipe(images, params=params)
    assert copies.to_host and all(copies.to_host), copies.to_host
    assert out.device.type == "cpu" and out.shape == (4, 3, 64, 64)


def test_op_buffers_follow_the_pipeline_device():
    pipe = ga.Pipeline(ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device="meta")
    assert {b.device.type for b in pipe.buffers()} == {"meta"}


def test_a_cuda_pipeline_called_in_a_dataloader_worker_says_so(photos, fake_cuda, monkeypatch):
    """A forked worker cannot initialise CUDA; the pipeline names the mistake before touching it."""
    class Worker:
        id, seed = 1, 5

    steps = ops()
    with fake_cuda():
        pipe = ga.Pipeline(*steps, device="cuda", seed=0)
        _, drawn = pipe(photos[0][None].to("cuda"), return_params=True)  # in the main process: fine
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: Worker())
        for params in (None, drawn):
            with pytest.raises(RuntimeError, match="inside DataLoader worker 1: workers must not touch CUDA"):
                pipe(photos[0][None], params=params)


@pytest.mark.parametrize("path", ["cuda, triton kernels", "cuda, torch kernels", "cpu, torch kernels"])
def test_a_float32_call_goes_through_no_matmul(photos, monkeypatch, path):
    """A float32 matmul follows process-wide settings: in TF32 on CUDA where a process allows it
    (``torch.set_float32_matmul_precision("high")``, common in training scripts: 10 bits of
    mantissa, ~0.05 px at 224 px, 13/255 on a sharp edge), in bfloat16 on CPUs that have it
    (``"medium"``). The warp's matrices (a rotation with a flip after it, two rotations) were
    composed by one, and the torch color kernels mixed channels by one; a float32 call now
    dispatches no matmul on any path."""
    monkeypatch.setenv("GPUAUG_NATIVE", "0")  # the CPU's torch kernels
    stub = _stand_in_cuda(monkeypatch, path.split(", ")[1]) if path.startswith("cuda") else None
    matmuls = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default,
               torch.ops.aten.addmm.default, torch.ops.aten.matmul.default}

    class Matmuls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.found = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in matmuls:
                self.found.append(func.__name__)
            return func(*args, **(kwargs or {}))

    steps = [ga.RandomResizedCrop(64), ga.RandomRotation(15), ga.RandomHorizontalFlip(), ga.RandomRotation(5),
             ga.RandomVerticalFlip(), ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.5),
             ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    batch = torch.stack([p[:, :200, :240] for p in photos])
    device = path.split(",")[0]
    with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True) if device == "cuda" else nullcontext():
        pipe = ga.Pipeline(*steps, device=device, dtype=torch.float32, seed=0)
        with Matmuls() as mode:
            pipe(batch.to(device))
    assert mode.found == []
    if stub is not None:
        assert "warp_affine" in stub.calls and "color_program" in stub.calls
