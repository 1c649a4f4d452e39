"""The benchmark's bookkeeping, without training: preset checks, where results go, which
checkpoint a resumed run continues from, metrics stitched over sittings, CPU time and load,
the table's marks, the progress display."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO

from solo_bayesncl.benchmark.machine import StageMeter, git_state, load_unreliable
from solo_bayesncl.benchmark.presets import PresetError, load_preset
from solo_bayesncl.benchmark.progress import ProgressDisplay, RunProgress
from solo_bayesncl.benchmark.table import aggregate, write_csv, write_markdown
from solo_bayesncl.training.auto_resume import config_differences, find_resume_checkpoint

CONFIG_DIR = REPO / "scripts/pretrain/cifar"


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"config_dir: {CONFIG_DIR}\n" + text)
    return path


# ---- presets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "linear: {max_epoch: 1}\n",
            "unknown key linear.max_epoch; known keys of linear: config, max_epochs, batch_size, lr, "
            "overrides",
        ),
        ("knn: {k: 0}\n", r"knn.k must be a positive int, got 0"),
        ("knn: {neighbours: 5}\n", "unknown key knn.neighbours; known keys of knn: k, temperature"),
        ("report: {topdims: 4}\n", "unknown key report.topdims; known keys of report: dataset"),
        ("linear: {lr: fast}\n", "linear.lr must be a positive number, got 'fast'"),
        ("linear: {max_epochs: 2.5}\n", "linear.max_epochs must be a positive int, got 2.5"),
        ("seeds: [five]\n", r"seeds must be integers >= 0, got \['five'\]"),
        ("seeds: [1.5]\n", r"seeds must be integers >= 0"),
        ("seeds: [true]\n", r"seeds must be integers >= 0"),
        ("seeds: []\n", "seeds must list at least one seed"),
        ("seeds: [5, 5]\n", "seeds lists a seed twice"),
        ("seeds: 5\n", "seeds must list at least one seed"),
        ("methods: [simclr, byol]\n", "methods contains 'byol'; allowed values: simclr"),
        ("methods: simclr\n", "methods must be a non-empty list"),
        ("overrides: max_epochs=1\n", "overrides must be a list of strings"),
        ("method_overrides: {ncl: 3}\n", "method_overrides.ncl must be a list of strings"),
        ("method_overrides: {byol: []}\n", "method_overrides.byol is not a method"),
        ("epochs: 3\n", "unknown key 'epochs'; allowed keys: config_dir, knn, linear"),
        ("out_dir: 3\n", "out_dir must be a string"),
        ("- a list\n", "is a mapping of keys"),
    ],
)
def test_bad_preset_values_are_refused_naming_the_key(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text if text.startswith("-") else f"config_dir: {CONFIG_DIR}\n" + text)
    with pytest.raises(PresetError, match=message) as err:
        load_preset(path)
    assert str(path) in str(err.value)


def test_report_keys_are_the_report_function_arguments(tmp_path):
    from solo_bayesncl.evaluation.report import ReportOptions

    known = [f.name for f in dataclasses.fields(ReportOptions) if f.name != "protocol"]
    path = tmp_path / "p.yaml"
    path.write_text(f"config_dir: {CONFIG_DIR}\nreport: {{typo: 1}}\n")
    with pytest.raises(PresetError, match=f"known keys of report: {', '.join(known)}$"):
        load_preset(path)


def test_a_preset_file_writes_beside_itself_from_any_folder(tmp_path, monkeypatch):
    folder = tmp_path / "study"
    folder.mkdir()
    path = _write(folder, "out_dir: results/mine\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_preset(path).out_dir == (folder / "results/mine").resolve()
    monkeypatch.chdir(tmp_path)
    assert load_preset("study/p.yaml").out_dir == (folder / "results/mine").resolve()
    absolute = _write(folder, f"out_dir: {tmp_path / 'abs'}\n", "q.yaml")
    assert load_preset(absolute).out_dir == tmp_path / "abs"


def test_cli_refuses_a_bad_preset_before_anything_runs(tmp_path):
    path = _write(tmp_path, "linear: {max_epoch: 1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "solo_bayesncl.benchmark", "--preset", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "unknown key linear.max_epoch" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


def test_bad_override_is_refused_before_training(tmp_path):
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from solo_bayesncl.benchmark.runner import check_configs

    preset = load_preset(_write(tmp_path, "methods: [ncl]\noverrides: [max_epochz=3]\n"))
    with pytest.raises(PresetError, match="ncl: .*max_epochz"):
        check_configs(preset)
    preset = load_preset(_write(tmp_path, "methods: [ncl]\noverrides: [max_epochs=0]\n"))
    with pytest.raises(
        PresetError, match=r"ncl: max_epochs=0 is out of range; allowed: an integer >= 1"
    ):
        check_configs(preset)
    preset = load_preset(_write(tmp_path, "methods: [ncl, simclr]\noverrides: [max_epochs=4]\n"))
    assert check_configs(preset) == {"ncl": 4, "simclr": 4}


# ---- auto-resume -----------------------------------------------------------------------------

BASE = {
    "name": "bayesncl-fashion-mnist",
    "method": "bayesncl",
    "max_epochs": 2,
    "data": {"dataset": "fashion-mnist", "fraction": 0.01, "num_workers": 2},
    "method_kwargs": {"bayesian_prior_prob": 0.8, "temperature": 0.2, "non_neg": "rep_relu"},
    "devices": [0],
    "checkpoint": {"dir": "/a"},
    "wandb": {"enabled": False},
    "auto_resume": {"enabled": True},
}


def _variant(**changes) -> dict:
    cfg = json.loads(json.dumps(BASE))
    for dotted, value in changes.items():
        node = cfg
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    return cfg


def test_config_differences_ignore_only_the_keys_that_may_differ():
    same = _variant(data__num_workers=0, devices=[0, 1], checkpoint__dir="/b", wandb__enabled=True)
    assert config_differences(BASE, same) == []
    sweep = _variant(
        data__fraction=0.02,
        method_kwargs__bayesian_prior_prob=0.3,
        method_kwargs__temperature=0.5,
        method_kwargs__non_neg="relu",
    )
    assert config_differences(BASE, sweep) == [
        ("data.fraction", 0.01, 0.02),
        ("method_kwargs.bayesian_prior_prob", 0.8, 0.3),
        ("method_kwargs.non_neg", "rep_relu", "relu"),
        ("method_kwargs.temperature", 0.2, 0.5),
    ]
    extra = _variant(method_kwargs__use_topk=True)
    assert config_differences(BASE, extra) == [("method_kwargs.use_topk", "<not set>", True)]


def _sitting(root: Path, version: str, args: dict, epochs: dict[int, bool]) -> Path:
    folder = root / version
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps({**args, "wandb_run_id": version}))
    for epoch, readable in epochs.items():
        path = folder / f"{args['name']}-{version}-ep={epoch}.ckpt"
        torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": epoch}, path)
        if not readable:  # killed while writing
            path.write_bytes(path.read_bytes()[:20])
    return folder


def test_resume_only_the_same_run_and_say_what_differed(tmp_path):
    root = tmp_path / "bayesncl"
    _sitting(root, "offline-a", BASE, {1: True})
    lines: list[str] = []
    sweep = _variant(data__fraction=0.02, method_kwargs__temperature=0.5)
    assert find_resume_checkpoint(sweep, root, log=lines.append) == (None, None)
    assert len(lines) == 1
    assert "starting a new run" in lines[0]
    assert "data.fraction: 0.01 -> 0.02" in lines[0]
    assert "method_kwargs.temperature: 0.2 -> 0.5" in lines[0]

    lines.clear()
    same = _variant(data__num_workers=0, checkpoint__dir=str(tmp_path))
    ckpt, run_id = find_resume_checkpoint(same, root, log=lines.append)
    assert ckpt == root / "offline-a" / "bayesncl-fashion-mnist-offline-a-ep=1.ckpt"
    assert run_id == "a"  # the run id of folder offline-a: the run continues there
    assert lines == [f"auto-resume: resuming the same run from {ckpt}"]


def test_resume_skips_a_checkpoint_cut_short_by_a_kill(tmp_path):
    root = tmp_path / "bayesncl"
    _sitting(root, "offline-a", BASE, {0: True})
    _sitting(root, "offline-b", BASE, {1: True, 2: False})  # a resumed sitting, killed
    lines: list[str] = []
    ckpt, _ = find_resume_checkpoint(BASE, root, log=lines.append)
    assert ckpt.name == "bayesncl-fashion-mnist-offline-b-ep=1.ckpt"
    assert lines[0].startswith("auto-resume: skipping unreadable checkpoint ")
    assert "ep=2.ckpt" in lines[0]


@pytest.mark.solo
def test_solo_learns_own_resumer_would_resume_a_different_run(tmp_path):
    """The case this module exists for: solo-learn's key list misses data and method settings."""
    from omegaconf import OmegaConf
    from solo.utils.auto_resumer import AutoResumer

    root = tmp_path / "bayesncl"
    _sitting(root, "offline-a", BASE, {1: True})
    sweep = _variant(data__fraction=0.02, method_kwargs__bayesian_prior_prob=0.3)
    theirs, _ = AutoResumer(str(root)).find_checkpoint(OmegaConf.create(sweep))
    assert theirs is not None  # solo-learn "resumes" it
    assert find_resume_checkpoint(sweep, root, log=lambda line: None) == (None, None)


# ---- metrics stitched over sittings ----------------------------------------------------------


def test_metrics_of_a_resumed_pretraining_are_stitched_without_repeats(tmp_path):
    from solo_bayesncl.benchmark.sittings import merge_metrics as _merge_metrics

    def sitting(name: str, rows: list[dict]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        with open(folder / "metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
            writer.writeheader()
            writer.writerows(rows)
        return folder

    a = sitting("a", [{"epoch": e, "step": e, "val_acc1": 10 + e} for e in range(3)])  # killed
    b = sitting("b", [{"epoch": e, "step": e, "val_acc1": 20 + e} for e in (1, 2, 3)])  # killed
    c = sitting("c", [{"epoch": e, "step": e, "lr": 0.1} for e in (2, 3, 4)])
    attempts = [
        {"folder": str(a), "resumed_from": None, "start_epoch": 0, "start_step": 0},
        {
            "folder": str(b),
            "resumed_from": str(a / "x-ep=0.ckpt"),
            "start_epoch": 1,
            "start_step": 1,
        },
        {
            "folder": str(c),
            "resumed_from": str(b / "x-ep=1.ckpt"),
            "start_epoch": 2,
            "start_step": 2,
        },
    ]
    (tmp_path / "pretrain_attempts.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in attempts)
    )
    merged = _merge_metrics(tmp_path, str(c), tmp_path / "merged.csv")
    with open(merged, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["epoch"], r["val_acc1"], r["lr"]) for r in rows] == [
        ("0", "10", ""),
        ("1", "21", ""),
        ("2", "", "0.1"),
        ("3", "", "0.1"),
        ("4", "", "0.1"),
    ]


def test_an_unfinished_fit_is_never_taken_as_finished():
    pytest.importorskip("lightning")
    from lightning.pytorch.trainer.states import TrainerStatus

    from solo_bayesncl.benchmark.stages import StageUnfinished
    from solo_bayesncl.benchmark.stages import check_finished as _check_finished

    def trainer(status, epoch, interrupted=False):
        return SimpleNamespace(
            interrupted=interrupted,
            state=SimpleNamespace(status=status),
            current_epoch=epoch,
            max_epochs=6,
        )

    with pytest.raises(KeyboardInterrupt):  # Lightning returned normally after Ctrl-C
        _check_finished(trainer(TrainerStatus.INTERRUPTED, 2, interrupted=True), "pretraining")
    with pytest.raises(StageUnfinished, match="pretraining stopped at epoch 2 of 6"):
        _check_finished(trainer(TrainerStatus.FINISHED, 2), "pretraining")
    _check_finished(trainer(TrainerStatus.FINISHED, 6), "pretraining")


def test_linear_configs_are_found_by_path_components(tmp_path):
    from solo_bayesncl.config.shipped import linear_config_dir as shipped_linear_dir
    from solo_bayesncl.config.shipped import linear_dir_for as linear_config_dir

    # a folder named like "pretraining" above the configs must not be rewritten
    root = tmp_path / "pretraining" / "scripts"
    (root / "pretrain" / "cifar").mkdir(parents=True)
    (root / "linear" / "cifar").mkdir(parents=True)
    assert linear_config_dir(root / "pretrain" / "cifar") == root / "linear" / "cifar"
    # without a sibling linear/ folder, the shipped linear configs of that group are used
    lone = tmp_path / "pretraining" / "elsewhere" / "pretrain" / "cifar"
    lone.mkdir(parents=True)
    assert linear_config_dir(lone) == shipped_linear_dir("cifar")


# ---- CPU time, load, commit ------------------------------------------------------------------


def test_cpu_time_includes_the_children_and_load_is_sampled(tmp_path):
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    with StageMeter(interval=0.05, samples_file=tmp_path / "load.jsonl") as meter:
        child = subprocess.run(
            [sys.executable, "-c", burn + "import os; t = os.times(); print(t.user + t.system)"],
            capture_output=True,
            text=True,
            check=True,
        )
    result = meter.result()
    assert result["cpu_s"] >= float(child.stdout) - 0.02  # the child's CPU time is counted
    assert result["load_samples"] >= 1 and result["load_mean"] is not None
    assert result["cpu_count"] == os.cpu_count()
    assert len((tmp_path / "load.jsonl").read_text().splitlines()) == result["load_samples"]


def test_wall_times_are_marked_unreliable_only_under_foreign_load():
    quiet = {"wall_s": 100, "cpu_s": 190, "cpu_count": 2, "load_mean": 3.9, "own_threads_mean": 3.8}
    assert not load_unreliable(quiet)  # busy with its own threads only
    busy = {**quiet, "load_mean": 12.7}
    assert load_unreliable(busy)
    half = {"wall_s": 100, "cpu_s": 100, "cpu_count": 8, "load_mean": 4.0, "own_threads_mean": 1}
    assert not load_unreliable(half)  # others ran, but on cores the run did not need
    assert not load_unreliable({**busy, "load_mean": None})


def test_git_state_outside_a_checkout_is_unknown(tmp_path):
    assert git_state(tmp_path) == {"commit": "unknown", "dirty": "unknown"}
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t.invalid")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env)
    (tmp_path / "f.txt").write_text("a")
    subprocess.run(["git", "add", "f.txt"], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "f"], cwd=tmp_path, check=True, env=env)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "untracked.txt").write_text("results")
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "f.txt").write_text("b")
    assert git_state(tmp_path) == {"commit": head, "dirty": True}


def test_results_and_docs_the_benchmark_rewrote_do_not_make_the_code_dirty(tmp_path):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t.invalid")
    files = ["results/study/results.md", "results/study/results.csv", "docs/r.md", "README.md"]
    files += ["pkg/code.py", "presets/p.yaml"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "x"], cwd=tmp_path, check=True, env=env)
    for name in files[:4]:  # a finished preset rewrote its tables; the README was edited
        (tmp_path / name).write_text("b")
    assert git_state(tmp_path)["dirty"] is False
    for name in files[4:]:  # code and configs a run reads
        (tmp_path / name).write_text("b")
        assert git_state(tmp_path)["dirty"] is True, name
        subprocess.run(["git", "checkout", "-q", "--", name], cwd=tmp_path, check=True)


# ---- table and progress ----------------------------------------------------------------------


def _result(method: str, unreliable: bool) -> dict:
    return {
        "method": method,
        "seed": 5,
        "linear_top1": 50.0,
        "knn_top1": 40.0,
        "seconds_per_epoch": 80.0,
        "cpu_seconds_per_epoch": 21.5,
        "peak_memory_mb": 1000.0,
        "wall_unreliable": unreliable,
        "epoch_load_mean": 12.66,
        "cpu_count": 2,
        "metrics": {},
    }


def test_table_has_cpu_time_and_marks_unreliable_wall_times(tmp_path):
    rows = aggregate([_result("simclr", False), _result("bayesncl", True)])
    md = write_markdown(rows, tmp_path / "t.md", "unit", "abc", "2026-11-30").read_text()
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| method"))
    assert "| s_per_epoch | cpu_s_per_epoch |" in header
    assert "| 80.0 | 21.5 |" in next(line for line in lines if line.startswith("| simclr"))
    assert "| 80.0 † | 21.5 |" in next(line for line in lines if line.startswith("| bayesncl"))
    (note,) = [line for line in lines if line.startswith("† ")]
    assert note.startswith("† wall time measured while other work loaded the machine")
    assert "12.7 on 2 cores" in note
    quiet = aggregate([_result("simclr", False)])
    assert "†" not in write_markdown(quiet, tmp_path / "q.md", "u", "abc", "d").read_text()
    with open(write_csv(rows, tmp_path / "t.csv", "abc", "d"), newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["wall_unreliable"] for r in table] == ["False", "True"]
    assert float(table[0]["cpu_s_per_epoch"]) == pytest.approx(21.5)


def test_progress_shows_method_seed_stage_epoch_and_time_left():
    run = RunProgress(pretrain_epochs=6, linear_epochs=3)
    assert run.total == 11
    assert run.done({}) == 0
    assert run.done({"stage": "pretrain", "epoch": 2, "batch": 5, "batches": 10}) == 2.5
    assert run.done({"stage": "linear", "epoch": 1, "batch": 0, "batches": 4}) == 7
    assert run.done({"stage": "report"}) == 10 and run.done({"stage": "done"}) == 11
    assert RunProgress.describe({"stage": "pretrain", "epoch": 2, "epochs": 6}) == (
        "pretrain epoch 3/6"
    )
    out = io.StringIO()
    display = ProgressDisplay(total=22, file=out)
    display.skip_run(run)
    display.start_run("bayesncl seed 5", run)
    display.update({"stage": "pretrain", "epoch": 0, "epochs": 6, "batch": 0, "batches": 10})
    display._run_start -= 60  # a minute later, 1.5 epochs on, an epoch measured at 40 s
    display.update(
        {"stage": "pretrain", "epoch": 1, "epochs": 6, "batch": 5, "batches": 10, "epoch_s": 40}
    )
    display.close()
    text = out.getvalue().split("\r")[-1]
    # 4.5 epochs of 40 s, then the guessed evaluation (3 x 0.3 + 0.4 + 0.7 epochs): 4:20
    assert "bayesncl seed 5 | pretrain epoch 2/6 | 1:00 elapsed, ~4:20 left" in text
    assert text.rstrip().endswith("% all runs [00:00, ~4:20 left]")
    assert display.bar.n == pytest.approx(11 + 1.5)
