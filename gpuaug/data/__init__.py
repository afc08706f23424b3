"""The loading side: decode-only datasets, a bad-file policy, collate, and DeviceLoader."""

from .collate import Batch, collate
from .datasets import BadFile, Encoded, ImageFiles, ImageFolder
from .decode import DecodeError, load_rgb
from .loader import DeviceLoader, LoaderStats

__all__ = ["Batch", "collate", "BadFile", "Encoded", "ImageFiles", "ImageFolder", "DecodeError", "load_rgb",
           "DeviceLoader", "LoaderStats"]
