"""CUDA-only checks; they skip cleanly on machines without a GPU (CI has none)."""

import warnings

import pytest
import torch

import gpuaug as ga

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def ops():
    return [ga.RandomResizedCrop(224), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
            ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.2)]


def test_float16_on_cuda_within_4_of_255_of_float32_on_cpu(photos, monkeypatch):
    # The CPU reference runs as CUDA does (float resampling, not torchvision's uint8 kernel): only
    # precision differs.
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    gpu = ga.Pipeline(*ops(), device="cuda", seed=0)
    out, params = gpu(photos * 4, return_params=True)
    assert out.dtype == torch.float16 and out.device.type == "cuda"
    cpu = ga.Pipeline(*ops(), device="cpu", seed=0)
    ref = cpu(photos * 4, params=[{k: v.cpu() for k, v in p.items()} for p in params])
    err = (out.float().cpu() - ref).abs()
    # Hue flips by a whole turn where a pixel's hue sits on the wrap point; allow a handful of pixels.
    assert (err > 4 / 255).float().mean() < 1e-4, err.max()


@pytest.mark.parametrize("steps", [
    lambda: [ga.RandomCrop((300, 420), padding=(12, 9), pad_if_needed=True), ga.Resize((96, 128))],
    lambda: [ga.CenterCrop((560, 700)), ga.Resize((150, 170)), ga.RandomHorizontalFlip()],
    lambda: [ga.Resize((64, 80)), ga.RandomCrop(56, padding=6), ga.RandomRotation(25)],
    lambda: [ga.RandomCrop((300, 420), padding=(12, 9), padding_mode="reflect"), ga.Resize((96, 128))],
    lambda: [ga.RandomCrop((300, 420), padding=(2, 5, 9, 1), pad_if_needed=True, padding_mode="edge")],
    lambda: [ga.RandomCrop((300, 420), padding=(12, 9), fill=(0.2, 0.5, 0.9)), ga.Resize((96, 128)), ga.RandomRotation(20)],
    lambda: [ga.Resize((96, 128)), ga.RandomRotation(30, center=(20, 30), fill=None), ga.RandomHorizontalFlip()],
    lambda: [ga.RandomResizedCrop((96, 128)), ga.RandomCrop((90, 120), padding=(20, 16), padding_mode="symmetric"),
             ga.RandomVerticalFlip()],
    lambda: [ga.RandomCrop((300, 420), padding=(12, 9), fill=0.3), ga.Resize((96, 128), "bicubic")],
], ids=["random crop padding, resize", "center crop padding, resize", "resize, random crop padding, rotation",
        "reflect padding, resize", "edge padding", "fill padding, resize, rotation", "rotation about a point, fill None",
        "resized crop, symmetric padding of it", "fill padding, bicubic resize"])
def test_padding_crops_on_cuda_match_the_cpu(photos, monkeypatch, steps):
    """The compiled resampling kernel's content mask (padding read as 0, blended by a later resize)
    against the same map on the CPU, float32 both sides."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    out, params = ga.Pipeline(*steps(), device="cuda", dtype=torch.float32, seed=3)(photos, return_params=True)
    on_cpu = [{k: v.cpu() for k, v in p.items()} for p in params]
    ref = ga.Pipeline(*steps(), device="cpu", seed=3)(photos, params=on_cpu)
    err = (out.cpu() - ref).abs()
    # A rotation's inside/outside test may flip on a boundary pixel between the two warps' rounding.
    assert err.max() < 0.05 and (err > 1e-3).float().mean() < 1e-4, err.max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_nearest_rotation_on_cuda_matches_the_cpu(photos, monkeypatch, dtype):
    """interpolation=NEAREST through the compiled warp: the CPU's picks, but where the two sides'
    coordinates straddle a midpoint between pixels (float noise: a few pixels per million)."""
    from torchvision.transforms import InterpolationMode

    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)

    def steps():
        return [ga.Resize((96, 128)), ga.RandomRotation(30, InterpolationMode.NEAREST, fill=0.4), ga.RandomHorizontalFlip()]

    out, params = ga.Pipeline(*steps(), device="cuda", dtype=dtype, seed=5)(photos * 4, return_params=True)
    ref = ga.Pipeline(*steps(), device="cpu", seed=5)(photos * 4, params=[{k: v.cpu() for k, v in p.items()} for p in params])
    err = (out.float().cpu() - ref).abs().amax(1)
    assert (err > (1e-3 if dtype == torch.float32 else 2e-3)).float().mean() < 1e-3, err.max()
    assert (ref == 0.4).all(1).float().mean() > 0.02  # the fill, whole


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "cuda_graph"])
def test_no_host_sync_per_batch(photos, cuda_graph):
    pipe = ga.Pipeline(*ops(), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device="cuda", seed=0,
                       cuda_graph=cuda_graph)
    batch = torch.stack([torch.nn.functional.interpolate(p[None].float(), size=(375, 500))[0] for p in photos * 8])
    batch = batch.to(torch.uint8).cuda()
    pipe(batch)  # warm up: generator creation and lazy CUDA init may sync once
    pipe(batch)  # (cuda_graph: recorded here; a recording synchronizes once)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            out = pipe(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert out.shape == (32, 3, 224, 224)


def test_a_pipeline_moved_to_cuda_after_drawing_does_not_restart_its_stream(photos):
    batch = torch.stack([p[:, :200, :240] for p in photos])  # (a ragged list needs a crop before a rotation)
    moved = ga.Pipeline(ga.RandomRotation(180), device="cpu", seed=9)
    moved(batch)
    moved.to("cuda")
    _, after = moved(batch, return_params=True)
    _, fresh = ga.Pipeline(ga.RandomRotation(180), device="cuda", seed=9)(batch, return_params=True)
    assert after[0]["angle"].is_cuda and not torch.equal(after[0]["angle"], fresh[0]["angle"])


@pytest.mark.skipif(torch.cuda.device_count() < 3, reason="needs three CUDA devices")
def test_data_parallel_copies_draw_their_own_params(photos):
    """nn.DataParallel with the pipeline inside: each device's copy draws its own parameters, the
    same ones from one seed whatever the threads' order (tests/test_randomness.py stands this in
    on the CPU)."""
    n = torch.cuda.device_count()
    batch = torch.stack([photos[0][:, :200, :240]] * (2 * n)).cuda()

    def run():
        model = torch.nn.DataParallel(ga.Pipeline(ga.RandomRotation(180), device="cuda:0", seed=5, dtype=torch.float32))
        return [model(batch) for _ in range(2)]

    first, again = run(), run()
    for out in first:
        copies = out.chunk(n)
        assert all(not torch.equal(copies[i], copies[j]) for i in range(n) for j in range(i))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(first, again))


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_rng_state_on_cuda_resumes_the_draws_and_refuses_a_cpu_state(photos, cuda_graph):
    """A CUDA generator's state (seed and offset, 16 bytes) round-trips, recorded graphs too (a
    restored state records anew); a CPU pipeline's state cannot continue a CUDA stream."""
    batch = torch.stack([p[:, :200, :240] for p in photos]).cuda()
    pipe = ga.Pipeline(*ops(), device="cuda", seed=4, cuda_graph=cuda_graph)
    for _ in range(3):
        pipe(batch)
    saved = pipe.get_rng_state()
    assert saved.device.type == "cpu" and saved.numel() == 16
    after = [pipe(batch) for _ in range(3)]
    pipe.set_rng_state(saved)
    eager = ga.Pipeline(*ops(), device="cuda", seed=0).set_rng_state(saved)
    for out in after:
        again = pipe(batch)
        assert torch.equal(again, out) and torch.equal(again, eager(batch))
    with pytest.raises(ValueError, match="cuda generator's has 16"):
        pipe.set_rng_state(ga.Pipeline(*ops(), device="cpu", seed=4).get_rng_state())


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_pickled_and_copied_cuda_pipelines_go_on_with_the_stream(photos, cuda_graph):
    """A CUDA generator travels as its state's bytes (pickle, deepcopy): the copy goes on where
    the original was, and records its own graphs."""
    import copy
    import pickle

    batch = torch.stack([p[:, :200, :240] for p in photos]).cuda()
    pipe = ga.Pipeline(*ops(), device="cuda", seed=4, cuda_graph=cuda_graph)
    for _ in range(2):
        pipe(batch)
    copies = [pickle.loads(pickle.dumps(pipe)), copy.deepcopy(pipe)]
    expected = [pipe(batch) for _ in range(2)]
    for other in copies:
        assert other.device == pipe.device and other.cuda_graph == cuda_graph
        assert all(torch.equal(other(batch), out) for out in expected)


def test_cpu_batch_is_moved_to_the_pipeline_device(photos):
    out = ga.Pipeline(*ops(), device="cuda", seed=0)(photos)
    assert out.device.type == "cuda"


def test_a_cpu_pipeline_given_cuda_images_and_params_reads_them_whole(photos):
    """The copies to the host block: a non-blocking one could be read before it lands."""
    pipe = ga.Pipeline(*ops(), device="cpu", seed=4)
    batch = torch.stack([p[:, :300, :400] for p in photos])
    expected, params = pipe(batch, return_params=True)
    images = batch.cuda().repeat(16, 1, 1, 1)
    gpu_params = [{k: v.cuda().repeat(16, *[1] * (v.dim() - 1)) for k, v in p.items()} for p in params]
    torch.cuda._sleep(100_000_000)  # the copies to the host queue behind this: a non-blocking one would be read early
    assert torch.equal(pipe(images, params=gpu_params)[:len(batch)], expected)


def test_ragged_list_on_cuda_matches_each_alone(photos):
    pipe = ga.Pipeline(*ops(), device="cuda", seed=1)
    out, params = pipe([p.cuda() for p in photos], return_params=True)
    for i, img in enumerate(photos):
        alone = pipe(img[None].cuda(), params=[{k: v[i:i + 1] for k, v in p.items()} for p in params])
        assert (out[i].float() - alone[0].float()).abs().max() < 2e-3


def test_packed_images_pinned_by_the_dataloader_match_the_list_on_cuda(photos):
    from torch.utils.data import DataLoader

    items = [(p, i) for i, p in enumerate(photos * 2)]
    (images, labels, _), = list(DataLoader(items, batch_size=len(items), collate_fn=ga.data.collate, pin_memory=True))
    assert isinstance(images, ga.PackedImages) and images.flat.is_pinned()
    pipe = ga.Pipeline(*ops(), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device="cuda", seed=3)
    out, params = pipe(images, return_params=True)
    assert torch.equal(out, pipe([p.cuda() for p in photos * 2], params=params))


def test_torch_compile_matches_eager(photos):
    pipe = ga.Pipeline(*ops(), device="cuda", seed=2)
    batch = torch.stack([torch.nn.functional.interpolate(p[None].float(), size=(240, 320))[0] for p in photos])
    batch = batch.to(torch.uint8).cuda()
    eager, params = pipe(batch, return_params=True)
    compiled = torch.compile(pipe)
    out = compiled(batch, params=params)
    assert (out.float() - eager.float()).abs().max() < 4 / 255


def test_triton_color_kernel_matches_torch_color_kernels(photos, monkeypatch):
    """The compiled Triton color kernel (the default on CUDA) against the torch color kernels
    (GPUAUG_TRITON=0), same params: only float16 rounding differs (and hue wraps, as above)."""
    from gpuaug import gpu_kernels

    if gpu_kernels.triton is None:
        pytest.skip("Triton is not installed here")
    assert not gpu_kernels._state.get("broken"), "an earlier launch of the Triton color kernel failed (see its warning)"
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    batch = torch.stack([torch.nn.functional.interpolate(p[None].float(), size=(240, 320))[0] for p in photos * 4])
    batch = batch.to(torch.uint8).cuda()
    steps = ops() + [ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback warning: the kernel did not run
        fused, params = ga.Pipeline(*steps, device="cuda", seed=3)(batch, return_params=True)
    monkeypatch.setenv("GPUAUG_TRITON", "0")
    plain = ga.Pipeline(*steps, device="cuda", seed=3)(batch, params=params)
    err = (fused.float() - plain.float()).abs()
    assert (err > 4 / 255 / min(ga.IMAGENET_STD)).float().mean() < 1e-4, err.max()



def test_a_batch_past_cudas_grid_limit_runs_the_triton_kernels(monkeypatch):
    """50000 CIFAR images at once (as fast CIFAR recipes augment the whole set each epoch): 150000
    sample x channel planes, past the 65535 programs a CUDA grid holds along y. The kernels launch
    in parts, no fallback warning, and agree with the torch kernels."""
    from gpuaug import gpu_kernels

    if gpu_kernels.triton is None:
        pytest.skip("Triton is not installed here")
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    images = torch.randint(0, 256, (50000, 3, 32, 32), dtype=torch.uint8, device="cuda",
                           generator=torch.Generator("cuda").manual_seed(0))
    steps = [ga.RandomCrop(32, padding=4), ga.RandomHorizontalFlip(), ga.RandomRotation(10),
             ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback warning: a launch failed
        fused, params = ga.Pipeline(*steps, device="cuda", seed=4)(images, return_params=True)
    assert not gpu_kernels._state.get("broken")
    monkeypatch.setenv("GPUAUG_TRITON", "0")
    plain = ga.Pipeline(*steps, device="cuda", seed=4)(images, params=params)
    err = (fused.float() - plain.float()).abs()
    assert (err > 4 / 255 / min(ga.IMAGENET_STD)).float().mean() < 1e-4, err.max()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_pipeline_on_a_device_that_is_not_current_computes_there(photos):
    """select_device's LOCAL_RANK and pid rules pick a GPU without making it current, and Triton
    launches on the current one: the last device's pipeline, called with cuda:0 current (ragged
    list and batch, both kernel paths' launches), gives what it gives with its own device current."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    batch = torch.stack([p[:, :300, :400] for p in photos])
    outs = []
    for current in (0, last.index):
        with torch.cuda.device(current):
            pipeline = ga.Pipeline(*ops(), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device=last, seed=5)
            outs.append([pipeline(photos), pipeline(batch)])
        torch.cuda.synchronize(last)
    for got, want in zip(outs[0], outs[1]):
        assert got.device == last and torch.equal(got, want)


def use_kernels(monkeypatch, kernels: str) -> None:
    """Run the CUDA pipeline on the Triton kernels (``"triton"``, the default) or the torch ones."""
    if kernels == "torch":
        monkeypatch.setenv("GPUAUG_TRITON", "0")
    else:
        monkeypatch.delenv("GPUAUG_TRITON", raising=False)


@pytest.mark.parametrize("kernels", ["triton", "torch"])
def test_tf32_matmuls_allowed_leave_float32_exact(photos, monkeypatch, kernels):
    """``torch.set_float32_matmul_precision("high")`` (TF32 matmuls, common in training scripts)
    must not round a float32 call: the warp's coordinates (a rotation with a flip and a second
    rotation after it) nor the color steps (the torch kernels mixed channels by a matmul), against
    the CPU with the same params. TF32's 10-bit mantissa would put ~2e-4 of error on most pixels."""
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    use_kernels(monkeypatch, kernels)
    steps = lambda: [ga.RandomResizedCrop(224), ga.RandomRotation(15), ga.RandomHorizontalFlip(1.0), ga.RandomRotation(10),
                     ga.ColorJitter(0.4, 0.4, 0.4), ga.RandomGrayscale(0.3)]
    out, params = ga.Pipeline(*steps(), device="cuda", dtype=torch.float32, seed=4)(photos * 4, return_params=True)
    ref = ga.Pipeline(*steps(), device="cpu", seed=4)(photos * 4, params=[{k: v.cpu() for k, v in p.items()}
                                                                         for p in params])
    err = (out.cpu() - ref).abs()
    # A rotation's inside/outside test may flip on a boundary pixel between the two warps' rounding.
    assert (err > 1e-3).float().mean() < 1e-4, err.max()
    assert (err > 1e-4).float().mean() < 1e-3, (err > 1e-4).float().mean()


@pytest.mark.parametrize("kernels", ["triton", "torch"])
def test_autocast_around_a_cuda_pipeline_changes_nothing(photos, monkeypatch, kernels):
    """Under CUDA autocast the warp matrices' products would run in float16 and a float32
    pipeline would round its coordinates; the pipeline turns autocast off for its call (the CPU
    twin is in test_randomness) and leaves it on for the caller."""
    use_kernels(monkeypatch, kernels)
    pipe = ga.Pipeline(ga.RandomResizedCrop(224), ga.RandomRotation(15), ga.RandomHorizontalFlip(1.0), ga.RandomRotation(10),
                       ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD),
                       device="cuda", dtype=torch.float32, seed=0)
    ref, params = pipe(photos * 4, return_params=True)
    with torch.autocast("cuda", dtype=torch.float16):
        out = pipe(photos * 4, params=params)
        assert torch.is_autocast_enabled("cuda")
    assert out.dtype == torch.float32 and torch.equal(out, ref)
