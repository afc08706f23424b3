"""The pipeline: validate a batch once, draw every op's params, warp, then color, then normalize."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor

from . import cpu, native
from .cuda_graph import GraphedCalls
from .device import select_device
from .inputs import check_finite_output, check_float_range, checked_dtype, checked_seed, inspect_images
from .packed import PackedImages
from .functional.geometry import (axis_taps, crop_boxes, crop_or_pad, resample_separable, resized_crops, single_taps,
                                 tap_count, warp_affine)
from .transforms._base import Draw, Op, Params, Sizes, move, to_device
from .transforms.color import ColorOp, Normalize, color_programs
from .transforms.geometry import (AxisMap, CenterCrop, GeometricOp, RandomCrop, RandomHorizontalFlip, RandomResizedCrop,
                                 RandomRotation, RandomVerticalFlip, Resize)


_T = TypeVar("_T")
Fill = tuple[float, ...]  # an op's fill: one value, or one per channel (``Pipeline.float`` hides ``float`` in the class)

if TYPE_CHECKING:
    class _OpList(nn.ModuleList):
        """What ``Pipeline.ops`` holds, for type checkers: an ``nn.ModuleList`` of gpuaug ops."""

        def __getitem__(self, index: int) -> Op: ...  # type: ignore[override]

        def __iter__(self) -> Iterator[Op]: ...


def _seed_from_state(state: Tensor, device: torch.device) -> int:
    """A 63-bit seed for a generator on ``device`` from another generator's state (a uint8 tensor on
    the host), the same in every process; generators on different devices get different seeds."""
    digest = hashlib.blake2b(state.numpy().tobytes() + str(device).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _drawn_seed() -> int:
    """``seed=None``'s seed: drawn from torch's global RNG and, in a distributed job, folded with
    this process's rank (torch.distributed's, else ``RANK`` as torchrun sets it, else SLURM's
    ``SLURM_PROCID``): ranks that all call ``torch.manual_seed(s)``, as is common, would otherwise
    draw the same parameters each."""
    seed = int(torch.randint(0, 2**62, (1,), device="cpu").item())
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
    else:
        given = [os.environ.get(name, "").strip() for name in ("RANK", "SLURM_PROCID")]
        rank = next((int(v) for v in given if v.isdigit()), 0)
    return seed if rank == 0 else hash((seed, rank)) & (2**62 - 1)


def _owner() -> tuple:
    """Who a generator is seeded for: (this process, its DataLoader worker's seed or None)."""
    worker = torch.utils.data.get_worker_info()
    return os.getpid(), None if worker is None else worker.seed


class Pipeline(nn.Module):
    """A batched augmentation graph with its own random parameters for every sample.

    ``Pipeline(*ops)(images)`` takes a batch of uint8 (or float in [0, 1]) images and returns float
    images on ``pipeline.device``. Geometry is fused: crop, resize and flip ops become one
    per-sample antialiased sampling pass over the source; a rotation (with any flip after it) is
    one bilinear pass at output resolution, as torchvision rotates the resized image. Color ops
    then run at output resolution in the order given, and ``Normalize`` last.

    On the CPU the same results come by other means (see :mod:`gpuaug.cpu`):
    uint8 crops that are plain crop + resize go through torchvision's own uint8 resize kernel
    (rounded to integers, as torchvision's), and the color ops through one fused C kernel
    (:mod:`gpuaug.native`) where a C compiler is present.

    Args:
        *ops: gpuaug ops (``RandomResizedCrop``, ``RandomRotation``, ``ColorJitter``, ...).
        device: where to compute; ``None`` asks :func:`gpuaug.select_device`.
        dtype: compute and output dtype; ``None`` means float16 on CUDA and float32 on CPU. Hue
            and the rotation's sampling always run in float32 (so no half-precision
            ``grid_sample``, which crashes torch 2.14 on one CPU thread), then cast back.
            ``pipeline.to(dtype)``, ``.half()``, ``.bfloat16()``, ``.float()`` set it too.
        seed: seed of the pipeline's own generator; ``None`` draws one from torch's global RNG
            (so ``torch.manual_seed`` makes it repeatable too), folded with the process's rank in
            a distributed job (each rank draws its own parameters). An explicit seed is used as
            given, on every rank.
        channels_last: return channels-last memory format.
        cuda_graph: on CUDA, record the call for a batch tensor as a CUDA graph (one per input
            shape, from its second call on) and replay it, instead of launching its ~75 small
            kernels one by one: see :mod:`gpuaug.cuda_graph`. The outputs are those of an eager
            pipeline with the same seed. Ignored elsewhere, for ragged batches, replayed params,
            under ``torch.compile`` and autocast.

    Shape:
        - input: uint8 or float ``(B, C, H, W)``, C in {1, 3}; a list of ``(C, H, W)`` tensors of
          different sizes (or a :class:`gpuaug.PackedImages` of them, what
          :func:`gpuaug.data.collate` gives: read in place on CUDA); or clips ``(B, T, C, H, W)`` (or a
          list of ``(T, C, H, W)``, or a :class:`gpuaug.PackedImages` of them), one draw per clip
          shared by its frames.
        - output: ``(B, C, h, w)`` (``(B, T, C, h, w)`` for clips) in ``dtype``: normalized if the
          pipeline ends with ``Normalize``, else in [0, 1].

    ``pipeline(images, return_params=True)`` also returns the drawn params (a list with one dict of
    tensors per op, first dimension B); ``pipeline(images, params=p)`` replays them exactly.
    :meth:`get_rng_state` and :meth:`set_rng_state` save and restore the stream (checkpoints),
    :meth:`manual_seed` restarts it.

    Under ``torch.compile`` a batch tensor is traced (a new size compiles anew); ragged input
    runs eagerly.
    """

    _anchor: Tensor  # an empty buffer: where the pipeline lives (moved by .to())

    def __init__(self, *ops: Op | Sequence[Op], device: str | int | torch.device | None = None, dtype: torch.dtype | None = None, seed: int | None = None,
                 channels_last: bool = False, cuda_graph: bool = False):
        super().__init__()
        given = tuple(ops[0]) if len(ops) == 1 and isinstance(ops[0], (list, tuple)) else ops
        for op in given:
            if isinstance(op, type) and issubclass(op, Op):
                raise TypeError(f"Pipeline expects gpuaug ops, got the class {op.__name__}: make one, "
                                f"{op.__name__}(...)")
            if not isinstance(op, Op):
                raise TypeError(f"Pipeline expects gpuaug ops, got {type(op).__name__}: {op!r}{_port_hint(op)}")
        ops = cast("tuple[Op, ...]", given)
        first_rotation = next((i for i, op in enumerate(ops) if isinstance(op, RandomRotation)), len(ops))
        # Crops holding a fill or a copying padding_mode that never pad here: plain crops (below).
        self._plain_crops = self._check_order(ops, first_rotation)
        self.ops = cast("_OpList", nn.ModuleList(ops))
        # The three stages, fixed at construction, as positions in ``ops`` (params go by position,
        # so an op listed twice draws twice, as in torchvision's Compose): crop/resize/flip ops
        # before any rotation are resampled together; the rotation and the flips after it are one
        # warp (CenterCrops after it cut the warped image: torchvision's idiom to hide the
        # corners); then color ops.
        geometric = [i for i, op in enumerate(ops) if isinstance(op, GeometricOp)]
        self._resample_at = [i for i in geometric if i < first_rotation]
        self._warp_at = [i for i in geometric if i >= first_rotation and hasattr(ops[i], "matrix")]
        self._final_crop_at = [i for i in geometric if i >= first_rotation and isinstance(ops[i], CenterCrop)]
        self._color_at = [i for i, op in enumerate(ops) if isinstance(op, ColorOp)]
        # On a device, the ops from here on draw once the resampling is launched (see _forward).
        self._late_from = self._resample_at[-1] + 1 if self._resample_at else len(ops)
        # Crops, flips and padding only: each output pixel may be one source pixel (CPU: a gather).
        moves = (RandomCrop, CenterCrop, RandomHorizontalFlip, RandomVerticalFlip)
        self._moves_pixels_only = all(isinstance(ops[i], moves) for i in self._resample_at)
        # The value of the padding of the map (RandomCrop's fill), where it is not 0.
        self._pad_fill = next((op.fill for i, op in enumerate(ops) if i in self._resample_at
                               and isinstance(op, RandomCrop) and op.fills and i not in self._plain_crops), None)
        self.dtype = checked_dtype(dtype)
        for name, flag in (("channels_last", channels_last), ("cuda_graph", cuda_graph)):
            if not isinstance(flag, bool):  # channels_last="no" was taken as True
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.channels_last = channels_last
        self._graphs = GraphedCalls() if cuda_graph else None
        self.seed = _drawn_seed() if seed is None else checked_seed(seed)
        self._generator: torch.Generator | None = None
        self._owner: tuple | None = None  # (process, worker seed) the generator was seeded for
        self.register_buffer("_anchor", torch.empty(0, device=select_device(device)), persistent=False)
        # Op buffers (Normalize's mean and std) live where the work runs: copying them per batch
        # from host memory would be a blocking copy, a host sync on CUDA.
        self.ops.to(self.device)

    @staticmethod
    def _check_order(ops: Sequence[Op], first_rotation: int) -> list[int]:
        """ValueError for what the one resampling and the one warp cannot compute; -> the
        positions of the crops before the rotation whose padding is not zeros but which never pad
        (the fixed size before them is no smaller and they have no ``padding``): mapped as plain
        crops, so that their fill or mode does not reach the zeros another crop padded with."""
        resampled = list(ops[:first_rotation])
        # A crop whose padding is not zeros (it copies the canvas's pixels, or holds a fill) must
        # be the only op of the map that pads: the map knows one padding. After a resize, copies
        # are of resized pixels, which no second resize may filter: the map resamples once.
        special = [i for i, op in enumerate(resampled)
                   if isinstance(op, RandomCrop) and (op.padding_mode != "constant" or op.fills)]
        may_pad = _may_pad(resampled)
        plain = [i for i in special if i not in may_pad]
        special = [i for i in special if i in may_pad]
        if special:
            at = special[0]
            op = resampled[at]
            resizes = [[o for o in part if isinstance(o, (Resize, RandomResizedCrop))]
                       for part in (resampled[:at], resampled[at + 1:])]
            copies = op.padding_mode != "constant"
            what = f"padding_mode={op.padding_mode!r}" if copies else f"fill={op.fill}"
            if len(may_pad) > 1:
                raise ValueError(
                    f"RandomCrop({what}) must be the only op before RandomRotation that may pad (a CenterCrop or "
                    f"pad_if_needed crop larger than the fixed size before it pads, with zeros); got "
                    f"{[type(o).__name__ for o in ops]}")
            if copies and all(resizes):
                raise ValueError(
                    f"RandomCrop({what}) between two resizes is not supported: its padding copies pixels of the "
                    f"first resize's output, which gpuaug does not compute (it resamples the source once); "
                    f"got {[type(o).__name__ for o in ops]}")
        filters = {op.interpolation for op in ops[:first_rotation] if isinstance(op, (Resize, RandomResizedCrop))}
        if len(filters) > 1:  # they are one resampling
            raise ValueError(f"the resize ops before RandomRotation are one resampling and must share their "
                             f"interpolation, got {sorted(filters)}")
        rotations = {op.interpolation for op in ops if isinstance(op, RandomRotation)}
        if len(rotations) > 1:  # they are one warp
            raise ValueError(f"the RandomRotations of a pipeline must share their interpolation, got {sorted(rotations)}")
        rotated = cropped = False
        for i, op in enumerate(ops):
            if isinstance(op, Normalize) and i != len(ops) - 1:
                raise ValueError(f"Normalize must be the last op, but {type(ops[i + 1]).__name__} follows it")
            if isinstance(op, RandomRotation):
                rotated = True
            elif rotated and isinstance(op, CenterCrop):
                cropped = True
            elif rotated and isinstance(op, GeometricOp) and not hasattr(op, "matrix"):
                raise ValueError(
                    f"{type(op).__name__} after RandomRotation is not supported: gpuaug rotates at output "
                    "resolution, so put resize ops and random crops before RandomRotation (a CenterCrop may follow it)")
            elif cropped and isinstance(op, GeometricOp):
                raise ValueError(f"{type(op).__name__} after the CenterCrop that follows RandomRotation is not "
                                 f"supported: put flips before that CenterCrop")
        return plain

    @property
    def device(self) -> torch.device:
        return self._anchor.device

    @property
    def cuda_graph(self) -> bool:
        return self._graphs is not None

    def extra_repr(self) -> str:
        graph = ", cuda_graph=True" if self.cuda_graph else ""
        # dtype=None follows the device: say which dtype that is now
        dtype = f"None ({self.compute_dtype()})" if self.dtype is None else str(self.dtype)
        return f"device={self.device}, dtype={dtype}, seed={self.seed}, channels_last={self.channels_last}{graph}"

    def manual_seed(self, seed: int) -> Pipeline:
        """Restart the pipeline's random stream from ``seed``."""
        self.seed, self._generator = checked_seed(seed), None
        return self

    def get_rng_state(self) -> Tensor:
        """The state of the pipeline's random stream, a uint8 CPU tensor (a copy), as
        ``torch.get_rng_state()`` gives torch's: save it with a checkpoint and
        :meth:`set_rng_state` resumes the draws where they were. torch's own RNG state does not
        hold it (the pipeline draws from its own generator)."""
        self._refuse_meta()
        return self._get_generator().get_state()

    def set_rng_state(self, state: Tensor) -> Pipeline:
        """Resume the random stream from ``state``, what :meth:`get_rng_state` gave on a
        pipeline of this device type: the next draws are that pipeline's next draws, bit for bit."""
        if not isinstance(state, Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
            got = f"{state.dtype} {tuple(state.shape)}" if isinstance(state, Tensor) else type(state).__name__
            raise TypeError(f"state should be what get_rng_state() returns, a 1-D uint8 tensor, got {got}")
        self._refuse_meta()
        generator = torch.Generator(device=self.device)  # a new one: recorded CUDA graphs re-record
        size = generator.get_state().numel()
        if state.numel() != size:
            raise ValueError(f"state has {state.numel()} bytes, a {self.device.type} generator's has "
                             f"{size}: it was saved from a pipeline on another device "
                             f"type, whose stream this one cannot continue")
        try:
            generator.set_state(state.cpu())
        except RuntimeError as error:  # torch's check of the bytes ("Invalid mt19937 state", ...)
            raise ValueError(f"state is not a {self.device.type} generator's state: {error}") from None
        self._generator, self._owner = generator, _owner()
        return self

    def to(self, *args, **kwargs) -> Pipeline:
        """Move the pipeline to a device and/or set its compute and output dtype, as
        ``nn.Module.to`` takes them: ``pipeline.to("cuda:1")``, ``pipeline.to(torch.bfloat16)``,
        ``pipeline.to("cuda", torch.float16)``. A dtype sets :attr:`dtype`; the ops' own buffers
        (``Normalize``'s mean and std) stay float32, so casting never rounds them."""
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            self.dtype = checked_dtype(dtype)
        return super().to(select_device(device), non_blocking=non_blocking) if device is not None else self

    def half(self) -> Pipeline:
        """Compute and return float16 (``self.to(torch.float16)``)."""
        return self.to(torch.float16)

    def bfloat16(self) -> Pipeline:
        """Compute and return bfloat16 (``self.to(torch.bfloat16)``)."""
        return self.to(torch.bfloat16)

    def float(self) -> Pipeline:
        """Compute and return float32 (``self.to(torch.float32)``)."""
        return self.to(torch.float32)

    def double(self) -> Pipeline:
        """Compute and return float64 (``self.to(torch.float64)``)."""
        return self.to(torch.float64)

    def __getstate__(self) -> dict:
        # A torch.Generator does not survive the pickling that sends a pipeline to spawn or
        # forkserver workers (pytorch#146828: the worker dies with "unable to resize file"), so
        # the stream travels as its state's bytes; a copy in a worker reseeds anyway (see
        # _get_generator), a copy in this process (pickle, deepcopy) goes on from that state.
        state = super().__getstate__()
        generator = state.pop("_generator")
        state["_generator"] = None if generator is None else (generator.device, bytes(generator.get_state().numpy()))
        return state

    def __setstate__(self, state: dict) -> None:
        carried = state.get("_generator")
        super().__setstate__({**state, "_generator": None})
        # Another process (a worker, a checkpoint loaded elsewhere) reseeds anyway (_get_generator):
        # it makes no generator here, so a CUDA pipeline's copy touches no CUDA in a DataLoader
        # worker, nor fails to load where there is none (torch.load(..., map_location="cpu")).
        if carried is not None and self._owner == _owner():
            device, stream = carried
            generator = torch.Generator(device=device)
            generator.set_state(torch.frombuffer(bytearray(stream), dtype=torch.uint8))
            self._generator = generator

    def _refuse_meta(self) -> None:
        if self.device.type == "meta":  # a stand-in device (buffers placed, nothing computed)
            raise ValueError("this Pipeline is on the meta device, which holds no values to draw or compute: "
                             "move it to a real one first (.to('cpu'), .to('cuda'))")

    def _get_generator(self) -> torch.Generator:
        # A copy of the pipeline in a DataLoader worker (a CPU user's Dataset) must not replay the
        # parent's stream, nor another worker's: each worker seeds from the pipeline's seed and its
        # own worker seed (new each epoch), as torch reseeds its global RNG there.
        # A pipeline moved to another device after drawing goes on from where its stream was (a
        # generator cannot move): the new one is seeded from the old one's state, read on the host
        # (a CUDA generator's seed and offset: no wait for the device), so no draw repeats.
        owner = _owner()
        worker_seed = owner[1]
        if self._generator is None or self._generator.device != self.device or self._owner != owner:
            if self._generator is not None and self._owner == owner:
                copied = vars(self).get("_stream_at_copy")  # an nn.DataParallel copy's (below)
                seed = _seed_from_state(self._generator.get_state() if copied is None else copied, self.device)
            else:
                seed = self.seed if worker_seed is None else hash((self.seed, worker_seed)) & (2**63 - 1)
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(seed)
            self._owner = owner
        return self._generator

    def _replicate_for_data_parallel(self) -> Pipeline:
        # nn.DataParallel copies its module for each of its devices at each call (buffers, and so
        # `device`, placed after). The copy on the pipeline's device draws from its generator; a
        # copy on another device seeds one there (_get_generator) from the stream's state as read
        # here, before any copy draws, and its own device: copies on different devices draw apart,
        # and their seeds do not depend on which thread draws first.
        stream = self._get_generator().get_state()
        replica = super()._replicate_for_data_parallel()
        replica._stream_at_copy = stream
        return replica

    def compute_dtype(self) -> torch.dtype:
        """The dtype the kernels run in: ``dtype``, else float16 on CUDA and float32 elsewhere."""
        if self.dtype is None:
            return torch.float16 if self.device.type == "cuda" else torch.float32
        return self.dtype

    # ---- the per-batch path: no host sync, no per-sample loop over pixels -----------------------

    def forward(self, images, params: list[Params] | None = None, return_params: bool = False):
        if isinstance(images, Tensor):
            if self._graphs is not None and params is None and self._graphable():
                items, _, frames, _ = inspect_images(images)  # the checks an eager call makes first
                check_float_range(items, frames)
                out = self._graphs.run(self, images, return_params)
                if out is not None:
                    return out
            return self._forward(images, params, return_params)
        return self._forward_eagerly(images, params, return_params)

    def _settings(self) -> tuple:
        """What a recorded call bakes in besides its input: the output dtype and layout, whether
        the Triton kernels run (``GPUAUG_TRITON``), and each op's settings (:meth:`Op.settings`)."""
        return (self.dtype, self.channels_last, _gpu_kernels(self.device) is not None,
                tuple(op.settings() for op in self.ops))

    def _graphable(self) -> bool:
        """Whether a batch tensor may go through a recorded CUDA graph (``cuda_graph=True``)."""
        return (self.device.type == "cuda" and not torch.compiler.is_compiling()
                and not torch.is_autocast_enabled("cuda") and torch.utils.data.get_worker_info() is None
                and torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing())

    # Under torch.compile a ragged batch (a list, PackedImages) runs eagerly: its sizes are host-side
    # Python values the plan branches on, so each new set of sizes recompiled the whole call
    # (seconds a batch; past dynamo's limit of 8 the compiled call stayed 2.6-5x slower than eager, CPU).
    @torch.compiler.disable
    def _forward_eagerly(self, images, params: list[Params] | None, return_params: bool):
        return self._forward(images, params, return_params)

    @torch.no_grad()  # not differentiable: float input that requires grad gives an output that does not
    def _forward(self, images, params: list[Params] | None, return_params: bool):
        if self.device.type == "cuda" and (worker := torch.utils.data.get_worker_info()) is not None:
            raise RuntimeError(f"gpuaug.Pipeline on {self.device} was called inside DataLoader worker {worker.id}: "
                               "workers must not touch CUDA. Call it on the batch in the training loop (or "
                               "through gpuaug.DeviceLoader), or give the Dataset a device='cpu' pipeline")
        self._refuse_meta()
        if self.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(self.device.type):
            # The output's precision is the pipeline's dtype: under autocast the warp matrices'
            # products and the torch color kernels' matmuls would run in float16/bfloat16.
            with torch.autocast(self.device.type, enabled=False):
                return self._forward(images, params, return_params)
        items, sizes, frames, is_clip = inspect_images(images)
        n = len(items) // frames
        own = cpu.own_path(self.device)
        # On a device the ops after the resampling draw (and the warp and color program are planned)
        # once its kernel is launched: that host work then overlaps the device's largest kernel.
        # Same generator, same order: the same draws. (Not under torch.compile: _draw is a graph break.)
        defer = not own and not torch.compiler.is_compiling()
        if params is None:
            params = self._draw(n, sizes, frames, stop=self._late_from if defer else None)
        else:
            params = self._check_params(params, n, sizes, frames)
        first = items if isinstance(items, Tensor) else items[0]
        check_float_range(items, frames)
        channels = first.shape[-3]
        kernels = None if own else _gpu_kernels(self.device)
        cpu_kernel = own and self.compute_dtype() == torch.float32  # the fused C color kernel (gpuaug.native)
        frame_params = _per_frame(params, frames)
        plan = self._plan(sizes, frame_params, len(items), channels, uint8=first.dtype == torch.uint8, kernels=kernels)

        # The plan (taps, matrices) is built once for the whole batch. On CUDA: one pass, the warp
        # and the color ops as Triton kernels (gpuaug.gpu_kernels) or else torch kernels. On the CPU
        # (gpuaug.cpu): chunks of a few images that stay in cache, and the color ops as one fused C
        # kernel per chunk where it is built (gpuaug.native).
        rest = (n, sizes, frames, channels, len(items), cpu_kernel)
        if own:
            params, frame_params, color, program = self._plan_the_rest(plan, params, frame_params, *rest)
            fused = cpu.fused_color_program(program, channels) if cpu_kernel else None
            source = sizes.max()
            (H, W), (h, w) = source, plan["size"] or source
            areas = None if sizes.per_image is None else [a * b for a, b in sizes.per_image]
            parts = cpu.chunks(color, len(items), frames, grouped=fused is None, pixels=(H * W, h * w), areas=areas)
        else:
            fused, parts = None, [slice(0, len(items))]
        # CUDA kernels: a ragged batch is packed into one buffer (if not already) and read unpadded.
        packs = sizes.per_image is not None and plan["axes"] is not None
        if isinstance(items, PackedImages) and not packs:
            items = list(move(items, self.device))  # one copy, then views
        out = None
        for part in parts:
            if packs:  # one part: the whole batch
                chunk = plan["kernels"].pack_images(items, self.device, sizes.array())
            elif not (isinstance(chunk := _take(items, part), list) and own and cpu.reads_in_place(chunk, plan)):
                chunk = self._stack(chunk, sizes[part])
            if own:
                x = self._geometry(chunk, plan, part)
            else:  # one part: the whole batch
                x, mirror = self._resample(chunk, plan, part)
                params, frame_params, color, program = self._plan_the_rest(plan, params, frame_params, *rest)
                x = self._warp(x, mirror, plan, part)
            if fused is not None:
                if out is None:
                    out = x.new_empty((len(items), *x.shape[1:]))
                index = torch.arange(*part.indices(len(items)), device="cpu") if isinstance(part, slice) else part
                native.color_program(x, out, index, *fused)
                continue
            if plan["kernels"] is not None and program is not None:
                out = self._color_gpu(plan["kernels"], x, program)
                if out is not None:  # CUDA: one part, the whole batch
                    break
            for op, p in color:
                x = op.apply_transform(x, {k: _take(v, part) for k, v in p.items()})
            if len(parts) == 1:  # a slice of everything: the batch's own order
                out = x
                break
            if out is None:
                out = x.new_empty((len(items), *x.shape[1:]))
            if isinstance(part, Tensor):
                out.index_copy_(0, part, x)
            else:
                out[part] = x
        assert out is not None  # parts is not empty
        check_finite_output(out, items, frames)
        out = self._finish(out, n, frames if is_clip else 0)
        return (out, params) if return_params else out

    def _plan_the_rest(self, plan: dict[str, Any], params: list[Params], frame_params: list[Params], n: int,
                       sizes: Sizes, frames: int, channels: int, count: int, cpu_kernel: bool):
        """Draw the ops not drawn yet, plan the warp -> (params, params per frame, the color ops with
        their params, their program for a fused kernel or None). A method, not a closure over
        ``_forward``'s locals: under torch.compile on Python 3.13, dynamo lost the closure's
        ``params`` cell, assigned after the draws' graph break (7 graphs for Resize + CenterCrop)."""
        if len(params) < len(self.ops):
            late = self._draw(n, sizes, frames, start=len(params))
            params, frame_params = params + late, frame_params + _per_frame(late, frames)
        self._plan_warp(plan, frame_params, channels)
        # (no walrus in this comprehension: dynamo broke the graph on it, 7 graphs for Resize + CenterCrop)
        color = [(cast(ColorOp, self.ops[i]), frame_params[i]) for i in self._color_at]
        # The color ops as one program per sample for a fused kernel (CPU float32: gpuaug.native;
        # CUDA: gpuaug.gpu_kernels), else op by op.
        program = None
        if color and (cpu_kernel or plan["kernels"] is not None):
            program = color_programs(color, count, self.device)
        return params, frame_params, color, program

    # Under torch.compile: one graph break for all the draws (dynamo cannot trace a Generator
    # argument, so each op's draw was a break of its own).
    @torch.compiler.disable
    def _draw(self, n: int, sizes: Sizes, frames: int, meta: bool = False, start: int = 0,
              stop: int | None = None) -> list[Params]:
        """The params of ops ``start:stop`` (all by default) for ``n`` draws (images, or clips), from
        the pipeline's generator; ``meta``: their shapes and dtypes only, on the meta device, drawing nothing."""
        gen, device = (None, torch.device("meta")) if meta else (self._get_generator(), self.device)
        ops = list(self._op_inputs(sizes, frames))[start:stop]
        params = [op.make_params(Draw(n, device, gen, s)) for op, s in ops]
        if not meta and any(op.PIXEL_PARAMS for op, _ in ops):  # crop boxes remember the sizes they
            drawn_for = _per_draw(sizes, frames)  # were drawn for (host values: no sync to check)
            for (op, _), p in zip(ops, params):
                for v in p.values() if op.PIXEL_PARAMS else ():
                    setattr(v, _DRAWN_FOR, drawn_for)
        return params

    def _op_inputs(self, sizes: Sizes, frames: int):
        """Each op with the sizes of its input, one per draw (a clip's frames share its size)."""
        sizes = _one_per_draw(sizes, frames)
        for op in self.ops:
            yield op, sizes
            if isinstance(op, GeometricOp):
                sizes = op.output_sizes(sizes)

    def _plan(self, sizes: Sizes, params: list[Params], n: int, channels: int, uint8: bool,
              kernels=None) -> dict[str, Any]:
        """Per-sample resampling (crop/resize/flip) for the whole batch, from the params of the ops
        before any rotation (``params`` may stop there); ``None`` where there is none; the warp
        (rotation and the flips after it) is left to :meth:`_plan_warp`. The resampling is planned
        as axis maps for the CUDA kernels (``kernels``: :mod:`gpuaug.gpu_kernels`, which compute
        their filter taps themselves), as crop boxes on the CPU for uint8 images whose maps are all
        plain crops (+ flips), resized, or whole-pixel parts of such (torchvision's uint8 kernel,
        see ``_resample``), else as filter taps (:func:`_filter_taps`)."""
        plan: dict[str, Any] = {
            "resample": None, "axes": None, "rows": None, "cols": None, "boxes": None, "exact": None, "single": None,
            "size": None, "warp": None, "fill": None, "blend": True, "nearest": False, "pad_fill": None,
            "final_crop": None, "kernels": kernels}
        s = sizes
        if self._resample_at or sizes.uniform is None:
            axes = AxisMap(sizes.pairs(n, self.device))
            zoom_y = zoom_x = 1.0
            for i in self._resample_at:
                op = self.ops[i]
                assert isinstance(op, GeometricOp)  # _resample_at holds geometric ops only
                if i in self._plain_crops and isinstance(op, RandomCrop):
                    op.map_axes(axes, params[i], s, padding_mode="constant")
                else:
                    op.map_axes(axes, params[i], s)
                zy, zx = op.max_scale(s)
                zoom_y, zoom_x = zoom_y * zy, zoom_x * zx
                s = op.output_sizes(s)
            if s.uniform is None:
                raise ValueError(
                    "images of different sizes need a pipeline with a fixed output size (add RandomResizedCrop, "
                    f"RandomCrop, CenterCrop or Resize((h, w)) before any RandomRotation); this one gives sizes "
                    f"{sorted(set(s.per_image or ()))[:4]}...")
            aa = all(getattr(self.ops[i], "antialias", True) for i in self._resample_at)
            cubic = any(getattr(self.ops[i], "interpolation", None) == "bicubic" for i in self._resample_at)
            (h, w) = s.uniform
            plan["size"] = (h, w)
            # Per axis (y, x): scale, offset, window lo/hi, valid lo/hi, content lo/hi, each (n, 2).
            maps = [t.expand(n, 2) for t in (axes.scale, axes.offset, *axes.window, *axes.valid, *axes.content)]
            plan["resample"] = {"maps": maps, "taps": (tap_count(zoom_y, aa, cubic), tap_count(zoom_x, aa, cubic)),
                                "antialias": aa, "source": sizes.max(), "pad_mode": axes.pad_mode,
                                "pad_output": axes.pad_output, "cubic": cubic}
            if kernels is not None:
                plan["axes"] = torch.stack(maps, -1)  # (n, 2, 8), as gpu_kernels.resample_axes reads it
            elif cpu.own_path(self.device) and aa and uint8 and not cubic:
                # (Not for bicubic: torch's uint8 bicubic rounds and clamps between its two passes,
                # up to 44/255 from the float result on noise; the CPU computes what CUDA does.)
                scale, offset, lo, hi, valid_lo, valid_hi, content_lo, content_hi = maps
                ys, xs = (crop_boxes(scale[:, a], offset[:, a], (lo[:, a], hi[:, a]), (valid_lo[:, a], valid_hi[:, a]),
                                     length, (content_lo[:, a], content_hi[:, a]))
                          for a, length in ((0, h), (1, w)))
                exact = ys[-1] & xs[-1]
                if bool(exact.any()):  # these by torchvision's uint8 kernel, the rest (padding) in float
                    plan["boxes"], plan["exact"] = (ys[:-1], xs[:-1]), None if bool(exact.all()) else exact
            if plan["axes"] is None and (plan["boxes"] is None or plan["exact"] is not None):
                plan["rows"], plan["cols"] = _filter_taps(plan["resample"], plan["size"])
                if cpu.own_path(self.device) and self._moves_pixels_only:  # a gather will do
                    rows, cols = single_taps(*plan["rows"]), single_taps(*plan["cols"])
                    plan["single"] = (rows, cols) if rows is not None and cols is not None else None
            if self._pad_fill is not None:
                plan["pad_fill"] = self._padding_share(plan, self._pad_fill, channels)
        plan["seen"] = s  # the sizes the warp sees
        return plan

    def _padding_share(self, plan: dict[str, Any], pad_fill: Fill,
                       channels: int) -> tuple[Tensor, Tensor, Tensor] | None:
        """RandomCrop's fill, ``(C,)``, and the share of each output pixel's filter that read
        image pixels, per axis: ``(n, h)`` and ``(n, w)``; the rest of the filter read padding,
        which holds the fill (the resampling read it as 0). None for crop boxes: no padding."""
        fill = _fill_values("RandomCrop", pad_fill, channels, self.device)
        if plan["boxes"] is not None and plan["exact"] is None:
            return None
        rows, cols = (plan["rows"], plan["cols"]) if plan["rows"] is not None else \
            _filter_taps(plan["resample"], plan["size"])
        return fill, rows[1].sum(-1), cols[1].sum(-1)

    def _plan_warp(self, plan: dict[str, Any], params: list[Params], channels: int) -> None:
        """The warp stage of :meth:`_plan` (done apart: on a device, once the resampling is launched)."""
        s = plan["seen"]
        if self._warp_at:
            matrix = None
            for i in self._warp_at:
                warp = self.ops[i]
                assert isinstance(warp, (RandomRotation, RandomHorizontalFlip, RandomVerticalFlip))
                m = warp.matrix(params[i], s.uniform)
                # The product elementwise, not by a matmul: a float32 matmul on CUDA may run in
                # TF32 (torch.set_float32_matmul_precision("high"), which training scripts set),
                # rounding the coordinates' coefficients to 10 bits (~0.05 px at 224 px).
                matrix = m if matrix is None else (matrix.unsqueeze(-1) * m.unsqueeze(-3)).sum(-2)
            plan["warp"] = matrix
            rotation = next(op for op in map(self.ops.__getitem__, self._warp_at) if isinstance(op, RandomRotation))
            plan["nearest"] = rotation.interpolation == "nearest"
            fill = rotation.fill
            if fill is None:  # torchvision's fill=None: no fill rule at all
                plan["blend"] = False
            else:  # the channel count is checked for a zero fill too
                values = _fill_values("RandomRotation", fill, channels, self.device)
                plan["fill"] = values if any(fill) else None
        if self._final_crop_at:  # one window (top, left, h, w) of the warped image, host-side
            top = left = 0
            size = s.uniform
            for i in self._final_crop_at:
                crop = self.ops[i]
                assert isinstance(crop, CenterCrop)
                t, l = crop.start(size)
                top, left, size = top + t, left + l, crop.size
            plan["final_crop"] = (top, left, *size)

    def _geometry(self, x: Any, plan: dict[str, Any], part: slice | Tensor) -> Tensor:
        """Images ``part`` of the batch (one tensor; on the CPU a list that
        :func:`gpuaug.cpu.reads_in_place` accepts; on CUDA a ragged list packed by
        :func:`gpuaug.gpu_kernels.pack_images`) through the planned resampling and warp -> float,
        contiguous."""
        if plan["exact"] is not None:
            return self._geometry_split(x, plan, part)
        return self._warp(*self._resample(x, plan, part), plan, part)

    def _resample(self, x: Any, plan: dict[str, Any], part: slice | Tensor) -> tuple[Tensor, tuple | None]:
        """The resampling stage of :meth:`_geometry` -> (float images, the ``(flip_x, flip_y)``
        ``(n,)`` bools left to the warp, or None): the CPU's uint8 crops leave their flips to a
        planned warp."""
        dt = self.compute_dtype()
        packed = not isinstance(x, (Tensor, list))  # a ragged list packed for the CUDA kernels
        uint8 = (x.flat if packed else x[0] if isinstance(x, list) else x).dtype == torch.uint8
        unit = 1 / 255 if uint8 else 1.0  # uint8 -> [0, 1], carried by a resampling's column weights
        mirror = None
        if plan["boxes"] is not None:
            # CPU, uint8, every sample a plain crop (+ flip) resized (a part of it kept): torchvision's own uint8
            # kernel per image, 3-5x faster here than resampling in float. Results are integers,
            # as torchvision's are on uint8 (fixed-point weights: within 1/255 of the float path).
            (top, height, flip_y, rows, skip_y), (left, width, flip_x, cols, skip_x) = (
                [_take(t, part) for t in axis] for axis in plan["boxes"])
            x = resized_crops(x, top.tolist(), left.tolist(), height.tolist(), width.tolist(), plan["size"],
                              list(zip(rows.tolist(), cols.tolist())), list(zip(skip_y.tolist(), skip_x.tolist())))
            if self._warp_at:  # flips ride on the warp
                mirror = (flip_x, flip_y)
            else:
                for dim, flags in ((-1, flip_x), (-2, flip_y)):
                    for i in flags.nonzero().flatten().tolist():
                        x[i] = x[i].flip(dim)
            x = x.to(dt).mul_(1 / 255)
        elif plan["resample"] is None:
            # With no warp and no color op after it, a float input would come back as itself.
            x = x.to(dt, copy=not self._warp_at and not self._color_at)
            if uint8:
                x = x.mul_(1 / 255)
        else:
            resampled = None
            kernels = plan["kernels"]
            if plan["axes"] is not None:  # CUDA: two Triton launches, uint8 read as is
                r = plan["resample"]
                resampled = kernels.guarded(kernels.resample_axes, x, _take(plan["axes"], part), plan["size"], r["taps"],
                                            dt, unit, r["antialias"], r["pad_mode"], r["pad_output"], r["cubic"])
                if resampled is None and plan["rows"] is None:  # the kernels failed: taps for torch's
                    plan["rows"], plan["cols"] = _filter_taps(r, plan["size"])
                if resampled is None and packed:  # and torch's kernels read a padded batch
                    x = self._stack(x.images, Sizes(per_image=[tuple(t.shape[-2:]) for t in x.images]))
            if resampled is None and plan["single"] is not None:  # CPU: each output pixel one source pixel
                (ri, rw), (ci, cw) = plan["single"]
                resampled = cpu.gather_pixels(x, (_take(ri, part), _take(rw, part)),
                                              (_take(ci, part), _take(cw, part) * unit), dt)
            if resampled is None:
                (ri, rw), (ci, cw) = plan["rows"], plan["cols"]
                # This part's (padded) size: taps past it have zero weight.
                H, W = (max(t.shape[-2] for t in x), max(t.shape[-1] for t in x)) if isinstance(x, list) else x.shape[-2:]
                rows = (_take(ri, part).clamp(max=H - 1), _take(rw, part))
                # uint8 -> [0, 1] rides on the column weights: one pass less over the images.
                cols = (_take(ci, part).clamp(max=W - 1), _take(cw, part) * unit)
                if cpu.own_path(self.device):
                    x, rows, cols = cpu.crop_to_taps(x, rows, cols, dt)
                resampled = resample_separable(x, rows, cols, dt)
            x = resampled
        if plan["pad_fill"] is not None:  # out += fill * (share of the filter that read padding)
            fill, rows, cols = plan["pad_fill"]
            read = _take(rows, part)[:, None, :, None] * _take(cols, part)[:, None, None, :]
            x = x.add_((1 - read).to(x.dtype) * fill.to(x.dtype).view(1, -1, 1, 1))
        if plan["resample"] is not None and plan["resample"]["cubic"]:
            # Bicubic overshoots: gpuaug's images stay in [0, 1] (torchvision clamps uint8, not float).
            x = x.clamp_(0, 1)
        return x, mirror

    def _warp(self, x: Tensor, mirror: tuple | None, plan: dict[str, Any], part: slice | Tensor) -> Tensor:
        """The warp stage of :meth:`_geometry` (rotation, the flips after it, the CenterCrop after
        it) on the resampled images -> contiguous; ``mirror``: flips to fold into the warp."""
        warp = None if plan["warp"] is None else _take(plan["warp"], part)
        if mirror is not None:  # mirror the warp's source coordinates
            flip_x, flip_y = mirror
            assert warp is not None  # flips left to the warp: there is one
            warp = warp.clone()
            warp[:, 0] *= 1 - 2 * flip_x.to(warp.dtype).view(-1, 1)
            warp[:, 1] *= 1 - 2 * flip_y.to(warp.dtype).view(-1, 1)
        if warp is not None:
            kernels = plan["kernels"]
            how = (plan["fill"], plan["blend"], plan["nearest"])
            warped = kernels.guarded(kernels.warp_affine, x, warp, *how) if kernels is not None else None
            x = warped if warped is not None else warp_affine(x, warp, *how)
        if plan["final_crop"] is not None:
            x = crop_or_pad(x, *plan["final_crop"])
        return x.contiguous()

    def _geometry_split(self, x: Any, plan: dict[str, Any], part: slice | Tensor) -> Tensor:
        """:meth:`_geometry` for a part of a batch in which some samples' maps are plain crops
        (``plan["exact"]``, the CPU's uint8 path) and the others pad or cut fractional parts: the
        first by torchvision's uint8 kernel, the others in float, so that each sample gets what
        it gets alone, whatever the rest of its batch is."""
        index = torch.arange(len(plan["exact"]), device="cpu")[part]  # the part's positions in the batch
        exact = plan["exact"][index]
        out = None
        for keep, sub_plan in ((exact, {**plan, "exact": None, "pad_fill": None}),  # plain crops read no padding
                               (~exact, {**plan, "exact": None, "boxes": None})):
            local = keep.nonzero().flatten()
            if len(local) == 0:
                continue
            y = self._geometry(_take(x, local), sub_plan, index[local])
            out = y.new_empty((len(index), *y.shape[1:])) if out is None else out
            out.index_copy_(0, local, y)
        assert out is not None  # the part holds samples of one kind or both
        return out

    def _color_gpu(self, kernels, x: Tensor, program: tuple) -> Tensor | None:
        """The color ops on CUDA by the fused Triton kernel -> the result, or None where the
        kernels failed to launch (it warned; the caller runs the torch kernels)."""
        ops, factors, normalize = program
        mean = inv_std = None
        if normalize is not None:
            mean, inv_std = normalize.values(x.shape[1])
        contrast_steps = sum(cast(ColorOp, self.ops[i]).contrast_steps() for i in self._color_at)
        return kernels.guarded(kernels.color_program, x, torch.empty_like(x), ops, factors, mean, inv_std,
                               contrast_steps)

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

    def _stack(self, items: Sequence[Tensor] | Tensor, sizes: Sizes) -> Tensor:
        """Move to the device (:func:`move`) as one ``(N, C, H, W)`` batch, ragged images padded."""
        dev = self.device
        if isinstance(items, Tensor):
            return move(items, dev)
        moved = [move(t, dev) for t in items]
        if sizes.uniform is not None:
            return torch.stack(moved)
        H, W = sizes.max()
        x = moved[0].new_zeros(len(moved), moved[0].shape[0], H, W)
        for i, t in enumerate(moved):
            x[i, :, : t.shape[1], : t.shape[2]] = t
        return x

    def _check_params(self, params, n: int, sizes: Sizes, frames: int) -> list[Params]:
        """Replayed ``params`` checked against what this pipeline draws (keys, shapes; cast to its
        dtypes) -> on the device. Params on the CPU are read and checked against what each op could
        apply to these images (:meth:`Op.check_params`: a crop box inside its image, ...); params
        on a GPU are not read, as that would wait for the device (nor while traced)."""
        if not isinstance(params, (list, tuple)) or len(params) != len(self.ops):
            got = f"a {type(params).__name__} of {len(params)} (params drawn by another pipeline?)" \
                if isinstance(params, (list, tuple)) else type(params).__name__
            raise ValueError(f"params should be a list with one dict per op ({len(self.ops)}), as returned by "
                             f"return_params=True, got {got}")
        out, wants = [], self._draw(n, sizes, frames, meta=True)
        for i, (op, p, want) in enumerate(zip(self.ops, params, wants)):
            name = type(op).__name__
            if not isinstance(p, dict):
                raise TypeError(f"params for {name} should be a dict, got {type(p).__name__}")
            if p.keys() != want.keys():
                raise ValueError(f"params[{i}] for {name} should have keys {sorted(want)}, got {sorted(p)} "
                                 f"(params drawn by another pipeline?)")
            for k, v in p.items():
                if not isinstance(v, Tensor) or v.shape != want[k].shape:
                    raise ValueError(f"params[{name}][{k!r}] should be a tensor of shape {tuple(want[k].shape)} (first "
                                     f"dimension {n}, one per sample), got {getattr(v, 'shape', type(v).__name__)}")
            drawn_for = next((getattr(v, _DRAWN_FOR) for v in p.values() if hasattr(v, _DRAWN_FOR)), None)
            if op.PIXEL_PARAMS and drawn_for is not None and drawn_for != (now := _per_draw(sizes, frames)):
                j = next(j for j in range(n) if _size_of(drawn_for, j) != _size_of(now, j))
                raise ValueError(f"params for {name} were drawn for images of other sizes (sample {j}: drawn for "
                                 "{}x{}, given {}x{}): its crops are pixel positions in the images they were drawn for; "
                                 "replay them on those images, or draw anew".format(*_size_of(drawn_for, j), *_size_of(now, j)))
            out.append({k: move(v, self.device, want[k].dtype) for k, v in p.items()})
        values = [v for p in params for v in p.values()]
        if all(v.device.type == "cpu" and not isinstance(v, FakeTensor) for v in values) \
                and not torch.compiler.is_compiling():
            for (op, s), p, want in zip(self._op_inputs(sizes, frames), params, wants):
                op.check_params({k: v.detach().to(want[k].dtype).numpy() for k, v in p.items()}, s)
        return out


def _port_hint(op: object) -> str:
    """For another library's transform given to a Pipeline: gpuaug's namesake, where it has one."""
    from . import transforms

    name, home = type(op).__name__, type(op).__module__.split(".")[0]
    if home not in ("torchvision", "kornia"):
        return ""
    if isinstance(getattr(transforms, name, None), type):
        return f" ({home}'s; gpuaug's own is ga.{name}, with torchvision's arguments)"
    if name in ("Compose", "AugmentationSequential"):
        return f" (list gpuaug's ops in the Pipeline instead of a {home} {name})"
    return f" ({home}'s; gpuaug's ops are listed in the README's op table)"


# The attribute that a pixel-position param (a crop box: Op.PIXEL_PARAMS) carries from its draw:
# the sizes of the images it was drawn for, so a replay on other images is caught from host
# values (reading the params on a GPU would wait for it). A copy, slice or move of the tensor
# has none, and is checked by its values where it is on the CPU.
_DRAWN_FOR = "_gpuaug_drawn_for"


def _per_frame(params: list[Params], frames: int) -> list[Params]:
    """Each draw's params repeated for the frames of its clip (``frames`` > 1), as the images come."""
    return [{k: v.repeat_interleave(frames, 0) for k, v in p.items()} for p in params] if frames > 1 else params


def _per_draw(sizes: Sizes, frames: int) -> tuple:
    """The input sizes, one per draw, as a comparable host value: ``(h, w)`` where uniform, else
    a tuple of ``(h, w)``."""
    sizes = _one_per_draw(sizes, frames)
    return sizes.uniform if sizes.uniform is not None else tuple(map(tuple, sizes.per_image or ()))


def _one_per_draw(sizes: Sizes, frames: int) -> Sizes:
    """The sizes of the first frame of each clip (a clip's frames share its size and its draw)."""
    return sizes[::frames] if frames > 1 else sizes


def _size_of(per_draw: tuple, j: int) -> tuple[int, int]:
    """Draw ``j``'s ``(h, w)`` in a :func:`_per_draw` value."""
    return per_draw[j] if isinstance(per_draw[0], tuple) else per_draw


def _may_pad(ops: Sequence[Op]) -> list[int]:
    """The positions of the crops of ``ops`` (crop/resize/flip ops, in order) that may pad: a
    ``RandomCrop`` with ``padding``, and a ``CenterCrop`` or ``pad_if_needed`` crop larger than the
    fixed size before it (or after an op whose output size depends on the input's: any of them)."""
    padders, size = [], None  # the fixed (h, w) the ops so far give, if they give one
    for i, op in enumerate(ops):
        if isinstance(op, (CenterCrop, RandomCrop)):
            larger = size is None or op.size[0] > size[0] or op.size[1] > size[1]
            if (any(op.padding) or op.pad_if_needed and larger) if isinstance(op, RandomCrop) else larger:
                padders.append(i)
        if isinstance(op, (CenterCrop, RandomCrop, RandomResizedCrop)):
            size = op.size
        elif isinstance(op, Resize):
            size = op.size if isinstance(op.size, tuple) else None
    return padders


def _filter_taps(resample: dict, size: tuple[int, int]) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The planned axis maps as filter taps (:func:`axis_taps`) -> ``rows``, ``cols``, each
    ``(index, weight)``. Both axes in one call, padded to the longer output and the larger tap
    count, then each takes its own: the taps past an axis's own count have zero weight."""
    scale, offset, lo, hi, valid_lo, valid_hi, content_lo, content_hi = resample["maps"]
    (h, w), (H, W), (ky, kx) = size, resample["source"], resample["taps"]
    index, weight = axis_taps(scale, offset, (lo, hi), (valid_lo, valid_hi), max(h, w), max(H, W), max(ky, kx),
                              resample["antialias"], (content_lo, content_hi), resample["pad_mode"],
                              resample["pad_output"], resample["cubic"])
    return (index[:, 0, :h, :ky], weight[:, 0, :h, :ky]), (index[:, 1, :w, :kx], weight[:, 1, :w, :kx])


def _fill_values(op: str, fill: tuple[float, ...], channels: int, device: torch.device) -> Tensor:
    """An op's fill (one value, or one per channel) as ``(C,)`` float32 on ``device`` (a
    non-blocking copy); ValueError where it holds another number of values."""
    if len(fill) not in (1, channels):
        raise ValueError(f"{op} fill has {len(fill)} values, images have {channels} channels")
    return to_device(fill * channels if len(fill) == 1 else fill, device)


def _gpu_kernels(device: torch.device):
    """:mod:`gpuaug.gpu_kernels` where its Triton kernels should run on ``device``, else None.
    Imported on first need (Triton takes ~0.1 s to load, and the CPU never needs it)."""
    if device.type != "cuda":
        return None
    from . import gpu_kernels

    return gpu_kernels if gpu_kernels.usable(device) else None


@overload
def _take(items: Tensor, part: slice | Tensor) -> Tensor: ...
@overload
def _take(items: list[_T], part: slice | Tensor) -> list[_T]: ...
@overload
def _take(items: PackedImages, part: slice | Tensor) -> PackedImages | list[Tensor]: ...
def _take(items, part):
    """``items[part]`` for a slice or an index tensor; ``index_select`` (a plain copy) rather than
    advanced indexing, which is several times slower on the CPU."""
    if isinstance(part, slice):
        return items[part]
    if not isinstance(items, Tensor):
        return [items[i] for i in part.tolist()]
    return items.index_select(0, part.to(items.device))
