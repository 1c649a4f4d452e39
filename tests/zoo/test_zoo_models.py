"""End to end with real solo-learn models: export a checkpoint of each zoo method, serve it on
127.0.0.1, download it by entry, load it as a method and as a backbone, and compare outputs with
the model it was exported from."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("solo", reason="needs upstream solo-learn")

from omegaconf import OmegaConf  # noqa: E402

from solo_bayesncl.cli.zoo import main  # noqa: E402
from solo_bayesncl.zoo import (  # noqa: E402
    ZooEntry,
    download,
    export_checkpoint,
    load_artifact,
    load_model,
    open_artifact,
)

try:  # the loopback server lives with the download tests
    from test_download import serving
except ImportError:  # tests/ imported as a package
    from tests.zoo.test_download import serving

pytestmark = pytest.mark.solo


def solo_cfg(method: str, **method_kwargs):
    """A small solo-learn pretraining config for ``method`` (ResNet-18, CIFAR stem)."""
    from solo.methods import METHODS

    import solo_bayesncl  # noqa: F401  - registers bayesncl and ncl

    kwargs = {"proj_hidden_dim": 32, "proj_output_dim": 16, "temperature": 0.2, **method_kwargs}
    if method == "mocov2plus":
        kwargs.setdefault("queue_size", 64)
    cfg = OmegaConf.create(
        {
            "name": f"{method}-test",
            "method": method,
            "backbone": {"name": "resnet18", "kwargs": {}},
            "data": {
                "dataset": "cifar10",
                "num_classes": 10,
                "num_large_crops": 2,
                "num_small_crops": 0,
            },
            "optimizer": {
                "name": "lars",
                "batch_size": 8,
                "lr": 0.3,
                "weight_decay": 1e-4,
                "classifier_lr": 0.1,
                "kwargs": {"eta": 0.02, "clip_lr": True, "exclude_bias_n_norm": True},
            },
            "scheduler": {"name": "warmup_cosine"},
            "momentum": {"base_tau": 0.99, "final_tau": 1.0},
            "max_epochs": 1,
            "method_kwargs": kwargs,
        }
    )
    return METHODS[method].add_and_assert_specific_cfg(cfg)


def make_model(method: str, seed: int = 0, **method_kwargs):
    from solo.methods import METHODS

    torch.manual_seed(seed)
    cfg = solo_cfg(method, **method_kwargs)
    model = METHODS[method](cfg)
    for module in model.modules():  # non-trivial BN statistics, so eval mode is tested
        if isinstance(module, torch.nn.BatchNorm2d | torch.nn.BatchNorm1d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model.eval(), cfg


def save_run(model, cfg, folder: Path, metrics: dict | None = None) -> Path:
    """What solo-learn's Checkpointer leaves: a Lightning .ckpt and args.json beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    ckpt = folder / f"{cfg.name}-abcd1234-ep=0.ckpt"
    state = model.state_dict()
    torch.save(
        {
            "epoch": 0,
            "global_step": 10,
            "pytorch-lightning_version": "2.1.2",
            "state_dict": state,
            "optimizer_states": [{"state": {0: {"momentum_buffer": torch.ones(1000)}}}],
            "lr_schedulers": [{"last_epoch": 10}],
        },
        ckpt,
    )
    (folder / "args.json").write_text(json.dumps(OmegaConf.to_container(cfg)))
    if metrics is not None:
        (folder / "metrics.json").write_text(json.dumps(metrics))
    return ckpt


def outputs(model, x: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(x)
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


def loopback_entry(result, url: str) -> ZooEntry:
    return ZooEntry.from_dict(dict(result.entry, urls=[url]), require_https=False)


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SOLO_BAYESNCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SOLO_BAYESNCL_OFFLINE", raising=False)


@pytest.mark.parametrize("method", ["bayesncl", "mocov2plus"])
def test_served_artifact_reproduces_the_model(method, tmp_path):
    model, cfg = make_model(method)
    ckpt = save_run(model, cfg, tmp_path / "run", metrics={"val_acc1": 11.0})
    result = export_checkpoint(ckpt, name=f"{method}-toy", out_dir=tmp_path / "export")
    assert result.entry["method"] == method
    assert result.entry["metrics"] == {"val_acc1": 11.0}
    stored = open_artifact(result.path, restore=False)
    assert not any(k.startswith("momentum_") or k == "queue" for k in stored.state_dict)

    x = torch.randn(2, 3, 16, 16)
    expected = outputs(model, x)
    with serving({"/a.pt": ("ok", result.path.read_bytes())}) as srv:
        entry = loopback_entry(result, srv.url("/a.pt"))
        path = download(entry, progress=False)
        assert srv.requests == ["/a.pt"]
        loaded = load_model(entry, as_="method", progress=False)  # cache hit
        backbone = load_model(entry, as_="backbone", progress=False)
        assert srv.requests == ["/a.pt"]
    assert path.read_bytes() == result.path.read_bytes()

    assert type(loaded) is type(model) and not loaded.training
    got = outputs(loaded, x)
    assert got.keys() == expected.keys() and "feats" in got
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6, msg=key)
    with torch.no_grad():  # same input layout on both sides (forward uses channels_last)
        torch.testing.assert_close(backbone(x), model.backbone(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", ["simclr", "ncl"])
def test_exported_artifact_reproduces_the_model(method, tmp_path):
    """The other two zoo methods, without the server (the transfer is tested above)."""
    model, cfg = make_model(method)
    result = export_checkpoint(save_run(model, cfg, tmp_path / "run"), name="m", out_dir=tmp_path)
    assert result.entry["method"] == method
    x = torch.randn(2, 3, 16, 16)
    loaded = load_artifact(result.path)
    assert type(loaded) is type(model)
    expected, got = outputs(model, x), outputs(loaded, x)
    assert got.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6, msg=key)


def test_fp16_export_is_close_and_smaller(tmp_path):
    model, cfg = make_model("bayesncl")
    ckpt = save_run(model, cfg, tmp_path / "run")
    full = export_checkpoint(ckpt, name="b32", out_dir=tmp_path / "e")
    half = export_checkpoint(ckpt, name="b16", out_dir=tmp_path / "e", fp16=True)
    assert half.size < 0.55 * full.size
    assert half.entry["metrics"] == {}  # nothing beside the checkpoint, nothing invented
    x = torch.randn(2, 3, 16, 16)
    ref = outputs(model, x)["feats"]
    got = outputs(load_artifact(half.path), x)["feats"]
    cos = torch.nn.functional.cosine_similarity(got, ref, dim=1)
    assert cos.min() > 0.999


@pytest.mark.parametrize(("method", "kwargs"), [("ncl", {"non_neg": "rep_relu"}), ("bayesncl", {})])
def test_official_layout_exports_as_plugin_method(method, kwargs, tmp_path):
    """The official NCL and BayesNCL codes save ``method: simclr`` (with ``non_neg``, resp. gate
    settings and a ``gating_head``): the zoo entry is the plugin's method."""
    model, cfg = make_model(method, **kwargs)
    official = OmegaConf.to_container(cfg)
    official["method"] = "simclr"
    ckpt = save_run(model, OmegaConf.create(official), tmp_path / "run")
    result = export_checkpoint(ckpt, name=f"{method}-official", out_dir=tmp_path / "e")
    assert result.entry["method"] == method and result.entry["config"]["method"] == method
    x = torch.randn(2, 3, 16, 16)
    got = outputs(load_artifact(result.path), x)
    torch.testing.assert_close(got["z"], outputs(model, x)["z"], rtol=0, atol=1e-6)


def test_cli_export_prints_a_valid_entry(tmp_path, capsys):
    model, cfg = make_model("simclr")
    ckpt = save_run(model, cfg, tmp_path / "run")
    metrics = tmp_path / "eval.json"
    metrics.write_text(json.dumps({"linear": {"top1": 87.9}}))
    out = tmp_path / "e"
    argv = ["export", str(ckpt), "--name", "simclr-cli", "--out", str(out), "--fp16"]
    argv += ["--url", "https://example.org/w/", "--metrics", str(metrics)]
    assert main(argv) == 0
    printed = capsys.readouterr()
    entry = json.loads((out / "simclr-cli.entry.json").read_text())
    assert entry["sha256"] in printed.out and "next: upload" in printed.err
    assert entry["urls"] == ["https://example.org/w/simclr-cli.pt"]
    assert entry["metrics"] == {"linear/top1": 87.9} and entry["dtype"] == "float16"
    ZooEntry.from_dict(entry)
    assert main(["verify", str(out / "simclr-cli.pt"), "--sha256", entry["sha256"]]) == 0


def test_module_entry_point_runs(monkeypatch, capsys):
    """``python -m solo_bayesncl.zoo`` (run in-process: a new interpreter re-imports solo-learn)."""
    monkeypatch.setattr(sys, "argv", ["python -m solo_bayesncl.zoo", "list", "--json"])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("solo_bayesncl.zoo", run_name="__main__")
    assert info.value.code == 0
    assert isinstance(json.loads(capsys.readouterr().out), list)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_loads_on_gpu(tmp_path):
    model, cfg = make_model("bayesncl")
    result = export_checkpoint(save_run(model, cfg, tmp_path / "run"), name="g", out_dir=tmp_path)
    gpu = load_artifact(result.path, device="cuda")
    assert next(gpu.parameters()).device.type == "cuda"
    x = torch.randn(2, 3, 16, 16)
    got = outputs(gpu, x.cuda())["feats"].cpu()
    torch.testing.assert_close(got, outputs(model, x)["feats"], rtol=1e-3, atol=1e-3)
