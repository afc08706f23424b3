"""How many kernels does one CUDA-path call launch? `python benchmarks/count_ops.py [--batch 256]`.

No GPU needed: with ``gpuaug.cpu.OWN_PATH = False`` and float16 (CUDA's default dtype: the torch
color kernels take other ops in float32) the pipeline runs on the CPU exactly as on CUDA, and
every non-view aten op it dispatches would be one kernel launch there. Prints the count per stage
(draw, plan, geometry, each color op, finish), and the host arrays copied to the device, for the
README pipeline (`gpuaug bench`'s ops, with an 8x8 output) and the time of a call
on ``--batch`` ~16x20 images: almost all of it is dispatch, the host's per-batch cost that a GPU
cannot hide when it launches kernels faster than they run. With the Triton kernels, also how long
into the call the resampling is launched: a call timed alone waits that long before the device
starts its largest kernel (what the host does after the launch overlaps it).

Rows: the warp and color ops by torch kernels (CUDA without Triton, or ``GPUAUG_TRITON=0``)
and by the Triton kernels (gpuaug.gpu_kernels; their launches are counted, not run: on the CPU the
pipeline gets a stand-in that only counts them, so that row's time leaves out that work), on a
batch of one size; then images of different sizes (all different, as a photo dataset's batch:
``--distinct 15`` repeats 15 sizes, this script's batch until 2026-12-04) as a list and as the one buffer
``gpuaug.data.collate`` makes (``ga.PackedImages``); last, the validation transform (Resize +
CenterCrop, the same 8x8 output) on that buffer, whose host work is per image size.
"""

import argparse
import statistics
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import gpuaug as ga
from gpuaug import cpu, gpu_kernels
import gpuaug.pipeline as pipeline_module
from gpuaug.pipeline import Pipeline

_stage = ["other"]
# The pipeline's methods counted as each stage (on a device the call goes _resample, _warp, not _geometry).
_STAGES = {"_draw": "draw", "_plan": "plan", "_plan_warp": "plan", "_geometry": "geometry", "_resample": "geometry",
           "_warp": "geometry", "_finish": "finish"}


class _CountLaunches:
    """Stands in for gpuaug.gpu_kernels: counts the Triton launches (the resampling: two; the warp:
    one; the color program: one per contrast step a sample may have, for their means, plus one), runs none."""

    pack_images = staticmethod(gpu_kernels.pack_images)  # plain torch: counted as ops

    def __init__(self):
        self.launches = 0
        self.resampled_at = None  # time.perf_counter() at the last resampling launch
        self.ops_before = None  # torch ops counted (under _Count) before the last resampling launch

    def guarded(self, launch, *args, **kwargs):
        return launch(*args, **kwargs)

    def color_program(self, x, out, ops, factors, mean, inv_std, contrast_steps=None):
        self.launches += (ops.shape[1] if contrast_steps is None else min(contrast_steps, ops.shape[1])) + 1
        return out

    def warp_affine(self, x, matrix, fill=None, blend=True, nearest=False):
        self.launches += 1
        return torch.empty_like(x)

    def resample_axes(self, x, axes, size, taps, dtype, scale=1.0, antialias=True, pad_mode="constant",
                      pad_output=False, cubic=False):
        self.launches += 2
        self.resampled_at = time.perf_counter()
        self.ops_before = _Count.running
        return torch.empty(x.shape[0], x.shape[1], *size, dtype=dtype)


class _Count(TorchDispatchMode):
    running = 0  # ops counted so far in the current count

    def __init__(self):
        super().__init__()
        self.counts, self.names = Counter(), Counter()
        _Count.running = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func not in (torch.ops.aten.detach.default,):
            _Count.running += 1
            self.counts[_stage[0]] += 1
            self.names[(_stage[0], func.__name__)] += 1
        return func(*args, **(kwargs or {}))


def _labelled(fn, label):
    def wrapper(*args, **kwargs):
        outer, _stage[0] = _stage[0], label
        try:
            return fn(*args, **kwargs)
        finally:
            _stage[0] = outer
    return wrapper


def _measure(pipe, x, calls: int, show_ops: bool, label: str) -> None:
    pipe(x)
    start, best, to_launch = time.perf_counter(), float("inf"), []
    kernel = pipeline_module._gpu_kernels(None)
    for _ in range(calls):
        t = time.perf_counter()
        pipe(x)
        best = min(best, time.perf_counter() - t)
        if kernel is not None and kernel.resampled_at is not None:
            to_launch.append(kernel.resampled_at - t)
    total = time.perf_counter() - start
    copies, from_numpy = [0], torch.from_numpy

    def counted(array):  # each host array made a tensor is one host-to-device copy on CUDA
        copies[0] += 1
        return from_numpy(array)
    torch.from_numpy = counted
    try:
        with _Count() as counter:
            pipe(x)
    finally:
        torch.from_numpy = from_numpy
    order = ["draw", "plan", "geometry", *[type(pipe.ops[i]).__name__ for i in pipe._color_at], "color (Triton)", "finish",
             "other"]
    counts = " | ".join(f"{k} {counter.counts[k]}" for k in order if counter.counts[k])
    extra, launches = "", 0
    if kernel is not None:
        launches = kernel.launches // (calls + 2)
        extra = f" | Triton launches {launches}"
    print(f"{label}: {counts}{extra} | total {sum(counter.counts.values()) + launches} | host copies {copies[0]}")
    launch = (f"; the resampling launched after {statistics.median(to_launch) * 1e3:.2f} ms (median) and "
              f"{kernel.ops_before} torch ops" if to_launch else "")
    print(f"  call on {len(x)} ~16x20 images (~dispatch): fastest {best * 1e3:.2f} ms, mean {total / calls * 1e3:.2f} ms"
          f"{launch}")
    if show_ops:
        for stage in order:
            ops = sorted(((n, c) for (s, n), c in counter.names.items() if s == stage), key=lambda t: -t[1])
            if ops:
                print(f"    {stage}: " + ", ".join(f"{n} {c}" for n, c in ops))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--ops", action="store_true", help="also list the aten ops of each stage")
    parser.add_argument("--distinct", choices=("all", "15"), default="all",
                        help="how many sizes the ragged batch has: all different, or 15 repeated")
    args = parser.parse_args(argv)
    saved = (torch.get_num_threads(), cpu.OWN_PATH, pipeline_module._gpu_kernels,
             {name: getattr(Pipeline, name) for name in _STAGES})
    try:
        _count(args)
    finally:  # leave the process as it was (the tests call main())
        torch.set_num_threads(saved[0])
        cpu.OWN_PATH, pipeline_module._gpu_kernels = saved[1], saved[2]
        for name, method in saved[3].items():
            setattr(Pipeline, name, method)


def _count(args) -> None:
    torch.set_num_threads(1)
    cpu.OWN_PATH = False
    for name, label in _STAGES.items():
        setattr(Pipeline, name, _labelled(getattr(Pipeline, name), label))
    x = torch.randint(0, 256, (args.batch, 3, 16, 20), dtype=torch.uint8)
    shapes = [(16 + i % 5, 20 + i % 3) for i in range(args.batch)] if args.distinct == "15" else \
        [(16 + i % 16, 20 + i // 16) for i in range(args.batch)]  # all different
    ragged = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in shapes]
    print(f"count_ops: README pipeline (8x8 output), CUDA code path on the CPU, {time.strftime('%Y-%m-%d')}")
    # The README pipeline with an 8x8 output, so the pixel work is negligible; then the validation
    # transform (Resize + CenterCrop, the same outputs) on the ragged batch a DeviceLoader hands over.
    train = (ga.RandomResizedCrop(8), ga.RandomHorizontalFlip(), ga.RandomRotation(15), ga.ColorJitter(0.4, 0.4, 0.4, 0.1))
    val = (ga.Resize(12), ga.CenterCrop(8))
    packed = ga.PackedImages.pack(ragged)
    for label, kernel, x, ops in (("torch kernels", None, x, train), ("Triton kernels", _CountLaunches(), x, train),
                                  ("Triton kernels, ragged list", _CountLaunches(), ragged, train),
                                  ("Triton kernels, ragged PackedImages", _CountLaunches(), packed, train),
                                  ("Triton kernels, ragged PackedImages, Resize(12) + CenterCrop(8) + Normalize",
                                   _CountLaunches(), packed, val)):
        pipeline_module._gpu_kernels = lambda device, kernel=kernel: kernel
        pipe = ga.Pipeline(*ops, ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device="cpu", dtype=torch.float16, seed=0)
        for op in (pipe.ops[i] for i in pipe._color_at):
            op.apply_transform = _labelled(op.apply_transform, type(op).__name__)
        pipe._color_gpu = _labelled(pipe._color_gpu, "color (Triton)")
        _measure(pipe, x, args.calls, args.ops, label)


if __name__ == "__main__":
    main()
