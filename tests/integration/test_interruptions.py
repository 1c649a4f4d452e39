"""Interruptions outside training's own handling, by real processes and real signals, each sent
at a point the process reports (never after a fixed sleep): SIGTERM during a pretraining whose
progress bar is shown ends with its ``== ... interrupted`` line on a line of its own; Ctrl-C
while the command's imports load (torch, Lightning) is one line and exit status 130."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, image_folder_overrides, signal_after, signals_at_default

pytestmark = pytest.mark.solo

# Runs a script as ``python SCRIPT ARGS`` would, after sending this process SIGINT as the module
# named first is imported (the point the import starts, reported on stderr).
SIGINT_AT_IMPORT = """
import importlib.abc, os, runpy, signal, sys

MODULE = sys.argv[1]

class SigintAtImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            sys.meta_path.remove(self)
            print(f"importing {name}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, SigintAtImport())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLO_BAYESNCL_")}
    return {**env, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _overrides(image_folder: Path, out: Path) -> list[str]:
    return [
        *image_folder_overrides(image_folder),
        "data.num_workers=0",
        "optimizer.batch_size=8",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "max_epochs=2",
        "++limit_train_batches=4",
        "++num_sanity_val_steps=0",
        "accelerator=cpu",
        "wandb.enabled=False",
        f"checkpoint.dir={out}",
        "++checkpoint.time_interval_s=0.000001",  # a checkpoint after every step
    ]


def test_sigterm_line_starts_on_its_own_line_after_the_progress_bar(image_folder, tmp_path):
    command = [sys.executable, str(REPO / "main_pretrain.py"), *_overrides(image_folder, tmp_path)]
    code, out, err = signal_after(
        command, "bayesncl/*/*-step=*.ckpt", tmp_path, signal.SIGTERM, env=_env()
    )
    assert code == 143, err[-3000:]
    assert "Epoch 0" in out  # the progress bar was shown
    lines = out.split("\n")
    summary = [line for line in lines if "== pretraining" in line]
    assert len(summary) == 1, out[-2000:]
    assert re.match(r"== pretraining \S+ interrupted at epoch \d+, step \d+$", summary[0]), summary


@pytest.mark.parametrize("module", ["torch", "lightning"])
def test_ctrl_c_during_the_imports_is_one_line_and_exit_130(module, image_folder, tmp_path):
    command = [
        sys.executable,
        "-c",
        SIGINT_AT_IMPORT,
        module,
        str(REPO / "main_pretrain.py"),
        *_overrides(image_folder, tmp_path),
    ]
    done = subprocess.run(
        command,
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=signals_at_default,
    )
    assert done.stderr.startswith(f"importing {module}\n"), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip().splitlines() == [
        "== pretraining interrupted (SIGINT) while starting; nothing was trained"
    ]
    assert done.returncode == 130
    assert not (tmp_path / "bayesncl").exists()
