"""A Ctrl-C is never lost in a fit. C code that probes an attribute swallows what is raised inside
the probe: ``torch.as_tensor`` asks a sequence for ``__array__``, and when the sequence has a
Python ``__getattr__`` (a config's list was ``Normalize``'s mean and std in the data pipeline,
until ``per_image_transform`` made them tuples) that may be where Python raises the
KeyboardInterrupt of a Ctrl-C. The run then trained to its end and said "finished".
``stop_together`` marks the Ctrl-C and raises it again after the batch."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from solo_bayesncl.training.trainer import stop_together

pytest.importorskip("lightning", reason="needs Lightning (installed with solo-learn)")


class _CtrlCInsideAProbe(list):
    """A list whose attribute probe is where a Ctrl-C lands: it sends this process SIGINT, and
    Python runs the handler, which raises KeyboardInterrupt, inside the probe."""

    def __getattr__(self, key: str):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):  # the handler runs between these bytecodes, at the latest
            pass
        raise AttributeError(key)


@pytest.fixture(autouse=True)
def _ctrl_c_raises():
    """SIGINT raising KeyboardInterrupt, as in a terminal, even where the tests were started in
    the background (``make test &``, where SIGINT is ignored); the test runner's after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_inside_an_attribute_probe_is_swallowed_by_torch():
    """Why the callback is needed: without it the KeyboardInterrupt never reaches the caller."""
    assert torch.as_tensor(_CtrlCInsideAProbe([1.0, 2.0])).tolist() == [1.0, 2.0]


def _fit(ctrl_c_at: str, callbacks: list):
    from lightning.pytorch import LightningModule, Trainer

    class Tiny(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, index):
            if ctrl_c_at == "training" and self.global_step == 1:
                torch.as_tensor(_CtrlCInsideAProbe([0.5]))
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, index):
            if ctrl_c_at == "validation" and self.current_epoch == 1 and index == 0:
                torch.as_tensor(_CtrlCInsideAProbe([0.5]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Tiny(), loader, loader)
    return trainer


@pytest.mark.parametrize(
    ("ctrl_c_at", "stopped_at"),
    [("training", (0, 2)), ("validation", (1, 8))],  # epoch, step: the batch the Ctrl-C came in
)
def test_a_ctrl_c_swallowed_inside_a_step_stops_the_fit_after_that_batch(ctrl_c_at, stopped_at):
    unguarded = _fit(ctrl_c_at, [])
    assert not unguarded.interrupted and unguarded.global_step == 12  # trained to the end

    trainer = _fit(ctrl_c_at, [stop_together()])
    assert trainer.interrupted
    assert (trainer.current_epoch, trainer.global_step) == stopped_at
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_a_ctrl_c_that_lands_normally_still_stops_at_once():
    from lightning.pytorch import Callback

    class CtrlC(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, index):
            if trainer.global_step == 1:
                os.kill(os.getpid(), signal.SIGINT)

    trainer = _fit("nowhere", [stop_together(), CtrlC()])
    assert trainer.interrupted and trainer.global_step == 1  # before the second step trained


def test_a_fit_started_with_ctrl_c_ignored_keeps_it_ignored():
    """``nohup python main_pretrain.py ... &`` ignores SIGINT; the fit must not take it back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    trainer = _fit("training", [stop_together()])
    assert not trainer.interrupted and trainer.global_step == 12
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
