"""The pipeline: validate a batch once, draw every op's params, warp, then color, then normalize."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from . import native
from .device import select_device
from .functional.geometry import axis_taps, crop_boxes, resample_separable, resized_crops, tap_count, warp_affine
from .transforms._base import Draw, Op, Params, Sizes
from .transforms.color import ColorOp, Normalize
from .transforms.geometry import AxisMap, GeometricOp, RandomRotation

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_CPU_CHUNK = 4


class Pipeline(nn.Module):
    """A batched augmentation graph with its own random parameters for every sample.

    ``Pipeline(*ops)(images)`` takes a batch of uint8 (or float in [0, 1]) images and returns float
    images on ``pipeline.device``. Geometry is fused: crop, resize and flip ops become one
    per-sample antialiased sampling pass over the source; a rotation (with any flip after it) is
    one bilinear pass at output resolution, as torchvision rotates the resized image. Color ops
    then run at output resolution in the order given, and ``Normalize`` last.

    On the CPU the same results come by other means (see ``_geometry`` and ``_fused_color``):
    uint8 crops that are plain crop + resize go through torchvision's own uint8 resize kernel
    (rounded to integers, as torchvision's), and the color ops through one fused C kernel
    (:mod:`gpuaug.native`) where a C compiler is present.

    Args:
        *ops: gpuaug ops (``RandomResizedCrop``, ``RandomRotation``, ``ColorJitter``, ...).
        device: where to compute; ``None`` asks :func:`gpuaug.select_device`.
        dtype: compute and output dtype; ``None`` means float16 on CUDA and float32 on CPU. Hue
            and the rotation's sampling always run in float32 (so no half-precision
            ``grid_sample``, which crashes torch 2.14 on one CPU thread), then cast back.
        seed: seed of the pipeline's own generator; ``None`` draws one from torch's global RNG
            (so ``torch.manual_seed`` makes it repeatable too).
        channels_last: return channels-last memory format.

    Shape:
        - input: uint8 or float ``(B, C, H, W)``, C in {1, 3}; a list of ``(C, H, W)`` tensors of
          different sizes; or clips ``(B, T, C, H, W)`` (or a list of ``(T, C, H, W)``), one draw per
          clip shared by its frames.
        - output: ``(B, C, h, w)`` (``(B, T, C, h, w)`` for clips) in ``dtype``: normalized if the
          pipeline ends with ``Normalize``, else in [0, 1].

    ``pipeline(images, return_params=True)`` also returns the drawn params (a list with one dict of
    tensors per op, first dimension B); ``pipeline(images, params=p)`` replays them exactly.
    """

    def __init__(self, *ops: Op, device=None, dtype: torch.dtype | None = None, seed: int | None = None,
                 channels_last: bool = False):
        super().__init__()
        if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
            ops = tuple(ops[0])
        for op in ops:
            if not isinstance(op, Op):
                raise TypeError(f"Pipeline expects gpuaug ops, got {type(op).__name__}: {op!r}")
        if dtype is not None and dtype not in _FLOAT_DTYPES:
            raise TypeError(f"dtype should be one of {[str(d) for d in _FLOAT_DTYPES]}, got {dtype}")
        self._check_order(ops)
        self.ops = nn.ModuleList(ops)
        # The three stages, fixed at construction: crop/resize/flip ops before any rotation are
        # resampled together; the rotation and the flips after it are one warp; then color ops.
        first_rotation = next((i for i, op in enumerate(ops) if isinstance(op, RandomRotation)), len(ops))
        self._resample_ops = [op for op in ops[:first_rotation] if isinstance(op, GeometricOp)]
        self._warp_ops = [op for op in ops[first_rotation:] if isinstance(op, GeometricOp)]
        self._color_ops = [op for op in ops if isinstance(op, ColorOp)]
        self.dtype = dtype
        self.channels_last = bool(channels_last)
        self.seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else int(seed)
        self._generator: torch.Generator | None = None
        self.register_buffer("_anchor", torch.empty(0, device=select_device(device)), persistent=False)

    @staticmethod
    def _check_order(ops: Sequence[Op]) -> None:
        rotated = False
        for i, op in enumerate(ops):
            if isinstance(op, Normalize) and i != len(ops) - 1:
                raise ValueError(f"Normalize must be the last op, but {type(ops[i + 1]).__name__} follows it")
            if isinstance(op, RandomRotation):
                rotated = True
            elif rotated and isinstance(op, GeometricOp) and not hasattr(op, "matrix"):
                raise ValueError(
                    f"{type(op).__name__} after RandomRotation is not supported: gpuaug rotates at output "
                    "resolution, so put crop and resize ops before RandomRotation")

    @property
    def device(self) -> torch.device:
        return self._anchor.device

    def extra_repr(self) -> str:
        return f"device={self.device}, dtype={self.dtype}, seed={self.seed}, channels_last={self.channels_last}"

    def manual_seed(self, seed: int) -> Pipeline:
        """Restart the pipeline's random stream from ``seed``."""
        self.seed, self._generator = int(seed), None
        return self

    def _get_generator(self) -> torch.Generator:
        if self._generator is None or self._generator.device != self.device:
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(self.seed)
        return self._generator

    def compute_dtype(self) -> torch.dtype:
        """The dtype the kernels run in: ``dtype``, else float16 on CUDA and float32 elsewhere."""
        if self.dtype is None:
            return torch.float16 if self.device.type == "cuda" else torch.float32
        return self.dtype

    # ---- the per-batch path: no host sync, no per-sample loop over pixels -----------------------

    def forward(self, images, params: list[Params] | None = None, return_params: bool = False):
        items, sizes, frames, is_clip = self._inspect(images)
        n = len(items) // frames
        if params is None:
            params = self._draw(n, sizes, frames)
        else:
            params = self._check_params(params, n)
        frame_params = [{k: v.repeat_interleave(frames, 0) for k, v in p.items()} if frames > 1 else p for p in params]
        by_op = {id(op): p for op, p in zip(self.ops, frame_params)}
        channels = items[0].shape[0] if isinstance(items, list) else items.shape[1]
        plan = self._plan(sizes, by_op, len(items), channels)

        # On the CPU, working on a few images at a time keeps the intermediates in cache: with one
        # thread, chunks of 4 ran 378 img/s against 50 for one 64-image pass (2026-12-02; chunks of
        # 2 and 8 ran alike, 16 collapsed). The color ops then run as one fused kernel per chunk
        # where it is built (gpuaug.native), else as torch kernels on chunks that hold samples
        # taking the same color passes (ColorOp.group_key), so a chunk skips the passes none of
        # its samples needs. The plan (taps, matrices) is built once for the whole batch.
        # On CUDA: one pass, torch kernels.
        fused = self._fused_color(by_op, len(items), channels)
        if self.device.type == "cuda":
            parts = [slice(0, len(items))]
        else:
            parts = self._cpu_chunks(by_op, len(items), frames, grouped=fused is None)
        out = None
        for part in parts:
            chunk = _take(items, part)
            if not (isinstance(chunk, list) and _crops_in_place(chunk, plan, self.device)):
                chunk = self._stack(chunk, sizes[part])
            x = self._geometry(chunk, plan, part)
            if fused is not None:
                if out is None:
                    out = x.new_empty((len(items), *x.shape[1:]))
                index = torch.arange(*part.indices(len(items))) if isinstance(part, slice) else part
                native.color_program(x, out, index, *fused)
                continue
            for op in self._color_ops:
                x = op.apply(x, {k: _take(v, part) for k, v in by_op[id(op)].items()})
            if len(parts) == 1:  # a slice of everything: the batch's own order
                out = x
                break
            if out is None:
                out = x.new_empty((len(items), *x.shape[1:]))
            if isinstance(part, Tensor):
                out.index_copy_(0, part, x)
            else:
                out[part] = x
        out = self._finish(out, n, frames if is_clip else 0)
        return (out, params) if return_params else out

    def _fused_color(self, by_op: dict, n: int, channels: int) -> tuple | None:
        """On the CPU in float32, the color ops as per-sample programs for the fused kernel:
        ``(ops, factors, mean, inv_std)`` for :func:`gpuaug.native.color_program`; ``None`` where
        an op has no program, the kernel is not built, or the pipeline has no color op."""
        if self.device.type != "cpu" or self.compute_dtype() != torch.float32 or not self._color_ops:
            return None
        normalize = self._color_ops[-1] if isinstance(self._color_ops[-1], Normalize) else None
        programs = [op.program(by_op[id(op)]) for op in self._color_ops if op is not normalize]
        if any(p is None for p in programs) or not native.available():
            return None
        ops = torch.cat([p[0] for p in programs], 1) if programs else torch.zeros(n, 0, dtype=torch.int32)
        factors = torch.cat([p[1] for p in programs], 1) if programs else torch.zeros(n, 0)
        if ops.shape[1] > native.MAX_STEPS:
            return None
        mean = inv_std = None
        if normalize is not None:
            normalize.check_channels(channels)
            mean, inv_std = normalize.mean.float(), (1.0 / normalize.std.double()).float()
        return ops, factors, mean, inv_std

    def _cpu_chunks(self, by_op: dict, n: int, frames: int, grouped: bool = True) -> list[slice | Tensor]:
        """The CPU's chunks of the ``n`` images: runs of ``max(_CPU_CHUNK, frames)`` or fewer, as
        slices in order, or, where ``grouped`` and the color ops' group keys differ, as index
        tensors that keep each chunk within one group (samples that take the same color passes)."""
        step = max(_CPU_CHUNK, frames)
        keys = [k for op in self._color_ops if grouped and (k := op.group_key(by_op[id(op)])) is not None]
        group = torch.unique(torch.stack(keys, 1), dim=0, return_inverse=True)[1] if keys else torch.zeros(n)
        counts = torch.bincount(group.long()).tolist()
        if len(counts) == 1:  # one group: the batch's own order
            return [slice(start, start + step) for start in range(0, n, step)]
        order, chunks, begin = torch.argsort(group, stable=True), [], 0
        for count in counts:
            chunks += [order[i:min(i + step, begin + count)] for i in range(begin, begin + count, step)]
            begin += count
        return chunks

    def _draw(self, n: int, sizes: Sizes, frames: int) -> list[Params]:
        """Every op's params for ``n`` draws (images, or clips), from the pipeline's generator."""
        gen = self._get_generator()
        params = []
        for op in self.ops:
            params.append(op.make_params(Draw(n, self.device, gen, sizes[::frames])))
            if isinstance(op, GeometricOp):
                sizes = op.output_sizes(sizes)
        return params

    def _plan(self, sizes: Sizes, by_op: dict, n: int, channels: int) -> dict:
        """Per-sample sampling taps (crop/resize/flip) and warp matrix (rotation and the flips
        after it) for the whole batch, from the params; ``None`` for a stage with no op."""
        plan = {"rows": None, "cols": None, "boxes": None, "size": None, "warp": None, "fill": None}
        s = sizes
        if self._resample_ops or sizes.uniform is None:
            height, width = sizes.tensors(n, self.device)
            ymap, xmap = AxisMap(height), AxisMap(width)
            zoom_y = zoom_x = 1.0
            for op in self._resample_ops:
                op.map_axes(ymap, xmap, by_op[id(op)], s)
                zy, zx = op.max_scale(s)
                zoom_y, zoom_x = zoom_y * zy, zoom_x * zx
                s = op.output_sizes(s)
            if s.uniform is None:
                raise ValueError(
                    "images of different sizes need a pipeline with a fixed output size (add RandomResizedCrop, "
                    f"CenterCrop or Resize((h, w))); this one gives sizes {sorted(set(s.per_image))[:4]}...")
            aa = all(getattr(op, "antialias", True) for op in self._resample_ops)
            (h, w), (H, W) = s.uniform, sizes.max()
            plan["rows"] = axis_taps(ymap.scale, ymap.offset, ymap.window, ymap.valid, h, H, tap_count(zoom_y, aa), aa)
            plan["cols"] = axis_taps(xmap.scale, xmap.offset, xmap.window, xmap.valid, w, W, tap_count(zoom_x, aa), aa)
            plan["size"] = (h, w)
            if self.device.type == "cpu" and aa:  # plain crops: torchvision's uint8 kernel (see _geometry)
                ys, xs = crop_boxes(ymap.scale, ymap.offset, ymap.window, ymap.valid, h), crop_boxes(
                    xmap.scale, xmap.offset, xmap.window, xmap.valid, w)
                plan["boxes"] = (ys, xs) if ys is not None and xs is not None else None
        if self._warp_ops:
            matrix = None
            for op in self._warp_ops:
                m = op.matrix(by_op[id(op)], s.uniform)
                matrix = m if matrix is None else matrix @ m
            plan["warp"] = matrix
            fill = next(op.fill for op in self._warp_ops if isinstance(op, RandomRotation))
            if len(fill) not in (1, channels):
                raise ValueError(f"RandomRotation fill has {len(fill)} values, images have {channels} channels")
            if any(fill):
                fill_t = torch.tensor(fill * channels if len(fill) == 1 else fill, dtype=torch.float32)
                plan["fill"] = fill_t.to(self.device, non_blocking=True)
        return plan

    def _geometry(self, x: Tensor | list[Tensor], plan: dict, part: slice | Tensor) -> Tensor:
        """Images ``part`` of the batch (one tensor, or on the CPU a list that
        :func:`_crops_in_place` accepts) through the planned resampling and warp -> float, contiguous."""
        dt = self.compute_dtype()
        uint8 = x[0].dtype == torch.uint8 if isinstance(x, list) else x.dtype == torch.uint8
        warp = None if plan["warp"] is None else _take(plan["warp"], part)
        if plan["boxes"] is not None and uint8 and (isinstance(x, list) or x.device.type == "cpu"):
            # CPU, uint8, every sample a plain crop (+ flip) resized: torchvision's own uint8
            # kernel per image, 3-5x faster here than resampling in float. Results are integers,
            # as torchvision's are on uint8 (fixed-point weights: within 1/255 of the float path).
            (top, height, flip_y), (left, width, flip_x) = ([_take(t, part) for t in axis] for axis in plan["boxes"])
            x = resized_crops(x, top.tolist(), left.tolist(), height.tolist(), width.tolist(), plan["size"])
            if warp is not None:  # flips ride on the warp: mirror its source coordinates
                warp = warp.clone()
                warp[:, 0] *= 1 - 2 * flip_x.to(warp.dtype).view(-1, 1)
                warp[:, 1] *= 1 - 2 * flip_y.to(warp.dtype).view(-1, 1)
            else:
                for dim, flags in ((-1, flip_x), (-2, flip_y)):
                    for i in flags.nonzero().flatten().tolist():
                        x[i] = x[i].flip(dim)
            x = x.to(dt).mul_(1 / 255)
        elif plan["rows"] is None:
            x = x.to(dt)
            if uint8:
                x = x.mul_(1 / 255)
        else:
            (ri, rw), (ci, cw) = plan["rows"], plan["cols"]
            # This part's (padded) size: taps past it have zero weight.
            H, W = (max(t.shape[-2] for t in x), max(t.shape[-1] for t in x)) if isinstance(x, list) else x.shape[-2:]
            rows = (_take(ri, part).clamp(max=H - 1), _take(rw, part))
            # uint8 -> [0, 1] rides on the column weights: one pass less over the images.
            cols = (_take(ci, part).clamp(max=W - 1), _take(cw, part) * (1 / 255 if uint8 else 1))
            if isinstance(x, list) or x.device.type == "cpu":
                x, rows, cols = _crop_to_taps(x, rows, cols, dt)
            x = resample_separable(x, rows, cols, dt)
        if warp is not None:
            x = warp_affine(x, warp, plan["fill"])
        return x.contiguous()

    def _finish(self, x: Tensor, n: int, frames: int) -> Tensor:
        """Cast to the output dtype, restore clips' ``(B, T, ...)`` (``frames`` > 0), lay out memory."""
        x = x.to(self.dtype or x.dtype)
        if frames:
            x = x.reshape(n, frames, *x.shape[1:])
        if self.channels_last:
            c_dim = x.dim() - 3
            perm = [d for d in range(x.dim()) if d != c_dim] + [c_dim]
            inv = [perm.index(d) for d in range(x.dim())]
            return x.permute(perm).contiguous().permute(inv)
        return x.contiguous()

    # ---- input and params checks ---------------------------------------------------------------

    def _inspect(self, images) -> tuple[list[Tensor] | Tensor, Sizes, int, bool]:
        """Validate the input without touching its data: -> the images as a list of ``(C, H, W)``
        or an ``(N, C, H, W)`` tensor (clips flattened), their sizes, frames per clip, is-clip."""
        if isinstance(images, (list, tuple)):
            if len(images) == 0:
                raise ValueError("expected a non-empty batch of images, got an empty list")
            if all(isinstance(t, Tensor) and t.dim() == 4 for t in images):  # clips of different sizes
                if len({t.shape[0] for t in images}) != 1 or images[0].shape[0] == 0:
                    raise ValueError(f"clips in a list need one (non-zero) frame count, got {[t.shape[0] for t in images]}")
                frames = [f for clip in images for f in clip.unbind(0)]
                items, sizes, _, _ = self._inspect(frames)
                return items, sizes, images[0].shape[0], True
            for i, t in enumerate(images):
                if not isinstance(t, Tensor):
                    raise TypeError(f"expected a list of (C, H, W) tensors, item {i} is {type(t).__name__}")
                if t.dim() != 3:
                    raise ValueError(f"expected a list of (C, H, W) tensors, item {i} has shape {tuple(t.shape)}")
                if t.dtype != images[0].dtype or t.shape[0] != images[0].shape[0]:
                    raise ValueError(
                        f"all images in a list need one dtype and channel count: item 0 is {images[0].dtype} "
                        f"{tuple(images[0].shape)}, item {i} is {t.dtype} {tuple(t.shape)}")
                _check_image_tensor(t[None], "images")
            return list(images), Sizes(per_image=[tuple(t.shape[-2:]) for t in images]), 1, False
        if not isinstance(images, Tensor):
            raise TypeError(f"expected a uint8/float tensor or a list of tensors, got {type(images).__name__}")
        if images.dim() == 5:
            if images.shape[1] == 0:
                raise ValueError(f"expected clips with at least one frame, got shape {tuple(images.shape)}")
            _check_image_tensor(images.flatten(0, 1), "clips")
            return images.flatten(0, 1), Sizes(uniform=tuple(images.shape[-2:])), images.shape[1], True
        if images.dim() != 4:
            raise ValueError(
                f"expected images of shape (B, C, H, W), clips (B, T, C, H, W) or a list of (C, H, W) tensors, "
                f"got a tensor of shape {tuple(images.shape)}")
        _check_image_tensor(images, "images")
        return images, Sizes(uniform=tuple(images.shape[-2:])), 1, False

    def _stack(self, items: list[Tensor] | Tensor, sizes: Sizes) -> Tensor:
        """Move to the device (non-blocking) as one ``(N, C, H, W)`` batch, ragged images padded."""
        dev = self.device
        if isinstance(items, Tensor):
            return items.to(dev, non_blocking=True)
        moved = [t.to(dev, non_blocking=True) for t in items]
        if sizes.uniform is not None:
            return torch.stack(moved)
        H, W = sizes.max()
        x = moved[0].new_zeros(len(moved), moved[0].shape[0], H, W)
        for i, t in enumerate(moved):
            x[i, :, : t.shape[1], : t.shape[2]] = t
        return x

    def _check_params(self, params, n: int) -> list[Params]:
        if not isinstance(params, (list, tuple)) or len(params) != len(self.ops):
            raise ValueError(f"params should be a list with one dict per op ({len(self.ops)}), as returned by "
                             f"return_params=True, got {type(params).__name__}")
        out = []
        for op, p in zip(self.ops, params):
            if not isinstance(p, dict):
                raise TypeError(f"params for {type(op).__name__} should be a dict, got {type(p).__name__}")
            for k, v in p.items():
                if not isinstance(v, Tensor) or v.shape[0] != n:
                    raise ValueError(f"params[{type(op).__name__}][{k!r}] should be a tensor with first dimension "
                                     f"{n} (one per sample), got {getattr(v, 'shape', type(v).__name__)}")
            out.append({k: v.to(self.device, non_blocking=True) for k, v in p.items()})
        return out


def _crops_in_place(chunk: list[Tensor], plan: dict, device: torch.device) -> bool:
    """True where the CPU's resampling (:func:`_crop_to_taps`, or :func:`resized_crops` for plain
    crops) can read a ragged chunk as it is, unpadded: on the CPU, with a resampling stage, every
    image already there."""
    return device.type == "cpu" and plan["rows"] is not None and all(t.device.type == "cpu" for t in chunk)


def _crop_to_taps(x: Tensor | list[Tensor], rows: tuple[Tensor, Tensor], cols: tuple[Tensor, Tensor],
                  dtype: torch.dtype):
    """CPU only: copy (and convert to ``dtype``) just the part of each image its taps read, into
    one ``(B, C, h', w')`` tensor (the largest such part in the batch), and shift the taps to it.
    A crop reads ~half of the image on average, and every later pass of the resampling scales
    with its width. ``x`` is a ``(B, C, H, W)`` tensor or a list of ``(C, H_i, W_i)`` images (read
    unpadded; where the part is larger than an image, the rest is zero, as padding would be).
    Reads the taps' values, which syncs with nothing on the CPU."""
    (ri, rw), (ci, cw) = rows, cols
    heights = torch.tensor([t.shape[-2] for t in x] if isinstance(x, list) else [x.shape[-2]] * len(x))
    widths = torch.tensor([t.shape[-1] for t in x] if isinstance(x, list) else [x.shape[-1]] * len(x))
    # Taps past an image's own edge have zero weight: pointing them at its last pixel keeps every
    # tap inside the part copied.
    ri, ci = torch.minimum(ri, (heights - 1).view(-1, 1, 1)), torch.minimum(ci, (widths - 1).view(-1, 1, 1))
    r0, r1 = ri.amin((1, 2)), ri.amax((1, 2)) + 1
    c0, c1 = ci.amin((1, 2)), ci.amax((1, 2)) + 1
    h, w = int((r1 - r0).max()), int((c1 - c0).max())
    r0, c0 = torch.minimum(r0, (heights - h).clamp(min=0)), torch.minimum(c0, (widths - w).clamp(min=0))
    out = torch.empty(len(x), x[0].shape[0], h, w, dtype=dtype)
    for b, (top, left) in enumerate(zip(r0.tolist(), c0.tolist())):
        part = x[b][:, top:top + h, left:left + w]
        ph, pw = part.shape[-2:]
        out[b, :, :ph, :pw].copy_(part)
        if ph < h or pw < w:
            out[b, :, ph:].zero_()
            out[b, :, :ph, pw:].zero_()
    return out, (ri - r0.view(-1, 1, 1), rw), (ci - c0.view(-1, 1, 1), cw)


def _take(items: list | Tensor, part: slice | Tensor) -> list | Tensor:
    """``items[part]`` for a slice or an index tensor; ``index_select`` (a plain copy) rather than
    advanced indexing, which is several times slower on the CPU."""
    if isinstance(part, slice):
        return items[part]
    if isinstance(items, list):
        return [items[i] for i in part.tolist()]
    return items.index_select(0, part.to(items.device))


def _check_image_tensor(x: Tensor, what: str) -> None:
    if x.dtype != torch.uint8 and not x.is_floating_point():
        raise TypeError(f"expected uint8 or float {what}, got {x.dtype}")
    if x.shape[0] == 0:
        raise ValueError(f"expected a non-empty batch of {what}, got shape {tuple(x.shape)}")
    if x.shape[1] not in (1, 3):
        raise ValueError(f"expected {what} with 1 or 3 channels in dim -3, got {x.shape[1]} (shape {tuple(x.shape)})")
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError(f"expected {what} with non-zero height and width, got shape {tuple(x.shape)}")
