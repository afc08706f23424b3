"""The end-to-end loader benchmark: `python benchmarks/loader_bench.py [gpuaug bench options]`.

Same as `gpuaug bench --loader`: DataLoader workers doing decode + torchvision CPU transforms versus
decode-only workers + gpuaug through DeviceLoader, on a generated folder of mixed-size JPEGs.
"""

import sys

from gpuaug.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--loader", *sys.argv[1:]]))
