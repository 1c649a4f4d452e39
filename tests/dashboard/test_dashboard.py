"""Feature dashboard: summaries, bundle format, build output, CLI (no browser needed)."""

from __future__ import annotations

import gzip
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from solo_bayesncl.cli.dashboard import main as cli_main
from solo_bayesncl.dashboard import (
    build_dashboard,
    class_specificity,
    load_feature_bundle,
    most_specific_dims,
    summarize_dimensions,
    write_feature_bundle,
)
from solo_bayesncl.data.fashion_mnist import read_idx
from solo_bayesncl.metrics import evidence_order, wilson_lower_bound
from tests.dashboard.demo import synthetic_sparse_features


def read_data_js(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    prefix = "window.DASHBOARD_DATA = "
    assert text.startswith(prefix) and text.rstrip().endswith(";")
    return json.loads(text[len(prefix) :].rstrip().rstrip(";"))


def tiny_report(path: Path, *, seed: int = 0, gates: bool = True, method: str = "bayesncl"):
    """60 images, 3 classes, 8 dims (dims 6 and 7 dead); thumbnails encode the image index."""
    rng = np.random.default_rng(seed)
    n, k = 60, 8
    labels = np.arange(n) % 3
    feats = synthetic_sparse_features(labels, 3, k, p_in=0.7, p_out=0.1, dead_share=0.25, seed=seed)
    thumbs = np.zeros((n, 6, 5, 3), np.uint8)
    thumbs[..., 0] = (np.arange(n) * 4)[:, None, None]  # red channel = 4 * index
    thumbs[..., 1] = rng.integers(0, 256, (n, 6, 5))
    gate = np.linspace(0.0, 1.0, k).astype(np.float32) if gates else None
    write_feature_bundle(
        path,
        features=feats,
        labels=labels,
        class_names=["cat", "dog", "<b>bird</b>"],
        thumbnails=thumbs,
        gate_open_rate=gate,
        method=method,
        checkpoint="ckpt.ckpt",
        dataset="toy",
        metrics={
            "semantic_consistency": 0.5,
            "linear_top1": 71.0,
            "num_samples": float(n),
            "num_dims": float(k),
            "active_dims": 6.0,
        },
    )
    return feats, labels, thumbs


# ----------------------------------------------------------------------------- summaries


def test_summaries_known_values():
    # 6 images x 4 dims; labels 0,0,1,1,2,2. Dim 3 never fires (|a| <= eps).
    feats = np.array(
        [
            [0.9, 0.0, -0.5, 1e-6],
            [0.1, 0.0, 0.0, 0.0],
            [0.0, 0.3, 0.0, 0.0],
            [0.4, 0.2, 0.0, 0.0],
            [0.0, 0.0, 0.2, 0.0],
            [0.0, 0.7, 0.0, -1e-6],
        ],
        np.float32,
    )
    labels = np.array([0, 0, 1, 1, 2, 2])
    s = summarize_dimensions(feats, labels, 3, top_k=3, n_random=2, n_bins=2, seed=1, block=3)
    np.testing.assert_array_equal(s.active_count, [3, 3, 2, 0])
    np.testing.assert_array_equal(s.class_counts, [[2, 1, 0], [0, 2, 1], [1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(s.majority, [0, 1, 0, -1])  # dead: -1, as in the metrics
    np.testing.assert_allclose(s.purity, [2 / 3, 2 / 3, 1 / 2, 0])
    # top images (|activation| order): dim 0 -> labels 0, 1, 0; dim 1 -> 2, 1, 1; dim 2 -> 0, 2
    np.testing.assert_allclose(s.top_purity, [2 / 3, 2 / 3, 1 / 2, 0])
    np.testing.assert_array_equal(s.active_dims, [0, 1, 2])
    np.testing.assert_array_equal(s.top_index[0], [0, 3, 1])
    np.testing.assert_allclose(s.top_value[0], [0.9, 0.4, 0.1])
    # signed: ranked by |a|, value keeps its sign; padding where fewer than top_k fire
    np.testing.assert_array_equal(s.top_index[2], [0, 4, -1])
    np.testing.assert_allclose(s.top_value[2], [-0.5, 0.2, 0.0])
    np.testing.assert_array_equal(s.top_index[3], [-1, -1, -1])
    np.testing.assert_allclose(s.mean_active[:3], [(0.9 + 0.1 + 0.4) / 3, 0.4, 0.35])
    # histograms: dim 0 values 0.1, 0.4, 0.9 over [0.1, 0.9] in 2 bins -> [2, 1]
    np.testing.assert_array_equal(s.hist_counts[0], [2, 1])
    np.testing.assert_allclose([s.hist_low[0], s.hist_high[0]], [0.1, 0.9], rtol=1e-6)
    np.testing.assert_array_equal(s.hist_counts[2], [1, 1])
    np.testing.assert_array_equal(s.hist_counts[3], [0, 0])
    # random samples: distinct, all firing, padded with -1 when too few fire
    for j in range(4):
        picked = s.random_index[j][s.random_index[j] >= 0]
        assert len(picked) == min(2, s.active_count[j])
        assert len(set(picked.tolist())) == len(picked)
        assert np.all(np.abs(feats[picked, j]) > 1e-5)
        np.testing.assert_allclose(s.random_value[j][: len(picked)], feats[picked, j])


def test_summaries_match_a_per_dimension_loop_and_are_seeded():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 5, 300)
    feats = synthetic_sparse_features(labels, 5, 40, seed=3)
    a = summarize_dimensions(feats, labels, 5, top_k=7, n_random=5, seed=9, block=16)
    b = summarize_dimensions(feats, labels, 5, top_k=7, n_random=5, seed=9, block=16)
    np.testing.assert_array_equal(a.random_index, b.random_index)
    for j in range(40):
        fired = np.flatnonzero(np.abs(feats[:, j]) > 1e-5)
        assert a.active_count[j] == len(fired)
        np.testing.assert_array_equal(a.class_counts[j], np.bincount(labels[fired], minlength=5))
        top = a.top_index[j][a.top_index[j] >= 0]
        expected = np.sort(np.abs(feats[fired, j]))[::-1][: len(top)]
        np.testing.assert_allclose(np.abs(feats[top, j]), expected)
        assert a.hist_counts[j].sum() == len(fired)
        assert set(a.random_index[j][a.random_index[j] >= 0]) <= set(fired.tolist())


def test_activity_uses_row_normalised_features():
    # row 0 has a huge entry, so its 1e-4 entry is below eps after normalisation
    feats = np.array([[1e2, 1e-4], [0.0, 1e-4], [0.0, 0.0]], np.float32)
    s = summarize_dimensions(feats, np.array([0, 1, 1]), 2, top_k=3, n_random=1)
    np.testing.assert_array_equal(s.active_count, [1, 1])
    np.testing.assert_array_equal(s.top_index[1], [1, -1, -1])  # row 0 does not count
    np.testing.assert_allclose(s.top_value[1, 0], 1e-4)  # values are the features as given


def test_summaries_agree_with_the_metrics_module():
    stats_mod = pytest.importorskip(
        "solo_bayesncl.metrics.dimension_stats", reason="needs the metrics module (torch)"
    )
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, 200)
    feats = synthetic_sparse_features(labels, 4, 30, seed=1) * rng.uniform(0.5, 3, (200, 1))
    feats[:, 3] *= -1  # signed column
    ours = summarize_dimensions(feats.astype(np.float32), labels, 4)
    ref = stats_mod.per_dimension_stats(torch.from_numpy(feats), torch.from_numpy(labels), 4)
    np.testing.assert_array_equal(ours.active_count, ref.active_count.numpy())
    np.testing.assert_array_equal(ours.class_counts, ref.class_histogram.numpy())
    np.testing.assert_allclose(ours.purity, ref.purity.numpy())
    assert (ours.active_count == 0).any()  # dead dimensions agree too (majority -1)
    np.testing.assert_array_equal(ours.majority, ref.majority_class.numpy())


def _selectivity_case():
    """100 images, 5 classes of 20. Dim 0 fires on all of class 0; dim 1 on 20 random images;
    dim 2 on one image (purity 1 by luck); dim 3 on 10 of class 1 and 9 of class 2 (a near
    tie); dim 4 never fires."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), 20)
    feats = np.zeros((100, 5), np.float32)
    feats[labels == 0, 0] = rng.uniform(0.5, 1, 20)
    feats[rng.choice(100, 20, replace=False), 1] = 1.0
    feats[3, 2] = 1.0
    feats[20:30, 3] = 1.0
    feats[40:49, 3] = 2.0
    return feats, labels


def test_majority_significance_against_the_shuffled_baseline():
    torch = pytest.importorskip("torch")
    from solo_bayesncl.metrics import SIGNIFICANCE, majority_p_values

    feats, labels = _selectivity_case()
    p = majority_p_values(torch.from_numpy(feats), torch.from_numpy(labels), 5).numpy()
    # 20 images of one class: no shuffle of 100 labels reaches purity 1 -> the smallest p
    assert p[0] == pytest.approx(1 / 20) and p[0] <= SIGNIFICANCE
    # one image: every shuffle gives purity 1 as well
    assert p[2] == 1.0 and p[4] == 1.0
    assert p[1] > SIGNIFICANCE
    summ = summarize_dimensions(feats, labels, 5, top_k=4)
    np.testing.assert_array_equal(summ.significant, p <= SIGNIFICANCE)


def test_wilson_lower_bound_known_values():
    # textbook 95% Wilson intervals: 5/5 -> [0.566, 1], 50/100 -> [0.404, 0.596], 0/10 -> [0, ..]
    got = wilson_lower_bound(np.array([1.0, 0.5, 0.0, 0.9, 0.3]), np.array([5, 100, 10, 0, 1]))
    np.testing.assert_allclose(got[:3], [0.5655, 0.4038, 0.0], atol=1e-4)
    assert got[3] == 0.0  # never fires: no evidence
    # the same purity over more images is stronger evidence, and approaches the purity itself
    more = wilson_lower_bound(np.full(3, 0.8), np.array([10, 100, 100_000]))
    assert more[0] < more[1] < more[2] < 0.8 and more[2] == pytest.approx(0.8, abs=0.003)


def test_evidence_order_weighs_purity_by_support():
    """1,000 images, minimum support 1% (10 images). Dim 0: 5 images, all one class (purity 1);
    dim 1: 200 images at purity 0.7; dim 2: 40 images at purity 0.95; dim 3: 10 images at
    purity 0.9 (exactly the minimum); dim 4: 9 images at purity 1; dim 5 never fires."""
    count = np.array([5, 200, 40, 10, 9, 0])
    purity = np.array([1.0, 0.7, 0.95, 0.9, 1.0, 0.0])
    order = evidence_order(count, purity, 1000).tolist()
    # Wilson lower bounds: dim 2 0.835, dim 1 0.633, dim 3 0.596 | dim 4 0.701, dim 0 0.566
    assert order == [2, 1, 3, 4, 0]
    # with no minimum support the pure handful is ranked by its bound alone
    assert evidence_order(count, purity, 1000, min_support=0.0).tolist() == [2, 4, 1, 3, 0]
    # ties in evidence: more images first, then the lower index
    tie = evidence_order(np.array([50, 80, 50]), np.array([1.0, 1.0, 1.0]), 100).tolist()
    assert tie == [1, 0, 2]


def test_summaries_top_purity_can_differ_from_the_majority_share():
    """The purity of the top images is taken over the strongest activations, which can all be of
    another class than the dimension's majority (why a card shows the majority's own share)."""
    feats, labels = _selectivity_case()
    summ = summarize_dimensions(feats, labels, 5, top_k=4)
    # the top images of dim 3 are its class-2 images (larger values): top purity shows it
    assert summ.majority[3] == 1 and summ.top_purity[3] == 0.0
    assert summ.purity[3] == pytest.approx(10 / 19)
    # the lucky one-image dimension (purity 1, bound 0.21) outranks the random one (purity
    # 0.25 over 20 images, bound 0.11) by its bound alone, but not below 5% support
    loose = evidence_order(summ.active_count, summ.purity, 100, min_support=0)
    assert loose.tolist() == [0, 3, 2, 1]
    order = evidence_order(summ.active_count, summ.purity, 100, min_support=0.05).tolist()
    assert order[-1] == 2 and order[0] == 0 and sorted(order) == [0, 1, 2, 3]


def test_class_specificity_is_purity_times_coverage():
    counts = np.array([[10, 0], [5, 5], [1, 0], [0, 0]])
    sizes = np.array([10, 20])
    score = class_specificity(counts, sizes)
    np.testing.assert_allclose(score[:, 0], [1.0, 0.5 * 0.5, 1.0 * 0.1, 0.0])
    np.testing.assert_allclose(score[:, 1], [0.0, 0.5 * 0.25, 0.0, 0.0])
    dims, vals = most_specific_dims(score, top=3)
    np.testing.assert_array_equal(dims[0], [0, 1, 2])
    np.testing.assert_array_equal(dims[1], [1, -1, -1])  # only positive scores are listed
    np.testing.assert_allclose(vals[1], [0.125, 0, 0])


def test_summaries_reject_bad_arguments():
    with pytest.raises(ValueError, match="top_k"):
        summarize_dimensions(np.ones((3, 2)), np.zeros(3, int), 1, top_k=0)
    with pytest.raises(ValueError, match="N = 0"):
        summarize_dimensions(np.ones((0, 2)), np.zeros(0, int), 1)


# ----------------------------------------------------------------------------- bundle


def test_bundle_roundtrip_and_grey_thumbnails(tmp_path):
    feats = np.abs(np.random.default_rng(0).normal(size=(4, 3))).astype(np.float16)
    write_feature_bundle(
        tmp_path,
        features=feats,
        labels=[0, 1, 1, 0],
        class_names=["a", "b"],
        thumbnails=np.full((4, 2, 2), 7, np.uint8),
        method="ncl",
        metrics={"x": 1},
    )
    bundle = load_feature_bundle(tmp_path)
    assert bundle.features.dtype == np.float16
    np.testing.assert_array_equal(bundle.features, feats)
    assert bundle.class_names == ["a", "b"]
    assert bundle.thumbnails.shape == (4, 2, 2, 3)
    assert bundle.gate_open_rate is None
    assert (bundle.method, bundle.metrics) == ("ncl", {"x": 1.0})
    meta = json.loads((tmp_path / "metrics.json").read_text())
    assert set(meta) == {"method", "checkpoint", "dataset", "metrics"}


def test_bundle_without_method_leaves_metrics_json_alone(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"method": "simclr", "metrics": {"a": 2}}))
    write_feature_bundle(
        tmp_path,
        features=np.zeros((2, 2), np.float32),
        labels=[0, 0],
        class_names=["a"],
        thumbnails=np.zeros((2, 2, 2, 3), np.uint8),
    )
    assert load_feature_bundle(tmp_path).method == "simclr"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"labels": [0, 1, 2]}, "'labels' must lie in"),
        ({"labels": [0, 1]}, "'labels' must be an integer array of shape"),
        ({"thumbnails": np.zeros((3, 2, 2, 3), np.float32)}, "'thumbnails' must have dtype uint8"),
        ({"thumbnails": np.zeros((2, 2, 2, 3), np.uint8)}, "'thumbnails' has 2 images"),
        ({"features": np.zeros(3, np.float32)}, "'features' must be 2-D"),
        ({"features": np.full((3, 2), np.nan, np.float32)}, "NaN"),
        ({"gate_open_rate": [0.5]}, "'gate_open_rate' must have shape"),
        ({"gate_open_rate": [0.5, 2.0]}, "must lie in"),
    ],
)
def test_bundle_rejects_bad_arrays(tmp_path, change, message):
    args = dict(
        features=np.zeros((3, 2), np.float32),
        labels=[0, 1, 0],
        class_names=["a", "b"],
        thumbnails=np.zeros((3, 2, 2, 3), np.uint8),
    )
    args.update(change)
    with pytest.raises(ValueError, match=re.escape(message)):
        write_feature_bundle(tmp_path, **args)


def test_load_names_missing_file_and_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="features.npz"):
        load_feature_bundle(tmp_path)
    np.savez(tmp_path / "features.npz", features=np.zeros((2, 2)), labels=np.zeros(2, int))
    with pytest.raises(KeyError, match="class_names, thumbnails"):
        load_feature_bundle(tmp_path)
    with pytest.raises(FileNotFoundError, match="report folder not found"):
        load_feature_bundle(tmp_path / "nope")


def test_read_idx(tmp_path):
    data = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    header = bytes([0, 0, 8, 3]) + b"".join(int(d).to_bytes(4, "big") for d in data.shape)
    with gzip.open(tmp_path / "x-idx3-ubyte.gz", "wb") as fh:
        fh.write(header + data.tobytes())
    np.testing.assert_array_equal(read_idx(tmp_path / "x-idx3-ubyte.gz"), data)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad")


# ----------------------------------------------------------------------------- build


def test_build_writes_an_offline_dashboard(tmp_path):
    feats, labels, thumbs = tiny_report(tmp_path / "rep")
    index = build_dashboard(tmp_path / "rep", tmp_path / "out", thumb_format="png", top_k=4)
    out = tmp_path / "out"
    assert index == out / "index.html" and index.is_file()
    assert (out / "dim.html").is_file() and not (out / "compare.html").exists()
    data = read_data_js(out / "data.js")

    active = np.flatnonzero((np.abs(feats) > 1e-5).any(axis=0))
    counts = (np.abs(feats) > 1e-5).sum(axis=0)
    assert sorted(data["dims"]["id"]) == active.tolist() and data["meta"]["n_active"] == 6
    assert data["dims"]["count"] == counts[data["dims"]["id"]].tolist()
    # best-evidenced first (see test_evidence_order_weighs_purity_by_support)
    ids, dims = data["dims"]["id"], data["dims"]
    fired = np.abs(feats) > 1e-5
    purity = np.array(
        [np.bincount(labels[fired[:, j]], minlength=3).max() / max(counts[j], 1) for j in range(8)]
    )
    assert ids == evidence_order(counts, purity, 60).tolist()
    expected = wilson_lower_bound(np.array(dims["purity"]), np.array(dims["count"]))
    np.testing.assert_allclose(dims["evidence"], expected, rtol=1e-3)
    supported = [c >= 0.01 * 60 for c in dims["count"]]
    assert supported == sorted(supported, reverse=True)
    evidence = [e for e, ok in zip(dims["evidence"], supported, strict=True) if ok]
    assert evidence == sorted(evidence, reverse=True)
    assert data["meta"]["min_support"] == 0.01
    assert data["dims"]["gate"] == pytest.approx(np.linspace(0, 1, 8)[data["dims"]["id"]], abs=1e-3)
    # one tile per figure: images, dimensions and active dimensions are facts, not metrics
    assert data["meta"]["metrics"] == {"semantic_consistency": 0.5, "linear_top1": 71.0}
    assert (data["meta"]["n_images"], data["meta"]["n_dims"]) == (60, 8)
    assert data["class_names"][2] == "<b>bird</b>"  # kept verbatim, escaped by the page

    # every referenced image is stored exactly once, and tile t shows image index[t]
    sprite, images = data["sprite"], data["images"]["index"]
    refs = {t for key in ("top", "random") for row in data["dims"][key] for t in row}
    assert refs == set(range(len(images))) and len(set(images)) == len(images)
    sheets = [np.asarray(Image.open(out / f).convert("RGB")) for f in sprite["files"]]
    m = sprite["margin"]
    for t, img_index in enumerate(images):
        sheet, r = divmod(t, sprite["per_sheet"])
        row, col = divmod(r, sprite["cols"])
        y, x = row * sprite["cell_h"] + m, col * sprite["cell_w"] + m
        tile = sheets[sheet][y : y + sprite["tile_h"], x : x + sprite["tile_w"]]
        np.testing.assert_array_equal(tile, thumbs[img_index])
        assert data["images"]["label"][t] == labels[img_index]

    # top images of the first card are that dimension's largest activations
    j = data["dims"]["id"][0]
    top_images = [images[t] for t in data["dims"]["top"][0]]
    np.testing.assert_allclose(np.sort(feats[:, j])[::-1][:4], feats[top_images, j], rtol=1e-6)

    # nothing points outside the folder: no http(s), no protocol-relative URLs, no absolute paths
    for path in out.rglob("*"):
        if path.suffix in {".html", ".js", ".css"}:
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"https?://|src=\"//|href=\"//|url\(", text), path


def test_build_compare_and_rebuild(tmp_path):
    tiny_report(tmp_path / "a")
    tiny_report(tmp_path / "b", seed=5, gates=False, method="ncl")
    build_dashboard(tmp_path / "a", tmp_path / "out", compare_dir=tmp_path / "b")
    out = tmp_path / "out"
    assert (out / "compare.html").is_file() and (out / "b" / "index.html").is_file()
    a, b = read_data_js(out / "data.js"), read_data_js(out / "b" / "data.js")
    assert a["nav"]["compare"] == "compare.html" and b["nav"]["compare"] == "../compare.html"
    assert b["meta"]["method"] == "ncl" and b["dims"]["gate"] is None
    assert all((out / "b" / f).is_file() for f in b["sprite"]["files"])
    assert len(a["specific"]) == 3
    for spec in a["specific"]:
        assert spec["score"] == sorted(spec["score"], reverse=True)
        for s, p, c in zip(spec["score"], spec["purity"], spec["coverage"], strict=True):
            assert s == pytest.approx(p * c, rel=1e-3)
    # rebuilding without --compare removes the stale comparison
    build_dashboard(tmp_path / "a", out)
    assert not (out / "compare.html").exists() and not (out / "b").exists()


def test_build_refuses_foreign_folder_and_mismatched_classes(tmp_path):
    tiny_report(tmp_path / "a")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "thesis.tex").write_text("x")
    with pytest.raises(FileExistsError, match="thesis.tex"):
        build_dashboard(tmp_path / "a", tmp_path / "busy")
    write_feature_bundle(
        tmp_path / "other",
        features=np.ones((2, 2), np.float32),
        labels=[0, 1],
        class_names=["x", "y"],
        thumbnails=np.zeros((2, 2, 2, 3), np.uint8),
    )
    with pytest.raises(ValueError, match="class_names differ"):
        build_dashboard(tmp_path / "a", tmp_path / "out", compare_dir=tmp_path / "other")
    with pytest.raises(ValueError, match="thumb_format must be one of"):
        build_dashboard(tmp_path / "a", tmp_path / "out", thumb_format="gif")


def test_build_with_no_active_dimension(tmp_path):
    write_feature_bundle(
        tmp_path / "rep",
        features=np.zeros((3, 4), np.float32),
        labels=[0, 0, 0],
        class_names=["only"],
        thumbnails=np.zeros((3, 2, 2, 3), np.uint8),
    )
    build_dashboard(tmp_path / "rep", tmp_path / "out")
    data = read_data_js(tmp_path / "out" / "data.js")
    assert data["dims"]["id"] == [] and data["sprite"]["files"] == []


def test_cli(tmp_path, capsys):
    tiny_report(tmp_path / "rep")
    assert cli_main([str(tmp_path / "rep"), "--out", str(tmp_path / "out"), "--top-k", "3"]) == 0
    assert capsys.readouterr().out.strip() == (tmp_path / "out" / "index.html").as_uri()
    assert max(len(r) for r in read_data_js(tmp_path / "out" / "data.js")["dims"]["top"]) == 3
    assert cli_main([str(tmp_path / "missing"), "--out", str(tmp_path / "o2")]) == 2
    assert "report folder not found" in capsys.readouterr().err


# ----------------------------------------------------------------------------- header tiles


class _Tiles(HTMLParser):
    """The header's tiles of an index.html: ``key`` -> (folded, title, text of the tile)."""

    def __init__(self) -> None:
        super().__init__()
        self.tiles: dict[str, dict] = {}
        self.folded = 0  # depth inside <details>
        self.open: list[tuple[str, dict]] = []  # tiles being read, with their tag
        self.summary = ""
        self.in_summary = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "details":
            self.folded += 1
        if tag == "summary":
            self.in_summary = True
        if "fact" in (attrs.get("class") or "").split() and "data-key" in attrs:
            tile = {"folded": self.folded > 0, "title": attrs.get("title", ""), "text": ""}
            self.tiles[attrs["data-key"]] = tile
            self.open.append((tag, tile))

    def handle_endtag(self, tag):
        if tag == "details":
            self.folded -= 1
        if tag == "summary":
            self.in_summary = False
        if self.open and self.open[-1][0] == tag:
            self.open.pop()

    def handle_data(self, data):
        if self.in_summary:
            self.summary += data
        for _, tile in self.open:
            tile["text"] += data


def _header(index: Path) -> _Tiles:
    parser = _Tiles()
    parser.feed(index.read_text(encoding="utf-8"))
    return parser


def test_header_leads_with_the_figures_that_compare_methods(tmp_path):
    """Issue 25 (9): consistency gain, active dimensions, gates open and the accuracy lead; the
    other figures (a report's full metric set) are folded in a <details>; every tile explains
    itself in its title, and a folded one in a line of text too."""
    from solo_bayesncl.metrics import compute_interpretability_metrics, describe_metric

    feats, labels, _ = tiny_report(tmp_path / "rep")
    metrics = compute_interpretability_metrics(feats, labels, 3, shuffle_permutations=2)
    metrics["linear_top1"] = 71.25
    meta = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    meta["metrics"] = metrics
    (tmp_path / "rep" / "metrics.json").write_text(json.dumps(meta))
    assert len(metrics) >= 20  # the crowd the header used to show as tiles

    index = build_dashboard(tmp_path / "rep", tmp_path / "out", thumb_format="png")
    header = _header(index)
    tiles = header.tiles
    lead = [k for k, t in tiles.items() if not t["folded"]]
    assert lead == ["semantic_consistency_gain", "active_dims", "gate_open_rate", "linear_top1"]
    gain = metrics["semantic_consistency_gain"]
    assert tiles["semantic_consistency_gain"]["text"].startswith(f"{gain:+.3f}")
    active = int((np.abs(feats) > 1e-5).any(axis=0).sum())
    assert tiles["active_dims"]["text"].startswith(f"{active} of 8")
    assert tiles["gate_open_rate"]["text"].startswith(f"{100 * np.linspace(0, 1, 8).mean():.1f}%")
    assert tiles["linear_top1"]["text"].startswith("71.25")

    folded = {k for k, t in tiles.items() if t["folded"]}
    shown_elsewhere = {"num_samples", "num_dims", "active_dims"}  # facts: images, active dims
    expected = set(metrics) - shown_elsewhere - set(lead) | {"images", "gates_never_open"}
    assert folded == expected
    assert header.summary.strip() == f"{len(folded)} more figures"
    for key, tile in tiles.items():
        assert len(tile["title"]) > 20 and "\n" not in tile["title"], key
        if tile["folded"]:
            assert tile["title"] in tile["text"], key  # the explanation is a visible line too
    assert tiles["sparsity"]["title"] == describe_metric("sparsity")
    assert tiles["retrieval_p@5"]["title"] == describe_metric("retrieval_p@5")


def test_header_escapes_names_and_explains_unknown_figures(tmp_path):
    tiny_report(tmp_path / "rep", gates=False, method="<script>x</script>")
    meta = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    meta["metrics"]["my_figure"] = 3.0
    (tmp_path / "rep" / "metrics.json").write_text(json.dumps(meta))
    index = build_dashboard(tmp_path / "rep", tmp_path / "out", thumb_format="png")
    text = index.read_text(encoding="utf-8")
    assert "<script>x</script>" not in text and "&lt;script&gt;x&lt;/script&gt;" in text
    tiles = _header(index).tiles
    assert "gate_open_rate" not in tiles and "gates_never_open" not in tiles  # no gate: NCL
    assert [k for k, t in tiles.items() if not t["folded"]] == ["active_dims", "linear_top1"]
    assert "no description" in tiles["my_figure"]["title"]


def test_cli_min_support_reaches_the_page_and_is_refused_outside_0_to_1(tmp_path, capsys):
    tiny_report(tmp_path / "rep")
    out = tmp_path / "out"
    assert cli_main([str(tmp_path / "rep"), "--out", str(out), "--min-support", "0.2"]) == 0
    assert read_data_js(out / "data.js")["meta"]["min_support"] == 0.2
    with pytest.raises(SystemExit) as exit_info:
        cli_main([str(tmp_path / "rep"), "--out", str(tmp_path / "o2"), "--min-support", "5"])
    assert exit_info.value.code == 2
    assert "--min-support: 5 is not a share of the images (0 to 1)" in capsys.readouterr().err
