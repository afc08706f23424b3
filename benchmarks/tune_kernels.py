"""Which tiles should the Triton kernels use? `python benchmarks/tune_kernels.py --device cuda`.

The resampling's pass order, tiles and warps (``gpuaug.gpu_kernels.RESAMPLE_FIRST_AXIS``,
``RESAMPLE_ROW_PIXELS``, ``RESAMPLE_COLUMN_TILE``, ``RESAMPLE_WARPS``, ``RESAMPLE_COLUMNS_ACROSS``) and the warp's
(``GEOMETRY_BLOCK``, ``WARP_WARPS``, ``WARP_GROUP_ROWS``) were chosen without a GPU
(benchmarks/kernel_instructions.py counts instructions). This times them: one call of the README
pipeline (`gpuaug bench`'s ops) on ``--batch`` photos records the arguments it gives each Triton
kernel (the resampling, the warp, the color program), then each kernel runs alone on those
arguments, the resampling and the warp once per setting of their grids below, timed by CUDA
events (median of ``--repeats``), for a one-size uint8 batch (the photos resized to 375x500) and
for the ragged photos in one buffer (``ga.PackedImages``, what ``ga.data.collate`` gives). It
prints every setting's time, the fastest, and the default's; the color program is timed as it
is, for scale. Last, the whole pipeline call (img/s, as `gpuaug bench` times it) with the
defaults and with the fastest settings. Part of benchmarks/gpu_check.sh.

Without CUDA it runs the kernels through Triton's interpreter on the CPU (set
``TRITON_INTERPRET=1`` before Python starts; tiny ``--size`` and ``--crop``, and ``--quick``): a
check that the script works, not a timing.
"""

import argparse
import itertools
import os
import statistics
import time

import torch

import gpuaug as ga
import gpuaug.pipeline as pipeline_module
from gpuaug import cpu, gpu_kernels
from gpuaug.bench import BACK_TO_BACK, gpuaug_pipeline, median_seconds, uniform_batch

# Settings timed: (gpu_kernels constants, their values) for the resampling, then the warp. The
# column tile held either way and a tall one (256x8) are there because Triton 3.6 (the GPU
# image's) and 3.8 lay the column pass out differently (kernel_instructions.py counts them).
RESAMPLING = (("RESAMPLE_FIRST_AXIS", "RESAMPLE_ROW_PIXELS", "RESAMPLE_COLUMN_TILE", "RESAMPLE_WARPS",
               "RESAMPLE_COLUMNS_ACROSS"),
              list(itertools.product((0, 1), (512, 2048), ((32, 32), (64, 32), (16, 64), (256, 8)), (2, 4),
                                     (False, True))))
# The warp: pixels and warps per program (1 to 32 pixels a thread), and the rows of each warp's
# 32-pixel group (1: row order; 2, 4: 2x16, 4x8 groups, fewer cache lines a load once rotated).
WARP = (("GEOMETRY_BLOCK", "WARP_WARPS", "WARP_GROUP_ROWS"),
        list(itertools.product((256, 512, 1024, 2048), (2, 4, 8), (1, 2, 4))))


def record_launches(pipe, images) -> dict:
    """Run ``pipe(images)`` once and return, by name, the ``(launch, args, kwargs)`` of each
    Triton kernel call it made (``gpu_kernels.guarded`` is the one door they go through)."""
    calls, guarded = {}, gpu_kernels.guarded

    def recording(launch, *args, **kwargs):
        calls[launch.__name__] = (launch, args, kwargs)
        return guarded(launch, *args, **kwargs)

    gpu_kernels.guarded = recording
    try:
        pipe(images)
    finally:
        gpu_kernels.guarded = guarded
    return calls


def seconds(call, repeats: int, device: torch.device) -> float:
    """Median seconds of ``call()`` (after one call that compiles): CUDA events on a GPU."""
    call()
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) for start, end in events) / 1000


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--size", type=int, nargs=2, default=(375, 500), metavar=("H", "W"),
                        help="the one-size batch's image size (the ragged photos are scaled to match)")
    parser.add_argument("--crop", type=int, default=224, help="RandomResizedCrop's output size")
    parser.add_argument("--quick", action="store_true", help="two settings of each grid (a check that it runs)")
    args = parser.parse_args(argv)
    device = ga.select_device(args.device)
    knobs = RESAMPLING[0] + WARP[0]
    saved = ({k: getattr(gpu_kernels, k) for k in knobs}, cpu.OWN_PATH, pipeline_module._gpu_kernels)
    if device.type != "cuda":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("tune_kernels.py: without CUDA, run it with TRITON_INTERPRET=1 (a check, no timing)")
        cpu.OWN_PATH = False  # the CUDA code path on the CPU, the kernels interpreted
        pipeline_module._gpu_kernels = lambda d: gpu_kernels
    try:
        _tune(args, device)
    finally:
        for k, v in saved[0].items():
            setattr(gpu_kernels, k, v)
        cpu.OWN_PATH, pipeline_module._gpu_kernels = saved[1], saved[2]


def _tune(args, device: torch.device) -> None:
    photos = ga.sample_images(args.batch)
    scale = args.size[0] / 375
    ragged = [torch.nn.functional.interpolate(p[None].float(), scale_factor=scale, antialias=True, mode="bilinear")[0]
              .round().clamp(0, 255).to(torch.uint8) for p in photos] if scale != 1 else photos
    inputs = {"one size": uniform_batch(photos, tuple(args.size)).to(device),
              "ragged PackedImages": ga.PackedImages.pack(ragged).to(device)}
    pipe = gpuaug_pipeline(device, size=args.crop)
    recorded = {label: record_launches(pipe, x) for label, x in inputs.items()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, Triton's interpreter (no timing)"
    print(f"tune_kernels: {name}, batch {args.batch}, {time.strftime('%Y-%m-%d %H:%M')}, median of {args.repeats}")
    fastest = {}
    for kernel, (knobs, grid) in (("resample_axes", RESAMPLING), ("warp_affine", WARP)):
        fastest.update(zip(knobs, _sweep(kernel, knobs, grid, recorded, args, device)))
    for label, calls in recorded.items():
        print(f"color_program, {label}, as it is: "
              f"{seconds(lambda c=calls['color_program']: c[0](*c[1], **c[2]), args.repeats, device) * 1e3:.3f} ms")
    # The whole call with the defaults, then with both kernels' fastest settings (as gpuaug bench
    # times it: each call alone, waiting for the device; and calls back to back, one wait).
    calls = 2 if args.quick else BACK_TO_BACK
    print(f"the pipeline call, img/s (each call alone | {calls} calls back to back):")
    for label, settings in (("default", {}), ("fastest settings", fastest)):
        for k, v in settings.items():
            setattr(gpu_kernels, k, v)
        rates = []
        for name, x in inputs.items():
            alone = median_seconds(lambda: pipe(x), device, args.repeats)
            together = median_seconds(lambda: pipe(x), device, max(1, args.repeats // 3), 0, calls)
            rates.append(f"{name} {args.batch / alone:.0f} | {args.batch / together:.0f}")
        print(f"  {label}: " + ", ".join(rates), flush=True)


def _sweep(kernel: str, knobs: tuple, grid: list, recorded: dict, args, device: torch.device) -> tuple:
    """Time ``kernel`` on each input's recorded arguments at each setting of ``knobs``; print them all,
    then the default's time and the fastest setting's, per input and over both -> the fastest over both."""
    default = tuple(getattr(gpu_kernels, k) for k in knobs)
    grid = [default, grid[-1] if grid[-1] != default else grid[0]] if args.quick else \
        grid + [default] * (default not in grid)
    print(f"{kernel} ({', '.join(knobs)}), ms per batch:")
    times = {}
    for setting in grid:
        for k, v in zip(knobs, setting):
            setattr(gpu_kernels, k, v)
        times[setting] = {}
        for label, calls in recorded.items():
            launch, a, kw = calls[kernel]
            times[setting][label] = seconds(lambda: launch(*a, **kw), args.repeats, device)
        print(f"  {setting}: " + ", ".join(f"{label} {t * 1e3:.3f}" for label, t in times[setting].items()), flush=True)
    for k, v in zip(knobs, default):
        setattr(gpu_kernels, k, v)
    for label in recorded:
        best = min(times, key=lambda s: times[s][label])
        print(f"  {label}: default {default} {times[default][label] * 1e3:.3f}, fastest {best} "
              f"{times[best][label] * 1e3:.3f}")
    best = min(times, key=lambda s: sum(times[s].values()))
    print(f"  fastest over both inputs: {best} (" + ", ".join(f"{k}={v}" for k, v in zip(knobs, best)) + ")")
    return best


if __name__ == "__main__":
    main()
