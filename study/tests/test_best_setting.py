"""The sweep's best setting by the study's rule: eligible when the converged probe is not below
NCL's beyond seed noise, collapsed below a tenth of NCL's active dimensions or with the probe
below, best by the mean class-gain difference; no choice until every seed is in."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from helpers import fake_result

from study.best_setting import (
    best_setting,
    main,
    per_seed_differences,
    setting_verdicts,
    verdict_line,
)

NCL = {1: (0.40, 84.0), 2: (0.41, 84.2), 3: (0.39, 83.9)}  # seed: (class gain, probe)


def _result(name: str, seed: int, gain: float, probe: float, dims: float) -> dict:
    method = "ncl" if name == "ncl" else "bayesncl"
    variant = None if name in ("ncl", "bayesncl") else name
    result = fake_result(method, seed, gain, variant=variant, probe_top1=probe)
    result["metrics"]["active_dims"] = dims
    return result


def _sweep(skip: tuple[str, int] | None = None) -> list[dict]:
    """NCL and three settings on seeds 1-3: ``good`` (+0.05 class gain, probe level), ``worse``
    (+0.08, probe a point below on every seed), ``sparse`` (+0.03, probe level, 20 of 250
    dimensions)."""
    results = []
    for seed, (gain, probe) in NCL.items():
        results.append(_result("ncl", seed, gain, probe, 250))
        offsets = {1: 0.1, 2: -0.2, 3: 0.3}
        settings = {
            "good": (gain + 0.05 + 0.01 * seed, probe + offsets[seed], 200),
            "worse": (gain + 0.08, probe - 1.0 - 0.1 * seed, 180),
            "sparse": (gain + 0.03, probe + offsets[seed], 20),
        }
        for name, (g, p, dims) in settings.items():
            if skip != (name, seed):
                results.append(_result(name, seed, g, p, dims))
    return results


def test_the_rule_picks_the_eligible_setting_with_the_largest_class_gain() -> None:
    verdicts = {v.setting: v for v in setting_verdicts(_sweep())}
    assert set(verdicts) == {"good", "worse", "sparse"}
    good, worse, sparse = verdicts["good"], verdicts["worse"], verdicts["sparse"]
    # good: differences 0.06, 0.07, 0.08 -> mean 0.07, std 0.01, t(2) = 4.3026527
    assert good.gain["mean"] == pytest.approx(0.07)
    half = 4.3026527 * 0.01 / math.sqrt(3)
    assert (good.gain["low"], good.gain["high"]) == pytest.approx((0.07 - half, 0.07 + half))
    probe_diffs = [0.1, -0.2, 0.3]
    assert good.probe["mean"] == pytest.approx(statistics.fmean(probe_diffs))
    assert good.probe["high"] > 0 and good.eligible and not good.collapsed
    # worse: a higher class gain, but its probe is below NCL's on every seed (-1.1 .. -1.3)
    assert worse.gain["mean"] == pytest.approx(0.08) and worse.probe["high"] < 0
    assert not worse.eligible and worse.collapsed
    # sparse: eligible, but 20 active dimensions against 250 (under a tenth): collapsed
    assert sparse.active_dims == 20 and sparse.reference_active_dims == 250
    assert sparse.eligible and sparse.collapsed
    assert best_setting(list(verdicts.values())) is good
    line = verdict_line(list(verdicts.values()), (1, 2, 3))
    assert line.startswith("**Best: good**, class gain +0.070 against ncl (95% +0.045 to +0.095)")
    assert "200 active dimensions against 250." in line


def test_no_choice_until_every_seed_of_every_setting_is_in() -> None:
    verdicts = setting_verdicts(_sweep(skip=("worse", 3)))
    assert best_setting(verdicts) is None  # "good" would win either way: still no choice
    worse = next(v for v in verdicts if v.setting == "worse")
    assert worse.pairs == (1, 2) and worse.missing == (3,)
    assert not worse.eligible and not worse.collapsed  # not judged yet
    assert verdict_line(verdicts, (1, 2, 3)) == (
        "**Not decided yet**: waiting for worse (seed 3) beside ncl."
    )


def test_seeds_outside_the_rules_are_not_read() -> None:
    results = _sweep()
    # seed 4 of "worse" with a huge probe would make it eligible if it were read
    results.append(_result("worse", 4, 0.6, 99.0, 180))
    results.append(_result("ncl", 4, 0.4, 84.0, 250))
    verdicts = {v.setting: v for v in setting_verdicts(results, (1, 2, 3))}
    assert verdicts["worse"].pairs == (1, 2, 3) and not verdicts["worse"].eligible
    with_four = {v.setting: v for v in setting_verdicts(results, (1, 2, 3, 4))}
    assert with_four["worse"].pairs == (1, 2, 3, 4)
    assert with_four["good"].missing == (4,)


def test_each_setting_is_given_seed_by_seed_against_the_reference() -> None:
    """The rule reads means; the per-seed differences show whether one seed makes them. Only
    the rule's seeds on which both finished, the setting's own active dimensions beside."""
    results = _sweep(skip=("worse", 2))
    results.append(_result("good", 4, 0.9, 90.0, 10))  # outside the rule's seeds
    good = per_seed_differences(results, "good", (1, 2, 3))
    assert [row["seed"] for row in good] == [1, 2, 3]
    assert [row["consistency_gain"] for row in good] == pytest.approx([0.06, 0.07, 0.08])
    assert [row["probe_top1"] for row in good] == pytest.approx([0.1, -0.2, 0.3])
    # fake_result reads kNN one point below the SGD probe, which both settings share here
    assert [row["linear_top1"] for row in good] == pytest.approx([0.0, 0.0, 0.0])
    assert [row["active_dims"] for row in good] == [200, 200, 200]
    worse = per_seed_differences(results, "worse", (1, 2, 3))
    assert [row["seed"] for row in worse] == [1, 3]
    assert worse[1]["probe_top1"] == pytest.approx(-1.3)
    assert per_seed_differences(results, "unrun", (1, 2, 3)) == []


def test_one_seed_gives_no_interval_and_so_no_choice() -> None:
    verdicts = setting_verdicts(_sweep(), (2,))
    assert all(len(v.pairs) == 1 and not v.decided for v in verdicts)
    assert best_setting(verdicts) is None
    assert verdict_line(verdicts, (2,)).startswith("**Not decided**: one pair per setting")


def test_when_every_probe_is_below_no_setting_is_eligible() -> None:
    results = [r for r in _sweep() if r.get("variant") in (None, "worse")]
    verdicts = setting_verdicts(results)
    assert [v.setting for v in verdicts] == ["worse"] and best_setting(verdicts) is None
    assert verdict_line(verdicts, (1, 2, 3)).startswith("**No setting is eligible**")


def test_the_command_writes_the_table_and_refuses_bad_input(tmp_path, capsys) -> None:
    runs = tmp_path / "sweep" / "runs"
    for i, result in enumerate(_sweep()):
        folder = runs / f"run{i}"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(result))
    assert main([str(tmp_path / "sweep")]) == 0
    text = (tmp_path / "sweep" / "best_setting.md").read_text()
    assert "| good | 3 | +0.070 [+0.045, +0.095] |" in text
    assert "| worse | 3 |" in text and "| no | yes |" in text
    assert text.rstrip().endswith("200 active dimensions against 250.")
    # seed by seed, between the rule's table and the verdict
    assert "| good | 2 | +0.070 | -0.20 | +0.00 | +0.00 | 200 |" in text
    assert "| worse | 3 | +0.080 | -1.30 | +0.00 | +0.00 | 180 |" in text
    assert text.index("| good | 3 | +0.080 |") < text.index("**Best: good**")
    assert "**Best: good**" in capsys.readouterr().out
    # written in one piece: no temporary left beside it (hidden ones included)
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == ["best_setting.md", "runs"]

    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "sweep"), "--seeds", "one,two"])
    assert exit_.value.code == 2
    assert "--seeds 'one,two': give comma-separated seed numbers" in capsys.readouterr().err

    only_settings = tmp_path / "no_ncl"
    (only_settings / "runs" / "a").mkdir(parents=True)
    (only_settings / "runs" / "a" / "result.json").write_text(
        json.dumps(_result("good", 1, 0.4, 84.0, 200))
    )
    with pytest.raises(SystemExit, match="no finished run of the reference row 'ncl'"):
        main([str(only_settings)])
    assert not (only_settings / "best_setting.md").exists()


def test_a_planned_setting_without_a_finished_run_is_waited_for(tmp_path, capsys) -> None:
    """The sweep's settings come from its preset: a setting none of whose runs finished is not
    forgotten, and "good" is not chosen before it has run."""
    runs = tmp_path / "sweep" / "runs"
    for i, result in enumerate(_sweep()):
        (runs / f"run{i}").mkdir(parents=True)
        (runs / f"run{i}" / "result.json").write_text(json.dumps(result))
    variants = "".join(
        f"  {name}: {{method: bayesncl, overrides: []}}\n"
        for name in ("good", "worse", "sparse", "unrun")
    )
    (tmp_path / "sweep" / "preset.yaml").write_text(
        f"methods: [ncl, unrun, good, worse, sparse]\nseeds: [1, 2, 3]\nvariants:\n{variants}"
    )
    assert main([str(tmp_path / "sweep")]) == 0
    out = capsys.readouterr().out
    assert "**Not decided yet**: waiting for unrun (seeds 1, 2, 3) beside ncl." in out
    text = (tmp_path / "sweep" / "best_setting.md").read_text()
    assert "| unrun | 0 | - | - | - (250) | not yet | not yet |" in text

    # --methods reads only the rows asked for, the planned ones among them
    assert main([str(tmp_path / "sweep"), "--methods", "ncl,good,worse,sparse"]) == 0
    assert "**Best: good**" in capsys.readouterr().out

    # a preset named on the command line replaces the one beside the results
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "sweep"), "--preset", str(tmp_path / "missing.yaml")])
    assert exit_.value.code == 2
    assert "--preset: preset file" in capsys.readouterr().err
