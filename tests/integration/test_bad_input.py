"""Bad input tried as a hostile user would: every key and option is refused with one line naming
it before anything is built, nothing a user wrote is lost, and the Python API refuses what it
cannot compute instead of returning NaN."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import FASHION_MNIST, TINY_FASHION_MNIST, compose, run_command

from solo_bayesncl.host.availability import solo_learn_available

needs_solo = pytest.mark.skipif(
    not solo_learn_available(), reason="needs upstream solo-learn installed"
)
needs_fashion = pytest.mark.skipif(
    not (FASHION_MNIST / "t10k-images-idx3-ubyte.gz").is_file(),
    reason="needs Debian's dataset-fashion-mnist",
)

TINY = [*TINY_FASHION_MNIST, "wandb.enabled=False"]


def _prepare(overrides: list[str], config: str = "bayesncl.yaml", check_data: bool = False):
    from solo_bayesncl.training.pretrain import prepare_pretrain

    return prepare_pretrain(
        compose("scripts/pretrain/cifar", config, [*TINY, *overrides]), check_data=check_data
    ).solo


# ------------------------------------------------------------------- pretraining config keys

BAD_KEYS = [
    ("++max_epoch=5", r"^unknown top-level key\(s\) max_epoch \(did you mean max_epochs\?\)"),
    ("++data.fracton=0.5", r"^data has unknown key\(s\) fracton; known keys: .*fraction"),
    (
        "++data.num_backgrounds=9",
        r"^data\.num_backgrounds is read by data\.dataset=fashion-mnist-scenes only",
    ),
    ("++optimizer.gating_head_lr=inf", r"^optimizer\.gating_head_lr=inf is out of range"),
    ("precision=bogus", r"^precision='bogus' is not supported; allowed values: auto, 16-mixed"),
    ("method_kwargs.temperature=inf", r"^method_kwargs\.temperature=inf is out of range"),
    ("method_kwargs.temperature=1e-40", r"^method_kwargs\.temperature=1e-40 is out of range; "),
    ("++method_kwargs.sigmoid_temperature=inf", r"^method_kwargs\.sigmoid_temperature=inf"),
    ("method_kwargs.bayesian_kl_lambda=inf", r"^method_kwargs\.bayesian_kl_lambda=inf is out"),
    ("optimizer.name=bogus", r"^optimizer\.name='bogus' is not supported; allowed values: sgd"),
    ("scheduler.name=bogus", r"^scheduler\.name='bogus' is not supported; allowed values: "),
    ("backbone.name=resnet7", r"^backbone\.name='resnet7' is not supported; allowed values: "),
    ("seed=abc", r"^seed='abc' is out of range; allowed: an integer in \[0, 4294967295\]$"),
    ("++interpretability.bogus=1", r"^interpretability has unknown key\(s\) bogus; known keys"),
]
INTERPRETABILITY = [
    ("gate=bogus", r"^interpretability\.gate='bogus' is not supported; allowed values: hard"),
    ("shuffle_permutations=-3", r"^interpretability\.shuffle_permutations=-3 is out of range"),
    ("retrieval=off", r"^interpretability\.retrieval='off' is not a boolean; allowed: true"),
    ("frequency=0", r"^interpretability\.frequency=0 is out of range; allowed: an integer >= 1"),
    ("max_samples=-5", r"^interpretability\.max_samples=-5 is out of range"),
]


@needs_solo
@pytest.mark.parametrize(("override", "message"), BAD_KEYS)
def test_a_bad_pretraining_key_is_refused_naming_it(override, message):
    with pytest.raises(ValueError, match=message):
        _prepare([override])


@needs_solo
@pytest.mark.parametrize(("override", "message"), INTERPRETABILITY)
def test_every_interpretability_key_is_checked_before_the_model_is_built(override, message):
    with pytest.raises(ValueError, match=message):
        _prepare(["++interpretability.enabled=True", f"++interpretability.{override}"])


@needs_solo
def test_interpretability_retrieval_false_really_stops_retrieval():
    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.training.callback import build_interpretability_callback

    cfg = _prepare(["++interpretability.enabled=True", "++interpretability.retrieval=False"])
    assert cfg.interpretability.retrieval is False
    spec = run_spec(cfg, pretraining=True)
    callback = build_interpretability_callback(
        spec.interpretability, spec.data, spec.optimizer.batch_size, val_loader=object()
    )
    assert callback is not None and callback.settings.retrieval is False


@needs_solo
@needs_fashion
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.fraction=0.001", "optimizer.batch_size=128"],
            r"^data\.fraction=0\.001 keeps 60 of the 60000 training images, fewer than one batch "
            r"\(optimizer\.batch_size=128 over all devices\): no training step would run",
        ),
        (
            ["data.fraction=0.00001"],
            r"^data\.fraction=1e-05 keeps 0 of the 60000 images; a stratified subset keeps and "
            r"leaves out at least 10 \(one per class\)",
        ),
        (["data.val_fraction=0.0001"], r"^data\.val_fraction=0\.0001 keeps 1 of the 10000 images"),
    ],
)
def test_a_fraction_that_leaves_no_batch_or_no_stratified_subset_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        _prepare(overrides, check_data=True)


def _broken_fashion_root(root: Path, kind: str) -> Path:
    root.mkdir()
    for f in FASHION_MNIST.iterdir():
        if not f.name.startswith("t10k-images"):
            (root / f.name).symlink_to(f)
    data = (FASHION_MNIST / "t10k-images-idx3-ubyte.gz").read_bytes()
    target = root / "t10k-images-idx3-ubyte.gz"
    if kind == "truncated":
        target.write_bytes(data[: len(data) // 2])
    elif kind == "corrupt":
        raw = bytearray(gzip.decompress(data))
        raw[2] = 0x0D
        target.write_bytes(gzip.compress(bytes(raw)))
    elif kind == "empty":
        target.write_bytes(b"")
    return root


BROKEN_TEST_FILE = {
    "missing": r"Fashion-MNIST file t10k-images-idx3-ubyte\(\.gz\) not found in ",
    "truncated": r"t10k-images-idx3-ubyte\.gz: cannot be read \(EOFError",
    "corrupt": r"t10k-images-idx3-ubyte\.gz: not an unsigned-byte IDX file \(bad magic number\)",
    "empty": r"t10k-images-idx3-ubyte\.gz: holds no data \(an empty file once decompressed\)",
}


@needs_solo
@needs_fashion
@pytest.mark.parametrize("kind", sorted(BROKEN_TEST_FILE))
def test_a_broken_test_file_is_found_before_training(kind, tmp_path, monkeypatch):
    """The validation (test) images are read with the training ones, before anything is built,
    by pretraining, linear evaluation (the same resolution) and the report."""
    root = _broken_fashion_root(tmp_path / "fm", kind)
    monkeypatch.setenv("SOLO_BAYESNCL_FASHION_MNIST", str(root))
    with pytest.raises((ValueError, FileNotFoundError), match=BROKEN_TEST_FILE[kind]):
        _prepare([], check_data=True)


@needs_solo
def test_bad_keys_reach_the_terminal_as_one_line_before_training(tmp_path):
    result = run_command(
        [
            "main_pretrain.py",
            "--config-path",
            "scripts/pretrain/cifar",
            "--config-name",
            "bayesncl.yaml",
            *TINY,
            "++interpretability.enabled=True",
            "++interpretability.gate=bogus",
            f"checkpoint.dir={tmp_path}",
        ]
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "main_pretrain.py: error: interpretability.gate='bogus' is not supported; "
        "allowed values: hard, soft"
    )
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())


def test_precisions_are_lightnings():
    import typing

    pytest.importorskip("lightning")
    from lightning.fabric.connector import _PRECISION_INPUT

    from solo_bayesncl.config.runtime import PRECISIONS

    lightning = {
        str(v) for group in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(group)
    }
    assert set(PRECISIONS) == lightning | {"auto"}


# ------------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def ncl_checkpoint(image_folder, tmp_path_factory) -> Path:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from helpers import untrained_checkpoint

    return untrained_checkpoint(
        tmp_path_factory.mktemp("ncl") / "run", "ncl.yaml", image_folder, 16, 8
    )


@pytest.fixture(scope="module")
def bayesncl_checkpoint(image_folder, tmp_path_factory) -> Path:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from helpers import untrained_checkpoint

    return untrained_checkpoint(
        tmp_path_factory.mktemp("bayesncl") / "run", "bayesncl.yaml", image_folder, 16, 8
    )


def _variant(ckpt: Path, folder: Path, change) -> Path:
    """A copy of ``ckpt`` whose args.json ``change(cfg)`` edits."""
    folder.mkdir(parents=True)
    (folder / ckpt.name).write_bytes(ckpt.read_bytes())
    cfg = json.loads((ckpt.parent / "args.json").read_text())
    change(cfg)
    (folder / "args.json").write_text(json.dumps(cfg))
    return folder / ckpt.name


def _prior5(cfg):
    cfg["method_kwargs"]["bayesian_prior_prob"] = 5


def _mismatch(cfg):
    cfg["method_kwargs"]["proj_output_dim"] = 12


@needs_solo
def test_every_command_refuses_an_out_of_range_or_mismatching_config(
    bayesncl_checkpoint, tmp_path, capsys
):
    """zoo export refuses what the report, kNN and linear evaluation refuse: one shared check."""
    from solo_bayesncl.cli.evaluate import main as report_main
    from solo_bayesncl.cli.zoo import main as zoo_main
    from solo_bayesncl.io.checkpoints import CheckpointError, load_checkpoint, load_method

    prior5 = _variant(bayesncl_checkpoint, tmp_path / "prior5", _prior5)
    mismatch = _variant(bayesncl_checkpoint, tmp_path / "mismatch", _mismatch)
    cases = {
        prior5: rf"^{prior5.parent / 'args.json'}: method_kwargs\.bayesian_prior_prob=5 is out of "
        r"range; allowed: a number in \(0, 1\); the checkpoint's config is not one its bayesncl",
        mismatch: rf"^{mismatch}: its weights do not fit the bayesncl model its config describes",
    }
    for ckpt, message in cases.items():
        with pytest.raises(CheckpointError, match=message):
            load_method(load_checkpoint(ckpt))
        assert zoo_main(["export", str(ckpt), "--name", "x", "--out", str(tmp_path / "z")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and len(err.splitlines()) == 1, err
        assert __import__("re").match(message, err.removeprefix("error: ")), err
        assert not (tmp_path / "z").exists() or not list((tmp_path / "z").iterdir())
        assert report_main([str(ckpt), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
        assert capsys.readouterr().err.strip() == err


@needs_solo
def test_an_args_json_without_data_is_named(ncl_checkpoint, tmp_path):
    from solo_bayesncl.io.checkpoints import CheckpointError, load_checkpoint

    ckpt = _variant(ncl_checkpoint, tmp_path / "nodata", lambda cfg: cfg.pop("data"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(ckpt)
    assert str(err.value) == (
        f"{ckpt.parent / 'args.json'}: the config has no data.dataset, which says what the model "
        "was trained on; is it the args.json of a pretraining run?"
    )


@needs_solo
def test_a_folder_passed_as_a_checkpoint_is_called_a_folder(ncl_checkpoint):
    from solo_bayesncl.io.checkpoints import CheckpointError, load_checkpoint

    with pytest.raises(CheckpointError) as err:
        load_checkpoint(ncl_checkpoint.parent)
    assert str(err.value) == (
        f"checkpoint {ncl_checkpoint.parent} is a folder, not a checkpoint file; give the .ckpt "
        "file (it holds last.ckpt)"
    )


@needs_solo
def test_zoo_export_records_the_real_dataset_and_refuses_non_finite_metrics(
    ncl_checkpoint, tmp_path
):
    from solo_bayesncl.zoo import ArtifactError
    from solo_bayesncl.zoo.export import export_checkpoint

    def fashion(cfg):
        cfg["data"]["offline_dataset"] = "fashion-mnist"

    ckpt = _variant(ncl_checkpoint, tmp_path / "fm", fashion)
    result = export_checkpoint(ckpt, "x", tmp_path / "out")
    entry = json.loads(result.entry_path.read_text())
    assert entry["dataset"] == "fashion-mnist" and entry["config"]["data"]["dataset"] == "custom"
    metrics = tmp_path / "metrics.json"
    metrics.write_text('{"acc": NaN, "knn": {"top1": Infinity}}')
    with pytest.raises(ArtifactError, match=r"^metric 'acc' is nan; a manifest holds finite"):
        export_checkpoint(ckpt, "y", tmp_path / "out", metrics=metrics)
    assert not (tmp_path / "out" / "y.pt").exists()


def test_zoo_verify_on_a_text_file_says_so_in_one_line(tmp_path, capsys):
    from solo_bayesncl.cli.zoo import main
    from solo_bayesncl.io.artifact import ARTIFACT_FORMAT

    text = tmp_path / "notes.pt"
    text.write_text("not weights\n")
    assert main(["verify", str(text)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {text} is not a zoo artifact ({ARTIFACT_FORMAT}): not a file written by "
        "torch.save (a zip archive)"
    )


# ----------------------------------------------------------------------------------- report


@needs_solo
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("num_workers", -1, r"^--num-workers=-1 is out of range; allowed: an integer >= 0$"),
        ("images_per_dim", 0, r"^--images-per-dim=0 is out of range; allowed: an integer >= 1$"),
        ("shuffle_permutations", 0, r"^--shuffle-permutations=0 is out of range"),
        ("retrieval_max_samples", 0, r"^--retrieval-max-samples=0 is out of range; allowed: an "),
        ("max_images", 0, r"^--max-images=0 is out of range"),
        ("protocol", "bogus", r"^--protocol='bogus' is not supported; allowed values: standard"),
    ],
)
def test_report_options_are_checked_before_anything_is_read(option, value, message, tmp_path):
    from solo_bayesncl.evaluation.report import ReportError, ReportOptions, write_report

    with pytest.raises(ReportError, match=message):
        write_report(tmp_path / "missing.ckpt", tmp_path / "out", ReportOptions(**{option: value}))
    assert not (tmp_path / "out").exists()


@needs_solo
@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ("bogus", r"^data\.dataset='bogus' is not supported; allowed values: cifar10"),
        # the report reads the validation split only: the key is the folder it looked in
        ("cifar10", r"^CIFAR10 is not in data\.val_path=.* and could not be downloaded"),
    ],
)
def test_report_dataset_errors_are_one_line(
    ncl_checkpoint, dataset, message, tmp_path, monkeypatch
):
    from torchvision import datasets

    from solo_bayesncl.data.resolve import DatasetUnavailableError
    from solo_bayesncl.evaluation.report import ReportError, ReportOptions, write_report

    def offline(*args, **kwargs):  # no network: what a download attempt offline raises
        raise OSError("[Errno 101] Network is unreachable")

    monkeypatch.setattr(datasets.CIFAR10, "download", offline)
    monkeypatch.chdir(tmp_path)
    with pytest.raises((ReportError, DatasetUnavailableError), match=message):
        write_report(ncl_checkpoint, tmp_path / "out", ReportOptions(dataset), progress=False)


@needs_solo
def test_report_overwrite_removes_only_files_its_previous_report_wrote(
    ncl_checkpoint, bayesncl_checkpoint, tmp_path
):
    """A user's file that carries a report file name is kept; the picture a previous BayesNCL
    report wrote (listed in its metrics.json) goes when an NCL report replaces it."""
    pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")
    from solo_bayesncl.evaluation.report import GATE_PICTURE, ReportOptions, write_report

    options = dict(
        options=ReportOptions(num_workers=0, max_images=12, top_dims=2, batch_size=12),
        progress=False,
    )
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / GATE_PICTURE).write_bytes(b"my own picture")
    write_report(ncl_checkpoint, mine, overwrite=True, **options)
    assert (mine / GATE_PICTURE).read_bytes() == b"my own picture"
    listed = json.loads((mine / "metrics.json").read_text())["files"]
    assert GATE_PICTURE not in listed and {"metrics.json", "features.npz"} <= set(listed)

    replaced = tmp_path / "replaced"
    write_report(bayesncl_checkpoint, replaced, **options)
    assert GATE_PICTURE in json.loads((replaced / "metrics.json").read_text())["files"]
    write_report(ncl_checkpoint, replaced, overwrite=True, **options)
    assert not (replaced / GATE_PICTURE).exists()


# -------------------------------------------------------------------------------------- kNN


@needs_solo
def test_knn_refuses_k_larger_than_the_training_set(ncl_checkpoint):
    from solo_bayesncl.evaluation.knn import knn_eval

    with pytest.raises(ValueError) as err:
        knn_eval(ncl_checkpoint, ks=[5, 100000], num_workers=0, device="cpu")
    assert str(err.value) == (
        "--k 100000 is larger than the 72 training images the vote reads; allowed: an integer "
        "in [1, 72]"
    )


@needs_solo
def test_knn_output_into_a_missing_folder_is_refused_before_the_knn_work(
    ncl_checkpoint, tmp_path, capsys, monkeypatch
):
    from solo_bayesncl.cli import knn

    def never(*args, **kwargs):
        raise AssertionError("the kNN work started")

    monkeypatch.setattr(knn, "knn_eval", never)
    out = tmp_path / "missing" / "knn.json"
    with pytest.raises(SystemExit) as code:
        knn.main([str(ncl_checkpoint), "--output", str(out)])
    assert code.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"solo-bayesncl-knn: error: --output {out}: the folder {out.parent} does not exist"
    )


# -------------------------------------------------------------------------------- benchmark


@needs_solo
def test_benchmark_out_naming_a_file_is_refused(image_folder, tmp_path, capsys):
    from helpers import tiny_preset_file

    from solo_bayesncl.benchmark.__main__ import main

    preset = tiny_preset_file(tmp_path / "p.yaml", image_folder, tmp_path / "out")
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    assert main(["--preset", str(preset), "--out", str(a_file)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --out {a_file}: {a_file} exists and is not a folder"
    )
    assert a_file.read_text() == "mine"


@needs_solo
def test_benchmark_bad_override_names_the_key_before_any_run(image_folder, tmp_path):
    from helpers import tiny_preset_file

    from solo_bayesncl.benchmark.presets import PresetError, load_preset
    from solo_bayesncl.benchmark.runner import run_benchmark

    path = tiny_preset_file(
        tmp_path / "p.yaml",
        image_folder,
        tmp_path / "out",
        methods=("ncl",),
        extra_overrides=("method_kwargs.temperature=-1",),
    )
    with pytest.raises(PresetError) as err:
        run_benchmark(load_preset(path), log=lambda *_: None, progress=False)
    assert str(err.value) == (
        f"{path}: ncl: method_kwargs.temperature=-1 is out of range; allowed: a number in "
        "[0.0001, inf)"
    )
    assert not (tmp_path / "out" / "runs").exists() or not list(
        (tmp_path / "out" / "runs").iterdir()
    )


@needs_solo
def test_benchmark_shows_the_use_bayes_warning_on_its_console(image_folder, tmp_path):
    """The runs' own output goes to their logs: the warning that a run trains plain NCL is
    given by the benchmark itself, when it checks the configs."""
    from helpers import tiny_preset_file

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.benchmark.runner import check_configs

    path = tiny_preset_file(
        tmp_path / "p.yaml",
        image_folder,
        tmp_path / "out",
        extra_overrides=("method_kwargs.use_bayes=False",),
    )
    with pytest.warns(UserWarning, match=r"use_bayes=False means no gate at all"):
        check_configs(load_preset(path))


@contextlib.contextmanager
def _lock_held_by_another_process(lock: Path):
    """A live process holding ``lock`` (as a benchmark training that run would) while the
    block runs; yields its process id."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom solo_bayesncl.io.files import hold_lock\n"
            f"with hold_lock({str(lock)!r}):\n print('held', flush=True)\n time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


@needs_solo
def test_a_second_benchmark_refuses_a_run_another_live_one_holds(image_folder, tmp_path):
    from helpers import tiny_preset_file

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.benchmark.runner import RunBusy, run_benchmark, run_key

    path = tiny_preset_file(tmp_path / "p.yaml", image_folder, tmp_path / "out", methods=("ncl",))
    preset = load_preset(path)
    run_dir = tmp_path / "out" / "runs" / f"ncl-seed5-{run_key(preset, 'ncl', 5)}"
    run_dir.mkdir(parents=True)
    with _lock_held_by_another_process(run_dir / "lock") as holder, pytest.raises(RunBusy) as err:
        run_benchmark(preset, log=lambda *_: None, progress=False)
    assert str(err.value).startswith(
        f"ncl seed 5 is being trained by another benchmark (process {holder}, lock "
        f"{run_dir / 'lock'}); wait for it to end"
    )
    assert not (run_dir / "log.txt").exists() and not (run_dir / "spec.json").exists()


@needs_solo
def test_a_benchmark_asked_to_leave_busy_runs_trains_the_others_and_tables_the_finished(
    image_folder, tmp_path
):
    """Two benchmarks sharing one preset's runs: the one that finds a run locked by the other
    leaves it, trains the next, and writes the table of the finished runs only."""
    from helpers import tiny_preset_file

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.benchmark.runner import run_benchmark, run_key

    path = tiny_preset_file(
        tmp_path / "p.yaml", image_folder, tmp_path / "out", methods=("ncl", "simclr")
    )
    preset = load_preset(path)
    busy = tmp_path / "out" / "runs" / f"ncl-seed5-{run_key(preset, 'ncl', 5)}"
    other = tmp_path / "out" / "runs" / f"simclr-seed5-{run_key(preset, 'simclr', 5)}"
    busy.mkdir(parents=True)
    lines: list[str] = []
    with _lock_held_by_another_process(busy / "lock") as holder:
        run_benchmark(preset, log=lines.append, progress=False, leave_busy=True)
    assert (
        f"[busy] ncl seed 5: left to the benchmark training it (process {holder}, lock "
        f"{busy / 'lock'})"
    ) in lines
    assert not (busy / "result.json").exists() and not (busy / "log.txt").exists()
    assert (other / "result.json").is_file()
    table = (tmp_path / "out" / "results.md").read_text()
    assert "\n| simclr | 1 |" in table  # one seed: the run trained here
    assert "Not finished yet, so in no figure above (1 run): ncl seed 5." in table


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    import os

    from solo_bayesncl.io.files import LockedError, hold_lock

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / "lock"
    lock.write_text(f"{dead.pid}\n")
    with hold_lock(lock):
        assert lock.read_text() == f"{os.getpid()}\n"
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "from solo_bayesncl.io.files import hold_lock\n"
                f"with hold_lock({str(lock)!r}): pass\n",
            ],
            capture_output=True,
            text=True,
        )
        assert probe.returncode == 1 and f"is held by process {os.getpid()}" in probe.stderr
    assert LockedError  # the refusal above is this error


# ----------------------------------------------------------------------------- zoo download


def test_zoo_download_gives_up_on_a_trickling_server(tmp_path, monkeypatch):
    """One byte every 0.5 s never trips the per-read timeout; the overall deadline does."""
    import hashlib
    import http.server
    import threading

    from solo_bayesncl.zoo import DownloadError, ZooEntry, download

    monkeypatch.setenv("SOLO_BAYESNCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SOLO_BAYESNCL_OFFLINE", raising=False)

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:  # the client gave up
                pass

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {"method": "ncl", "backbone": {"name": "resnet18"}, "data": {"dataset": "cifar10"}}
    entry = ZooEntry.from_dict(
        {
            "name": "slow",
            "method": "ncl",
            "dataset": "cifar10",
            "backbone": "resnet18",
            "urls": [f"http://127.0.0.1:{server.server_address[1]}/a.pt"],
            "sha256": hashlib.sha256(b"x" * 1000).hexdigest(),
            "size": 1000,
            "config": config,
            "metrics": {},
        },
        require_https=False,
    )
    try:
        with pytest.raises(DownloadError, match=r"longer than its deadline of 2 s") as cut:
            download(entry, progress=False, timeout=5, deadline=2)
    finally:
        server.shutdown()
        server.server_close()
    received = re.search(r"\((\d+) bytes received\)", str(cut.value))
    assert received and int(received[1]) < 1000  # cut at the deadline, not waited out
    assert not list((tmp_path / "cache").glob("*"))  # no partial file left


# ------------------------------------------------------------------------------- Python API


def test_info_nce_loss_refuses_rows_it_cannot_compute():
    from solo_bayesncl.core.losses import info_nce_loss

    idx = torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"^v: 4 of 4 rows have an L2 norm above 1; "):
        info_nce_loss(torch.full((4, 8), 1e30), idx, 0.2, gather_distributed=False)
    with pytest.raises(ValueError, match=r"^v has no rows"):
        info_nce_loss(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long), 0.2, False)
    with pytest.raises(ValueError, match=r"^v must be 2-D \(rows x dims\), got shape \(2, 4, 8\)$"):
        info_nce_loss(torch.zeros(2, 4, 8), torch.tensor([0, 0]), 0.2, gather_distributed=False)


def test_bernoulli_kl_refuses_values_that_are_not_probabilities():
    from solo_bayesncl.core.gates import bernoulli_kl

    for value in (5.0, -3.0):
        with pytest.raises(ValueError, match=r"^probs: 8 of 8 values lie outside \[0, 1\]"):
            bernoulli_kl(torch.full((2, 4), value), 0.8, 0.01)
    with pytest.raises(ValueError, match=r"^probs has shape \(0, 4\): no gate probabilities"):
        bernoulli_kl(torch.zeros(0, 4), 0.8, 0.01)
    assert math.isnan(float(bernoulli_kl(torch.full((1, 2), math.nan), 0.8, 0.01)))  # still visible


@pytest.mark.parametrize(("dtype", "scale"), [(torch.float32, 1e30), (torch.float64, 1e300)])
def test_metrics_do_not_depend_on_the_scale_of_the_features(dtype, scale):
    from solo_bayesncl.metrics import compute_interpretability_metrics

    g = torch.Generator().manual_seed(0)
    features = (torch.rand(200, 16, generator=g) * (torch.rand(200, 16, generator=g) > 0.6)).to(
        dtype
    )
    labels = torch.randint(0, 4, (200,), generator=g)
    small = compute_interpretability_metrics(features, labels, 4)
    large = compute_interpretability_metrics(features * scale, labels, 4)
    for key in (
        "semantic_consistency",
        "semantic_entropy_freq",
        "semantic_entropy_sum",
        "semantic_entropy_mean",
        "effective_rank",
        "orthogonality_error",
        "retrieval_p@1",
        "retrieval_p@10",
    ):
        assert large[key] == pytest.approx(small[key], rel=1e-5, abs=1e-9), key
    assert small["semantic_consistency"] > 0.2 and small["semantic_entropy_freq"] > 1.0


@needs_solo
def test_an_error_while_the_run_is_built_is_one_line(tmp_path, capsys):
    """Past the config checks, what building the datasets raises (an image folder without
    images) is still an input error: one line and status 2, not a traceback."""
    from solo_bayesncl.cli.pretrain import _run

    for split in ("train", "val"):
        (tmp_path / split).mkdir()
    cfg = compose(
        "scripts/pretrain/cifar",
        "ncl.yaml",
        [
            *TINY,
            "data.dataset=custom",
            f"data.train_path={tmp_path / 'train'}",
            f"data.val_path={tmp_path / 'val'}",
            f"checkpoint.dir={tmp_path / 'out'}",
        ],
    )
    with pytest.raises(SystemExit) as code:
        _run(cfg)
    assert code.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("solo-bayesncl-pretrain: error: Couldn't find any class folder in ")


# ------------------------------------------------------------- broken records, as a user meets them


def test_study_budget_on_broken_records_ends_in_one_line(tmp_path):
    """``python -m study.budget`` on a half-written ``result.json``, then on a ``results.csv``
    whose ``seed_list`` is not whole numbers: one ``error:`` line naming the file, status 1."""
    run_dir = tmp_path / "runs" / "ncl-seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text('{"method": "ncl", "seed": 1, "pretrain_metr')
    done = run_command(["-m", "study.budget", str(tmp_path)], timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {run_dir / 'result.json'}: not a finished run's result (not valid JSON at line 1 "
        "column 30: Unterminated string starting at); it was cut short or edited: restore it, or "
        "remove it and the run is trained again"
    ]
    (run_dir / "result.json").write_text(json.dumps({"method": "ncl", "seed": 1}))
    (tmp_path / "results.csv").write_text("method,base_method,seeds,seed_list\nncl,ncl,1,1 x\n")
    done = run_command(["-m", "study.budget", str(tmp_path)], timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'results.csv'}: row ncl: seed_list '1 x' is not a list of seeds "
        "(whole numbers separated by spaces, e.g. '1 2 3'); fix the row, or pass --methods to "
        "read the runs without the table"
    ]


# ------------------------------------------------------------------ linear evaluation's keys


@needs_solo
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("++datset=x", r"^unknown top-level key\(s\) datset \(did you mean data\?\); known keys"),
        ("++data.datset=x", r"^data has unknown key\(s\) datset; known keys: .*dataset"),
        ("++optimizer.lr_decay=0.1", r"^optimizer has unknown key\(s\) lr_decay; known keys: "),
        ("++scheduler.warmup_epoch=2", r"^scheduler has unknown key\(s\) warmup_epoch; known "),
        (
            "++data.augmentations.crop_sise=32",
            r"^data\.augmentations has unknown key\(s\) crop_sise; known keys: crop_size, mean",
        ),
    ],
)
def test_a_bad_key_of_linear_evaluation_is_refused_naming_it(
    override, message, ncl_checkpoint, image_folder
):
    from helpers import image_folder_overrides

    from solo_bayesncl.training.linear import prepare_linear

    overrides = [
        f"pretrained_feature_extractor={ncl_checkpoint}",
        *image_folder_overrides(image_folder),
        "accelerator=cpu",
        "wandb.enabled=False",
        override,
    ]
    cfg = compose("scripts/linear/cifar", "linear.yaml", overrides)
    with pytest.raises(ValueError, match=message) as err:
        prepare_linear(cfg, overrides)
    assert "\n" not in str(err.value)
