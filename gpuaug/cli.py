"""The ``gpuaug`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuaug", description="Batched per-sample image augmentation on the GPU.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="time torchvision, kornia and gpuaug on the built-in sample photos")
    bench.add_argument("--device", action="append", help="cpu or cuda[:N]; repeat for several (default: cuda if present, and cpu)")
    bench.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256], metavar="B")
    bench.add_argument("--repeats", type=int, default=5, help="timed runs per row; the median is reported")
    bench.add_argument("--quick", action="store_true", help="batch 16, 2 repeats: a smoke test")
    bench.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    bench.add_argument("--plot", metavar="PATH", help="write a PNG bar chart (needs matplotlib)")
    bench.add_argument("--no-progress", action="store_true")
    pack = sub.add_parser("pack", help="pack frame folders SRC/<class>/<video>/*.jpg into DST/<class>/<video>.pack")
    pack.add_argument("src")
    pack.add_argument("dst")
    pack.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "bench":
        from . import bench as b

        if args.repeats < 1 or any(s < 1 for s in args.batch_sizes):
            parser.error("--repeats and --batch-sizes must be positive")
        batch_sizes, repeats = ([16], 2) if args.quick else (args.batch_sizes, args.repeats)
        rows = b.run(args.device, batch_sizes, repeats, progress=not args.no_progress)
        if args.json:
            b.save_json(rows, args.json)
        if args.plot:
            b.save_plot(rows, args.plot)
        print(b.format_table(rows))
    elif args.command == "pack":
        from .data.clips import pack_folder

        try:
            count = pack_folder(args.src, args.dst, progress=not args.no_progress)
        except (FileNotFoundError, ValueError) as e:
            print(f"gpuaug pack: {e}", file=sys.stderr)
            return 2
        print(f"packed {count} videos into {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
