"""A disk that fills up while a command writes: one line naming the folder and "no space left",
and nothing partial where the user looks (no file of the failed write, an earlier output as it
was, no hidden temporary). The disk is a real one: a small tmpfs filled to the last byte (needs
root, as the tests run here; skipped otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from solo_bayesncl.dashboard.bundle import write_feature_bundle


@pytest.fixture
def small_disk(tmp_path, request) -> Path:
    """A tmpfs mounted for the test (unmounted after): 2 MiB, or the size given as its param."""
    size = getattr(request, "param", "2m")
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    """Fills ``disk`` to its last byte (a file ``filler`` at its root)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by relative path, with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "filler"
    }


def one_no_space_line(err: str, folder: Path) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert f"{folder}: no space left on the device" in lines[0], err


@pytest.fixture(scope="module")
def checkpoint(image_folder, tmp_path_factory) -> Path:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from helpers import untrained_checkpoint

    root = tmp_path_factory.mktemp("run")
    return untrained_checkpoint(root / "ncl", "ncl.yaml", image_folder, 16, 16)


def test_zoo_export_name_on_a_full_disk(checkpoint, small_disk, capsys):
    from solo_bayesncl.cli.zoo import main

    out = small_disk / "exports"
    fill(small_disk)
    assert main(["export", str(checkpoint), "--name", "ncl-toy", "--out", str(out)]) == 2
    one_no_space_line(capsys.readouterr().err, out)
    assert files(small_disk) == {}  # not the artifact, nor its sha256 or entry
    assert not out.exists()  # nor the folder the export made


@pytest.mark.parametrize("small_disk", ["64m"], indirect=True)  # room for one export
def test_zoo_export_name_on_a_full_disk_keeps_the_earlier_export(checkpoint, small_disk, capsys):
    from solo_bayesncl.cli.zoo import main

    out = small_disk / "exports"
    args = ["export", str(checkpoint), "--name", "ncl-toy", "--out", str(out)]
    assert main(args) == 0
    before = files(small_disk)
    assert sorted(before) == [
        "exports/ncl-toy.entry.json",
        "exports/ncl-toy.pt",
        "exports/ncl-toy.pt.sha256",
    ]
    fill(small_disk)
    capsys.readouterr()
    assert main([*args, "--overwrite", "--fp16"]) == 2
    one_no_space_line(capsys.readouterr().err, out)
    assert files(small_disk) == before


def test_zoo_export_hub_folder_on_a_full_disk(checkpoint, small_disk, capsys):
    from solo_bayesncl.cli.zoo import main

    folder = small_disk / "hub" / "ncl-toy"
    (small_disk / "hub").mkdir()
    fill(small_disk)
    assert main(["export", str(checkpoint), "--hub-folder", str(folder)]) == 2
    one_no_space_line(capsys.readouterr().err, folder)
    assert files(small_disk) == {} and not folder.exists()
    assert [p.name for p in (small_disk / "hub").iterdir()] == []  # no hidden staging folder


def test_evaluation_report_on_a_full_disk(checkpoint, small_disk, capsys):
    pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")
    from solo_bayesncl.cli.evaluate import main

    out = small_disk / "report"
    fill(small_disk)
    code = main(
        [
            str(checkpoint),
            "--out",
            str(out),
            "--num-workers",
            "0",
            "--top-dims",
            "4",
            "--no-progress",
        ]
    )
    assert code == 2
    one_no_space_line(capsys.readouterr().err, out)
    assert files(small_disk) == {}


def _tiny_report(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    feats = np.maximum(rng.normal(size=(24, 8)), 0).astype(np.float32)
    return write_feature_bundle(
        folder,
        features=feats,
        labels=np.arange(24) % 3,
        class_names=["a", "b", "c"],
        thumbnails=rng.integers(0, 255, (24, 8, 8, 3), dtype=np.uint8),
        method="ncl",
    )


def test_dashboard_on_a_full_disk_leaves_the_earlier_one_as_it_was(tmp_path, small_disk, capsys):
    from solo_bayesncl.cli.dashboard import main

    report, site = _tiny_report(tmp_path / "report"), small_disk / "site"
    assert main([str(report), "--out", str(site), "--thumb-format", "png"]) == 0
    before = files(small_disk)
    assert ".dashboard-files.json" in {Path(p).name for p in before}
    fill(small_disk)
    capsys.readouterr()
    assert main([str(report), "--out", str(site), "--thumb-format", "jpeg"]) == 2
    one_no_space_line(capsys.readouterr().err, site)
    assert files(small_disk) == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "site"]


def test_dashboard_on_a_full_disk_leaves_no_partial_dashboard(tmp_path, small_disk, capsys):
    from solo_bayesncl.cli.dashboard import main

    report, site = _tiny_report(tmp_path / "report"), small_disk / "site"
    fill(small_disk)
    assert main([str(report), "--out", str(site)]) == 2
    one_no_space_line(capsys.readouterr().err, site)
    assert files(small_disk) == {}


@pytest.mark.solo
def test_benchmark_table_only_on_a_full_disk(small_disk, capsys):
    from helpers import REPO, fake_result

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.benchmark.runner import run_key
    from solo_bayesncl.cli.benchmark import main

    path = small_disk / "p.yaml"
    path.write_text(
        f"config_dir: {REPO / 'scripts/pretrain/cifar'}\nmethods: [ncl, bayesncl]\n"
        "seeds: [1]\noverrides: [max_epochs=1]\n"
    )
    preset = load_preset(path)
    out = small_disk / "out"
    for method in ("ncl", "bayesncl"):
        run_dir = out / "runs" / f"{method}-seed1-{run_key(preset, method, 1)}"
        run_dir.mkdir(parents=True)
        (run_dir / "result.json").write_text(json.dumps(fake_result(method, 1, 0.2)))
    argv = ["--preset", str(path), "--out", str(out), "--table-only"]
    assert main(argv) == 0
    before = files(small_disk)
    assert "out/results.md" in before and "out/results.csv" in before
    (out / "runs" / f"ncl-seed1-{run_key(preset, 'ncl', 1)}" / "result.json").write_text(
        json.dumps(fake_result("ncl", 1, 0.4))
    )
    before = files(small_disk)
    fill(small_disk)
    capsys.readouterr()
    assert main(argv) == 2
    one_no_space_line(capsys.readouterr().err, out)
    assert files(small_disk) == before  # the tables and the records as they were


def test_a_write_error_on_an_almost_full_disk_is_taken_for_no_space(small_disk) -> None:
    """torch.save's error on a full disk says nothing of why ("unexpected pos"): the free space
    of the folder decides."""
    from solo_bayesncl.io.files import NoSpaceError, replacing

    fill(small_disk)
    expected = pytest.raises(NoSpaceError, match=f"^{small_disk}: no space left on the device")
    with expected, replacing(small_disk / "weights.pt") as tmp:
        torch.save({"w": torch.zeros(10_000)}, tmp)
    assert files(small_disk) == {}


def test_a_write_error_into_a_folder_not_made_yet_is_taken_for_no_space(small_disk) -> None:
    """The free space is read on the disk of the nearest folder that exists."""
    from solo_bayesncl.io.files import NoSpaceError, replacing_folder

    fill(small_disk)
    final = small_disk / "new" / "weights"
    expected = pytest.raises(NoSpaceError, match=f"^{final}: no space left on the device")
    with expected, replacing_folder(final) as staging:
        torch.save({"w": torch.zeros(10_000)}, staging / "weights.pt")
    assert files(small_disk) == {}
