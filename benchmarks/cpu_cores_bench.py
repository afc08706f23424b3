"""Does the CPU path use more than one core? `python benchmarks/cpu_cores_bench.py`.

Two ways a CPU-only user could give gpuaug more cores, timed on `gpuaug bench`'s pipeline (the
README's) and ``--batch`` of the sample photos (ragged, ~375x500, uint8):

* threads: the pipeline in this process, called on the stacked batch and on the ragged list with
  ``torch.set_num_threads(n)`` for each n in ``--threads``, the settings alternating over
  ``--rounds`` (``--repeats`` calls each, every call alone); prints the median and best img/s;
* workers: the pipeline on each batch in a DataLoader ``collate_fn``, inside ``n`` worker
  processes for each n in ``--workers`` (one torch thread each; the float32 outputs go to the main
  process through shared memory, as any DataLoader batch does), ``--batches`` batches timed after
  the workers' first ones, over ``--rounds``.
"""

import argparse
import multiprocessing
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset

from gpuaug.bench import gpuaug_pipeline, uniform_batch
from gpuaug.cpu import keep_freed_memory
from gpuaug.samples import sample_images


class Photos(Dataset):
    """The sample photos, repeated to ``length`` items (decoded once, in the parent)."""

    def __init__(self, photos: list[torch.Tensor], length: int):
        self.photos, self.length = photos, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.photos[i % len(self.photos)]


class AugmentBatch:
    """A ``collate_fn``: the pipeline on the list of a batch's images (runs in each worker)."""

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def __call__(self, images: list[torch.Tensor]) -> torch.Tensor:
        return self.pipeline(list(images))


def _one_thread_worker(_: int) -> None:
    torch.set_num_threads(1)
    keep_freed_memory()


def time_threads(pipe, batch: list[torch.Tensor], threads: list[int], rounds: int, repeats: int) -> dict:
    """img/s of each (threads, input) setting: (median, best) over every call of every round."""
    inputs = {"stacked batch": uniform_batch(batch), "ragged list": batch}
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(rounds):
        for n in threads:
            torch.set_num_threads(n)
            for name, x in inputs.items():
                pipe(x)
                for _ in range(repeats):
                    start = time.perf_counter()
                    pipe(x)
                    times.setdefault((n, name), []).append(time.perf_counter() - start)
    return {k: (len(batch) / statistics.median(v), len(batch) / min(v)) for k, v in times.items()}


def time_workers(pipe, photos: list[torch.Tensor], batch: int, workers: list[int], rounds: int,
                 batches: int) -> dict:
    """img/s of the pipeline in ``n`` DataLoader workers' collate_fn, one figure per round."""
    rates: dict[int, list[float]] = {}
    warmup = 2
    for _ in range(rounds):
        for n in workers:
            loader = DataLoader(Photos(photos, batch * (batches + warmup * n)), batch_size=batch, num_workers=n,
                                collate_fn=AugmentBatch(pipe), worker_init_fn=_one_thread_worker,
                                multiprocessing_context=multiprocessing.get_context("fork"))
            it = iter(loader)
            for _ in range(warmup * n):  # every worker started and has sent its first batches
                next(it)
            images, start = 0, time.perf_counter()
            for out in it:
                images += len(out)
            rates.setdefault(n, []).append(images / (time.perf_counter() - start))
    return rates


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=16, help="timed batches per workers setting")
    parser.add_argument("--size", type=int, default=224, help="output side (tests: smaller)")
    parser.add_argument("--photo-side", type=int, default=0, help="crop the photos to this side (tests)")
    args = parser.parse_args(argv)
    keep_freed_memory()
    photos = sample_images()
    if args.photo_side:
        photos = [p[:, :args.photo_side, :args.photo_side] for p in photos]
    batch = [photos[i % len(photos)] for i in range(args.batch)]
    pipe = gpuaug_pipeline(torch.device("cpu"), size=args.size)
    saved = torch.get_num_threads()
    try:
        by_threads = time_threads(pipe, batch, args.threads, args.rounds, args.repeats)
    finally:
        torch.set_num_threads(saved)
    print(f"cpu_cores_bench: batch {args.batch} of the sample photos, {args.rounds} rounds, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("in this process (img/s, median / best):")
    for (n, name), (median, best) in sorted(by_threads.items()):
        print(f"  {n} thread(s), {name}: {median:.0f} / {best:.0f}")
    by_workers = time_workers(pipe, photos, args.batch, args.workers, args.rounds, args.batches)
    print("in DataLoader workers' collate_fn, one thread each (img/s, each round):")
    for n, rates in sorted(by_workers.items()):
        print(f"  {n} worker(s): " + ", ".join(f"{r:.0f}" for r in rates))


if __name__ == "__main__":
    main()
