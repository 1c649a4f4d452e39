"""Dashboard size and load time at 10,000 validation images x 2,048 dimensions.

The thumbnails are random colour noise, the worst case for the sprite-sheet compression, so the
measured size bounds what real 32 x 32 images give. The load-time test needs a local Chromium and
chromedriver and skips without them; it prints the measured figures.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from solo_bayesncl.dashboard import build_dashboard, write_feature_bundle
from tests.dashboard.browser import find_browser
from tests.dashboard.demo import synthetic_sparse_features

N_IMAGES, N_DIMS, N_CLASSES = 10_000, 2_048, 10
MAX_BYTES = 50 * 2**20
LOAD_BUDGET_S = 2.0
LOAD_MARGIN = 2.5  # this machine is shared and noisy; the real figure is printed


@pytest.fixture(scope="module")
def big_dashboard(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, N_CLASSES, N_IMAGES)
    feats = synthetic_sparse_features(
        labels, N_CLASSES, N_DIMS, p_in=0.3, p_out=0.02, dead_share=0.0
    )
    write_feature_bundle(
        root / "report",
        features=feats.astype(np.float16),
        labels=labels,
        class_names=[f"class {c}" for c in range(N_CLASSES)],
        thumbnails=rng.integers(0, 256, (N_IMAGES, 32, 32, 3), dtype=np.uint8),
        gate_open_rate=rng.random(N_DIMS).astype(np.float32),
        method="bayesncl",
    )
    return build_dashboard(root / "report", root / "out")


def test_size_under_50_mb(big_dashboard):
    files = [p for p in big_dashboard.parent.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    sheets = sum(p.stat().st_size for p in files if p.parent.name == "thumbs")
    data = (big_dashboard.parent / "data.js").stat().st_size
    print(
        f"\ndashboard for {N_IMAGES} images x {N_DIMS} dims: {total / 2**20:.1f} MiB in "
        f"{len(files)} files (sprite sheets {sheets / 2**20:.1f} MiB, data.js {data / 2**20:.2f} MiB)"
    )
    assert total < MAX_BYTES
    assert len(files) < 20  # thumbnails are shared sheets, not one file per card


def test_index_opens_quickly(big_dashboard):
    pytest.importorskip("selenium", reason="load-time test needs selenium")
    if find_browser() is None:
        pytest.skip("load-time test needs chromium and chromedriver")
    from tests.dashboard.browser import (
        IMAGES_READY,
        headless_chromium,
        page_load_timing,
        wait_for,
    )

    url = big_dashboard.as_uri()
    with headless_chromium(1280, 900) as driver:
        timings = [page_load_timing(driver, url) for _ in range(3)]
        loads = [t["load_ms"] / 1000 for t in timings]
        renders = [t["render_ms"] for t in timings]
        print(
            f"\nindex of {N_DIMS} cards: load event at {', '.join(f'{s:.2f}' for s in loads)} s "
            f"(median {statistics.median(loads):.2f} s); "
            f"rendering script {', '.join(f'{r:.0f}' for r in renders)} ms"
        )
        assert driver.execute_script("return document.querySelectorAll('.card').length") == N_DIMS
        # thumbnails of far-away cards are filled in when they are scrolled to
        driver.execute_script("window.scrollTo(0, document.body.scrollHeight);")
        assert wait_for(
            driver,
            "const c = document.querySelectorAll('.card'); "
            "return c[c.length - 1].dataset.filled === '1';",
        )
        assert wait_for(driver, IMAGES_READY)
        assert driver.execute_script(
            "const c = document.querySelectorAll('.card'); const imgs = "
            "c[c.length - 1].querySelectorAll('img'); "
            "return imgs.length > 0 && Array.from(imgs).every(i => i.naturalWidth > 0);"
        )
    assert statistics.median(loads) < LOAD_BUDGET_S * LOAD_MARGIN
