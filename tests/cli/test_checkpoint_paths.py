"""A checkpoint path as Lightning names it (``NAME-ep=1.ckpt``) may be given unquoted: Hydra's
override grammar refuses an ``=`` in a value, so the commands quote such a path for it."""

from __future__ import annotations

import pytest
from helpers import run_command

from solo_bayesncl.cli.console import _quoted_paths


def test_a_path_with_an_equals_sign_is_quoted_and_nothing_else_changes():
    argv = [
        "pretrained_feature_extractor=/runs/x/bayesncl-ep=1.ckpt",
        "++resume_from_checkpoint=runs/a-ep=2-step=8.ckpt",
        "max_epochs=2",
        "data.train_path=/data/train",
        "pretrained_feature_extractor='/already/quoted-ep=1.ckpt'",
        "key=${oc.env:HOME}/a=b",
        "--config-path=/configs/a=b",
    ]
    assert _quoted_paths(argv) == [
        "pretrained_feature_extractor='/runs/x/bayesncl-ep=1.ckpt'",
        "++resume_from_checkpoint='runs/a-ep=2-step=8.ckpt'",
        *argv[2:],
    ]


@pytest.mark.solo
def test_main_linear_reads_an_unquoted_lightning_checkpoint_path(tmp_path):
    missing = tmp_path / "bayesncl-fashion-mnist-ep=1.ckpt"
    result = run_command(
        ["main_linear.py", f"pretrained_feature_extractor={missing}", "accelerator=cpu"]
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"main_linear.py: error: checkpoint {missing} does not exist"
    )
