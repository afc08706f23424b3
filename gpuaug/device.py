"""Which device a process should augment on."""

from __future__ import annotations

import os

import torch


def select_device(device: str | int | torch.device | None = None) -> torch.device:
    """Pick this process's device without touching CUDA more than needed.

    Order: the explicit ``device`` argument > the ``GPUAUG_DEVICE`` environment variable >
    ``cuda:$LOCAL_RANK`` (set by torchrun; ``cuda:0`` where the process sees one GPU alone, as
    when a launcher gives each rank its own ``CUDA_VISIBLE_DEVICES``) > ``cuda:{pid % device_count}`` > ``cpu``.
    Call it in the main process only: DataLoader workers must never touch CUDA.
    """
    if device is not None:
        return _checked(_parse(device, "device argument"), "device argument")
    env = os.environ.get("GPUAUG_DEVICE", "").strip()  # (" cpu" from a .env file or a shell quote: torch refuses it)
    if env:
        return _checked(_parse(env, "GPUAUG_DEVICE"), "GPUAUG_DEVICE")
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None:
        try:
            rank = int(local_rank)
        except ValueError:
            raise ValueError(f"LOCAL_RANK should be an integer, got {local_rank!r}") from None
        if rank >= count == 1:  # a launcher that shows each rank its own GPU alone (CUDA_VISIBLE_DEVICES per rank)
            return torch.device("cuda", 0)
        if rank < 0:  # (-1: some launchers' "not distributed"; which GPU that means is the user's to say)
            raise ValueError(f"LOCAL_RANK={rank} is not a GPU index (expected 0 to {count - 1}): unset LOCAL_RANK, "
                             f"pass device= to the Pipeline or set GPUAUG_DEVICE")
        if rank >= count:
            raise ValueError(f"LOCAL_RANK={rank} but only {count} CUDA device(s) are visible (CUDA_VISIBLE_DEVICES="
                             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): pass device= to the Pipeline "
                             f"or set GPUAUG_DEVICE")
        return torch.device("cuda", rank)
    return torch.device("cuda", os.getpid() % count)


def _parse(device, source: str) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{source} should name a torch device (cpu, cuda, cuda:1, ...), got {device!r}") from None


def _checked(device: torch.device, source: str) -> torch.device:
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{source} asks for {device} but CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{source} asks for {device} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif device.type not in ("cpu", "meta"):  # mps, xpu, ...: torch's own error says only that an op failed
        backend = getattr(torch, device.type, None)
        if backend is not None and callable(getattr(backend, "is_available", None)) and not backend.is_available():
            raise ValueError(f"{source} asks for {device} but this machine has none "
                             f"(torch.{device.type}.is_available() is False)")
    return device
