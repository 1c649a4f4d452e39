"""The interpretability callback reads an evaluated epoch's validation forwards instead of a pass
of its own, and logs exactly the figures of its own pass; where the validation did not read the
whole set it makes its own pass."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import compose, tiny_pretrain_overrides

pytestmark = pytest.mark.solo


def _pretrain(image_folder: Path, out: Path, extra: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """A 2-epoch BayesNCL pretraining evaluated every epoch (with the converged probe, which
    reads the backbone features too); returns each logged ``interp/*`` column by epoch."""
    from solo_bayesncl.training.pretrain import pretrain
    from solo_bayesncl.training.summary import csv_log_dir

    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [
            *tiny_pretrain_overrides(image_folder, out),
            "max_epochs=2",
            "seed=7",
            "interpretability.enabled=True",
            "interpretability.frequency=1",
            "++interpretability.probe=True",
            "wandb.enabled=False",
            "++enable_progress_bar=False",
            *extra,
        ],
    )
    trainer = pretrain(cfg)
    with open(csv_log_dir(trainer) / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("interp/semantic_consistency")]
    columns = sorted(k for k in rows[0] if k.startswith("interp/"))
    return {k: [r[k] for r in rows] for k in columns}


@pytest.mark.long
def test_validation_forwards_give_the_figures_of_the_callbacks_own_pass(
    image_folder, tmp_path, monkeypatch
):
    from solo_bayesncl.training import callback

    own_passes: list[int] = []
    original = callback.extract_representations

    def counting(model, loader, *args, **kwargs):
        if kwargs.get("feature") != "backbone":  # the probe's training images aside
            own_passes.append(len(loader.dataset))
        return original(model, loader, *args, **kwargs)

    monkeypatch.setattr(callback, "extract_representations", counting)
    shared = _pretrain(image_folder, tmp_path / "shared")
    assert own_passes == []  # both evaluations read the epoch's validation

    monkeypatch.setattr(callback.InterpretabilityCallback, "share_validation", False)
    own = _pretrain(image_folder, tmp_path / "own")
    assert own_passes == [36, 36]
    assert len(own["interp/semantic_consistency"]) == 2
    assert "interp/probe_top1" in own and "interp/gate_open_ratio" in own
    assert shared == own  # every figure of both epochs, as logged

    monkeypatch.setattr(callback.InterpretabilityCallback, "share_validation", True)
    own_passes.clear()
    partial = _pretrain(image_folder, tmp_path / "partial", ("++limit_val_batches=1",))
    assert own_passes == [36, 36]  # the validation read 8 of 36 images: passes of its own
    assert partial == own
