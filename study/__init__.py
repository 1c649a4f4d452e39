"""The project's own study of BayesNCL against NCL: its rules and analyses, read from the records
under ``study/records/`` (see ``study/README.md``).

The study imports the package (``solo_bayesncl``); the package never imports the study, and the
wheel does not carry it. Its commands run from the repository root::

    python -m study.budget study/records/study_budget_200 --shorter study/records/study_budget
    python -m study.best_setting study/records/study_budget_sweep_200
    python -m study.background_gates study/records/study_budget_200
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PRESETS", "RECORDS", "preset_file", "study_presets"]

PRESETS = Path(__file__).resolve().with_name("presets")
"""The study's benchmark presets, each run by path: ``--preset study/presets/NAME.yaml``."""
RECORDS = Path(__file__).resolve().with_name("records")
"""The study's records: one folder per preset (its tables, plots and each run's records)."""


def preset_file(name: str) -> Path:
    """The file of the study preset ``name`` (``study_budget_200``, ...)."""
    return PRESETS / f"{name}.yaml"


def study_presets() -> list[str]:
    """The names of the study's presets."""
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))
