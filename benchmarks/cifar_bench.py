"""The CIFAR recipe side by side, on the CPU with one thread (or on CUDA): RandomCrop(32, padding=4)
(zero, or reflect padding) + RandomHorizontalFlip + Normalize on 32x32 uint8 images made from the
built-in photos, through torchvision v2 per sample (what a DataLoader worker does), torchvision v2
on the batch (one draw for the whole batch), kornia.augmentation eager, and gpuaug.
`python benchmarks/cifar_bench.py [--batch 256] [--repeats 15] [--device cpu]`; medians, img/s.
"""

import argparse
import statistics
import time

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2.functional import center_crop, resize

import gpuaug as ga


def images(n: int) -> torch.Tensor:
    """``n`` uint8 (3, 32, 32) crops of the sample photos, each from its own spot and scale."""
    photos, out = ga.sample_images(), []
    for i in range(n):
        photo = photos[i % len(photos)]
        side = min(photo.shape[-2:]) // (1 + i % 4)
        out.append(resize(center_crop(photo, [side, side]), [32, 32], antialias=True))
    return torch.stack(out)


def _median_rate(fn, n: int, repeats: int, sync) -> float:
    fn()
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return n / statistics.median(times)


def main(argv=None) -> list[tuple[str, str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = images(args.batch).to(device)
    mean, std = list(ga.IMAGENET_MEAN), list(ga.IMAGENET_STD)
    rows = []
    for mode in ("constant", "reflect"):
        tv = v2.Compose([v2.RandomCrop(32, padding=4, padding_mode=mode), v2.RandomHorizontalFlip(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])
        candidates = [("torchvision v2 per sample", lambda: [tv(img) for img in x.cpu()]),
                      ("torchvision v2 on the batch (one draw per batch)", lambda: tv(x))]
        try:
            import kornia.augmentation as K

            kornia = K.AugmentationSequential(K.RandomCrop((32, 32), padding=4, padding_mode=mode),
                                              K.RandomHorizontalFlip(), K.Normalize(torch.tensor(mean), torch.tensor(std))
                                              ).to(device)
            candidates.append(("kornia eager", lambda: kornia(x.float() / 255)))
        except Exception as e:  # kornia missing or refusing the mode: a row that says so
            rows.append((mode, f"kornia eager (failed: {type(e).__name__})", float("nan")))
        pipe = ga.Pipeline(ga.RandomCrop(32, padding=4, padding_mode=mode), ga.RandomHorizontalFlip(),
                           ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), device=device, seed=0)
        candidates.append(("gpuaug", lambda: pipe(x)))
        for name, fn in candidates:
            per_sample = name.endswith("per sample")
            try:
                rate = _median_rate(fn, args.batch, max(3, args.repeats // 5) if per_sample else args.repeats,
                                    (lambda: None) if per_sample else sync)
            except Exception as e:  # another library's failure is a row that says so; gpuaug's is fatal
                if name == "gpuaug":
                    raise
                name, rate = f"{name} (failed: {type(e).__name__})", float("nan")
            rows.append((mode, name, rate))
    base = {mode: rate for mode, name, rate in rows if name == "torchvision v2 per sample"}
    print(f"cifar_bench: {device}, batch {args.batch} of uint8 32x32, "
          f"{'1 thread' if device.type == 'cpu' else torch.cuda.get_device_name(device)}, medians of {args.repeats}")
    print(f"{'padding':<10}{'':<52}{'img/s':>12}{'x tv/sample':>13}")
    for mode, name, rate in rows:
        print(f"{mode:<10}{name:<52}{rate:>12.0f}{rate / base[mode]:>13.2f}")
    return rows


if __name__ == "__main__":
    main()
