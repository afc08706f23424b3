"""Optional fused CPU kernels, compiled from C on first use and called through ``ctypes``.

On the CPU, torch runs each elementwise op as its own pass over memory: a ColorJitter with hue
takes about forty of them per image. ``color.c`` runs every color op of a pipeline, per sample, in
one pass (one more per contrast step). ``layout.c`` turns a planar uint8 crop into the
channels-last layout torchvision's fast uint8 resize reads, ~30x faster than torch's copy. They
are plain C99 with no header beyond libm, so the system C compiler builds them in about a second,
once per machine: the library is cached under ``$GPUAUG_CACHE_DIR`` (default ``~/.cache/gpuaug``),
keyed by the sources, the compiler and the CPU.

Where no compiler works (or ``GPUAUG_NATIVE=0``), :func:`available` is False after one warning,
and the pipeline uses its torch kernels, which give the same results (both are tested against
torchvision). CUDA never uses this module.

(A fused bilinear warp was tried too, 2026-12-02: gather-bound, it ran no faster than
``grid_sample`` plus the fill mask, 1.56-1.62 against 1.52-1.65 ms per 4 images, so it was dropped.)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from ..user_warnings import warn

OP_NONE, OP_BRIGHTNESS, OP_CONTRAST, OP_SATURATION, OP_HUE = range(5)
MAX_STEPS = 64  # color.c's limit on steps per sample

_SOURCES = [Path(__file__).with_name(name) for name in ("color.c", "layout.c")]
# No -ffast-math: results stay IEEE. Without trapping math and errno, gcc vectorizes the
# branch-free selects and floorf of the hue step (5x faster on AVX2/AVX-512).
_FLAGS = ["-O3", "-std=c99", "-shared", "-fPIC", "-fno-trapping-math", "-fno-math-errno"]
_NATIVE_FLAGS = ["-march=native"]  # the library is built on, and cached for, this machine's CPU
_state: dict = {}


def available() -> bool:
    """Whether the fused CPU kernels can run here: built (or cached) and not disabled by
    ``GPUAUG_NATIVE=0``. The first call builds them; a failure warns once."""
    return _library() is not None


def _library():
    if os.environ.get("GPUAUG_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if "lib" not in _state:
        _state["lib"] = _load()
    return _state["lib"]


def _load():
    try:
        lib = ctypes.CDLL(str(_build()))
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        warn(f"gpuaug: could not build the fused CPU kernels ({exc}); using torch kernels, "
             "which are slower on the CPU. Set GPUAUG_NATIVE=0 to silence this.")
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.gpuaug_color.argtypes = [ptr, i64, i64, i64, ptr, ptr, ptr, ptr, i64, ptr, ptr]
    lib.gpuaug_color.restype = ctypes.c_int
    lib.gpuaug_planar_to_hwc3.argtypes = [ptr, i64, i64, i64, i64, ptr]
    lib.gpuaug_planar_to_hwc3.restype = None
    return lib


def _cpu_name() -> str:
    """The CPU's model and feature flags: -march=native code from one CPU may not run on another
    (a cache on a shared home directory), and VMs often report a generic model name."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    keys = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(dict.fromkeys(line for line in lines if line.startswith(keys)))


def _build() -> Path:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC)")
    command = shlex.split(compiler)  # CC may carry flags, as in make ("gcc -m64")
    sources = [p.read_bytes() for p in _SOURCES]
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=30).stdout
    parts: list[str | bytes] = [*sources, compiler, version, _cpu_name(), platform.machine(), *_FLAGS]
    key = hashlib.sha256(b"\0".join(s.encode() if isinstance(s, str) else s for s in parts)).hexdigest()[:16]
    cache = Path(os.environ.get("GPUAUG_CACHE_DIR") or Path.home() / ".cache" / "gpuaug")
    target = cache / f"kernels-{key}.so"
    if target.exists():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache = Path(tempfile.gettempdir())
        target = cache / target.name
    # Build under a unique name and rename: processes of one job may build at the same time.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
    os.close(fd)
    try:
        errors = ""
        for extra in (_NATIVE_FLAGS, []):  # -march=native is not known to every compiler
            done = subprocess.run([*command, *_FLAGS, *extra, *map(str, _SOURCES), "-o", tmp, "-lm"],
                                  capture_output=True, text=True, timeout=120)
            if done.returncode == 0:
                os.replace(tmp, target)
                return target
            errors = done.stderr.strip()[-500:]
        raise RuntimeError(f"{compiler} failed: {errors}")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def color_program(x: Tensor, out: Tensor, index: Tensor, ops: Tensor, factors: Tensor,
                  mean: Tensor | None = None, inv_std: Tensor | None = None) -> None:
    """Run per-sample color programs over ``x`` and write the results into rows of ``out``.

    Args:
        x: ``(n, C, h, w)`` float32 CPU images in [0, 1], C in {1, 3}.
        out: ``(N, C, h, w)`` float32 CPU, contiguous; image ``i`` is written to ``out[index[i]]``.
        index: ``(n,)`` int64, rows of ``out`` and of the programs, each in ``[0, N)``.
        ops: ``(N, S)`` int32 op codes (``OP_*``), run left to right; ``factors``: ``(N, S)`` float32.
        mean, inv_std: ``(C,)`` float32 for a final ``(x - mean) * inv_std``, or ``None``.

    Raises:
        RuntimeError: where the kernels are not available (see :func:`available`).
        ValueError, TypeError: on arguments it does not take.
    """
    lib = _require()
    n, C, h, w = x.shape
    N, S = ops.shape
    for name, t, dtype in (("x", x, torch.float32), ("out", out, torch.float32), ("index", index, torch.int64),
                           ("ops", ops, torch.int32), ("factors", factors, torch.float32)):
        if t.dtype != dtype or t.device.type != "cpu":
            raise TypeError(f"{name} should be a {dtype} CPU tensor, got {t.dtype} on {t.device}")
    if C not in (1, 3) or out.shape != (N, C, h, w) or factors.shape != (N, S) or index.shape != (n,):
        raise ValueError(f"shapes do not match: x {tuple(x.shape)}, out {tuple(out.shape)}, index {tuple(index.shape)}, "
                         f"ops {tuple(ops.shape)}, factors {tuple(factors.shape)}")
    if S > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} color steps per sample, got {S}")
    if n and (int(index.min()) < 0 or int(index.max()) >= N):
        raise ValueError(f"index should be in [0, {N}), got values from {int(index.min())} to {int(index.max())}")
    if not out.is_contiguous():
        raise ValueError("out should be contiguous")
    stats = normalize_stats(mean, inv_std, C, x.device)
    x, index, ops, factors = x.contiguous(), index.contiguous(), ops.contiguous(), factors.contiguous()
    mean_at, inv_std_at = (stats[0].data_ptr(), stats[1].data_ptr()) if stats else (None, None)
    rc = lib.gpuaug_color(x.data_ptr(), n, C, h * w, out.data_ptr(), index.data_ptr(), ops.data_ptr(), factors.data_ptr(),
                          S, mean_at, inv_std_at)
    if rc != 0:
        raise ValueError(f"the color kernel refused its arguments (code {rc})")


def normalize_stats(mean: Tensor | None, inv_std: Tensor | None, channels: int,
                    device: torch.device) -> tuple[Tensor, Tensor] | None:
    """The final normalize's ``mean`` and ``inv_std`` as contiguous ``(channels,)`` float32
    tensors on ``device``, or None where both are None (no normalize). Shared by both color kernels.

    Raises:
        ValueError: where one is None and the other not, or either holds other than ``channels`` values.
    """
    if mean is None and inv_std is None:
        return None
    if mean is None or inv_std is None or mean.numel() != channels or inv_std.numel() != channels:
        raise ValueError(f"mean and inv_std should both be None or both hold {channels} values, got "
                         f"{None if mean is None else tuple(mean.shape)} and {None if inv_std is None else tuple(inv_std.shape)}")
    return (mean.to(device, torch.float32).reshape(channels).contiguous(),
            inv_std.to(device, torch.float32).reshape(channels).contiguous())


def channels_last(image: Tensor) -> Tensor:
    """A ``(C, H, W)`` uint8 CPU image as a new ``(1, C, H, W)`` channels-last tensor. Planar RGB
    input (contiguous rows, as a crop of a stacked batch) goes through ``layout.c`` where the
    kernels are available; anything else through torch's copy, which is fast for it (an image that
    is channels-last in memory already, as decoded images are, copies row blocks)."""
    if image.dtype != torch.uint8 or image.device.type != "cpu" or image.dim() != 3:
        raise TypeError(f"expected a (C, H, W) uint8 CPU image, got {image.dtype} {tuple(image.shape)} on {image.device}")
    C, H, W = image.shape
    lib = _library()
    if lib is None or C != 3 or H == 0 or W == 0 or image.stride(2) != 1:  # (torch has no negative strides)
        return image[None].contiguous(memory_format=torch.channels_last)
    out = torch.empty((1, C, H, W), dtype=torch.uint8, device="cpu", memory_format=torch.channels_last)
    lib.gpuaug_planar_to_hwc3(image.data_ptr(), H, W, image.stride(0), image.stride(1), out.data_ptr())
    return out


def _require():
    lib = _library()
    if lib is None:
        raise RuntimeError("gpuaug's fused CPU kernels are not available (GPUAUG_NATIVE=0, or no C compiler)")
    return lib
