"""``progress_bar``: tqdm's bar for the commands' long runs (bench, profile, pack)."""

from __future__ import annotations

import importlib.util
from typing import Any


def progress_bar(iterable: Any = None, **kwargs: Any):
    """``tqdm(iterable, **kwargs)``: a widget in a notebook where ipywidgets is installed
    (``tqdm.auto``), else the text bar. ``tqdm.auto`` alone picks the same bars, but in a notebook
    without ipywidgets it warns "IProgress not found" when imported, whether a bar is shown or not."""
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    return tqdm(iterable, **kwargs)
