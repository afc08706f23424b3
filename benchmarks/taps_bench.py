"""Ragged batches with a few large photos: `python benchmarks/taps_bench.py --device cuda`.

The resampling needs as many filter taps as its batch's largest downscale (a ragged batch: its
largest image). Until 2026-12-06 every count was a Triton kernel of its own, compiled on first use,
and every sample of the batch ran through that many taps. Now the kernel unrolls at most
``gpu_kernels.RESAMPLE_UNROLLED_TAPS`` (8) and loops over the rest as far as each sample's own
scale needs. This times both on the same batches (the old kernel is the new one with every tap
unrolled: ``RESAMPLE_UNROLLED_TAPS = 128``): each setting in a process of its own with an empty
Triton cache (``TRITON_CACHE_DIR``), so its first pass over the batches pays every compile it needs;
then the same batches again, each call alone (waiting for the device), median of ``--repeats``.
Prints per setting: the first pass's seconds, the tap counts the batches needed, img/s after.

The batches: the sample photos (~375x500), with ``--large`` of each batch replaced by noise images
whose longer side is drawn from 800 to ``--max-side`` pixels (a photo dataset's long tail), each
batch one ``ga.PackedImages`` on the device, through `gpuaug bench`'s pipeline (the README's).

Without CUDA it runs through Triton's interpreter (``TRITON_INTERPRET=1``, tiny sizes): a check that
the script works, not a timing. Part of benchmarks/gpu_check.sh.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import gpuaug as ga
import gpuaug.pipeline as pipeline_module
from gpuaug import cpu, gpu_kernels
from gpuaug.bench import gpuaug_pipeline, median_seconds

SETTINGS = {"now (8 unrolled + loop)": 8, "before (every tap unrolled)": 128}


def batches(args, device: torch.device) -> list:
    """``args.batches`` ragged batches, each a ``ga.PackedImages`` on ``device``, seeded."""
    rng = random.Random(0)
    photos = ga.sample_images(args.batch)
    scale = args.photo_side / 500
    if scale != 1:
        photos = [torch.nn.functional.interpolate(p[None].float(), scale_factor=scale, mode="bilinear",
                                                  antialias=True)[0].round().clamp(0, 255).to(torch.uint8)
                  for p in photos]
    out = []
    for b in range(args.batches):
        images = list(photos)
        g = torch.Generator().manual_seed(b)
        for i in rng.sample(range(args.batch), max(1, round(args.large * args.batch))):
            side = rng.randint(min(args.min_side, args.max_side), args.max_side)
            other = round(side * rng.uniform(0.6, 0.8))
            shape = (3, side, other) if rng.random() < 0.5 else (3, other, side)
            images[i] = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        out.append(ga.PackedImages.pack(images).to(device))
    return out


def child(args) -> dict:
    """One setting, timed in this process (its Triton cache empty): -> the figures, as JSON."""
    device = ga.select_device(args.device)
    gpu_kernels.RESAMPLE_UNROLLED_TAPS = args.unrolled
    if device.type != "cuda":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("taps_bench.py: without CUDA, run it with TRITON_INTERPRET=1 (a check, no timing)")
        cpu.OWN_PATH = False  # the CUDA code path on the CPU, the kernels interpreted
        pipeline_module._gpu_kernels = lambda d: gpu_kernels
    data = batches(args, device)
    pipe = gpuaug_pipeline(device, size=args.crop)
    taps, guarded = set(), gpu_kernels.guarded

    def recording(launch, *a, **kw):
        if launch.__name__ == "resample_axes":
            taps.add(tuple(a[3]))
        return guarded(launch, *a, **kw)

    gpu_kernels.guarded = recording
    first = []
    for x in data:
        start = time.perf_counter()
        pipe(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        first.append(time.perf_counter() - start)
    gpu_kernels.guarded = guarded
    seconds = [median_seconds(lambda x=x: pipe(x), device, args.repeats) for x in data]
    return {"first_pass_s": first, "taps": sorted(taps), "seconds": seconds,
            "images_per_s": args.batch * len(data) / sum(seconds)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=6, help="batches, each with other large images")
    parser.add_argument("--large", type=float, default=0.05, help="share of each batch that is large")
    parser.add_argument("--min-side", type=int, default=800)
    parser.add_argument("--max-side", type=int, default=3000)
    parser.add_argument("--photo-side", type=int, default=500, help="the sample photos' longer side")
    parser.add_argument("--crop", type=int, default=224, help="RandomResizedCrop's output size")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=1, help="each setting this many times, alternating")
    parser.add_argument("--unrolled", type=int, help=argparse.SUPPRESS)  # a child: one setting
    args = parser.parse_args(argv)
    if args.unrolled is not None:
        print(json.dumps(child(args)))
        return
    device = ga.select_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, Triton's interpreter (no timing)"
    print(f"taps_bench: {name}, {time.strftime('%Y-%m-%d %H:%M')}, {args.batches} batches of {args.batch} "
          f"(~{args.photo_side}-pixel photos, {args.large:.0%} large: {args.min_side}-{args.max_side} px), "
          f"RandomResizedCrop({args.crop}) pipeline, median of {args.repeats}", flush=True)
    forwarded = list(argv if argv is not None else sys.argv[1:])
    for _ in range(args.rounds):
        for label, unrolled in SETTINGS.items():
            with tempfile.TemporaryDirectory() as cache:
                done = subprocess.run([sys.executable, __file__, *forwarded, "--unrolled", str(unrolled)],
                                      env={**os.environ, "TRITON_CACHE_DIR": cache}, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"  {label}: failed\n{done.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"  {label}: first pass {sum(r['first_pass_s']):.2f} s (per batch "
                  f"{', '.join(f'{t:.2f}' for t in r['first_pass_s'])}), taps (rows, columns) "
                  f"{', '.join(map(str, map(tuple, r['taps'])))}; after: {r['images_per_s']:.0f} img/s "
                  f"(ms per batch {', '.join(f'{1e3 * t:.2f}' for t in r['seconds'])}; median over batches "
                  f"{1e3 * statistics.median(r['seconds']):.2f})", flush=True)


if __name__ == "__main__":
    main()
