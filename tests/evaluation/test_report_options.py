"""The report's options: one frozen object, checked when built, read by every step."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from solo_bayesncl.evaluation.options import PASS_OPTIONS, ReportError, ReportOptions
from solo_bayesncl.evaluation.report_data import PreparedReport


def test_options_are_frozen():
    options = ReportOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_dims = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("batch_size", 0, r"^--batch-size=0 is out of range; allowed: an integer >= 1$"),
        ("top_dims", 2.5, r"^--top-dims=2.5 is out of range"),
        ("thumbnail_size", 0, r"^thumbnail_size=0 is out of range"),
        ("retrieval_max_samples", 1, r"^--retrieval-max-samples=1 is out of range; allowed: an "),
        ("device", "tpu", r"^--device='tpu' is not supported; allowed values: cpu, cuda$"),
    ],
)
def test_a_bad_option_is_refused_when_the_options_are_built(option, value, message):
    with pytest.raises(ReportError, match=message):
        ReportOptions(**{option: value})


def test_the_pass_settings_are_the_options_that_decide_the_pass():
    options = ReportOptions(dataset=Path("images/val"), max_images=7, top_dims=3, num_workers=0)
    settings = options.pass_settings()
    assert tuple(settings) == PASS_OPTIONS
    assert settings["dataset"] == "images/val" and settings["max_images"] == 7
    assert "top_dims" not in settings and "num_workers" not in settings


def _prepared(checkpoint: str, options: ReportOptions) -> PreparedReport:
    """A prepared pass without its data: the check reads only the checkpoint and the options."""
    return PreparedReport(checkpoint, options, inputs=None, data=None)  # type: ignore[arg-type]


def test_a_prepared_pass_serves_only_its_checkpoint_and_pass_options():
    prepared = _prepared("runs/a.ckpt", ReportOptions(batch_size=64))
    # what is drawn and listed, the workers and the protocol do not change the pass
    prepared.check_made_for("runs/a.ckpt", ReportOptions(batch_size=64, top_dims=2, num_workers=0))
    prepared.check_made_for(Path("runs/a.ckpt"), ReportOptions(batch_size=64, protocol="paper"))
    with pytest.raises(ReportError, match=r"^the prepared report was made with checkpoint="):
        prepared.check_made_for("runs/b.ckpt", ReportOptions(batch_size=64))
    with pytest.raises(ReportError, match=r"made with batch_size=64, this report asks for batch"):
        prepared.check_made_for("runs/a.ckpt", ReportOptions())


@pytest.mark.solo
def test_the_command_resolves_its_flags_into_one_options_object(tmp_path, monkeypatch, capsys):
    """``solo-bayesncl-evaluate`` builds one ReportOptions from its flags (the defaults when
    none is given) and hands it to the report as it is."""
    from solo_bayesncl.cli.evaluate import main
    from solo_bayesncl.evaluation import report

    given: list[ReportOptions] = []

    def fake_write_report(checkpoint, out_dir, options, **kwargs):
        given.append(options)
        metrics = {"semantic_consistency": 0.5, "sparsity": 0.25, "active_dims": 3.0}
        return {"method": "ncl", "dataset": "x", "num_images": 2, "metrics": metrics}

    monkeypatch.setattr(report, "write_report", fake_write_report)
    assert main(["a.ckpt", "--out", str(tmp_path / "r")]) == 0
    flags = ["--dataset", "cifar10", "--max-images", "9", "--images-per-dim", "4"]
    flags += ["--protocol", "ncl-paper", "--num-workers", "0", "--retrieval-max-samples", "50"]
    assert main(["a.ckpt", "--out", str(tmp_path / "r"), *flags]) == 0
    assert given[0] == ReportOptions()
    assert given[1] == ReportOptions(
        dataset="cifar10",
        max_images=9,
        images_per_dim=4,
        protocol="ncl-paper",
        num_workers=0,
        retrieval_max_samples=50,
    )
    assert main(["a.ckpt", "--out", str(tmp_path / "r"), "--top-dims", "0"]) == 2
    assert capsys.readouterr().err.endswith(
        "error: --top-dims=0 is out of range; allowed: an integer >= 1\n"
    )
