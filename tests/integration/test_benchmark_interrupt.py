"""An interrupted benchmark never records an unfinished run, and resuming it gives the table of
an uninterrupted run.

One tiny preset (BayesNCL, 3 pretraining and 2 linear epochs on a 24-image folder) runs once
without interruption, then again in another folder where it is stopped six times, through the
command line as a user would: SIGINT (Ctrl-C), SIGTERM and SIGKILL of the benchmark process
during pretraining (after a checkpoint exists) and during linear evaluation. Each stop exits as
documented, the run process ends with its parent, nothing unfinished is recorded, and the final
rerun's table equals the uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, signals_at_default, tiny_preset_file

from solo_bayesncl.benchmark.records import read_result

pytestmark = [
    pytest.mark.slow,
    pytest.mark.solo,
]

MESSAGE = "interrupted; run the same command again to resume"
DETERMINISTIC = (
    "method",
    "seeds",
    "linear_top1",
    "knn_top1",
    "semantic_consistency",
    "consistency_shuffled",
    "consistency_gain",
    "semantic_entropy",
    "active_dims",
    "sparsity",
    "effective_rank",
    "retrieval_p@1",
)


@pytest.fixture(scope="module")
def small_folder(image_folder, tmp_path_factory) -> Path:
    """4 training and 2 validation images per class: 3 training steps of 8 per epoch."""
    root = tmp_path_factory.mktemp("small")
    for split, count in (("train", 4), ("val", 2)):
        for cls in sorted((image_folder / split).iterdir()):
            (root / split / cls.name).mkdir(parents=True)
            for image in sorted(cls.iterdir())[:count]:
                shutil.copy(image, root / split / cls.name / image.name)
    return root


def _preset(folder: Path, data: Path) -> Path:
    return tiny_preset_file(
        folder / "tiny.yaml",
        data,
        "results",
        max_epochs=3,
        linear={"max_epochs": 2, "batch_size": 8, "lr": 0.1},
    )


def _launch(preset: Path, cwd: Path, output=subprocess.PIPE) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "solo_bayesncl.benchmark", "--preset", str(preset)],
        cwd=cwd,  # not the preset's folder: results must still go there
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=signals_at_default,  # the signals below arrive however pytest was started
    )


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _status(out: Path) -> dict:
    files = list(out.glob("runs/*/status.json"))
    try:
        return json.loads(files[0].read_text()) if files else {}
    except ValueError:
        return {}


def _stop(preset: Path, out: Path, sig: int, when) -> tuple[int, str, list[int]]:
    """Starts the benchmark, sends ``sig`` once ``when(status)`` holds; returns the exit status,
    the output and the run processes it had."""
    started = time.time()
    proc = _launch(preset, REPO)
    deadline = time.monotonic() + 900
    while not ((status := _status(out)).get("time", 0) > started and when(status)):
        assert proc.poll() is None, f"the benchmark ended before the signal:\n{proc.stdout.read()}"
        assert time.monotonic() < deadline, "the run never reached the stage to interrupt"
        time.sleep(0.1)
    children = _children(proc.pid)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=600)
    return proc.returncode, output, children


def _pretraining_at(epoch: int):
    return lambda s: s.get("stage") == "pretrain" and s.get("epoch", 0) >= epoch


def _linear_started(s: dict) -> bool:
    return s.get("stage") == "linear" and bool(s.get("batches"))


def _table(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as f:
        return [{k: row[k] for k in DETERMINISTIC} for row in csv.DictReader(f)]


@pytest.mark.long
def test_interrupted_runs_resume_to_the_uninterrupted_table(small_folder, tmp_path):
    # the uninterrupted run goes on beside the stopped ones (its own folder): mostly imports,
    # which take one core each; its output goes to a file, which never fills up as a pipe would
    whole_log = tmp_path / "whole.log"
    with open(whole_log, "w") as log:
        whole = _launch(_preset(tmp_path / "whole", small_folder), REPO, output=log)

    preset = _preset(tmp_path / "stopped", small_folder)
    out = tmp_path / "stopped" / "results"
    # each signal the benchmark forwards once (SIGINT in pretraining, SIGTERM in the probe: the
    # same handler passes both on), and a hard kill in each stage
    stops = [
        (signal.SIGINT, _pretraining_at(1), "pretrain"),
        (signal.SIGKILL, _pretraining_at(2), "pretrain"),
        (signal.SIGTERM, _linear_started, "linear"),
        (signal.SIGKILL, _linear_started, "linear"),
    ]
    for sig, when, stage in stops:
        code, output, children = _stop(preset, out, sig, when)
        (run_dir,) = list(out.glob("runs/*/"))
        assert children, "the benchmark runs each run in a child process"
        if sig == signal.SIGKILL:
            deadline = time.monotonic() + 120
            while any(_alive(pid) for pid in children):
                assert time.monotonic() < deadline, "the run outlived its killed benchmark"
                time.sleep(0.2)
        else:
            assert code == 128 + sig, output
            assert output.count(MESSAGE) == 1, output
            assert "Traceback" not in output, output
            assert not any(_alive(pid) for pid in children)
        # nothing unfinished is recorded
        assert not (run_dir / f"{stage}.json").exists(), f"{sig!r} came too late to test {stage}"
        assert not (run_dir / "result.json").exists()
        assert not (out / "results.csv").exists()
        if stage == "linear":
            assert (run_dir / "pretrain.json").is_file()

    final = _launch(preset, REPO)
    output, _ = final.communicate(timeout=1800)
    assert final.returncode == 0, output
    assert whole.wait(timeout=1800) == 0, whole_log.read_text()
    assert _table(out) == _table(tmp_path / "whole" / "results")

    result = read_result(run_dir)  # the files it names, relative to the run folder, resolved
    assert result["epochs"] == 3
    # the commit(s) the stages ran at ("a+b" when the code changed between sittings)
    assert all(len(c) == 40 for c in result["commit"].split("+")) or result["commit"] == "unknown"
    sittings = (run_dir / "pretrain_attempts.jsonl").read_text().splitlines()
    assert len(sittings) >= 3  # the first start and two resumes
    with open(result["pretrain_metrics_csv"], newline="") as f:
        val_epochs = [int(float(r["epoch"])) for r in csv.DictReader(f) if r.get("val_acc1")]
    assert val_epochs == [0, 1, 2]  # every epoch once, stitched from the sittings
