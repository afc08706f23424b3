"""What a ragged batch costs the main process to receive from DataLoader workers (and, on CUDA, to
put on the GPU): a list versus the one buffer `gpuaug.data.collate` packs, for decoded images
(`ga.PackedImages`) and for JPEG bytes (`decode="gpu"`: `ga.data.EncodedBatch`).
`python benchmarks/handoff_bench.py [--batch 256] [--device cuda]`.

The main process drives the GPU; every millisecond it spends unpickling a batch is a millisecond
it does not launch kernels. A list crosses from a worker as one shared-memory segment per image
(plus a file descriptor each), is pinned image by image and copied image by image; packed, it is
one of each. Workers get ahead (the loop sleeps), then the time of ``next()`` on batches already
waiting is taken (the handoff alone, not the workers' work), and the time of dropping it (its
shared memory unmapped, and freed unless a worker reuses it: ``ga.data.collate``'s batches, see
gpuaug/worker_memory.py). Both collates run
in this one process, alternating; medians over every batch timed.
"""

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2.functional import center_crop, resize

import gpuaug as ga
from gpuaug.bench_loader import SIZES
from gpuaug.data import Encoded, collate
from gpuaug.data.codecs import encode_jpeg


class Photos(Dataset):
    """The sample photos at mixed ~500x375 sizes, decoded once (uint8 (3, H, W)); with ``jpeg``,
    as JPEG bytes (``ga.data.Encoded``, what ``decode="gpu"`` datasets give)."""

    def __init__(self, n: int, jpeg: bool = False):
        photos = ga.sample_images()
        self.items = []
        for i in range(n):
            h, w = SIZES[i % len(SIZES)]
            img = photos[i % len(photos)]
            s = max(h / img.shape[1], w / img.shape[2])
            img = resize(img, [round(img.shape[1] * s) + 1, round(img.shape[2] * s) + 1], antialias=True)
            img = center_crop(img, [h, w]).contiguous()
            if jpeg:
                img = encode_jpeg(img, quality=90)
            self.items.append(img)
        self.jpeg = jpeg

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        data = self.items[i].clone()  # a fresh tensor, as a read or a decode makes
        return (Encoded(f"photo{i}.jpg", data) if self.jpeg else data), i


def list_collate(items):
    """What a ragged batch was before one-buffer batches: a plain list."""
    return [x for x, _ in items], torch.tensor([y for _, y in items])


def handoff_ms(collate_fn, dataset, batch: int, device, rounds: int, wait_s: float) -> tuple[list, list]:
    """ms the main process spends on ``next()`` of a waiting batch (+ moving it to ``device``),
    and on releasing it (its shared memory is unmapped and freed) -> two lists, one per batch."""
    cuda = device.type == "cuda"
    dl = DataLoader(dataset, batch_size=batch, num_workers=2, collate_fn=collate_fn, prefetch_factor=2,
                    pin_memory=cuda, persistent_workers=True)
    loader = ga.DeviceLoader(dl, device=device, prefetch=1) if cuda else dl  # each next() takes one batch
    receive, release = [], []
    for _ in range(rounds):
        it = iter(loader)
        next(it)
        time.sleep(wait_s)  # the workers fill their queue
        for _ in range(3):
            t = time.perf_counter()
            b = next(it, None)
            if b is None:
                break
            if cuda:
                torch.cuda.current_stream(device).synchronize()
            receive.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            del b
            release.append((time.perf_counter() - t) * 1e3)
        del it
    return receive, release


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait", type=float, default=4.0, help="seconds the workers get to fill their queue")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = ga.select_device(args.device)
    print(f"handoff_bench: batch {args.batch} of ~500x375 images of mixed sizes, 2 workers, on {device}, "
          f"{time.strftime('%Y-%m-%d')}" + (" (JPEG rows include decoding them on the GPU)" if device.type == "cuda" else ""))
    print(f"  {'median ms per batch, main process':<56} {'receive':>8} {'release':>8}  (batches)")
    for kind, jpeg, packed in (("uint8 images", False, "PackedImages"), ("JPEG bytes, decode='gpu'", True, "EncodedBatch")):
        dataset = Photos(args.batch * 5, jpeg=jpeg)  # a first batch, three timed, one spare
        results = {}
        for name, fn in [("list", list_collate), (f"{packed} (ga.data.collate)", collate)] * 2:
            receive, release = handoff_ms(fn, dataset, args.batch, device, args.rounds, args.wait)
            r = results.setdefault(f"{kind}: {name}", ([], []))
            r[0].extend(receive)
            r[1].extend(release)
        for name, (receive, release) in results.items():
            print(f"  {name:<56} {statistics.median(receive):8.2f} {statistics.median(release):8.2f}  ({len(receive)})")
        (a, c), (b, d) = ((statistics.median(r), statistics.median(f)) for r, f in results.values())
        print(f"  {kind}, list / one buffer: receive {a / b:.1f}x, release {c / d:.1f}x")


if __name__ == "__main__":
    main()
