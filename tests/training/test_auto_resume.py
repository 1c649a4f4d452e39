"""Auto-resume resumes only the same run: the reproduction of a prior sweep in one checkpoint
folder, where solo-learn's own resumer "resumed" the second run and trained nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FASHION_MNIST, TINY_FASHION_MNIST, compose

pytestmark = [
    pytest.mark.slow,
    pytest.mark.solo,
    pytest.mark.skipif(
        not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file(),
        reason="needs Debian's Fashion-MNIST (dataset-fashion-mnist)",
    ),
]

# the issue's $T, with the checkpoints in the test's folder
T = TINY_FASHION_MNIST
# two training steps and one validation batch per run keep the test short; the data, the model
# and every setting the issue names stay as they are
SHORT = ["++limit_train_batches=2", "++limit_val_batches=1", "++num_sanity_val_steps=0"]
SWEEP = [
    "data.fraction=0.02",
    "method_kwargs.bayesian_prior_prob=0.3",
    "method_kwargs.temperature=0.5",
    "method_kwargs.non_neg=relu",
]


def _pretrain(overrides: list[str], out: Path):
    from solo_bayesncl.training.pretrain import pretrain

    overrides = overrides + SHORT + [f"checkpoint.dir={out}"]
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
    assert cfg.auto_resume.enabled  # the shipped default
    return pretrain(cfg)


def test_a_run_with_other_settings_is_not_resumed(tmp_path, capsys):
    first = _pretrain([*T, "name=base"], tmp_path)
    assert first.global_step > 0
    capsys.readouterr()

    second = _pretrain([*T, "name=base", *SWEEP], tmp_path)
    said = capsys.readouterr().out
    assert "auto-resume: no earlier run" in said and "starting a new run" in said
    for change in (
        "data.fraction: 0.01 -> 0.02",
        "method_kwargs.bayesian_prior_prob: 0.8 -> 0.3",
        "method_kwargs.temperature: 0.2 -> 0.5",
        "method_kwargs.non_neg: 'rep_relu' -> 'relu'",
    ):
        assert change in said
    assert second.ckpt_path is None  # trained from scratch
    assert second.global_step == first.global_step == 2
    folders = sorted(p.parent for p in (tmp_path / "bayesncl").glob("*/*.ckpt"))
    assert len(folders) == 2

    # the same settings again (another wandb project: logging only) resume the second run
    third = _pretrain([*T, "name=base", *SWEEP, "wandb.project=elsewhere"], tmp_path)
    said = capsys.readouterr().out
    assert "auto-resume: resuming the same run from" in said
    assert Path(third.ckpt_path).parent in folders
    assert third.global_step == second.global_step  # finished: nothing trained again
