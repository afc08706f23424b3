"""Random ops: each draws per-sample params; :class:`gpuaug.Pipeline` applies them."""

from .color import IMAGENET_MEAN, IMAGENET_STD, ColorJitter, ColorOp, Normalize, RandomGrayscale
from .geometry import (
    CenterCrop,
    GeometricOp,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
    Resize,
)
from ._base import Op

__all__ = [
    "Op", "GeometricOp", "ColorOp", "RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomRotation",
    "RandomHorizontalFlip", "RandomVerticalFlip", "ColorJitter", "RandomGrayscale", "Normalize",
    "IMAGENET_MEAN", "IMAGENET_STD",
]
