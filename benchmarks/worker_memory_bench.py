"""Workers reusing their shared memory (gpuaug.worker_memory) against a fresh buffer per batch,
side by side in one run: `python benchmarks/worker_memory_bench.py [--batch 256] [--rounds 8]`,
or with `--jpeg` the decode-bound case: 192 generated JPEG files (~500x375, mixed sizes) read
and decoded by the 2 workers (ga.data.ImageFiles), batch 64 unless given, blocks of 8 batches
(after draining what was prefetched while the other loader ran), images/s per block.

Two DataLoaders over the same ragged ~500x375 photos (items already decoded: only the handoff is
timed), 2 workers each, ``ga.data.collate``; one with ``worker_memory.MAX_SLOTS`` set to 0 in its
workers (a fresh shared-memory buffer per batch, as before), one with the default. Alternating
rounds; per round, with the workers ahead: the main process's ``next()`` (receive), its reading
every page of the batch (as a pin or a copy does) and dropping it (release); then 6 batches back to
back (stream: images/s of the whole handoff, the workers' collate included). Medians.
"""

import argparse
import statistics
import tempfile
import time

from torch.utils.data import DataLoader, RandomSampler

import gpuaug as ga
from gpuaug import worker_memory
from gpuaug.bench_loader import make_jpeg_folder
from handoff_bench import Photos


class _Slots:
    """worker_init_fn: sets MAX_SLOTS in each worker (picklable, for any start method)."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, _worker_id: int) -> None:
        worker_memory.MAX_SLOTS = self.n


def decode_bound(batch: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _decode_bound(make_jpeg_folder(tmp, n=192), batch, rounds)


def _decode_bound(root, batch: int, rounds: int) -> None:
    dataset = ga.data.ImageFiles(sorted(str(p) for p in root.rglob("*.jpg")))
    sampler = RandomSampler(dataset, replacement=True, num_samples=10**7)
    runs = {n: iter(DataLoader(dataset, batch_size=batch, num_workers=2, collate_fn=ga.data.collate,
                               worker_init_fn=_Slots(n), sampler=sampler)) for n in (0, worker_memory.MAX_SLOTS)}
    rates = {n: [] for n in runs}
    for r in range(rounds + 1):
        for n, it in runs.items():
            for _ in range(4):  # what its 2 workers prefetched while the other loader ran
                next(it)
            t0 = time.perf_counter()
            for _ in range(8):
                images = next(it).images
                int((images.flat if isinstance(images, ga.PackedImages) else images.view(-1))[::4096].sum())
                del images
            if r:
                rates[n].append(8 * batch / (time.perf_counter() - t0))
    print(f"worker_memory_bench --jpeg: batch {batch}, 2 workers decoding JPEGs, {time.strftime('%Y-%m-%d')}")
    for n, v in rates.items():
        print(f"  {'fresh buffer per batch' if n == 0 else f'reused ({n} slots)':24s} {statistics.median(v):7.0f} img/s "
              f"(median of {len(v)} blocks of 8 batches; {min(v):.0f}-{max(v):.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=None, help="256, or 64 with --jpeg")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--jpeg", action="store_true", help="workers read and decode JPEG files")
    args = parser.parse_args()
    if args.jpeg:
        return decode_bound(args.batch or 64, args.rounds)
    args.batch = args.batch or 256
    dataset = Photos(args.batch)
    sampler = RandomSampler(dataset, replacement=True, num_samples=10**7)
    runs = {name: iter(DataLoader(dataset, batch_size=args.batch, num_workers=2, collate_fn=ga.data.collate,
                                  worker_init_fn=_Slots(n), sampler=sampler))
            for name, n in (("fresh buffer per batch", 0), (f"reused ({worker_memory.MAX_SLOTS} slots)",
                                                            worker_memory.MAX_SLOTS))}
    times = {name: ([], [], []) for name in runs}
    for r in range(args.rounds + 1):
        for name, it in runs.items():
            time.sleep(1.5)  # workers get ahead
            t0 = time.perf_counter()
            batch = next(it)
            t1 = time.perf_counter()
            int(batch.images.flat[::4096].sum())
            t2 = time.perf_counter()
            del batch
            t3 = time.perf_counter()
            for _ in range(6):
                batch = next(it)
                int(batch.images.flat[::4096].sum())
                del batch
            t4 = time.perf_counter()
            if r:  # the first round warms up
                times[name][0].append((t1 - t0) * 1e3)
                times[name][1].append((t3 - t2) * 1e3)
                times[name][2].append(6 * args.batch / (t4 - t3))
    print(f"worker_memory_bench: batch {args.batch} of ~500x375 images of mixed sizes, 2 workers, "
          f"{time.strftime('%Y-%m-%d')}")
    print(f"  {'median per batch, main process':40s} {'receive ms':>10s} {'release ms':>10s} {'stream img/s':>12s}")
    for name, (receive, release, stream) in times.items():
        print(f"  {name:40s} {statistics.median(receive):10.2f} {statistics.median(release):10.2f} "
              f"{statistics.median(stream):12.0f}")


if __name__ == "__main__":
    main()
