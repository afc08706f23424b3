"""What every op shares: the base class, the per-call draw context and the argument checks."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np
import torch
from torch import Tensor, nn

Params = dict[str, Tensor]


# Small host constants already copied to a device: (device, dtype, values) -> tensor. Never
# dropped (a recorded CUDA graph reads them where they are): past the bound, new values are
# copied each time instead of kept.
_CONSTANTS: dict = {}
_CONSTANT_ROWS, _CONSTANTS_KEPT = 4, 4096


def to_device(values, device, dtype: str = "float32") -> Tensor:
    """Host values (numbers, nested lists or tuples, a numpy array) as a ``dtype`` tensor on
    ``device`` by one non-blocking copy: a blocking host-to-device copy would be a stream sync on
    CUDA. (Through numpy: 2-3x faster than ``torch.tensor`` on a list, ~80 against ~140 us for 256
    rows of 4.)

    A tuple or list of up to 4 numbers or tuples of numbers (an image size, a fill, the fallback
    crop of a batch of one size, an op's ranges) is copied once: the same tensor comes back for the
    same values afterwards, found without numpy. A batch of one size made five such copies a call,
    each a host-to-device transfer on CUDA. Callers must not change the result in place."""
    key = None
    if isinstance(values, (tuple, list)) and len(values) <= _CONSTANT_ROWS and not torch.compiler.is_compiling():
        key = (device, dtype, tuple(values))
        try:
            kept = _CONSTANTS.get(key)
        except TypeError:  # unhashable items (lists): not kept
            key = kept = None
        if kept is not None:
            return kept
        if isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda" \
                and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            # A CUDA graph would replay a copy from host memory freed by then (gpuaug.cuda_graph).
            raise RuntimeError(f"host values {values} not yet on {device} while a CUDA graph is recorded")
    out = torch.from_numpy(np.array(values, dtype=dtype)).to(device, non_blocking=True)
    if key is not None and type(out) is Tensor and out.device.type != "meta" and len(_CONSTANTS) < _CONSTANTS_KEPT:
        _CONSTANTS[key] = out  # (not a stand-in holding no values: fake, meta)
    return out


def move(t, device, dtype: torch.dtype | None = None):
    """``t`` (a tensor, or a :class:`gpuaug.PackedImages` without ``dtype``) on ``device``, copied
    non-blocking unless it lands on the CPU: a non-blocking copy from a GPU to the host returns
    before the data is there, and the CPU kernels that read it next do not wait for it (torch
    documents this), so a copy to the host blocks."""
    non_blocking = torch.device(device).type != "cpu"
    if dtype is None:
        return t.to(device, non_blocking=non_blocking)
    return t.to(device, dtype, non_blocking=non_blocking)


def int_table(rows: list, width: int) -> np.ndarray:
    """``(n, width)`` int64 array of ``n`` rows of ``width`` ints (tuples, torch.Size): per call,
    a ragged batch's sizes. ``np.array`` of 256 such rows took 33 us (tuples) to 75 us (torch.Size),
    this 17 us (CPU)."""
    return np.fromiter(itertools.chain.from_iterable(rows), np.int64, len(rows) * width).reshape(-1, width)


# One-size rows of Sizes.rows: (rule, settings, (h, w)) -> tuple. A plain dict, not
# functools.lru_cache: under torch.compile dynamo reads a kept row from it as a constant (a row
# not yet kept is one graph break: _one_row), where through an lru_cache wrapper it traced into
# numpy and broke the graph. Rows added later recompile nothing (checked, torch 2.14.1).
_ONE_ROWS: dict = {}
_ONE_ROWS_KEPT = 1024


@torch.compiler.disable
def _one_row(rule, settings: tuple, hw: tuple[int, int]) -> tuple:
    """``rule`` of one size (:meth:`Sizes.rows`) as a tuple of ints, kept (an error it raises is not)."""
    key = (rule, settings, hw)
    row = tuple(rule(np.array([hw], np.int64), *settings)[0].tolist())
    if len(_ONE_ROWS) < _ONE_ROWS_KEPT:
        _ONE_ROWS[key] = row
    return row


class Sizes:
    """Host-side ``(height, width)`` of each image at some point of the pipeline.

    ``per_image`` is a list with one ``(h, w)`` per draw, or ``None`` when every image has the
    same ``uniform`` size (exactly one of the two is None). Sizes are tensor metadata, so computing
    them never syncs with the device.
    """

    def __init__(self, uniform: Sequence[int] | None = None, per_image: list[tuple[int, int]] | None = None):
        if per_image is not None and len(set(per_image)) == 1:
            uniform, per_image = per_image[0], None
        # a tuple: a hashable key (a torch.Size or list would not be)
        self.uniform: tuple[int, int] | None = None if uniform is None else (uniform[0], uniform[1])
        self.per_image = per_image
        self._array: np.ndarray | None = None
        self._pairs: Tensor | None = None
        self._rows: dict[tuple, np.ndarray] = {}  # (rule, settings) -> rows(rule, *settings)
        self._maps: dict = {}  # (rule, settings) -> map(rule, *settings)

    def array(self) -> np.ndarray:
        """``(n, 2)`` int64 ``[height, width]`` rows of ``per_image`` (``(1, 2)`` where uniform),
        made once: ragged batches ask for them several times a call."""
        if self._array is None:
            self._array = int_table([self.uniform] if self.per_image is None else self.per_image, 2)
        return self._array

    def __getitem__(self, part: slice | Tensor) -> Sizes:
        """The sizes of a slice of the images, or of the images at the indices of a CPU tensor."""
        if self.per_image is None:
            return self
        if isinstance(part, Tensor):
            return Sizes(per_image=[self.per_image[i] for i in part.tolist()])
        return Sizes(per_image=self.per_image[part])

    @classmethod
    def of_rows(cls, rows: np.ndarray) -> Sizes:
        """The sizes in ``rows``, ``(n, 2)`` int64 ``[height, width]`` (kept as :meth:`array`)."""
        sizes = cls(per_image=list(map(tuple, rows.tolist())))
        if sizes.per_image is not None:
            sizes._array = rows
        return sizes

    def rows(self, rule, *settings) -> list[tuple] | np.ndarray:
        """``rule(hw, *settings)`` of each image, where ``rule``, a pure function of its arguments
        (an op's output size, its crop's start, ...), maps ``(n, 2)`` int64 ``[height, width]``
        rows to ``(n, k)`` int64 rows, and ``settings`` are the op's, hashable.

        A ragged batch: the ``(n, k)`` array, one numpy pass over its sizes (a photo batch has
        about as many sizes as images: ~0.4 ms for 256 sizes a row at a time in Python), kept on
        this object (asked for several times a call). One size: ``[row]``, a tuple, kept for the
        process per (rule, settings, size): a numpy pass over one row costs ~18 us a call."""
        if self.uniform is not None:
            hw = self.uniform
            row = _ONE_ROWS.get((rule, settings, hw))
            return [_one_row(rule, settings, hw) if row is None else row]
        key = (rule, settings)
        if key not in self._rows:
            self._rows[key] = rule(self.array(), *settings)
        return self._rows[key]

    def map(self, rule, *settings) -> Sizes:
        """The sizes ``rule`` (:meth:`rows`, ``k = 2``) gives; the same Sizes each time."""
        key = (rule, settings)
        if key not in self._maps:
            out = self.rows(rule, *settings)
            self._maps[key] = Sizes(uniform=out[0]) if isinstance(out, list) else Sizes.of_rows(out)
        return self._maps[key]

    def max(self) -> tuple[int, int]:
        if self.uniform is not None:
            return self.uniform
        h, w = self.array().max(0).tolist()
        return h, w

    def pairs(self, n: int, device) -> Tensor:
        """``(n, 2)`` float32 ``[height, width]`` rows on ``device``: one non-blocking copy, made
        once (an expanded view of one row where the sizes are uniform). Not to be changed in place."""
        if self.uniform is not None:
            return to_device(self.uniform, device).expand(n, 2)
        if self._pairs is None or self._pairs.device != torch.device(device):  # asked for several times a call
            self._pairs = to_device(self.array(), device)
        return self._pairs


@dataclass
class Draw:
    """What an op's ``make_params`` may use: ``n`` draws (images, or clips), on ``device``, from
    ``generator``; ``sizes`` are the op's input sizes."""

    n: int
    device: torch.device
    generator: torch.Generator | None  # None on the meta device: shapes only
    sizes: Sizes

    def uniform(self, low: float, high: float, *shape: int) -> Tensor:
        """``(n, *shape)`` float32 uniform in ``[low, high)``."""
        out = torch.empty((self.n, *shape), dtype=torch.float32, device=self.device)
        return out.uniform_(low, high, generator=self.generator)

    def rand(self, *shape: int) -> Tensor:
        """``(n, *shape)`` float32 uniform in ``[0, 1)``: one kernel for all of an op's draws."""
        return torch.rand((self.n, *shape), generator=self.generator, dtype=torch.float32, device=self.device)

    def integers(self, high: Tensor, u: Tensor | None = None) -> Tensor:
        """Integers (float32) uniform in ``[0, high]``, one per element of ``high`` (``(n, k)``, holding
        integers): a crop's place in the room it has. ``u``: uniforms in [0, 1) of that shape, else
        drawn here."""
        u = self.rand(*high.shape[1:]) if u is None else u
        return torch.minimum(torch.floor(torch.addcmul(u, u, high)), high)  # floor(u * (high + 1)), at most high

    def bernoulli(self, p: float) -> Tensor:
        """``(n,)`` bool, each True with probability ``p``."""
        return self.rand() < p


class Op(nn.Module):
    """Base of every op: ``make_params`` draws ``(n,)`` tensors, the pipeline applies them.

    Ops are not called on their own: put them in :class:`gpuaug.Pipeline`, which fuses the
    geometry of all ops into one sampling pass.
    """

    # Whether the params are pixel positions in the op's input (crop boxes): drawn for images of
    # one size, they mean nothing for images of another (the pipeline refuses such a replay).
    PIXEL_PARAMS = False

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_") and name != "training":  # a setting (not a cache, not train()/eval(),
            # which change nothing here): count it, as a recorded CUDA graph bakes settings in
            self.__dict__["settings_changed"] = self.__dict__.get("settings_changed", 0) + 1

    def settings(self) -> tuple:
        """What a recorded call (:mod:`gpuaug.cuda_graph`) bakes in of this op, as comparable host
        values: how often its settings were set, and its buffers' identities and versions (an
        in-place edit, as ``load_state_dict`` makes, bumps a version)."""
        return self.__dict__.get("settings_changed", 0), *((id(b), b._version) for b in self._buffers.values() if b is not None)

    def make_params(self, draw: Draw) -> Params:
        return {}

    def check_params(self, params: dict[str, np.ndarray], sizes: Sizes) -> None:
        """Replayed ``params`` (on the host: numpy, one row per draw) checked against what this op
        could apply to images of ``sizes`` (its input): ValueError (:func:`refuse_params`) for the
        first sample that breaks a rule. Drawn params always pass; by default there is no rule."""

    def forward(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is applied by gpuaug.Pipeline; use gpuaug.Pipeline({self!r})(images)")


# ---- argument checks, with torchvision's messages for the same mistakes -------------------------


def check_probability(p) -> float:
    if not isinstance(p, numbers.Real):
        raise TypeError(f"`p` should be a floating point value in the interval [0.0, 1.0], got {type(p).__name__}")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
    return float(p)


def check_antialias(antialias) -> bool:
    """A bool; None means False, as torchvision's resize of a tensor reads it."""
    if antialias is not None and not isinstance(antialias, bool):
        raise TypeError(f"antialias should be a bool (or None, meaning False), got {antialias!r}")
    return bool(antialias)


_PIL_CODES = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL.Image.NEAREST, BILINEAR, BICUBIC


def check_interpolation(interpolation, op: str, modes: tuple[str, ...] = ("bilinear",)) -> str:
    """torchvision's ``interpolation`` argument (an ``InterpolationMode``, its value, or PIL's int
    code for it) -> the mode's name, one of ``modes`` (resize ops take bicubic too, RandomRotation nearest); ValueError for
    any other."""
    from torchvision.transforms import InterpolationMode

    given = interpolation
    if isinstance(interpolation, int) and not isinstance(interpolation, bool):  # PIL's codes, as torchvision takes them
        interpolation = _PIL_CODES.get(interpolation, interpolation)
    for mode in modes:
        if interpolation == InterpolationMode(mode) or interpolation == mode:
            return mode
    names = " or ".join(f"InterpolationMode.{m.upper()}" for m in modes)
    raise ValueError(f"{op} takes interpolation={names}, got interpolation={given!r}")


def check_resize_filter(interpolation, antialias, op: str) -> tuple[str, bool]:
    """A resize op's ``interpolation`` (BILINEAR or BICUBIC) and ``antialias`` -> both checked.
    Bicubic needs ``antialias=True``: without it torch's bicubic is another filter (``a = -0.75``,
    edge pixels repeated) that gpuaug does not compute."""
    mode, antialias = check_interpolation(interpolation, op, ("bilinear", "bicubic")), check_antialias(antialias)
    if mode == "bicubic" and not antialias:
        raise ValueError(f"{op}(interpolation=BICUBIC) needs antialias=True (torchvision's default): the "
                         f"non-antialiased bicubic filter is not supported")
    return mode, antialias


# Sequences to Python (``b"ab"`` is ``(97, 98)``), but never a size, a range, a fill or a mean.
TEXT_TYPES = (str, bytes, bytearray)


def is_sequence(value) -> TypeGuard[Sequence]:
    """A sequence of values, not text (:data:`TEXT_TYPES`)."""
    return isinstance(value, Sequence) and not isinstance(value, TEXT_TYPES)


def check_range(values, name: str) -> tuple[float, float]:
    """Two finite numbers ``(min, max)`` with ``min <= max`` (torchvision would fail only when
    drawing from them, with a RuntimeError, or silently draw inf/nan)."""
    if not is_sequence(values) or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{name} should be numbers (min, max), got {values!r}")
    lo, hi = float(values[0]), float(values[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"{name} should be finite numbers (min, max) with min <= max, got {tuple(values)}")
    return lo, hi


def setup_size(size, error_msg: str = "Please provide only two dimensions (h, w) for size.") -> tuple[int, int]:
    """An int ``s`` -> ``(s, s)``; a sequence of one or two positive ints -> ``(h, w)``."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (int(size),) * 2  # numpy's too
    elif isinstance(size, numbers.Real) and not isinstance(size, bool):
        if not math.isfinite(size):  # int() would raise OverflowError or ValueError of its own
            raise ValueError(f"size should be a positive integer, got {size}")
        size = (int(float(size)),) * 2  # torchvision's int(): truncates
    elif is_sequence(size) and len(size) == 1:
        size = (size[0], size[0])
    elif not is_sequence(size):
        raise TypeError(f"size should be an int or a sequence of ints, got {type(size).__name__}")
    if len(size) != 2:
        raise ValueError(error_msg)
    if any(not isinstance(s, numbers.Integral) or isinstance(s, bool) or s <= 0 for s in size):
        raise ValueError(f"size should contain positive integers, got {tuple(size)}")
    return int(size[0]), int(size[1])


def setup_range(value, name: str, center: float = 1.0, bound=(0, float("inf")), clip_first_on_zero=True):
    """torchvision's ColorJitter ``_check_input``: a number ``v`` -> ``(center - v, center + v)``;
    returns ``None`` when the range is the identity."""
    if value is None:
        return None
    if isinstance(value, numbers.Real):
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be non negative.")
        value = [center - value, center + value]
        if clip_first_on_zero:
            value[0] = max(value[0], 0.0)
    elif is_sequence(value) and len(value) == 2:
        try:  # torchvision's float(): "0.5" is taken too
            value = [float(v) for v in value]
        except (TypeError, ValueError):
            raise TypeError(f"{name}={value!r} should be a single number or a sequence of two numbers.") from None
    else:
        raise TypeError(f"{name}={value!r} should be a single number or a sequence with length 2.")
    if not bound[0] <= value[0] <= value[1] <= bound[1]:
        raise ValueError(f"{name} values should be between {bound}, but got {value}.")
    if not math.isfinite(value[1]):  # torchvision takes it, then draws inf factors
        raise ValueError(f"{name} values should be finite, but got {value}.")
    return None if value[0] == value[1] == center else (float(value[0]), float(value[1]))


def refuse_params(op: Op, ok: np.ndarray, params: dict[str, np.ndarray], rule: str, sizes: Sizes | None = None) -> None:
    """ValueError naming the first sample of replayed ``params`` where ``ok`` (``(n,)`` bool) is
    False, its values, ``rule`` and (``sizes``) its image's size; nothing where all are True."""
    bad = np.flatnonzero(~np.broadcast_to(ok, (len(next(iter(params.values()))),)))
    if bad.size == 0:
        return
    i = int(bad[0])
    got = ", ".join(f"{k}={v[i].tolist()}" for k, v in params.items())
    size = "" if sizes is None else " (its image is {}x{})".format(*sizes.array()[min(i, len(sizes.array()) - 1)])
    raise ValueError(f"replayed params for {type(op).__name__}, sample {i}: {got}; {rule}{size} (params drawn "
                     f"for images of other sizes, or edited?)")
