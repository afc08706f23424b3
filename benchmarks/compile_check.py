"""Does torch.compile help the pipeline? `python benchmarks/compile_check.py [--device cuda]`.

Times the README pipeline eager and under torch.compile on a batch of 375x500 uint8 images (the
sample photos resized), checks both agree on replayed params, prints the medians. CPU runs use one
thread, as the other CPU benchmarks. ``--ragged N`` then times N ragged batches (``PackedImages``
of the photos cut to new sizes each batch, as a DeviceLoader hands them over) through the compiled
pipeline, call by call, against eager.
"""

import argparse
import statistics
import time

import torch

import gpuaug as ga
from gpuaug.bench import gpuaug_pipeline, uniform_batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--mode", default=None, help="torch.compile mode, e.g. reduce-overhead (CUDA graphs)")
    parser.add_argument("--ragged", type=int, default=0, help="then time this many ragged batches, each of new sizes")
    args = parser.parse_args()
    ga.keep_freed_memory()
    device = ga.select_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    x = uniform_batch(ga.sample_images(args.batch)).to(device)
    pipe = gpuaug_pipeline(device)
    eager_out, params = pipe(x, return_params=True)
    start = time.perf_counter()
    compiled = torch.compile(pipe, mode=args.mode)
    out = compiled(x, params=params)
    first = time.perf_counter() - start
    diff = (out.float() - eager_out.float()).abs().max().item()

    def median(fn):
        fn()
        return statistics.median(_once(fn, device) for _ in range(args.repeats))

    eager_s, compiled_s = median(lambda: pipe(x)), median(lambda: compiled(x))
    print(f"device {device}, batch {args.batch}, torch {torch.__version__}, mode {args.mode or 'default'}")
    print(f"compile + first call: {first:.1f} s; max |compiled - eager| on replayed params: {diff:.2e}")
    print(f"eager    {args.batch / eager_s:10.1f} img/s")
    print(f"compiled {args.batch / compiled_s:10.1f} img/s  ({eager_s / compiled_s:.2f}x)")
    if args.ragged:
        photos = ga.sample_images(args.batch)
        batches = [ga.PackedImages.pack([p[:, k % 7:, 3 * (k % 5) + i % 4:] for i, p in enumerate(photos)])
                   for k in range(args.ragged)]
        timed = [_once(lambda b=b: compiled(b.to(device)), device) for b in batches]
        eager_ragged = statistics.median(_once(lambda b=b: pipe(b.to(device)), device) for b in batches)
        print(f"ragged, {args.ragged} batches of new sizes: compiled calls (s) "
              + " ".join(f"{t:.3f}" for t in timed) + f"; eager median {eager_ragged:.3f} s")


def _once(fn, device) -> float:
    """Seconds ``fn()`` takes, the device's queue included."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
