"""``gpuaug bench --loader``: DataLoader workers doing decode + torchvision transforms versus
decode-only workers + gpuaug through DeviceLoader, on a generated JPEG folder of mixed sizes.

Two measures:

* worker capacity — images one worker core turns out per second (decode + transforms, or decode
  only), timed in this process with one thread: what each extra worker buys;
* the loop — a DataLoader with the same ``num_workers`` feeding a simulated training step
  (``step_ms`` of sleep, as a GPU step leaves the CPU free): images/s and the fraction of time the
  loop waited for data, in its steady state (:func:`steady_order`: the workers' start is left out).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from .bench import gpuaug_pipeline, torchvision_transform
from .cpu import keep_freed_memory
from .data import DeviceLoader, ImageFolder, collate
from .data.decode import load_rgb
from .device import select_device
from .samples import sample_images

# Mixed, realistic photo sizes (h, w): ImageNet-like landscape and portrait, and some larger.
SIZES = [(375, 500), (500, 375), (333, 500), (480, 640), (400, 400), (427, 640), (600, 800), (300, 451)]


def make_jpeg_folder(root, n: int = 192, seed: int = 0) -> Path:
    """Write ``n`` JPEGs of the sample photos at mixed sizes to ``root/class{0,1}/``."""
    from torchvision.transforms.v2.functional import center_crop, resize

    from .data.codecs import encode_jpeg

    rng = random.Random(seed)
    root = Path(root)
    photos = sample_images()
    for i in range(n):
        h, w = rng.choice(SIZES)
        img = photos[i % len(photos)]
        s = max(h / img.shape[1], w / img.shape[2])
        img = center_crop(resize(img, [round(img.shape[1] * s) + 1, round(img.shape[2] * s) + 1], antialias=True), [h, w])
        path = root / f"class{i % 2}" / f"img{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_jpeg(img, quality=90).numpy().tobytes())
    return root


class TorchvisionFolder(Dataset):
    """What users run today: decode and torchvision v2 transforms, in the worker."""

    def __init__(self, paths, labels):
        self.paths, self.labels, self.transform = paths, labels, torchvision_transform()

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        return self.transform(load_rgb(self.paths[i])), self.labels[i]


def worker_capacity(dataset, n: int) -> float:
    """Items per second one thread produces from ``dataset`` (median of 3 passes over ``n`` items)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dataset[0]
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for i in range(n):
                dataset[i % len(dataset)]
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return n / statistics.median(times)


class LoopTiming(NamedTuple):
    """A simulated loop's timing: ``images`` arrived in ``seconds``, ``waited`` of them spent
    waiting for data, all counted after the warm-up, which took ``warmup_seconds``."""

    seconds: float
    waited: float
    images: int
    warmup_seconds: float


def simulated_loop(batches, step_ms: float, warmup: int = 0) -> LoopTiming:
    """Run a simulated training loop over ``batches`` (each ``(images, labels)``), ``step_ms`` of
    sleep a batch (a GPU step leaves the CPU free). Counted after the first ``warmup`` batches (the
    workers starting and their first batches in flight: a long run pays them once), or over the
    whole run where it has no more batches than that."""
    asked, waits, counts = [], [], []  # per batch: when the loop asked for it, how long it waited, its images
    start = time.perf_counter()
    it = iter(batches)
    while True:
        t = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        asked.append(t)
        waits.append(time.perf_counter() - t)
        counts.append(len(batch[1]))
        time.sleep(step_ms / 1000)
    end = time.perf_counter()
    skip = warmup if len(asked) > warmup else 0
    since = asked[skip] if skip else start
    return LoopTiming(end - since, sum(waits[skip:]), sum(counts[skip:]), since - start)


MEASURED_BATCHES = 16  # a loop's batches timed after its warm-up, at the least


def steady_order(n_items: int, batch_size: int, num_workers: int) -> tuple[list[int], int]:
    """A DataLoader ``sampler`` for timing a loop's steady state, as a long run sees it -> (the
    item indices, the warm-up batches to leave out of the timing): one batch a worker (at least
    one: the workers' start and first batches), then ``max(MEASURED_BATCHES, 2 * num_workers)``
    batches, the ``n_items`` taken again in order as needed."""
    if n_items < 1 or batch_size < 1 or num_workers < 0:
        raise ValueError(f"expected n_items and batch_size >= 1 and num_workers >= 0, got {n_items}, {batch_size}, "
                         f"{num_workers}")
    warmup = max(num_workers, 1)
    batches = warmup + max(MEASURED_BATCHES, 2 * num_workers)
    return [i % n_items for i in range(batches * batch_size)], warmup


def run(root=None, n_files: int = 192, num_workers: int = 2, batch_size: int = 32, step_ms: float = 20.0,
        device=None, progress: bool = True) -> list[dict]:
    from .progress import progress_bar

    keep_freed_memory()
    device = select_device(device)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(root) if root is not None else make_jpeg_folder(Path(tmp) / "jpegs", n_files)
        decode_only = ImageFolder(root)
        with_transforms = TorchvisionFolder(decode_only.paths, decode_only.labels)
        bar = progress_bar(total=4, desc="gpuaug bench --loader", disable=not progress, unit="step")
        n_cap = min(len(decode_only), 64)
        cap_tv = worker_capacity(with_transforms, n_cap)
        bar.update()
        cap_decode = worker_capacity(decode_only, n_cap)
        bar.update()
        order, warmup = steady_order(len(decode_only), batch_size, num_workers)
        kwargs = dict(batch_size=batch_size, sampler=order, num_workers=num_workers, pin_memory=device.type == "cuda",
                      persistent_workers=False)
        seconds, waited, images, _ = simulated_loop(DataLoader(with_transforms, **kwargs), step_ms, warmup)
        rows: list[dict[str, Any]] = [{"setup": "workers: decode + torchvision v2 transforms", "device": "cpu (workers)",
                 "worker_images_per_s": cap_tv, "loop_images_per_s": images / seconds,
                 "data_wait_fraction": waited / seconds}]
        bar.update()
        loader = DeviceLoader(DataLoader(decode_only, collate_fn=collate, **kwargs), gpuaug_pipeline(device))
        seconds, waited, images, _ = simulated_loop(loader, step_ms, warmup)
        rows.append({"setup": "workers: decode only; gpuaug in the loop (DeviceLoader)", "device": str(device),
                     "worker_images_per_s": cap_decode, "loop_images_per_s": images / seconds,
                     "data_wait_fraction": waited / seconds})
        bar.update()
        bar.close()
    for r in rows:
        r.update(num_workers=num_workers, batch_size=batch_size, step_ms=step_ms, files=len(decode_only),
                 warmup_batches=warmup, measured_batches=len(order) // batch_size - warmup)
        r["x_worker_capacity"] = r["worker_images_per_s"] / cap_tv
    return rows


def format_table(rows: list[dict]) -> str:
    head = f"{'setup':<58} {'worker img/s':>12} {'x':>6} {'loop img/s':>10} {'data wait':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['setup']:<58} {r['worker_images_per_s']:>12.1f} {r['x_worker_capacity']:>6.2f} "
                     f"{r['loop_images_per_s']:>10.1f} {100 * r['data_wait_fraction']:>8.1f}%")
    r = rows[0]
    lines.append(f"worker img/s: one worker core (1 thread), decode (+ transforms); x: over the transforming worker. "
                 f"loop: {r['files']} files, num_workers={r['num_workers']}, batch {r['batch_size']}, "
                 f"simulated step {r['step_ms']:.0f} ms, timed after a warm-up of {r['warmup_batches']} batches "
                 f"(the workers' start), over {r['measured_batches']}; gpuaug ran on {rows[1]['device']}.")
    return "\n".join(lines)
