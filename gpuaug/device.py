"""Which device a process should augment on."""

from __future__ import annotations

import os

import torch


def select_device(device: str | torch.device | None = None) -> torch.device:
    """Pick this process's device without touching CUDA more than needed.

    Order: the explicit ``device`` argument > the ``GPUAUG_DEVICE`` environment variable >
    ``cuda:$LOCAL_RANK`` (set by torchrun) > ``cuda:{pid % device_count}`` > ``cpu``.
    Call it in the main process only: DataLoader workers must never touch CUDA.
    """
    if device is not None:
        return torch.device(device)
    env = os.environ.get("GPUAUG_DEVICE")
    if env:
        return torch.device(env)
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None:
        try:
            rank = int(local_rank)
        except ValueError:
            raise ValueError(f"LOCAL_RANK should be an integer, got {local_rank!r}") from None
        if not 0 <= rank < count:
            raise ValueError(f"LOCAL_RANK={rank} but only {count} CUDA device(s) are visible")
        return torch.device("cuda", rank)
    return torch.device("cuda", os.getpid() % count)
