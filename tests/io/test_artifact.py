"""Export of a plain state dict into a zoo artifact, and reading it back (no solo-learn)."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from torch import nn

from solo_bayesncl.cli.zoo import main
from solo_bayesncl.zoo import (
    ARTIFACT_FORMAT,
    ArtifactError,
    ManifestError,
    ZooEntry,
    export_state_dict,
    is_artifact,
    open_artifact,
    read_artifact,
)


def make_cfg(method: str = "simclr") -> dict:
    return {
        "method": method,
        "backbone": {"name": "resnet18", "kwargs": {}},
        "data": {"dataset": "cifar10", "num_classes": 10},
        "method_kwargs": {"proj_hidden_dim": 16, "proj_output_dim": 8},
    }


def make_state(seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    net = nn.ModuleDict(
        {
            "backbone": nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)),
            "projector": nn.Linear(4, 8),
        }
    )
    net["backbone"][1].running_mean.uniform_()
    net["backbone"][1].num_batches_tracked.fill_(7)
    return net.state_dict()


def test_export_writes_artifact_hash_and_entry(tmp_path):
    state = make_state()
    res = export_state_dict(
        state,
        make_cfg(),
        "simclr-toy",
        tmp_path,
        metrics={"val_acc1": 12.5, "knn": {"top1": 10}},
        urls=["https://example.org/zoo/"],
    )
    data = res.path.read_bytes()
    assert res.path == tmp_path / "simclr-toy.pt"
    assert res.sha256 == hashlib.sha256(data).hexdigest()
    assert res.size == len(data)
    assert res.sha256_path.read_text() == f"{res.sha256}  simclr-toy.pt\n"
    entry = json.loads(res.entry_path.read_text())
    assert entry == res.entry
    assert entry["sha256"] == res.sha256 and entry["size"] == len(data)
    assert entry["urls"] == ["https://example.org/zoo/simclr-toy.pt"]
    assert entry["metrics"] == {"val_acc1": 12.5, "knn/top1": 10}
    assert (entry["method"], entry["dataset"], entry["backbone"]) == (
        "simclr",
        "cifar10",
        "resnet18",
    )
    assert ZooEntry.from_dict(entry).name == "simclr-toy"

    raw = torch.load(res.path, weights_only=True)  # no pickled code needed
    assert raw["format"] == ARTIFACT_FORMAT and raw["omitted"] == {}
    cfg, loaded, metrics = read_artifact(res.path)
    assert cfg == make_cfg() and metrics == entry["metrics"]
    assert loaded.keys() == state.keys()
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key
    assert is_artifact(res.path)


def test_fp16_halves_weights_and_restores_float32(tmp_path):
    state = make_state()
    state["projector.big"] = torch.randn(256, 64)  # large enough to dominate zip padding
    full = export_state_dict(state, make_cfg(), "full", tmp_path)
    half = export_state_dict(state, make_cfg(), "half", tmp_path, fp16=True)
    stored = open_artifact(half.path, restore=False).state_dict
    assert stored["projector.weight"].dtype == torch.float16
    assert stored["backbone.1.num_batches_tracked"].dtype == torch.int64
    assert half.entry["dtype"] == "float16"
    restored = open_artifact(half.path).state_dict
    assert restored["projector.weight"].dtype == torch.float32
    torch.testing.assert_close(
        restored["projector.weight"], state["projector.weight"], atol=1e-3, rtol=1e-3
    )
    assert int(restored["backbone.1.num_batches_tracked"]) == 7
    weights = sum(v.numel() * 2 for v in state.values() if v.is_floating_point())
    assert full.size - half.size >= weights * 0.9  # the float bytes were halved


def test_momentum_state_is_dropped_then_refilled(tmp_path):
    state = make_state()
    state["momentum_projector.weight"] = torch.randn(8, 4)
    state["momentum_projector.bias"] = torch.randn(8)
    state["queue"] = torch.randn(2, 8, 32)
    state["queue_ptr"] = torch.zeros(1, dtype=torch.long)
    res = export_state_dict(state, make_cfg("mocov2plus"), "moco-toy", tmp_path)
    art = open_artifact(res.path)
    assert set(art.omitted) == {
        "momentum_projector.weight",
        "momentum_projector.bias",
        "queue",
        "queue_ptr",
    }
    assert art.omitted["queue"] == {"shape": [2, 8, 32], "dtype": "float32"}
    assert torch.equal(art.state_dict["momentum_projector.weight"], state["projector.weight"])
    assert torch.equal(art.state_dict["queue"], torch.zeros(2, 8, 32))
    assert art.state_dict["queue_ptr"].dtype == torch.long
    assert art.state_dict.keys() == state.keys()

    kept = export_state_dict(
        state, make_cfg("mocov2plus"), "moco-full", tmp_path, keep_momentum=True
    )
    assert torch.equal(open_artifact(kept.path).state_dict["queue"], state["queue"])
    assert kept.size > res.size


def test_export_errors_name_the_problem(tmp_path):
    state = make_state()
    with pytest.raises(ArtifactError, match=r"method 'byol' is not one of .*bayesncl"):
        export_state_dict(state, make_cfg("byol"), "x", tmp_path)
    cfg = make_cfg()
    del cfg["backbone"]
    with pytest.raises(ArtifactError, match="backbone.name"):
        export_state_dict(state, cfg, "x", tmp_path)
    with pytest.raises(ArtifactError, match="metric 'acc' must be a number"):
        export_state_dict(state, make_cfg(), "x", tmp_path, metrics={"acc": "good"})
    with pytest.raises(ManifestError, match="not an https URL"):
        export_state_dict(state, make_cfg(), "x", tmp_path, urls=["ftp://example.org/x.pt"])
    with pytest.raises(ManifestError, match="name must match"):
        export_state_dict(state, make_cfg(), "Bad Name", tmp_path)
    with pytest.raises(ArtifactError, match="not tensors"):
        export_state_dict({"a": 1}, make_cfg(), "x", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written on a refused export


def test_non_artifacts_are_refused(tmp_path):
    plain = tmp_path / "plain.pt"
    torch.save({"state_dict": make_state()}, plain)
    with pytest.raises(ArtifactError, match="expected 'solo-bayesncl-zoo/1'"):
        open_artifact(plain)
    code = tmp_path / "code.pt"
    torch.save({"format": ARTIFACT_FORMAT, "obj": nn.Linear(2, 2)}, code)  # a pickled module
    with pytest.raises(ArtifactError, match="weights_only"):
        open_artifact(code)
    assert not is_artifact(plain) and not is_artifact(code) and not is_artifact(tmp_path / "none")


def test_cli_verify(tmp_path, capsys):
    res = export_state_dict(make_state(), make_cfg(), "toy", tmp_path)
    assert main(["verify", str(res.path), "--sha256", res.sha256]) == 0
    assert "OK: sha256 matches" in capsys.readouterr().out
    assert main(["verify", str(res.path), "--sha256", "f" * 64]) == 1
    assert f"expected {'f' * 64}, got {res.sha256}" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "toy.pt.sha256")]) == 2
    assert "is not a zoo artifact" in capsys.readouterr().err


def test_reexport_of_an_artifact_to_fp16_keeps_figures(tmp_path, monkeypatch):
    from solo_bayesncl.zoo import export, export_checkpoint

    # toy weights build no model: the checks of a real checkpoint are test_bad_input's
    monkeypatch.setattr(export, "load_method", lambda loaded: None)

    state = make_state()
    first = export_state_dict(
        state, make_cfg("ncl"), "ncl-toy", tmp_path / "a", metrics={"acc": 3.0}
    )
    again = export_checkpoint(first.path, name="ncl-toy-fp16", out_dir=tmp_path / "b", fp16=True)
    assert again.entry["metrics"] == {"acc": 3.0} and again.entry["method"] == "ncl"
    assert again.entry["config"] == first.entry["config"]
    restored = open_artifact(again.path).state_dict
    torch.testing.assert_close(
        restored["projector.weight"], state["projector.weight"], atol=1e-3, rtol=1e-3
    )
