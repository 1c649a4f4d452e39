"""Lightning's logging interval follows a short epoch: a run whose epoch has fewer than 50
batches logs every epoch's batches, without Lightning's warning that the epoch is shorter than
``log_every_n_steps``; a value the user gave is kept."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from solo_bayesncl.config.settings import run_spec
from solo_bayesncl.training.fit import train_batches_per_process
from solo_bayesncl.training.trainer import LIGHTNING_LOG_EVERY_N_STEPS, build_trainer

pytest.importorskip("lightning", reason="needs Lightning (installed with solo-learn)")


def _cfg(**keys):
    return run_spec(
        OmegaConf.create(
            {
                "accelerator": "cpu",
                "devices": [0],
                "strategy": "auto",
                "max_epochs": 1,
                "data": {"format": "image_folder"},
                **keys,
            }
        )
    ).trainer


@pytest.mark.parametrize(
    ("keys", "train_batches", "expected"),
    [
        ({}, 9, 9),
        ({}, 200, LIGHTNING_LOG_EVERY_N_STEPS),
        ({}, None, LIGHTNING_LOG_EVERY_N_STEPS),
        ({}, 0, 1),
        ({"log_every_n_steps": 3}, 9, 3),
        ({"log_every_n_steps": 80}, 9, 80),
        ({"limit_train_batches": 2}, 9, 2),
        ({"limit_train_batches": 0.5}, 9, 4),
    ],
)
def test_the_logging_interval_is_capped_at_the_epoch_unless_given(keys, train_batches, expected):
    trainer = build_trainer(_cfg(**keys), [], [], train_batches=train_batches)
    assert trainer.log_every_n_steps == expected


def test_lightnings_default_interval_is_the_one_named_here():
    assert build_trainer(_cfg(), [], []).log_every_n_steps == LIGHTNING_LOG_EVERY_N_STEPS


def _loader(n: int, batch: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(n, 1)), batch_size=batch, drop_last=True)


class _Stream(IterableDataset):
    def __iter__(self):
        yield torch.zeros(1)


def test_batches_per_process_from_a_loader_a_data_module_and_several_processes():
    assert train_batches_per_process({"train_dataloaders": _loader(21, 2)}, 1, False) == 10
    assert train_batches_per_process({"train_dataloaders": _loader(21, 2)}, 2, False) == 5
    assert train_batches_per_process({"train_dataloaders": _loader(21, 2)}, 4, False) == 2

    class Module:
        def train_dataloader(self):
            return _loader(12, 4)

    assert train_batches_per_process({"datamodule": Module()}, 1, False) == 3
    assert train_batches_per_process({"datamodule": Module()}, 1, True) is None  # DALI's
    stream = {"train_dataloaders": DataLoader(_Stream(), batch_size=None)}
    assert train_batches_per_process(stream, 1, False) is None
