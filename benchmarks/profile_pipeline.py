"""Where does the pipeline's time go? `python benchmarks/profile_pipeline.py [--device cuda] [--batch 256]`.

Runs the README pipeline (`gpuaug bench`'s ops) on a uint8 batch of the sample photos resized to
375x500, already on the device, under torch.profiler, and prints the ops and kernels that took the
most device time (CUDA) or CPU time (CPU), then img/s and, on CUDA, the peak memory;
``--cuda-graph``: the same with ``Pipeline(cuda_graph=True)``. Part of
benchmarks/gpu_check.sh, so one lent-GPU call also says what to work on next. CPU runs use one
thread, as the other CPU benchmarks.
"""

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

import gpuaug as ga
from gpuaug.bench import gpuaug_pipeline, uniform_batch


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--cuda-graph", action="store_true", help="Pipeline(cuda_graph=True): the call recorded, replayed")
    args = parser.parse_args(argv)
    ga.keep_freed_memory()
    device = ga.select_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = uniform_batch(ga.sample_images(args.batch)).to(device)
    pipe = gpuaug_pipeline(device, cuda_graph=args.cuda_graph)
    for _ in range(3):
        pipe(x)
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(args.calls):
        pipe(x)
    sync()
    seconds = (time.perf_counter() - start) / args.calls
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.calls):
            pipe(x)
        sync()
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"profile_pipeline: {device} batch {args.batch}, {args.calls} calls, {time.strftime('%Y-%m-%d')}")
    print(prof.key_averages().table(sort_by=sort, row_limit=args.rows, max_name_column_width=60))
    label = "cuda_graph=True" if pipe.cuda_graph and device.type == "cuda" else "eager"
    print(f"{label}: {seconds * 1000:.2f} ms per batch, {args.batch / seconds:.0f} img/s (calls back to back)")
    if device.type == "cuda":
        print(f"peak memory: {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
