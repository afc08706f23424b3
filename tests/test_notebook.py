"""notebooks/quickstart.ipynb runs top to bottom on the CPU."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUAUG_DEVICE", "cpu")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # tqdm.auto, imported in a notebook without ipywidgets, warns "IProgress not found" (even for a
    # run with progress=False): gpuaug's bars must not put that advice in a user's notebook.
    stderr = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stderr")
    assert "IProgress" not in stderr and "TqdmWarning" not in stderr, stderr
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) >= 4  # before/after, per-sample, clip, benchmark chart
