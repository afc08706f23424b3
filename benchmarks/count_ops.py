"""How many kernels does one CUDA-path call launch? `python benchmarks/count_ops.py [--batch 256]`.

No GPU needed: with ``gpuaug.cpu.OWN_PATH = False`` the pipeline runs on the CPU exactly as on
CUDA, and every non-view aten op it dispatches would be one kernel launch there. Prints the count
per stage (draw, plan, geometry, each color op, finish) for the README pipeline (`gpuaug bench`'s
ops, with an 8x8 output) and the time of a call on ``--batch`` 16x20 images: almost all of it is dispatch, the
host's per-batch cost that a GPU cannot hide when it launches kernels faster than they run.
"""

import argparse
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import gpuaug as ga
from gpuaug import cpu
from gpuaug.pipeline import Pipeline

_stage = ["other"]


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts, self.names = Counter(), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func not in (torch.ops.aten.detach.default,):
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--ops", action="store_true", help="also list the aten ops of each stage")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cpu.OWN_PATH = False
    # The README pipeline with an 8x8 output, so the pixel work is negligible.
    pipe = ga.Pipeline(ga.RandomResizedCrop(8), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
                       ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD),
                       device="cpu", seed=0)
    x = torch.randint(0, 256, (args.batch, 3, 16, 20), dtype=torch.uint8)
    pipe(x)
    start = time.perf_counter()
    best = float("inf")
    for _ in range(args.calls):
        t = time.perf_counter()
        pipe(x)
        best = min(best, time.perf_counter() - t)
    total = time.perf_counter() - start

    for name in ("_draw", "_plan", "_geometry", "_finish"):
        setattr(Pipeline, name, _labelled(getattr(Pipeline, name), name.strip("_")))
    for op in pipe._color_ops:
        op.apply = _labelled(op.apply, type(op).__name__)
    with _Count() as counter:
        pipe(x)
    order = ["draw", "plan", "geometry", *[type(op).__name__ for op in pipe._color_ops], "finish", "other"]
    print(f"count_ops: README pipeline, CUDA code path on the CPU, {time.strftime('%Y-%m-%d')}")
    print(" | ".join(f"{k} {counter.counts[k]}" for k in order if counter.counts[k]) + f" | total {sum(counter.counts.values())}")
    print(f"call on {args.batch} 16x20 images (~dispatch): fastest {best * 1e3:.2f} ms, mean {total / args.calls * 1e3:.2f} ms")
    if args.ops:
        for stage in order:
            ops = sorted(((n, c) for (s, n), c in counter.names.items() if s == stage), key=lambda t: -t[1])
            if ops:
                print(f"  {stage}: " + ", ".join(f"{n} {c}" for n, c in ops))


if __name__ == "__main__":
    main()
