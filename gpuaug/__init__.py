"""gpuaug: batched, per-sample image augmentation on the GPU.

DataLoader workers only decode; one :class:`Pipeline`, called on each batch in the training loop,
crops, resizes, rotates, flips and color-jitters every sample with its own random parameters.
"""

from .cpu import keep_freed_memory
from .device import select_device
from . import data, worker_memory
from .data import DecodeError, DeviceLoader
from .packed import PackedImages
from .pipeline import Pipeline
from .samples import sample_images
from .transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCrop,
    ColorJitter,
    Normalize,
    RandomCrop,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
    Resize,
)

__version__ = "0.1.0"

__all__ = [
    "Pipeline", "PackedImages", "DeviceLoader", "DecodeError", "data", "select_device", "sample_images", "keep_freed_memory",
    "RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomRotation", "RandomHorizontalFlip",
    "RandomVerticalFlip", "RandomGrayscale", "ColorJitter", "Normalize", "IMAGENET_MEAN", "IMAGENET_STD",
]
