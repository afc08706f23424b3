"""``gpuaug profile DIR``: where does a loader's time go, on the user's own images?

Stages, each timed on its own: raw read (bytes only: the disk), decode (one core), torchvision CPU
transforms (one core), gpuaug (on the best device). Then a DataLoader sweep over ``num_workers``
(up to the core count), ``pin_memory`` and ``prefetch_factor`` with decode-only workers, gpuaug in
the loop and a simulated training step, each setting timed in its steady state (its warm-up timed
apart: :func:`gpuaug.bench_loader.steady_order`). It says which stage bounds the loader and which
settings ran fastest.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from .bench import gpuaug_pipeline, torchvision_transform
from .bench_loader import MEASURED_BATCHES, simulated_loop, steady_order
from .cpu import keep_freed_memory
from .data import DeviceLoader, ImageFiles, collate
from .data.datasets import IMG_EXTENSIONS, find_files
from .data.decode import DecodeError, decode_rgb, read_bytes
from .device import select_device


def find_images(directory, max_files: int) -> list[str]:
    """Image files under ``directory`` (recursive, sorted), at most ``max_files``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{str(directory)!r} is not a directory")
    paths = find_files(directory, IMG_EXTENSIONS)
    if not paths:
        raise FileNotFoundError(f"no image files ({', '.join(IMG_EXTENSIONS)}) under {str(directory)!r}")
    return paths[:max_files]


def loader_settings(cores: int, device: torch.device) -> list[tuple[int, bool, int | None]]:
    """The DataLoader settings the sweep times: ``(num_workers, pin_memory, prefetch_factor)`` for
    0 workers, powers of two up to ``cores`` (32 at most) and ``cores`` itself; pinned and not on CUDA (on the
    CPU pinning only copies); prefetch 2 (torch's default) and 4 with workers (None without)."""
    workers = sorted({0, *[w for w in (1, 2, 4, 8, 16, 32) if w <= cores], cores})
    return [(w, pin, pf) for w in workers for pin in ([False, True] if device.type == "cuda" else [False])
            for pf in ([2, 4] if w > 0 else [None])]


def _one_thread(fn):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)


def run(directory, max_files: int = 256, step_ms: float = 20.0, device=None, batch_size: int = 32,
        max_workers: int | None = None, progress: bool = True) -> dict:
    from .progress import progress_bar

    keep_freed_memory()
    device = select_device(device)
    paths = find_images(directory, max_files)
    cores = max_workers if max_workers is not None else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    sweep_plan = loader_settings(cores, device)
    bar = progress_bar(total=4 + len(sweep_plan), desc="gpuaug profile", disable=not progress, unit="step")

    def read_all():
        blobs, bad = [], []
        for p in paths:
            try:
                blobs.append((p, read_bytes(p)))
            except DecodeError as e:
                bad.append(str(e))
        return blobs, bad

    (blobs, bad_reads), t_read = _one_thread(read_all)
    n_bytes = sum(b.numel() for _, b in blobs)
    bar.update()

    def decode_all():
        out, bad = [], []
        for p, b in blobs:
            try:
                out.append(decode_rgb(p, b))
            except DecodeError as e:
                bad.append(str(e))
        return out, bad

    (images, undecodable), t_decode = _one_thread(decode_all)
    bar.update()
    if not images:
        bar.close()  # before the error is printed, not after it
        first = (bad_reads + undecodable)[0]
        raise FileNotFoundError(f"none of the {len(paths)} files under {str(directory)!r} could be read and "
                                f"decoded; the first error: {first}")
    tf = torchvision_transform()
    _, t_tv = _one_thread(lambda: [tf(img) for img in images])
    bar.update()
    pipe = gpuaug_pipeline(device)
    pipe(images[:batch_size])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(images), batch_size):
        pipe(images[i : i + batch_size])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t_gpuaug = time.perf_counter() - start
    bar.update()

    stages = {
        "read": {"files_per_s": len(blobs) / t_read, "MB_per_s": n_bytes / t_read / 1e6, "unreadable": len(bad_reads),
                 "unreadable_files": bad_reads},
        "decode": {"images_per_s_per_core": len(images) / t_decode, "undecodable": undecodable},
        "torchvision_transforms": {"images_per_s_per_core": len(images) / t_tv},
        "gpuaug": {"images_per_s": len(images) / t_gpuaug, "device": str(device)},
    }
    dataset = ImageFiles(paths, on_error="skip")
    sweep: list[dict[str, Any]] = []
    for w, pin, pf in sweep_plan:
        bar.set_postfix_str(f"workers={w} pin={pin} prefetch={pf}")
        kwargs: dict[str, Any] = {"prefetch_factor": pf} if w > 0 else {}
        order, warmup = steady_order(len(dataset), batch_size, w)  # the steady state, as a long run sees it
        dl = DataLoader(dataset, batch_size=batch_size, sampler=order, num_workers=w, pin_memory=pin,
                        collate_fn=collate, **kwargs)
        with warnings.catch_warnings():  # the bad files, reported once above, not once per setting
            warnings.filterwarnings("ignore", message="gpuaug: skipping", category=RuntimeWarning)
            timing = simulated_loop(DeviceLoader(dl, pipe, on_error="skip"), step_ms, warmup=warmup)
        sweep.append({"num_workers": w, "pin_memory": pin, "prefetch_factor": pf,
                      "images_per_s": timing.images / timing.seconds,
                      "data_wait_fraction": timing.waited / timing.seconds,
                      "warmup_batches": warmup, "warmup_s": timing.warmup_seconds, "batches": len(order) // batch_size})
        bar.update()
    bar.close()

    worker_cores = max(cores - (0 if device.type == "cuda" else 1), 1)
    bounds = {
        "disk": stages["read"]["files_per_s"],
        "decode": stages["decode"]["images_per_s_per_core"] * worker_cores,
        "augment": stages["gpuaug"]["images_per_s"],
    }
    best = max(sweep, key=lambda r: r["images_per_s"])
    return {"directory": str(directory), "files": len(paths), "cores": cores, "step_ms": step_ms,
            "stages": stages, "bounds_images_per_s": bounds, "bottleneck": min(bounds, key=lambda stage: bounds[stage]),
            "sweep": sweep, "best": best}


def format_report(r: dict) -> str:
    s = r["stages"]
    lines = [
        f"gpuaug profile: {r['files']} files under {r['directory']}, {r['cores']} cores, simulated step {r['step_ms']:.0f} ms",
        "",
        f"  read (bytes only)        {s['read']['files_per_s']:10.1f} files/s  {s['read']['MB_per_s']:8.1f} MB/s"
        + (f"  ({s['read']['unreadable']} unreadable)" if s["read"]["unreadable"] else ""),
        f"  decode                   {s['decode']['images_per_s_per_core']:10.1f} img/s per core"
        + (f"  ({len(s['decode']['undecodable'])} undecodable, skipped)" if s["decode"]["undecodable"] else ""),
        f"  torchvision transforms   {s['torchvision_transforms']['images_per_s_per_core']:10.1f} img/s per core",
        f"  gpuaug ({s['gpuaug']['device']:<6})          {s['gpuaug']['images_per_s']:10.1f} img/s",
        *_skipped_lines(s["read"]["unreadable_files"] + s["decode"]["undecodable"]),
        "",
        f"  {'num_workers':>11} {'pin_memory':>10} {'prefetch':>8} {'img/s':>9} {'data wait':>9} {'warm-up':>9}",
    ]
    for row in r["sweep"]:
        lines.append(f"  {row['num_workers']:>11} {str(row['pin_memory']):>10} {str(row['prefetch_factor']):>8} "
                     f"{row['images_per_s']:>9.1f} {100 * row['data_wait_fraction']:>8.1f}% "
                     f"{1000 * row['warmup_s']:>6.0f} ms")
    lines.append("  img/s and data wait: after the warm-up (the workers' start and first batch each, timed apart), "
                 f"over {MEASURED_BATCHES} or more batches, files taken again as needed")
    b, best = r["bounds_images_per_s"], r["best"]
    lines += [
        "",
        f"  bounds (img/s): disk {b['disk']:.0f}, decode on all worker cores {b['decode']:.0f}, augment {b['augment']:.0f}",
        f"  the loader is bound by: {r['bottleneck']}",
        f"  use: DataLoader(num_workers={best['num_workers']}, pin_memory={best['pin_memory']}"
        + (f", prefetch_factor={best['prefetch_factor']}" if best["prefetch_factor"] else "")
        + f") -> {best['images_per_s']:.0f} img/s, data wait {100 * best['data_wait_fraction']:.0f}%",
    ]
    return "\n".join(lines)


def _skipped_lines(errors: list[str], shown: int = 5) -> list[str]:
    """The files that could not be read or decoded (the loader skips them too), the first few."""
    if not errors:
        return []
    more = [f"    ... and {len(errors) - shown} more (the JSON lists them all)"] if len(errors) > shown else []
    return ["", f"  files skipped, unreadable or undecodable ({len(errors)}):", *(f"    {e}" for e in errors[:shown]), *more]
