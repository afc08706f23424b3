"""Does torch.compile help the pipeline? `python benchmarks/compile_check.py [--device cuda]`.

Times the README pipeline eager and under torch.compile on a batch of 375x500 uint8 images (the
sample photos resized), checks both agree on replayed params, prints the medians. CPU runs use one
thread, as the other CPU benchmarks.
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
        times = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    eager_s, compiled_s = median(lambda: pipe(x)), median(lambda: compiled(x))
    print(f"device {device}, batch {args.batch}, torch {torch.__version__}, mode {args.mode or 'default'}")
    print(f"compile + first call: {first:.1f} s; max |compiled - eager| on replayed params: {diff:.2e}")
    print(f"eager    {args.batch / eager_s:10.1f} img/s")
    print(f"compiled {args.batch / compiled_s:10.1f} img/s  ({eager_s / compiled_s:.2f}x)")


if __name__ == "__main__":
    main()
