"""Per-sample randomness, seeds, replay, clips, ragged lists, and one property harness for every op."""

import pytest
import torch
import torchvision.transforms.v2.functional as TF

import gpuaug as ga
from gpuaug import cpu
from conftest import to_float

FULL = lambda: [ga.RandomResizedCrop(96), ga.RandomHorizontalFlip(), ga.RandomRotation(20),  # noqa: E731
                ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.2),
                ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]


def record_chunks(monkeypatch) -> list:
    """A list that gets each call's ``cpu.chunks`` result (the chunks a CPU batch went in), in order."""
    seen: list = []
    original = cpu.chunks
    monkeypatch.setattr(cpu, "chunks", lambda *a, **k: seen.append(original(*a, **k)) or seen[-1])
    return seen


def test_one_photo_repeated_gives_different_outputs(photos):
    x = photos[0][None].expand(32, -1, -1, -1)
    out = ga.Pipeline(*FULL(), device="cpu", seed=0)(x)
    flat = out.flatten(1)
    dist = torch.cdist(flat, flat)
    assert (dist + torch.eye(32) * 1e9).min() > 1.0  # every pair differs


def test_same_seed_same_output_other_seed_other_output(photos):
    a = ga.Pipeline(*FULL(), device="cpu", seed=123)(photos)
    b = ga.Pipeline(*FULL(), device="cpu", seed=123)(photos)
    c = ga.Pipeline(*FULL(), device="cpu", seed=124)(photos)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c, atol=0.1)


_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device, triton", [("cpu", "1"), pytest.param("cuda", "1", marks=_CUDA),
                                            pytest.param("cuda", "0", marks=_CUDA)])
def test_deterministic_algorithms_mode_is_accepted_and_repeats_bitwise(photos, device, triton, monkeypatch):
    """Reproducible training turns on ``torch.use_deterministic_algorithms``: no op of the pipeline
    may refuse it, and one seed gives the same bits twice (the Triton contrast mean sums in a fixed
    order). GPUAUG_TRITON=0: the torch kernels (matmuls, grid_sample, embedding_bag) on CUDA, with
    CUBLAS_WORKSPACE_CONFIG set, as torch asks of a process whose cuBLAS calls must repeat. The
    Triton path makes no cuBLAS call (the warp's matrices, a flip after the rotation here, are
    composed without a matmul), so it needs no such setting."""
    if triton == "0":
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    else:
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("GPUAUG_TRITON", triton)
    steps = [ga.RandomCrop(300, padding=8, padding_mode="reflect"), *FULL()[:3], ga.RandomVerticalFlip(),
             *FULL()[3:]]
    torch.use_deterministic_algorithms(True)
    try:
        first = ga.Pipeline(*steps, device=device, seed=5)(photos)
        again = ga.Pipeline(*steps, device=device, seed=5)(photos)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(first, again)


def test_seed_none_follows_torch_manual_seed(photos):
    torch.manual_seed(5)
    a = ga.Pipeline(*FULL(), device="cpu")(photos)
    torch.manual_seed(5)
    b = ga.Pipeline(*FULL(), device="cpu")(photos)
    assert torch.equal(a, b)


def test_successive_calls_draw_new_params(photos):
    pipe = ga.Pipeline(*FULL(), device="cpu", seed=1)
    assert not torch.allclose(pipe(photos), pipe(photos), atol=0.1)
    pipe.manual_seed(1)
    first = pipe(photos)
    pipe.manual_seed(1)
    assert torch.equal(first, pipe(photos))


class _GeneratorElsewhere:
    """A generator on another device (this machine has one): what a moved pipeline left behind."""
    device = torch.device("cuda")

    def __init__(self, generator: torch.Generator):
        self.get_state = generator.get_state


def test_a_moved_pipeline_goes_on_with_its_stream(small_photos):
    # A generator cannot move: after a move the pipeline makes one on its new device. Seeded from
    # the pipeline's seed, its first draws would repeat the ones made before the move.
    def angles_around_a_move(seed):
        pipe = ga.Pipeline(ga.RandomRotation(180), device="cpu", seed=seed)
        _, before = pipe(small_photos, return_params=True)
        pipe._generator = _GeneratorElsewhere(pipe._generator)
        _, after = pipe(small_photos, return_params=True)
        pipe.manual_seed(seed)
        _, restarted = pipe(small_photos, return_params=True)
        return before[0]["angle"], after[0]["angle"], restarted[0]["angle"]

    before, after, restarted = angles_around_a_move(4)
    assert not torch.isin(after, before).any()
    assert torch.equal(restarted, before)
    assert all(torch.equal(a, b) for a, b in zip(angles_around_a_move(4), (before, after, restarted)))


def test_data_parallel_copies_on_other_devices_draw_apart(small_photos, monkeypatch):
    """nn.DataParallel copies its module for each device at each call
    (``_replicate_for_data_parallel``, buffers placed after). A copy on cuda:k >= 1 reseeded from
    the cuda:0 generator's state as it found it: copies 1..N-1 got one seed, so drew the same
    parameters for their images, and which seed hung on whether copy 0 had drawn yet. Stood in
    for on the CPU: the copies' devices are named cuda:k, their generators are CPU ones."""
    real_generator = torch.Generator
    monkeypatch.setattr(torch, "Generator", lambda *args, **kwargs: real_generator())

    def copies_of(pipe, first_draws):
        copies = [pipe._replicate_for_data_parallel() for _ in range(4)]
        devices = [torch.device("cpu")] + [torch.device("cuda", k) for k in (1, 2, 3)]
        where = {id(copy): device for copy, device in zip(copies, devices)}
        monkeypatch.setattr(ga.Pipeline, "device", property(lambda self: where.get(id(self), torch.device("cpu"))))
        if first_draws:
            copies[0](small_photos)  # the copy on the pipeline's device draws before the others seed
        return copies, [copy._get_generator().initial_seed() for copy in copies[1:]]

    seeds = []
    for first_draws in (True, False):
        pipe = ga.Pipeline(ga.RandomRotation(180), device="cpu", seed=3)
        pipe(small_photos)
        copies, drawn = copies_of(pipe, first_draws)
        assert copies[0]._get_generator() is pipe._generator  # copy 0 goes on with the stream
        seeds.append(drawn)
    assert len(set(seeds[0])) == 3 and 3 not in seeds[0]
    assert seeds[0] == seeds[1]  # whichever copy draws first


def test_rng_state_resumes_the_draws_where_they_were(small_photos):
    """A checkpoint holds the pipeline's stream (torch's RNG state does not: the pipeline draws
    from its own generator): set_rng_state on another pipeline, or on the same one later, makes the
    next calls give what the saved one's next calls gave, bit for bit."""
    pipe = ga.Pipeline(*FULL(), device="cpu", seed=11)
    pipe(small_photos)
    saved = pipe.get_rng_state()
    next_calls = [pipe(small_photos, return_params=True) for _ in range(2)]
    saved_copy = saved.clone()
    pipe(small_photos)  # the saved state is a copy: drawing more does not change it
    assert torch.equal(saved, saved_copy)
    for resumed in (ga.Pipeline(*FULL(), device="cpu", seed=99).set_rng_state(saved), pipe.set_rng_state(saved)):
        for out, params in next_calls:
            again, again_params = resumed(small_photos, return_params=True)
            assert torch.equal(again, out)
            assert all(torch.equal(p[k], q[k]) for p, q in zip(again_params, params) for k in p)
    fresh = ga.Pipeline(*FULL(), device="cpu", seed=11)  # before any draw: the seed's stream
    assert torch.equal(ga.Pipeline(*FULL(), device="cpu", seed=5).set_rng_state(fresh.get_rng_state())(small_photos),
                       ga.Pipeline(*FULL(), device="cpu", seed=11)(small_photos))
    assert not torch.equal(pipe.manual_seed(11).get_rng_state(), saved)  # manual_seed restarts the stream


@pytest.mark.parametrize("state, error, message", [
    ([0] * 5056, TypeError, "1-D uint8 tensor, got list"),
    (torch.zeros(5056), TypeError, r"got torch.float32 \(5056,\)"),
    (torch.zeros(2, 2528, dtype=torch.uint8), TypeError, r"\(2, 2528\)"),
    (torch.zeros(16, dtype=torch.uint8), ValueError, "16 bytes, a cpu generator's has 5056"),  # a CUDA one's
    (torch.zeros(5056, dtype=torch.uint8), ValueError, "not a cpu generator's state"),
])
def test_set_rng_state_refuses_what_is_not_a_generator_state(state, error, message):
    pipe = ga.Pipeline(ga.RandomRotation(10), device="cpu", seed=0)
    before = pipe.get_rng_state()
    with pytest.raises(error, match=message):
        pipe.set_rng_state(state)
    assert torch.equal(pipe.get_rng_state(), before)  # left as it was
    with pytest.raises(ValueError, match="meta device"):
        ga.Pipeline(ga.RandomRotation(10), device="meta").get_rng_state()


def test_replayed_params_give_identical_output(photos):
    pipe = ga.Pipeline(*FULL(), device="cpu", seed=9)
    out, params = pipe(photos, return_params=True)
    assert [set(p) for p in params][0] == {"top", "left", "height", "width"}
    assert all(v.shape[0] == len(photos) for p in params for v in p.values())
    again = pipe(photos, params=params)
    assert torch.equal(out, again)


def test_ragged_list_gives_each_image_what_it_gets_alone(photos):
    pipe = ga.Pipeline(*FULL(), device="cpu", seed=2)
    out, params = pipe(photos, return_params=True)
    for i, img in enumerate(photos):
        alone = pipe([img], params=[{k: v[i : i + 1] for k, v in p.items()} for p in params])
        assert torch.allclose(out[i], alone[0], atol=1e-5)
        single = pipe(img[None], params=[{k: v[i : i + 1] for k, v in p.items()} for p in params])
        assert torch.allclose(out[i], single[0], atol=1e-5)


@pytest.mark.parametrize("steps", [
    lambda: [ga.CenterCrop((420, 500)), ga.Resize((64, 80))],
    lambda: [ga.RandomCrop((420, 500), pad_if_needed=True, fill=0.4), ga.RandomHorizontalFlip(), ga.Resize((64, 80)),
             ga.RandomRotation(20), ga.ColorJitter(0.3, 0.3)]], ids=["center crop", "fill crop, rotation"])
def test_a_plain_crop_gets_what_it_gets_alone_beside_crops_that_pad(photos, steps):
    """On the CPU a uint8 image whose map is a plain crop is resized by torchvision's uint8 kernel
    (integers), one that pads in float: in a batch that holds both (the 400x600 and 300x451 photos
    are smaller than 420x500, the others not), each still gets what it gets alone (it once took the
    float path for the whole batch, 1/255 off torchvision's uint8 result)."""
    images = photos * 3
    pipe = ga.Pipeline(*steps(), device="cpu", seed=6)
    out, params = pipe(images, return_params=True)
    for i, img in enumerate(images):
        alone = pipe([img], params=[{k: v[i:i + 1] for k, v in p.items()} for p in params])
        assert torch.allclose(out[i], alone[0], atol=1e-5), i
        if len(params) == 2 and min(img.shape[-2:]) >= 420:  # a plain crop: torchvision's uint8 result
            tv = TF.resize(TF.center_crop(img, [420, 500]), [64, 80], antialias=True)
            assert (out[i] * 255 - tv).abs().max() < 1e-3, i


def test_clips_share_a_draw_across_frames_and_differ_across_clips(small_photos):
    frames = torch.stack(small_photos)  # 4 different frames
    clips = frames[None].expand(6, -1, -1, -1, -1)  # 6 clips of the same 4 frames
    pipe = ga.Pipeline(ga.RandomResizedCrop(64), ga.RandomHorizontalFlip(), ga.RandomRotation(30),
                       ga.ColorJitter(0.4, 0.4, 0.4, 0.1), device="cpu", seed=3)
    out, params = pipe(clips, return_params=True)
    assert out.shape == (6, 4, 3, 64, 64)
    assert all(v.shape[0] == 6 for p in params for v in p.values())  # one draw per clip
    for c in range(6):  # each frame is what that frame gets alone with the clip's params
        one = [{k: v[c : c + 1].repeat_interleave(4, 0) for k, v in p.items()} for p in params]
        assert torch.allclose(out[c], pipe(frames, params=one), atol=1e-5)
    assert not torch.allclose(out[0], out[1], atol=0.05)


def test_a_list_of_clips_of_different_sizes(small_photos, photos):
    small = torch.stack(small_photos[:3])  # (3, 3, 96, 128)
    big = torch.stack([to_float(p[:, :300, :400]) for p in photos[:3]])  # (3, 3, 300, 400)
    pipe = ga.Pipeline(ga.RandomResizedCrop(64), ga.RandomRotation(20), device="cpu", seed=8)
    out, params = pipe([small, big], return_params=True)
    assert out.shape == (2, 3, 3, 64, 64) and all(v.shape[0] == 2 for p in params for v in p.values())
    alone = pipe(big[None], params=[{k: v[1:] for k, v in p.items()} for p in params])
    assert torch.allclose(out[1], alone[0], atol=1e-5)


def test_uint8_and_float_input_agree(photos, monkeypatch):
    pipe = ga.Pipeline(*FULL(), device="cpu", seed=4)
    out, params = pipe(photos, return_params=True)
    out_f = pipe([to_float(p) for p in photos], params=params)
    # On the CPU a uint8 crop is resized by torchvision's uint8 kernel (integers, within 1/255 of
    # the float result); the color ops and Normalize (1 / std < 4.5) scale that difference.
    assert (out - out_f).abs().max() <= 2 / 255 / min(ga.IMAGENET_STD)
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)  # as CUDA runs: float resampling for both
    assert torch.allclose(pipe(photos, params=params), out_f, atol=1e-4)


def test_output_dtype_layout_and_range(photos):
    out = ga.Pipeline(ga.RandomResizedCrop(64), ga.ColorJitter(0.5, 0.5, 0.5, 0.2), device="cpu",
                      channels_last=True)(photos)
    assert out.dtype == torch.float32 and out.shape == (4, 3, 64, 64)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert out.min() >= 0 and out.max() <= 1
    half = ga.Pipeline(ga.RandomResizedCrop(64), device="cpu", dtype=torch.float16)(photos)
    assert half.dtype == torch.float16
    assert half.is_contiguous() and not half.is_contiguous(memory_format=torch.channels_last)  # on request only


@pytest.mark.parametrize("native", ["1", "0"])
def test_autocast_around_the_pipeline_changes_nothing(small_photos, native, monkeypatch):
    """Under autocast the warp matrices' product and the torch color kernels' matmuls would run in
    bfloat16 (0.35 off in normalized units, and a bfloat16 output from a float32 pipeline)."""
    monkeypatch.setenv("GPUAUG_NATIVE", native)
    pipe = ga.Pipeline(ga.RandomResizedCrop(96), ga.RandomRotation(20), ga.RandomHorizontalFlip(p=1.0),
                       ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD),
                       device="cpu", seed=0)
    ref, params = pipe(small_photos, return_params=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = pipe(small_photos, params=params)
        assert torch.is_autocast_enabled("cpu")  # left as the caller had it
    assert out.dtype == torch.float32 and torch.equal(out, ref)


@pytest.mark.parametrize("ops", [(), (ga.ColorJitter(0.4, 0.4, 0.4, 0.1),), (ga.RandomResizedCrop(32),),
                                 (ga.RandomRotation(10), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD))],
                         ids=["no ops", "color", "crop", "rotation+normalize"])
def test_output_is_new_memory_without_grad(small_photos, ops):
    x = torch.stack([to_float(small_photos[0])] * 2).requires_grad_()
    for images in (x, x[None]):  # a batch, and the same as one clip
        before = images.detach().clone()
        out = ga.Pipeline(*ops, device="cpu", seed=0)(images)
        assert not out.requires_grad and out.data_ptr() != images.data_ptr()
        out.detach().add_(1)
        assert torch.equal(images.detach(), before)


class _AnglesInWorkers(torch.utils.data.Dataset):
    """A CPU user's Dataset that runs a pipeline per item, inside DataLoader workers."""

    def __init__(self):
        self.pipe = ga.Pipeline(ga.RandomRotation(90), device="cpu", seed=0)
        self.pipe(torch.zeros(1, 3, 4, 4))  # used in the parent first: its generator exists before the fork

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return self.pipe(torch.zeros(1, 3, 4, 4), return_params=True)[1][0]["angle"][0]


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pipeline_copies_in_dataloader_workers_draw_their_own_streams(method):
    """Under spawn and forkserver the pipeline is pickled to the workers after it has drawn: a
    torch.Generator did not survive that (pytorch#146828, every worker died)."""
    import multiprocessing

    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} not available here")
    ds = _AnglesInWorkers()
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2,
                                         multiprocessing_context=multiprocessing.get_context(method))

    def epoch():
        return torch.cat(list(loader)).tolist()

    torch.manual_seed(1)
    first, second = epoch(), epoch()
    assert len(set(first)) == 8  # worker 0's batches differ from worker 1's (they were equal, pairwise)
    assert first != second  # and each epoch draws anew
    torch.manual_seed(1)
    assert epoch() == first  # repeatable from torch's seed, as DataLoader's worker seeds are


def test_pickled_and_copied_pipelines_go_on_with_the_stream():
    """In this process a copy (pickle, deepcopy) continues the stream where the original was."""
    import copy
    import pickle

    x = torch.randint(0, 256, (4, 3, 20, 24), dtype=torch.uint8)
    for drawn in (0, 2):
        pipe = ga.Pipeline(ga.RandomResizedCrop(12), ga.ColorJitter(0.4, 0.4, 0.4, 0.1), device="cpu", seed=7)
        for _ in range(drawn):
            pipe(x)
        copies = [pickle.loads(pickle.dumps(pipe)), copy.deepcopy(pipe)]
        expected = pipe(x)
        for other in copies:
            assert torch.equal(other(x), expected)
            assert not torch.equal(other(x), expected)  # and on from there


def test_seed_none_draws_its_own_seed_on_each_rank(small_photos, monkeypatch):
    """torchrun ranks that all call ``torch.manual_seed(0)`` (as is common) drew one seed, so every
    rank drew the same parameters for its own images; ``seed=None`` now folds in the rank
    (torch.distributed's, else ``RANK``). Rank 0 draws what a single process does; an explicit
    seed is used as given."""
    def made(rank, seed=None):
        if rank is None:
            monkeypatch.delenv("RANK", raising=False)
        else:
            monkeypatch.setenv("RANK", str(rank))
        torch.manual_seed(0)
        return ga.Pipeline(ga.RandomRotation(180), device="cpu", seed=seed)

    monkeypatch.delenv("SLURM_PROCID", raising=False)
    single, ranks = made(None), [made(r) for r in range(4)]
    assert ranks[0].seed == single.seed and len({p.seed for p in ranks}) == 4
    assert made(2).seed == ranks[2].seed  # repeatable, rank by rank
    angles = [p(small_photos, return_params=True)[1][0]["angle"] for p in ranks[:2]]
    assert not torch.equal(*angles)
    assert made(3, seed=5).seed == 5
    monkeypatch.setenv("SLURM_PROCID", "2")  # srun without torchrun: SLURM's rank
    assert made(None).seed == ranks[2].seed and made(1).seed == ranks[1].seed  # RANK first
    monkeypatch.delenv("SLURM_PROCID")
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 3)
    assert made(0).seed == ranks[3].seed  # torch.distributed's rank first


def test_a_copy_in_another_process_makes_no_generator_of_the_originals_device(monkeypatch):
    """A CUDA pipeline saved whole (``torch.save(model)``) and loaded on a machine without CUDA
    (``map_location="cpu"``): unpickling made a CUDA generator for the carried stream and failed
    (``AcceleratorError``), though another process reseeds from ``seed`` anyway; in a DataLoader
    worker it touched CUDA. Stood in for here: the stream carried as a CUDA one's, the copy
    loaded in "another process" (another owner)."""
    import pickle

    import gpuaug.pipeline as pipeline_module

    x = torch.randint(0, 256, (4, 3, 20, 24), dtype=torch.uint8)
    pipe = ga.Pipeline(ga.RandomResizedCrop(12), device="cpu", seed=7)
    first = pipe(x)
    state = pipe.__getstate__()
    state["_generator"] = (torch.device("cuda", 0), bytes(16))  # what a CUDA pipeline's carries
    made = []
    real_generator = torch.Generator
    monkeypatch.setattr(torch, "Generator", lambda *a, **k: made.append(k.get("device")) or real_generator(*a, **k))
    monkeypatch.setattr(pipeline_module, "_owner", lambda: (-1, None))  # another process
    copy = pickle.loads(pickle.dumps(pipe))  # (its own state, carried as this process's)
    elsewhere = ga.Pipeline.__new__(ga.Pipeline)
    elsewhere.__setstate__(state)
    assert made == [] and elsewhere._generator is None
    assert torch.equal(elsewhere(x), first) and torch.equal(copy(x), first)  # reseeded from seed there


@pytest.mark.parametrize("native", ["1", "0"])
def test_small_images_in_large_cpu_chunks_give_what_each_gets_alone(native, monkeypatch):
    """Images far smaller than a photo go through the CPU path in larger chunks (2.5x faster at
    16x16); each still gets exactly what it gets alone."""
    monkeypatch.setenv("GPUAUG_NATIVE", native)
    seen = record_chunks(monkeypatch)
    torch.manual_seed(0)
    images = [torch.randint(0, 256, (3, 20 + i % 5, 24 + i % 3), dtype=torch.uint8) for i in range(200)]
    pipe = ga.Pipeline(ga.RandomResizedCrop(12), ga.RandomRotation(20), ga.ColorJitter(0.4, 0.4, 0.4, 0.1),
                       ga.RandomGrayscale(0.3), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device="cpu", seed=0)
    out, params = pipe(images, return_params=True)
    assert max(len(range(200)[p]) if isinstance(p, slice) else len(p) for p in seen[0]) > 4 * cpu.CHUNK
    for i in (0, 57, 199):
        alone = pipe(images[i][None], params=[{k: v[i:i + 1] for k, v in p.items()} for p in params])
        assert torch.allclose(out[i], alone[0], atol=1e-5)


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_ragged_batch_of_very_different_sizes_goes_in_chunks_of_like_sizes(native, photos, small_photos, monkeypatch):
    """On the CPU a chunk is resampled as one tensor of its largest part: a ragged batch whose
    sizes differ more than ``cpu.SIZE_SPREAD`` times goes in chunks of like sizes (one large photo
    once padded the three small ones beside it to its size), and each image still gets exactly
    what it gets alone."""
    monkeypatch.setenv("GPUAUG_NATIVE", native)
    seen = record_chunks(monkeypatch)
    tiny = [p[:, :24, :32] for p in small_photos]
    images = [to_float(photos[1])] + small_photos * 2 + tiny * 3 + [to_float(photos[3])]
    pipe = ga.Pipeline(ga.RandomResizedCrop(40), ga.RandomRotation(20), ga.ColorJitter(0.4, 0.4, 0.4, 0.1),
                       device="cpu", seed=3)
    out, params = pipe(images, return_params=True)
    areas = [t.shape[-2] * t.shape[-1] for t in images]
    chunked = sorted(i for part in seen[0] for i in part.tolist())
    assert chunked == list(range(len(images)))  # every image once
    for part in seen[0]:
        sizes = [areas[i] for i in part.tolist()]
        assert max(sizes) <= cpu.SIZE_SPREAD * min(sizes), sizes
    for i, img in enumerate(images):
        alone = pipe(img[None], params=[{k: v[i:i + 1] for k, v in p.items()} for p in params])
        assert torch.allclose(out[i], alone[0], atol=1e-5), i


def test_cpu_chunks_without_the_c_kernel_hold_samples_that_take_the_same_color_passes(monkeypatch):
    """Without the fused C kernel the CPU runs the color ops as torch passes per chunk and skips
    those none of its samples needs, so a chunk holds samples of one group key (ColorJitter with
    hue: how many blends each draws before hue); with one group the chunks are slices in the
    batch's order."""
    monkeypatch.setenv("GPUAUG_NATIVE", "0")
    seen = record_chunks(monkeypatch)
    x = torch.randint(0, 256, (32, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    jitter = ga.ColorJitter(0.4, 0.4, 0.4, 0.1)
    out, params = ga.Pipeline(jitter, device="cpu", seed=0)(x, return_params=True)
    key = jitter.group_key(params[0])
    assert len(set(key.tolist())) > 1
    assert sorted(i for part in seen[0] for i in part.tolist()) == list(range(32))  # every sample once
    for part in seen[0]:
        assert len(set(key[part].tolist())) == 1, (part, key)
    seen.clear()
    ga.Pipeline(ga.ColorJitter(0.4, 0.4, 0.4), device="cpu", seed=0)(x)  # no hue: one group
    assert all(isinstance(part, slice) for part in seen[0])
    assert [i for part in seen[0] for i in range(32)[part]] == list(range(32))


def test_an_op_listed_twice_draws_twice(small_photos):
    flip = ga.RandomHorizontalFlip()
    x = torch.stack([to_float(small_photos[0])] * 64)
    out, params = ga.Pipeline(flip, flip, device="cpu", seed=0)(x, return_params=True)
    flipped = params[0]["flip"] != params[1]["flip"]  # flipped once: mirrored; twice or never: as it was
    assert 0 < flipped.sum() < 64
    assert torch.equal(out[~flipped], x[~flipped]) and torch.equal(out[flipped], x[flipped].flip(-1))


def test_half_precision_with_one_thread_no_crash_and_within_4_of_255(photos):
    """CPU float16 grid_sample segfaults with one thread in torch 2.14: the warp samples in float32."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        img = torch.nn.functional.interpolate(photos[3][None].float(), size=(375, 500)).to(torch.uint8)
        batch = img.expand(8, -1, -1, -1)
        ops = lambda: [ga.RandomResizedCrop(224), ga.RandomHorizontalFlip(), ga.RandomRotation(30),  # noqa: E731
                       ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.3)]
        ref, params = ga.Pipeline(*ops(), device="cpu", seed=0)(batch, return_params=True)
        for dt in (torch.float16, torch.bfloat16):
            out = ga.Pipeline(*ops(), device="cpu", dtype=dt)(batch, params=params)
            assert out.dtype == dt
            tol = 4 / 255 if dt == torch.float16 else 8 / 255  # bfloat16 keeps 8 bits of mantissa
            assert (out.float() - ref).abs().max() <= tol
    finally:
        torch.set_num_threads(threads)


def test_pipeline_is_a_module_with_a_readable_repr():
    pipe = ga.Pipeline(*FULL(), device="cpu", seed=0)
    assert isinstance(pipe, torch.nn.Module)
    text = repr(pipe)
    for name in ("RandomResizedCrop", "RandomRotation", "ColorJitter", "Normalize", "seed=0"):
        assert name in text
    assert "dtype=None (torch.float32)" in text  # the dtype the device implies, not a bare None
    assert "dtype=torch.bfloat16" in repr(ga.Pipeline(*FULL(), device="cpu", dtype=torch.bfloat16))
    assert pipe.to("cpu").device == torch.device("cpu")


def test_pipeline_takes_its_ops_as_one_list_or_tuple_too():
    """``Pipeline([a, b])`` (as ``Compose`` takes them) is ``Pipeline(a, b)``; by default the
    output is contiguous (channels_last only on request) and no CUDA graph is recorded."""
    x = torch.randint(0, 256, (3, 3, 50, 60), dtype=torch.uint8)
    one_by_one = ga.Pipeline(*FULL(), device="cpu", seed=5)
    expected = one_by_one(x)
    assert expected.is_contiguous() and not one_by_one.cuda_graph
    for wrap in (list, tuple):
        pipe = ga.Pipeline(wrap(FULL()), device="cpu", seed=5)
        assert repr(pipe) == repr(one_by_one) and len(pipe.ops) == len(FULL())
        torch.testing.assert_close(pipe(x), expected, rtol=0, atol=0)


def test_a_model_holding_a_pipeline_takes_module_apply():
    """``model.apply(init_weights)`` walks every submodule, a pipeline's ops too: an op's own
    ``apply`` (ColorJitter's once was) broke it with a TypeError."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model.augment = ga.Pipeline(*(make() for make in OPS.values()), device="cpu", seed=0)
    seen = []
    model.apply(seen.append)
    assert {type(op) for op in model.augment.ops} <= {type(m) for m in seen}
    x = torch.randint(0, 256, (2, 3, 64, 72), dtype=torch.uint8)
    alike = ga.Pipeline(*(make() for make in OPS.values()), device="cpu", seed=0)
    torch.testing.assert_close(model.augment(x), alike(x), rtol=0, atol=0)


def test_normalize_keeps_its_values_through_to_empty_and_meta_init():
    """Meta-device init (FSDP2, torchtitan): build under ``torch.device("meta")``, then
    ``model.to_empty(device=...)``. Normalize's mean and std are constants, not weights: they came
    back as uninitialised memory (outputs inf or noise). Now they keep their values, or, made real
    from meta, take the constructor's; a loaded state dict's values are kept."""
    x = torch.randint(0, 256, (2, 3, 40, 48), dtype=torch.uint8)
    make = lambda **kw: ga.Pipeline(ga.RandomResizedCrop(16), ga.ColorJitter(0.4, 0.4),  # noqa: E731
                                    ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), seed=3, **kw)
    fresh = make(device="cpu")(x)
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        model.augment = make()
    model.to_empty(device="cpu")
    torch.testing.assert_close(model.augment(x), fresh, rtol=0, atol=0)
    on_meta = make(device="meta")
    assert on_meta.ops[-1].mean.device.type == "meta"
    on_meta.to_empty(device="cpu")
    torch.testing.assert_close(on_meta(x), fresh, rtol=0, atol=0)
    loaded = make(device="cpu")
    loaded.load_state_dict({"ops.2.mean": torch.full((3,), 0.5), "ops.2.std": torch.full((3,), 0.25)})
    loaded.to_empty(device="cpu").half()
    assert loaded.ops[-1].mean.tolist() == [0.5] * 3 and loaded.ops[-1].std.tolist() == [0.25] * 3
    assert loaded.ops[-1].std.dtype == torch.float32


def test_ops_leave_nn_modules_methods_alone():
    """No op redefines a public method of nn.Module (``apply``, ``train``, ``to``, ...), which
    torch and users call on every submodule; Pipeline's dtype and device moves keep their meaning."""
    public = {name for name in dir(torch.nn.Module) if not name.startswith("_")} - {"forward", "extra_repr"}
    ops = {cls for cls in vars(ga).values() if isinstance(cls, type) and issubclass(cls, torch.nn.Module)}
    for cls in ops - {ga.Pipeline}:
        for klass in cls.__mro__[:cls.__mro__.index(torch.nn.Module)]:
            assert not public & set(vars(klass)), f"{klass.__name__} redefines {public & set(vars(klass))}"
    assert public & set(vars(ga.Pipeline)) == {"to", "half", "float", "double", "bfloat16"}


# ---- one property harness for every op (torchvision's check_kernel, adapted) -------------------

OPS = {
    "resized_crop": lambda: ga.RandomResizedCrop(48),
    "resize": lambda: ga.Resize((40, 56)),
    "center_crop": lambda: ga.CenterCrop(50),
    "hflip": lambda: ga.RandomHorizontalFlip(),
    "vflip": lambda: ga.RandomVerticalFlip(),
    "rotation": lambda: ga.RandomRotation(45),
    "jitter": lambda: ga.ColorJitter(0.5, 0.5, 0.5, 0.3),
    "grayscale": lambda: ga.RandomGrayscale(0.5),
    "normalize": lambda: ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD),
}


@pytest.mark.parametrize("name", OPS)
def test_op_properties(small_photos, name):
    x = torch.stack(small_photos * 4)
    before = x.clone()
    pipe = ga.Pipeline(OPS[name](), device="cpu", seed=0)
    out, params = pipe(x, return_params=True)
    assert torch.equal(x, before), "input modified in place"
    assert out.dtype == torch.float32 and out.device == x.device
    assert torch.isfinite(out).all()
    one_by_one = [pipe(x[i : i + 1], params=[{k: v[i : i + 1] for k, v in p.items()} for p in params])
                  for i in range(len(x))]
    assert torch.allclose(out, torch.cat(one_by_one), atol=1e-5), "batched != one by one"
    assert torch.equal(pipe(x, params=params), out), "replay differs"


@pytest.mark.parametrize("op", [ga.RandomHorizontalFlip, ga.RandomVerticalFlip, ga.RandomGrayscale])
def test_probability_zero_is_identity_and_one_changes_every_sample(small_photos, op):
    x = torch.stack(small_photos * 4)
    assert torch.allclose(ga.Pipeline(op(0.0), device="cpu")(x), x, atol=1e-6)
    changed = (ga.Pipeline(op(1.0), device="cpu")(x) - x).flatten(1).abs().amax(1)
    assert (changed > 0.01).all()


def test_identity_ranges_leave_images_unchanged(small_photos):
    x = torch.stack(small_photos)
    pipe = ga.Pipeline(ga.RandomRotation(0), ga.ColorJitter(0, (1, 1), 0, (0, 0)), device="cpu")
    assert torch.allclose(pipe(x), x, atol=1e-5)


def test_clips_split_across_cpu_chunks_keep_one_draw(small_photos):
    clips = torch.stack([torch.stack(small_photos[:3]), torch.stack(small_photos[1:4]), torch.stack(small_photos[:3])])
    pipe = ga.Pipeline(ga.RandomResizedCrop(40), ga.RandomRotation(25), ga.ColorJitter(0.3, 0.3, 0.3, 0.1),
                       device="cpu", seed=6, channels_last=True)
    out, params = pipe(clips, return_params=True)  # 9 frames: CPU chunks of 4 cut through clips
    assert out.shape == (3, 3, 3, 40, 40) and out.stride(2) == 1  # channels last
    for c in range(3):
        one = [{k: v[c : c + 1].repeat_interleave(3, 0) for k, v in p.items()} for p in params]
        assert torch.allclose(out[c], pipe(clips[c], params=one), atol=1e-5)


def test_one_channel_images_through_every_op(small_photos):
    gray = torch.stack([p.mean(0, keepdim=True) for p in small_photos])
    pipe = ga.Pipeline(ga.RandomResizedCrop(48), ga.RandomHorizontalFlip(), ga.RandomRotation(30),
                       ga.ColorJitter(0.4, 0.4, 0.4, 0.2), ga.RandomGrayscale(0.5), ga.Normalize([0.5], [0.25]),
                       device="cpu", seed=1, dtype=torch.float64)
    out = pipe(gray)
    assert out.shape == (4, 1, 48, 48) and out.dtype == torch.float64 and torch.isfinite(out).all()


def test_a_cpu_chunk_keeps_every_tap_any_of_its_samples_weighs():
    """``cpu._used_taps``: a chunk's taps are cut after the last one any sample weighs (a chunk
    needs fewer than the batch's largest downscale), never before; a zero-weight tap kept points
    at its pixel's first tap. (Counting the zero-weight taps instead passed the output tests tried:
    the padded taps past a pixel's own are zeros, so the count came out whole.)"""
    index = torch.arange(2 * 3 * 4).view(2, 3, 4)
    weight = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.2, 0.3, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]]).expand(2, 3, 4)
    kept_index, kept_weight = cpu._used_taps(index, weight)
    assert torch.equal(kept_weight, weight[..., :3])
    assert torch.equal(kept_index, torch.where(weight[..., :3] != 0, index[..., :3], index[..., :1]))
    full = torch.full((2, 3, 4), 0.25)  # every tap weighed: all kept
    kept_index, kept_weight = cpu._used_taps(index, full)
    assert torch.equal(kept_weight, full) and torch.equal(kept_index, index)
    none = torch.zeros(2, 3, 4)  # nothing weighed (a chunk of padding): one tap, reading nothing
    assert cpu._used_taps(index, none)[1].shape == (2, 3, 1)


def test_cpu_chunks_of_a_ragged_batch_go_by_group_then_size_in_as_few_chunks_as_those_allow():
    """``cpu.chunks`` with color groups and sizes far apart: sorted by group first, then by size,
    so each group's like sizes share one chunk. (Sorting by group + size instead interleaved the
    groups: [100], [120, 130], [150], [1000], twice the chunks, each a pass of its own; the
    outputs stayed right, so only this test sees it.)"""
    class Keyed:
        def group_key(self, params):
            return params

    groups = torch.tensor([0, 0, 0, 1, 1])
    areas = [100, 150, 1000, 120, 130]  # 1000 > SIZE_SPREAD * 100: sizes far apart
    parts = cpu.chunks([(Keyed(), groups)], 5, 1, areas=areas)
    assert [p.tolist() for p in parts] == [[0, 1], [2], [3, 4]]
    assert [p.tolist() for p in cpu.chunks([(Keyed(), groups)], 5, 1, grouped=False, areas=areas)] == [[0, 3, 4, 1], [2]]


def test_crop_to_taps_copies_just_the_part_the_taps_read():
    """``cpu.crop_to_taps`` copies the smallest block holding every image's taps (the largest such
    part in the batch) and shifts the taps to it, so each tap reads the pixel it read before; where
    every part is a whole image, the batch itself goes on (no copy). (A part one row or column too
    large, or a copy of whole images, gave the same outputs: only this test sees the cost.)"""
    x = torch.arange(2 * 2 * 10 * 12, dtype=torch.float32).view(2, 2, 10, 12)

    def taps(first, count, k=2):  # (B, count, k) indices from each sample's first row/column; weights 1/k
        index = torch.tensor(first).view(2, 1, 1) + torch.arange(count).view(1, -1, 1) + torch.arange(k).view(1, 1, -1)
        return index, torch.full(index.shape, 1 / k)

    rows, cols = taps([3, 6], 2), taps([2, 0], 5)  # rows 3-5 and 6-8; columns 2-7 and 0-5
    part, (ri, rw), (ci, cw) = cpu.crop_to_taps(x, rows, cols, torch.float64)
    assert part.shape == (2, 2, 3, 6) and part.dtype == torch.float64
    assert torch.equal(rw, rows[1]) and torch.equal(cw, cols[1])
    for b in range(2):
        before = x[b][:, rows[0][b].flatten()][:, :, cols[0][b].flatten()].double()
        assert torch.equal(part[b][:, ri[b].flatten()][:, :, ci[b].flatten()], before)
    whole_rows, whole_cols = taps([0, 0], 9), taps([0, 0], 11)
    part, (ri, _), (ci, _) = cpu.crop_to_taps(x, whole_rows, whole_cols, torch.float32)
    assert part.data_ptr() == x.data_ptr() and torch.equal(ri, whole_rows[0]) and torch.equal(ci, whole_cols[0])
