"""A pretraining stopped within an epoch resumes from its interval checkpoint and ends with the
weights of the run that was never stopped, bit for bit.

The run: BayesNCL (its gate draws noise at every step), 2 epochs of 3 steps, an interval
checkpoint after every step (``checkpoint.time_interval_s`` of a microsecond; the last step of an
epoch is left to the epoch's checkpoint). The stopped run raises KeyboardInterrupt (what Ctrl-C
raises) at the end of the second step of epoch 1, before that step's checkpoint is written, so
its newest checkpoint is the interval one after step 4 (epoch 1, one batch trained): the resumed
run has to skip that batch, redo the lost step and draw the same augmentations and gate noise as
the run that was never stopped. Once on the batched path (Fashion-MNIST in memory) and once on
solo-learn's per-image path (an image folder, ``data.num_workers=0``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import FASHION_MNIST, TINY_FASHION_MNIST, compose, image_folder_overrides

pytestmark = [pytest.mark.slow, pytest.mark.solo]

SHORT = [
    "max_epochs=2",
    "++limit_train_batches=3",
    "++limit_val_batches=1",
    "++num_sanity_val_steps=0",
    "method_kwargs.proj_hidden_dim=64",
    "method_kwargs.proj_output_dim=32",
    "wandb.enabled=False",
    "++enable_progress_bar=False",
]
EVERY_STEP = "++checkpoint.time_interval_s=0.000001"
STOP_AT = (1, 1)  # epoch, batch index: the fifth step


def _stop_at(epoch: int, batch_idx: int):
    from lightning.pytorch import Callback

    class Stop(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, index) -> None:
            if (trainer.current_epoch, index) == (epoch, batch_idx):
                raise KeyboardInterrupt  # before this step's interval checkpoint is saved

    return Stop()


def _pretrain(overrides: list[str], out: Path, callbacks=()):
    from solo_bayesncl.training.pretrain import pretrain

    cfg = compose(
        "scripts/pretrain/cifar", "bayesncl.yaml", [*overrides, *SHORT, f"checkpoint.dir={out}"]
    )
    return pretrain(cfg, extra_callbacks=list(callbacks))


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.lightning_module.state_dict().items()}


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.ckpt"))


def _stopped_and_resumed_equals_uninterrupted(data: list[str], tmp_path: Path, capsys) -> None:
    whole = _pretrain([*data, "++checkpoint.time_interval_s=0"], tmp_path / "whole")
    assert whole.global_step == 6
    expected = _weights(whole)

    root = tmp_path / "stopped"
    stopped = _pretrain([*data, EVERY_STEP], root, [_stop_at(*STOP_AT)])
    assert stopped.interrupted and stopped.global_step == 5
    (first,) = (root / "bayesncl").iterdir()
    # bounded: the epoch's checkpoint, and only the newest interval one (epoch 0's was removed
    # once its epoch's checkpoint existed)
    files = _files(first)
    assert len(files) == 2, files
    assert files[0].endswith(f"{first.name}-ep=0.ckpt")
    assert files[1].endswith(f"{first.name}-ep=1-step=4.ckpt")
    capsys.readouterr()

    resumed = _pretrain([*data, EVERY_STEP], root)
    said = capsys.readouterr().out
    interval = first / files[1]
    assert f"auto-resume: resuming the same run from {interval}" in said
    assert said.count("resumed from ") == 1
    assert f"resumed from epoch 1, step 4 ({interval})\n" in said
    assert resumed.global_step == 6 and not resumed.interrupted
    got = _weights(resumed)
    assert got.keys() == expected.keys()
    different = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert different == []
    # the resumed run continues in its own folder, which ends with the epochs' checkpoints: the
    # interval one it resumed from went once its epoch's end was saved
    assert list((root / "bayesncl").iterdir()) == [first]
    assert _files(first) == [files[0], files[0].replace("ep=0", "ep=1")]


@pytest.mark.skipif(
    not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file(),
    reason="needs Debian's Fashion-MNIST (dataset-fashion-mnist)",
)
def test_batched_path_resumed_within_an_epoch_equals_the_uninterrupted_run(tmp_path, capsys):
    _stopped_and_resumed_equals_uninterrupted(TINY_FASHION_MNIST, tmp_path, capsys)


def test_per_image_path_resumed_within_an_epoch_equals_the_uninterrupted_run(
    image_folder, tmp_path, capsys
):
    data = [
        *image_folder_overrides(image_folder),
        "data.num_workers=0",
        "optimizer.batch_size=8",
        "accelerator=cpu",
    ]
    _stopped_and_resumed_equals_uninterrupted(data, tmp_path, capsys)
