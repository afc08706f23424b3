"""Warnings attributed to the user's line, however deep inside gpuaug they are raised."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from types import FrameType

import torch

# Frames passed over on the way out to the user's: gpuaug's own, torch's (a pipeline is called
# through nn.Module.__call__) and contextlib's (a function decorated by a context manager).
_PASSED_OVER = (os.path.dirname(os.path.abspath(__file__)) + os.sep,
                os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
                os.path.abspath(contextlib.__file__))


def warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside gpuaug (and the torch and contextlib
    frames it is called through): the user's ``for batch in loader:`` or ``pipeline(images)``,
    which reach one warning through different depths (a CUDA loader prepares batches in a nested
    function; a kernel warns from whichever op first called it). A fixed ``stacklevel`` named a line
    of gpuaug's instead (Python 3.12's ``skip_file_prefixes``, for 3.10 and 3.11 too)."""
    frame: FrameType | None = sys._getframe(1)
    level = 2  # this function's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PASSED_OVER):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level - 1 if frame is None else level)
