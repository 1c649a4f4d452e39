"""Nothing a user wrote is lost: zoo exports are not replaced silently, a dashboard rebuild removes
only the files it wrote, an interrupted report leaves the earlier one intact, and an output that
cannot be written fails before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from solo_bayesncl.dashboard import build_dashboard
from solo_bayesncl.dashboard.bundle import write_feature_bundle


def _unwritable(tmp_path: Path) -> Path:
    """A folder path no file can be created in, even as root."""
    if os.geteuid() == 0:
        if not Path("/sys").is_dir():
            pytest.skip("needs /sys (read-only for root) to test an unwritable --out")
        return Path("/sys/solo-bayesncl-out")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder / "out"


# ---------------------------------------------------------------- zoo export


def _fake_checkpoint(folder: Path) -> Path:
    """A solo-learn-layout checkpoint readable without solo-learn: weights and args.json."""
    folder.mkdir(parents=True)
    path = folder / "last.ckpt"
    torch.save({"state_dict": {"backbone.w": torch.ones(3), "projector.w": torch.ones(2)}}, path)
    cfg = {"method": "ncl", "backbone": {"name": "resnet18"}, "data": {"dataset": "cifar10"}}
    (folder / "args.json").write_text(json.dumps(cfg))
    return path


def test_zoo_export_refuses_to_replace_an_export_without_overwrite(tmp_path, capsys, monkeypatch):
    from solo_bayesncl.cli.zoo import main
    from solo_bayesncl.zoo import export

    # fake weights build no model: the checks of a real checkpoint are test_bad_input's
    monkeypatch.setattr(export, "load_method", lambda loaded: None)

    ckpt = _fake_checkpoint(tmp_path / "run")
    out = tmp_path / "exports"
    args = ["export", str(ckpt), "--name", "ncl-test", "--out", str(out)]
    assert main(args) == 0
    artifact = out / "ncl-test.pt"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {artifact} exists (an earlier export named 'ncl-test'); pass --overwrite to "
        "replace it, or choose another --name\n"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main([*args, "--overwrite"]) == 0


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad-json"])
def test_zoo_export_of_a_broken_checkpoint_is_one_line(tmp_path, capsys, damage):
    from solo_bayesncl.cli.zoo import main

    ckpt = _fake_checkpoint(tmp_path / "run")
    if damage == "garbage":
        ckpt.write_bytes(b"not a checkpoint at all")
    elif damage == "truncated":
        ckpt.write_bytes(ckpt.read_bytes()[:200])
    else:
        (ckpt.parent / "args.json").write_text("{method: ncl")
    assert main(["export", str(ckpt), "--name", "x", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "Traceback" not in err
    if damage == "bad-json":
        assert f"{ckpt.parent / 'args.json'}: not a readable JSON config" in err
    else:
        assert f"{ckpt}: not a readable PyTorch checkpoint" in err


def test_zoo_export_to_an_unwritable_folder_fails_first(tmp_path, capsys, monkeypatch):
    from solo_bayesncl.cli.zoo import main
    from solo_bayesncl.io import checkpoints

    def never(*args, **kwargs):
        raise AssertionError("the checkpoint was read before the output was checked")

    monkeypatch.setattr(checkpoints, "load_checkpoint", never)
    out = _unwritable(tmp_path)
    assert main(["export", str(tmp_path / "x.ckpt"), "--name", "x", "--out", str(out)]) == 2
    assert "cannot write in" in capsys.readouterr().err


# ---------------------------------------------------------------- dashboard


def _tiny_report(folder: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    feats = np.maximum(rng.normal(size=(24, 8)), 0).astype(np.float32)
    return write_feature_bundle(
        folder,
        features=feats,
        labels=np.arange(24) % 3,
        class_names=["a", "b", "c"],
        thumbnails=rng.integers(0, 255, (24, 8, 8, 3), dtype=np.uint8),
        method="ncl",
    )


def test_dashboard_rebuild_keeps_the_users_files(tmp_path):
    report, other = _tiny_report(tmp_path / "r"), _tiny_report(tmp_path / "o", seed=1)
    site = tmp_path / "site"
    build_dashboard(report, site, compare_dir=other, thumb_format="png")
    (site / "assets" / "logo.png").write_bytes(b"user logo")
    (site / "notes.txt").write_text("mine")
    (site / "b" / "extra.txt").write_text("mine too")
    build_dashboard(report, site, thumb_format="png")  # no --compare: its files go
    assert (site / "assets" / "logo.png").read_bytes() == b"user logo"
    assert (site / "notes.txt").read_text() == "mine"
    assert (site / "b" / "extra.txt").read_text() == "mine too"
    assert not (site / "compare.html").exists() and not (site / "b" / "index.html").exists()
    assert (site / "index.html").is_file() and (site / "assets" / "dashboard.css").is_file()
    listed = json.loads((site / ".dashboard-files.json").read_text())["files"]
    assert "assets/logo.png" not in listed and "index.html" in listed


def test_dashboard_refuses_a_site_it_did_not_write(tmp_path):
    report = _tiny_report(tmp_path / "r")
    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    (site / "index.html").write_text("<h1>my site</h1>")
    (site / "assets" / "logo.png").write_bytes(b"user logo")
    with pytest.raises(FileExistsError, match="holds files no dashboard build wrote"):
        build_dashboard(report, site)
    assert (site / "assets" / "logo.png").read_bytes() == b"user logo"
    assert (site / "index.html").read_text() == "<h1>my site</h1>"


def test_an_interrupted_dashboard_build_is_cleaned_by_the_next(tmp_path, monkeypatch):
    from solo_bayesncl.dashboard import builder

    report = _tiny_report(tmp_path / "r")
    site = tmp_path / "site"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(builder, "_copy_static", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_dashboard(report, site)
    monkeypatch.undo()
    build_dashboard(report, site)
    assert (site / "index.html").is_file()


def test_dashboard_to_an_unwritable_folder_is_one_line(tmp_path, capsys):
    from solo_bayesncl.cli.dashboard import main

    report = _tiny_report(tmp_path / "r")
    assert main([str(report), "--out", str(_unwritable(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "cannot write in" in err and err.count("\n") == 1


# ---------------------------------------------------------------- evaluation report


@pytest.fixture(scope="module")
def two_checkpoints(image_folder, tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")
    from helpers import untrained_checkpoint

    root = tmp_path_factory.mktemp("runs")
    paths = {
        name: untrained_checkpoint(root / name, f"{name}.yaml", image_folder, 16, 16)
        for name in ("ncl", "bayesncl")
    }
    return paths


def _report(ckpt: Path, out: Path, **kwargs):
    from solo_bayesncl.evaluation.report import ReportOptions, write_report

    options = ReportOptions(num_workers=0, top_dims=4)
    return write_report(ckpt, out, options, progress=False, **kwargs)


def test_an_interrupted_overwrite_leaves_the_old_report_intact(
    two_checkpoints, tmp_path, monkeypatch
):
    from solo_bayesncl.evaluation import plots
    from solo_bayesncl.evaluation.report import REPORT_FILES

    out = tmp_path / "report"
    _report(two_checkpoints["ncl"], out)
    (out / "notes.txt").write_text("mine")
    old = {name: (out / name).read_bytes() for name in REPORT_FILES}
    # a temporary left by a killed run (its process is gone) is removed by the next run
    stale = tmp_path / f".report.{2**22 + 12345}.abcd.partial"
    stale.mkdir()

    def killed(*args, **kwargs):  # after features.npz and most pictures are written
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "plot_gate_open_rates", killed)
    with pytest.raises(KeyboardInterrupt):
        _report(two_checkpoints["bayesncl"], out, overwrite=True)
    assert {name: (out / name).read_bytes() for name in REPORT_FILES} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temporary left

    monkeypatch.undo()
    report = _report(two_checkpoints["bayesncl"], out, overwrite=True)
    assert report["method"] == "bayesncl"
    assert json.loads((out / "metrics.json").read_text())["method"] == "bayesncl"
    assert (out / "gate_open_rates.png").is_file() and (out / "notes.txt").read_text() == "mine"
    with np.load(out / "features.npz") as npz:
        assert npz["features"].shape == (36, 16)


def test_report_to_an_unwritable_folder_fails_before_any_work(
    two_checkpoints, tmp_path, capsys, monkeypatch
):
    from solo_bayesncl.cli.evaluate import main
    from solo_bayesncl.evaluation import report

    def never(*args, **kwargs):
        raise AssertionError("the checkpoint was read before the output was checked")

    monkeypatch.setattr(report, "prepare_report", never)
    out = _unwritable(tmp_path)
    assert main([str(two_checkpoints["ncl"]), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out}: cannot write in") and err.count("\n") == 1
