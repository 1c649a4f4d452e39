"""gate_measures refuses a checkpoint without a gate, naming it and its method, before any data
is read."""

from __future__ import annotations

import pytest

import solo_bayesncl.evaluation.background as background
from solo_bayesncl.config.settings import saved_run_spec
from study.background_gates import gate_measures


def test_a_method_without_a_gate_is_refused_before_any_data_is_read(monkeypatch, tmp_path):
    spec = saved_run_spec({"method": "ncl", "data": {"dataset": "fashion-mnist-scenes"}})
    monkeypatch.setattr(background, "scenes_checkpoint", lambda ckpt, device: (spec, object()))

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read")

    monkeypatch.setattr(background, "build_val_dataset", no_data)
    ckpt = tmp_path / "ncl-ep=49.ckpt"
    with pytest.raises(ValueError, match=r"ncl-ep=49.ckpt: method ncl has no gate to measure"):
        gate_measures(ckpt)
