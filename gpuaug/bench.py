"""``gpuaug bench``: the same photos and the same ops through torchvision, kornia and gpuaug, side by side.

Rows, per device and batch size:

1. torchvision.transforms.v2 per sample: what a DataLoader worker does today, on one CPU thread
   (so its img/s is per worker core); ragged ~500x375 uint8 photos, one at a time.
2. kornia.augmentation.AugmentationSequential on the batch (eager; on CUDA also torch.compile).
3. torchvision.transforms.v2 on the whole batch: fast, but ONE draw for the whole batch.
4. gpuaug on the batch, and on the ragged list as a DataLoader with a list collate gives it; on
   CUDA also on the ragged images as :func:`gpuaug.data.collate` gives them (one buffer,
   :class:`gpuaug.PackedImages`; on the CPU the same work as the list) and with its torch kernels
   instead of its Triton kernels (``GPUAUG_TRITON=0``), and with ``cuda_graph=True`` (the call
   recorded once as a CUDA graph and replayed: :mod:`gpuaug.cuda_graph`).

Batched rows get the photos resized once to a common 375x500 (kornia and torchvision cannot take a
ragged list), uint8 and already on the device. Timings are medians over ``repeats`` after a
warm-up; CPU rows run with one thread. ``img/s`` times each call alone, waiting for the device
after it (a call's latency: its host work and its kernels, one after the other). On CUDA a row
also gets ``back to back``: :data:`BACK_TO_BACK` calls issued one after another and one wait at the
end, as a training loop issues them (the host issues the next call while the device runs this
one; a method that waits for the device inside its call, as kornia's draws do, gains little). The process keeps freed memory for all rows alike
(:func:`gpuaug.keep_freed_memory`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import date

import torch
import torch.nn.functional as F

from .cpu import keep_freed_memory
from .device import select_device
from .packed import PackedImages
from .pipeline import Pipeline
from .samples import sample_images
from .transforms import IMAGENET_MEAN, IMAGENET_STD, ColorJitter, Normalize, RandomHorizontalFlip, RandomResizedCrop, RandomRotation
from .user_warnings import warn

SIZE = 224
TORCHVISION_PER_SAMPLE = "torchvision v2, per sample (1 worker core)"
KORNIA = "kornia AugmentationSequential"
KORNIA_COMPILED = "kornia AugmentationSequential, torch.compile"
TORCHVISION_BATCH = "torchvision v2 on the batch (one draw per batch)"
GPUAUG = "gpuaug"
GPUAUG_RAGGED = "gpuaug, ragged list input"
GPUAUG_PACKED = "gpuaug, ragged PackedImages input"
GPUAUG_TORCH_KERNELS = "gpuaug, torch kernels only (GPUAUG_TRITON=0)"
GPUAUG_GRAPH = "gpuaug, cuda_graph=True (recorded call replayed)"
BACK_TO_BACK = 8
# Other libraries' rows: one that fails is reported as failed and the run goes on.
PEERS = (KORNIA, KORNIA_COMPILED, TORCHVISION_BATCH)


def gpuaug_pipeline(device, cuda_graph: bool = False, size: int = SIZE) -> Pipeline:
    return Pipeline(RandomResizedCrop(size), RandomHorizontalFlip(), RandomRotation(15),
                    ColorJitter(0.4, 0.4, 0.4, 0.1), Normalize(IMAGENET_MEAN, IMAGENET_STD), device=device, seed=0,
                    cuda_graph=cuda_graph)


def torchvision_transform():
    from torchvision.transforms import v2

    # The CPU transform users write today (RandomRotation keeps torchvision's default, nearest).
    return v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(), v2.RandomRotation(15),
                       v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def kornia_augment(device):
    """kornia's equivalent pipeline, or None where kornia is not installed (its rows are skipped).
    Its RandomRotation is told p=1.0: kornia's default is 0.5, where torchvision's and gpuaug's
    rotate every sample (until 2026-12-06 kornia rotated half of them: less work than the others)."""
    try:
        import kornia.augmentation as K
    except ImportError:
        return None

    return K.AugmentationSequential(
        K.RandomResizedCrop((SIZE, SIZE)), K.RandomHorizontalFlip(), K.RandomRotation(15.0, p=1.0),
        K.ColorJitter(0.4, 0.4, 0.4, 0.1),
        K.Normalize(torch.tensor(IMAGENET_MEAN, dtype=torch.float32, device="cpu"),
                    torch.tensor(IMAGENET_STD, dtype=torch.float32, device="cpu"))).to(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device, repeats: int, warmup: int = 1, calls: int = 1) -> float:
    """The median over ``repeats`` of the seconds a call takes, ``calls`` calls timed together
    with one wait for the device after them."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def uniform_batch(images: list[torch.Tensor], size=(375, 500)) -> torch.Tensor:
    """The photos resized to one size and stacked: uint8 ``(B, 3, *size)``, for the batched rows."""
    return torch.stack([F.interpolate(img[None].float(), size=size, mode="bilinear", antialias=True)[0]
                        for img in images]).round().clamp(0, 255).to(torch.uint8)


def _jobs(device: torch.device, ragged: list[torch.Tensor]):
    """(method, callable, warm-up calls) for one device and batch; inputs prepared outside the timing."""
    uniform = uniform_batch(ragged).to(device)
    on_device = [img.to(device) for img in ragged]
    tv = torchvision_transform()
    ours = gpuaug_pipeline(device)
    kornia = kornia_augment(device)
    jobs: list[tuple[str, Callable[[], object], int]] = []
    if device.type == "cpu":
        jobs.append((TORCHVISION_PER_SAMPLE, lambda: [tv(img) for img in ragged], 1))
    if kornia is not None:
        jobs.append((KORNIA, lambda: kornia(uniform.float().div_(255)), 1))
        if device.type == "cuda":
            compiled = torch.compile(kornia)
            jobs.append((KORNIA_COMPILED, lambda: compiled(uniform.float().div_(255)), 3))
    jobs.append((TORCHVISION_BATCH, lambda: tv(uniform), 1))
    jobs.append((GPUAUG, lambda: ours(uniform), 2))
    jobs.append((GPUAUG_RAGGED, lambda: ours(on_device), 2))
    if device.type == "cuda":
        packed = PackedImages.pack(ragged).to(device)
        jobs.append((GPUAUG_PACKED, lambda: ours(packed), 2))
        jobs.append((GPUAUG_TORCH_KERNELS, lambda: _without_triton(ours, uniform), 2))
        graphed = gpuaug_pipeline(device, cuda_graph=True)
        jobs.append((GPUAUG_GRAPH, lambda: graphed(uniform), 3))  # eager, recorded, replayed
    return jobs


def _without_triton(pipeline: Pipeline, images: torch.Tensor) -> torch.Tensor:
    """``pipeline(images)`` with the torch kernels (``GPUAUG_TRITON=0`` for the call)."""
    before = os.environ.get("GPUAUG_TRITON")
    os.environ["GPUAUG_TRITON"] = "0"
    try:
        return pipeline(images)
    finally:
        if before is None:
            del os.environ["GPUAUG_TRITON"]
        else:
            os.environ["GPUAUG_TRITON"] = before


def run(devices=None, batch_sizes=(64, 256), repeats: int = 5, progress: bool = True, on_row=None) -> list[dict]:
    """Time every method on every device and batch size; returns one dict per row. ``on_row(rows)``
    is called after each row (the CLI saves and reports partial results with it, so a run cut
    short, as by a time limit on a lent GPU, still leaves what it measured)."""
    from .progress import progress_bar

    keep_freed_memory()  # for every row alike: page faults on fresh mmap pages otherwise dominate CPU rows
    if devices is None:
        devices = (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]
    devices = [select_device(d) for d in devices]  # a clear ValueError for an unavailable device
    rows = []
    plan = [(d, b) for d in devices for b in batch_sizes]
    has_kornia = kornia_augment("cpu") is not None
    per_plan = {"cpu": 4 + has_kornia, "cuda": 6 + 2 * has_kornia}  # rows _jobs makes: 3 + has_kornia elsewhere
    bar = progress_bar(total=sum(per_plan.get(d.type, 3 + has_kornia) for d, _ in plan), desc="gpuaug bench",
                       disable=not progress, unit="run")
    threads = torch.get_num_threads()
    try:
        for device, batch in plan:
            if device.type == "cpu":
                torch.set_num_threads(1)  # per worker core, as a DataLoader worker runs
            ragged = sample_images(batch)
            for method, fn, warmup in _jobs(device, ragged):
                bar.set_postfix_str(f"{device.type} b={batch} {method[:28]}")
                row = {"device": _device_name(device), "batch": batch, "method": method}
                try:
                    seconds = median_seconds(fn, device, repeats, warmup)
                    row.update(images_per_s=batch / seconds, ms_per_batch=seconds * 1000)
                    if device.type == "cuda":
                        row["back_to_back_images_per_s"] = batch / median_seconds(fn, device, repeats, 0,
                                                                                   BACK_TO_BACK)
                except Exception as e:  # a peer that fails here (kornia under torch.compile, say) loses its row only
                    if method not in PEERS:
                        raise
                    error = f"{type(e).__name__}: {e}".splitlines()[0][:160]
                    row.update(images_per_s=None, ms_per_batch=None, error=error)
                    warn(f"gpuaug bench: {method} failed on {device} at batch {batch}: {row['error']}")
                rows.append(row)
                bar.update()
                if on_row is not None:
                    on_row(rows)
            torch.set_num_threads(threads)
    finally:
        torch.set_num_threads(threads)
        bar.close()
    _add_ratios(rows)
    return rows


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()}, 1 thread)"


def _add_ratios(rows: list[dict]) -> None:
    """gpuaug's speed-up over the per-sample torchvision worker (CPU, same batch) and kornia eager."""
    def find(device, batch, method):
        return next((r for r in rows if r["device"] == device and r["batch"] == batch and r["method"] == method), None)

    cpu_device = next((x["device"] for x in rows if x["device"].startswith("cpu")), None)
    for r in rows:
        base = find(cpu_device, r["batch"], TORCHVISION_PER_SAMPLE)
        kornia = find(r["device"], r["batch"], KORNIA)
        ok = r["images_per_s"] is not None
        r["x_torchvision_per_sample"] = r["images_per_s"] / base["images_per_s"] if ok and base else None
        r["x_kornia"] = r["images_per_s"] / kornia["images_per_s"] if ok and kornia and kornia["images_per_s"] else None
        both = ok and kornia and r.get("back_to_back_images_per_s") and kornia.get("back_to_back_images_per_s")
        r["x_kornia_back_to_back"] = r["back_to_back_images_per_s"] / kornia["back_to_back_images_per_s"] \
            if both else None


def format_table(rows: list[dict]) -> str:
    """The rows as a text table; the ``b2b`` columns only where some row has them (CUDA rows)."""
    b2b_cols = any(r.get("back_to_back_images_per_s") for r in rows)
    head = (f"{'device':<36} {'batch':>5}  {'method':<50} {'img/s':>10} {'ms/batch':>9} {'x tv/sample':>11} "
            f"{'x kornia':>8}" + (f" {'b2b img/s':>10} {'b2b x kornia':>12}" if b2b_cols else ""))
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["images_per_s"] is None:
            lines.append(f"{r['device'][:36]:<36} {r['batch']:>5}  {r['method']:<50} failed: {r['error']}")
            continue
        tv = f"{r['x_torchvision_per_sample']:.2f}" if r["x_torchvision_per_sample"] else "-"
        ko = f"{r['x_kornia']:.2f}" if r["x_kornia"] else "-"
        line = (f"{r['device'][:36]:<36} {r['batch']:>5}  {r['method']:<50} {r['images_per_s']:>10.1f} "
                f"{r['ms_per_batch']:>9.1f} {tv:>11} {ko:>8}")
        if b2b_cols:
            b2b = f"{r['back_to_back_images_per_s']:.1f}" if r.get("back_to_back_images_per_s") else "-"
            b2b_ko = f"{r['x_kornia_back_to_back']:.2f}" if r.get("x_kornia_back_to_back") else "-"
            line += f" {b2b:>10} {b2b_ko:>12}"
        lines.append(line)
    lines.append("x tv/sample: images/s over torchvision v2 per sample on one CPU core (one worker); "
                 "x kornia: over kornia eager on the same device. img/s: each call timed alone (waiting "
                 "for the device after it)" + (f"; b2b (CUDA): {BACK_TO_BACK} calls back to back, one wait at "
                                               "the end." if b2b_cols else "."))
    return "\n".join(lines)


def save_json(rows: list[dict], path: str) -> None:
    meta = {"date": date.today().isoformat(), "torch": torch.__version__, "platform": platform.platform()}
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)


def save_plot(rows: list[dict], path: str) -> None:
    try:
        from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'gpuaug[plot]'") from None
    groups = sorted({(r["device"], r["batch"]) for r in rows}, key=lambda g: (g[0], g[1]))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig = Figure(figsize=(max(10, 2.5 * len(groups) + 4), 5))
    ax = fig.subplots()
    width = 0.8 / len(methods)
    for i, m in enumerate(methods):
        values = [next((r["images_per_s"] or 0 for r in rows if (r["device"], r["batch"]) == g and r["method"] == m), 0)
                  for g in groups]
        ax.bar([j + i * width for j in range(len(groups))], values, width, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))])
    ax.set_xticklabels([f"{d.split(' (')[0]}\nbatch {b}" for d, b in groups])
    ax.set_ylabel("images / s (higher is better)")
    ax.set_title("RandomResizedCrop + flip + rotation + ColorJitter + Normalize, 224x224")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    # A name with no suffix gets PNG at that very path (matplotlib would write PATH.png).
    fig.savefig(path, dpi=120, format=None if os.path.splitext(str(path))[1] else "png")
