"""docs/walkthrough.ipynb runs, top to bottom, against the code as it is (its cells assert what they show)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "walkthrough.ipynb"


@pytest.mark.slow
def test_the_walkthrough_runs(tmp_path, monkeypatch):
    # Its own reference, never the checkpoints/ of the checkout running the tests: the default recipe, trained here on
    # the machine's own kernels (the notebook would train it on the portable ones, in a child process: 2.3x the time;
    # the notebook's checks hold for either reference).
    from tinygrpo.sft.train import SFTConfig, train_reference

    train_reference(SFTConfig(output_dir=str(tmp_path / "reference"), kernels="native"), verbose=False)
    monkeypatch.setenv("TINYGRPO_REFERENCE", str(tmp_path / "reference"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # a failing cell raises CellExecutionError with its traceback
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "ratios all exactly 1: True" in outputs and "sum_i A_i log p(o_i)" in outputs
    assert (tmp_path / "reference" / "config.json").is_file()
