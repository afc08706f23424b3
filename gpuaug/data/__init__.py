"""The loading side: decode-only image and clip datasets, a bad-file policy, collate, DeviceLoader."""

from .clips import FrameFolder, PackedClips, frame_indices, pack_folder, pack_frames
from .collate import Batch, EncodedBatch, collate
from .datasets import BadFile, Encoded, ImageFiles, ImageFolder
from .decode import DecodeError, load_rgb
from .loader import DeviceLoader, LoaderStats

__all__ = ["FrameFolder", "PackedClips", "frame_indices", "pack_folder", "pack_frames", "Batch", "EncodedBatch", "collate", "BadFile", "Encoded", "ImageFiles", "ImageFolder", "DecodeError", "load_rgb",
           "DeviceLoader", "LoaderStats"]
