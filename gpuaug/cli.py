"""The ``gpuaug`` command."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    """Run ``gpuaug ARGS`` -> its exit status (2: bad arguments or input, named on stderr)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "bench":
        _check_bench_flags(args, parser)
    # Output paths are checked before a run of minutes, not after it.
    for flag in ("json", "plot"):
        path = getattr(args, flag, None)
        if path is not None:
            problem = _unwritable(path)
            if problem:
                parser.error(f"--{flag} {path}: {problem}")
    if getattr(args, "plot", None):
        if importlib.util.find_spec("matplotlib") is None:
            parser.error("--plot needs matplotlib: pip install 'gpuaug[plot]'")
        problem = _unplottable(args.plot)
        if problem:
            parser.error(f"--plot {args.plot}: {problem}")
    if args.command == "bench":
        return (_bench_loader if args.loader else _bench)(args, parser)
    return (_profile if args.command == "profile" else _pack)(args, parser)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuaug", description="Batched per-sample image augmentation on the GPU.")
    parser.add_argument("--version", action=_Versions, help="print gpuaug's version and those it runs with, then exit")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="time torchvision, kornia and gpuaug on the built-in sample photos")
    bench.add_argument("--device", action="append", help="cpu or cuda[:N]; repeat for several (default: cuda if present, and cpu)")
    bench.add_argument("--batch-sizes", type=int, nargs="+", metavar="B", help="default: 64 256")
    bench.add_argument("--repeats", type=int, help="timed runs per row; the median is reported (default: 5)")
    bench.add_argument("--quick", action="store_true",
                       help="batch 16, 5 repeats (with --loader: 48 files, batch 16): a smoke test (~10 s on one core)")
    bench.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    bench.add_argument("--plot", metavar="PATH",
                       help="write a bar chart: PNG, or the format its suffix names (.svg, .pdf, ...); "
                            "needs matplotlib")
    bench.add_argument("--no-progress", action="store_true",
                       help="no progress bar (without --loader, each row is reported on stderr instead)")
    bench.add_argument("--loader", action="store_true",
                       help="instead: DataLoader workers with torchvision transforms vs decode-only workers + gpuaug")
    bench.add_argument("--num-workers", type=int, help="with --loader (default: 2)")
    bench.add_argument("--step-ms", type=float, help="with --loader: simulated training step (default: 20)")
    bench.add_argument("--files", type=int, help="with --loader: generated JPEGs (default: 192)")
    prof = sub.add_parser("profile", help="where does my loader's time go? disk, decode or augment, on DIR's images")
    prof.add_argument("dir")
    prof.add_argument("--max-files", type=int, default=256, help="default: 256")
    prof.add_argument("--step-ms", type=float, default=20.0, help="simulated training step per batch (default: 20)")
    prof.add_argument("--batch-size", type=int, default=32, help="default: 32")
    prof.add_argument("--device", help="where gpuaug runs (default: gpuaug.select_device())")
    prof.add_argument("--json", metavar="PATH")
    prof.add_argument("--no-progress", action="store_true", help="no progress bar")
    pack = sub.add_parser("pack", help="pack frame folders SRC/<class>/<video>/*.jpg into DST/<class>/<video>.pack")
    pack.add_argument("src")
    pack.add_argument("dst")
    pack.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                      help="a video without frames, or with a frame that cannot be read or has no image header: "
                           "stop (default) or leave it out")
    pack.add_argument("--force", action="store_true",
                      help="rewrite every pack (by default a pack newer than its frames is left as it is)")
    pack.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


# gpuaug bench's flags for one of its two benchmarks only, and their defaults (None: not given).
AUGMENT_FLAGS = {"batch_sizes": [64, 256], "repeats": 5, "plot": None}
LOADER_FLAGS = {"num_workers": 2, "step_ms": 20.0, "files": 192}


def _check_bench_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse a ``gpuaug bench`` flag the run would not use (the other benchmark's, or a size
    ``--quick`` sets), then fill in the defaults of those not given."""
    def given(names) -> str:
        """The flags among ``names`` given on the command line, as typed ("--batch-sizes --repeats")."""
        return " ".join(f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is not None)

    other = given(AUGMENT_FLAGS if args.loader else LOADER_FLAGS)
    if other:
        no_chart = ", which has no chart (use --json)" if args.plot is not None else ""
        parser.error(f"{other}: " + ("not used by --loader" + no_chart if args.loader else "used only with --loader"))
    if args.loader and args.device and len(args.device) > 1:
        parser.error(f"--loader runs gpuaug on one device, got --device {' --device '.join(args.device)}")
    sized = given(["batch_sizes", "repeats", "files"]) if args.quick else ""
    if sized:
        parser.error(f"{sized}: --quick sets its own sizes (leave out --quick to choose them)")
    for name, default in {**AUGMENT_FLAGS, **LOADER_FLAGS}.items():
        if getattr(args, name) is None:
            setattr(args, name, list(default) if isinstance(default, list) else default)  # not the dict's list


class _Versions(argparse.Action):
    """``gpuaug --version``: gpuaug's version and what it runs with (for a bug report), read only
    when asked (importing torch takes a second)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(versions())
        parser.exit()


def versions() -> str:
    """One line: gpuaug, Python, torch, torchvision, kornia (or "not installed"), the image codecs
    library and the GPUs torch sees."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import torch
    import torchvision

    from . import __version__
    from .data.codecs import CODECS

    try:
        kornia = version("kornia")
    except PackageNotFoundError:
        kornia = "not installed"
    gpus = (f"{torch.cuda.device_count()} CUDA device(s), {torch.cuda.get_device_name(0)}"
            if torch.cuda.is_available() else "no CUDA device")
    return (f"gpuaug {__version__} (Python {platform.python_version()}, torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}, kornia {kornia}, codecs {CODECS.name}; {gpus})")


def _bench_loader(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``gpuaug bench --loader``: DataLoader workers with torchvision transforms vs decode-only workers."""
    from . import bench_loader

    if args.num_workers < 0 or args.files < 1 or args.step_ms < 0:
        parser.error(f"--files must be positive, --num-workers and --step-ms not negative; got --files "
                     f"{args.files}, --num-workers {args.num_workers}, --step-ms {args.step_ms}")
    files = 48 if args.quick else args.files
    device = args.device[0] if args.device else None
    try:
        rows = bench_loader.run(None, files, args.num_workers, 16 if args.quick else 32, args.step_ms, device,
                                progress=not args.no_progress)
    except ValueError as e:
        print(f"gpuaug bench: {e}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=2)
    print(bench_loader.format_table(rows))
    return 0


def _bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``gpuaug bench``: torchvision, kornia and gpuaug on the sample photos, the table printed last."""
    from . import bench as b

    if args.repeats < 1 or any(s < 1 for s in args.batch_sizes):
        parser.error(f"--repeats and --batch-sizes must be positive, got --repeats {args.repeats}, "
                     f"--batch-sizes {' '.join(map(str, args.batch_sizes))}")
    batch_sizes, repeats = ([16], 5) if args.quick else (args.batch_sizes, args.repeats)

    def on_row(rows):  # partial results survive a run cut short
        if args.json:
            b.save_json(rows, args.json)
        if args.no_progress:
            r = rows[-1]
            done = f"{r['images_per_s']:.1f} img/s" if r["images_per_s"] is not None else f"failed: {r['error']}"
            print(f"gpuaug bench: {r['device']} batch {r['batch']} {r['method']}: {done}", file=sys.stderr,
                  flush=True)

    try:
        rows = b.run(args.device, batch_sizes, repeats, progress=not args.no_progress, on_row=on_row)
    except ValueError as e:
        print(f"gpuaug bench: {e}", file=sys.stderr)
        return 2
    if args.json:
        b.save_json(rows, args.json)
    if args.plot:
        b.save_plot(rows, args.plot)
    print(b.format_table(rows))
    return 0


def _profile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``gpuaug profile DIR``: where a loader's time goes (disk, decode, augment)."""
    from . import profile

    if args.max_files < 1 or args.batch_size < 1 or args.step_ms < 0:
        parser.error(f"--max-files and --batch-size must be positive, --step-ms not negative; got --max-files "
                     f"{args.max_files}, --batch-size {args.batch_size}, --step-ms {args.step_ms}")
    try:
        report = profile.run(args.dir, args.max_files, args.step_ms, args.device, args.batch_size,
                             progress=not args.no_progress)
    except (FileNotFoundError, ValueError) as e:
        print(f"gpuaug profile: {e}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(profile.format_report(report))
    return 0


def _pack(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``gpuaug pack SRC DST``: each video's frames into one file (:func:`gpuaug.data.pack_folder`)."""
    from .data.clips import pack_folder
    from .data.decode import DecodeError

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            counts = pack_folder(args.src, args.dst, progress=not args.no_progress, on_error=args.on_error,
                                 force=args.force)
    except (FileNotFoundError, ValueError) as e:
        hint = " (--on-error skip packs the others)" if isinstance(e, DecodeError) else ""
        print(f"gpuaug pack: {e}{hint}", file=sys.stderr)
        return 2
    except OSError as e:  # writing DST: not a directory, no space left, no permission
        print(f"gpuaug pack: cannot write under {args.dst} ({e}); the packs written before stay", file=sys.stderr)
        return 2
    for w in caught:  # its own warnings (skipped videos, orphaned packs) as plain lines
        if str(w.message).startswith("gpuaug pack:"):
            print(w.message, file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    print(f"packed {counts.packed} videos into {args.dst}"
          + (f", {counts.up_to_date} already up to date" if counts.up_to_date else "")
          + (f", skipped {counts.skipped}" if counts.skipped else ""))
    return 0


def _unplottable(path: str) -> str | None:
    """Why matplotlib cannot write a chart to ``path`` (its format, from the name's suffix; none
    means PNG), or None."""
    from matplotlib.figure import Figure

    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    formats = Figure().canvas.get_supported_filetypes()
    if suffix and suffix not in formats:
        others = ", ".join("." + f for f in sorted(formats) if f != "png")
        return f"expected a chart file ending in .png (or {others}), got .{suffix}"
    return None


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written, or None."""
    if not path:  # "" would be taken as no output, silently
        return "expected a file path, got an empty one"
    if os.path.isdir(path):
        return "is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"folder {parent!r} does not exist"
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "not writable"
    return None


if __name__ == "__main__":
    sys.exit(main())
