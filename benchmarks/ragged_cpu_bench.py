"""A ragged batch with a few very large images, on the CPU: `python benchmarks/ragged_cpu_bench.py`.

The CPU path works on chunks of a few images, each resampled as one tensor of its largest part
(`gpuaug.cpu.crop_to_taps`). Until 2026-12-06 chunks were runs of the batch in its order, and every
chunk took the batch's largest tap count: one 3000x4000 photo padded the three photos beside it to
its size. Now a ragged batch whose pixel counts differ more than ``cpu.SIZE_SPREAD`` times goes in
chunks of like sizes, and each chunk keeps only the taps its own samples weigh. This times both on
the same batch in one process, alternating, each call alone, median of ``--repeats`` per round,
and checks that both give the same output:

* now: ``cpu.SIZE_SPREAD = 2`` and ``cpu._used_taps`` as it is;
* before: ``cpu.SIZE_SPREAD`` infinite (runs in order) and every chunk with the batch's taps.

The batch: ``--batch`` of the sample photos (ragged, ~375x500), the first ``--large`` of them
replaced by noise images of ``--large-side`` x 3/4 of it, float32 in [0, 1] (``--uint8``: as
decoded) through `gpuaug bench`'s pipeline (the README's), one thread. For reference it also times
the photos alone and the large images alone.
"""

import argparse
import math
import statistics
import time

import torch

import gpuaug as ga
from gpuaug import cpu
from gpuaug.bench import gpuaug_pipeline

SETTINGS = ("now (chunks of like sizes, their own taps)", "before (chunks in order, the batch's taps)")


def batch_of(args) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(photos, large images), uint8 or float32 ``(3, H, W)`` each."""
    photos = ga.sample_images(args.batch - args.large)
    if args.photo_side:  # small stand-ins (tests)
        photos = [p[:, :args.photo_side, :args.photo_side] for p in photos]
    g = torch.Generator().manual_seed(0)
    side = args.large_side
    large = [torch.randint(0, 256, (3, side * 3 // 4, side), generator=g, dtype=torch.uint8) for _ in range(args.large)]
    if not args.uint8:
        photos, large = [p.float().div_(255) for p in photos], [p.float().div_(255) for p in large]
    return photos, large


def timed(pipe, images, params, repeats: int) -> float:
    """Median seconds of ``repeats`` calls replaying ``params`` (after one untimed call)."""
    pipe(images, params=params)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        pipe(images, params=params)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--large", type=int, default=1, help="images replaced by large ones")
    parser.add_argument("--large-side", type=int, default=4000, help="their width (height 3/4 of it)")
    parser.add_argument("--photo-side", type=int, default=0, help="crop the photos to this square (0: as they are)")
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument("--uint8", action="store_true", help="uint8 input (default float32 in [0, 1])")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ga.keep_freed_memory()
    photos, large = batch_of(args)
    images = large + photos  # the large ones first: before, they shared a chunk with photos
    pipe = gpuaug_pipeline(torch.device("cpu"), size=args.crop)
    out, params = pipe(images, return_params=True)
    spread, used_taps = cpu.SIZE_SPREAD, cpu._used_taps

    def setting(name: str) -> None:
        now = name == SETTINGS[0]
        cpu.SIZE_SPREAD = spread if now else math.inf
        cpu._used_taps = used_taps if now else (lambda index, weight: (index, weight))

    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    try:
        for name in SETTINGS:  # the same output either way
            setting(name)
            again = pipe(images, params=params)
            assert torch.allclose(again, out, atol=1e-5), f"{name}: output differs by {(again - out).abs().max():.3g}"
        for _ in range(args.rounds):
            for name in SETTINGS:
                setting(name)
                seconds[name].append(timed(pipe, images, params, args.repeats))
    finally:
        cpu.SIZE_SPREAD, cpu._used_taps = spread, used_taps
    n = len(large)
    alone = {f"the {len(photos)} photos alone": (photos, [{k: v[n:] for k, v in p.items()} for p in params]),
             f"the {n} large alone": (large, [{k: v[:n] for k, v in p.items()} for p in params])}
    kind = "uint8" if args.uint8 else "float32"
    print(f"ragged_cpu_bench: {len(photos)} photos + {n} of {args.large_side * 3 // 4}x{args.large_side}, {kind}, "
          f"crop {args.crop}, one thread, median of {args.repeats} calls a round, {args.rounds} rounds")
    for name in SETTINGS:
        ms = sorted(1000 * s for s in seconds[name])
        print(f"  {name}: {' / '.join(f'{m:.1f}' for m in ms)} ms a batch "
              f"({len(images) / statistics.median(seconds[name]):.0f} img/s)")
    for name, (subset, subset_params) in alone.items():
        if subset:
            print(f"  {name}: {1000 * timed(pipe, subset, subset_params, args.repeats):.1f} ms")


if __name__ == "__main__":
    main()
