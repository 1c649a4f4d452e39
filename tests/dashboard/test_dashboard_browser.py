"""Feature dashboard in a real headless Chromium, built from Fashion-MNIST images.

Needs Debian's ``chromium`` and ``chromium-driver``, the ``selenium`` package and the
``dataset-fashion-mnist`` package; skips with the reason when one is missing. Pages are opened as
file:// URLs and every request the browser makes is checked to stay on the file system.

The README's screenshots are of a real run's dashboard (docs/evaluation.md says which); the
screenshot test here takes them of synthetic features, into a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from PIL import Image

from solo_bayesncl.dashboard import build_dashboard, load_feature_bundle, write_feature_bundle
from tests.dashboard.browser import (
    IMAGES_READY,
    find_browser,
    headless_chromium,
    requested_urls,
    save_screenshots,
    wait_for,
)
from tests.dashboard.demo import FASHION_MNIST_DIR, make_demo_report

pytestmark = pytest.mark.browser
pytest.importorskip("selenium", reason="browser tests need selenium (pip install selenium)")
if find_browser() is None:
    pytest.skip(
        "browser tests need chromium and chromedriver (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
if not (FASHION_MNIST_DIR / "t10k-images-idx3-ubyte.gz").is_file():
    pytest.skip(
        f"Fashion-MNIST not found in {FASHION_MNIST_DIR} (apt-get install dataset-fashion-mnist)",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

NETWORK_SCHEMES = ("http", "https", "ws", "wss", "ftp")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard")
    make_demo_report(root / "bayesncl", n=800, k=48, method="BayesNCL (synthetic features)")
    make_demo_report(
        root / "ncl",
        n=800,
        k=48,
        method="NCL (synthetic features)",
        gates=False,
        seed=7,
        p_in=0.35,
        p_out=0.08,
    )
    index = build_dashboard(root / "bayesncl", root / "out", compare_dir=root / "ncl")
    return index


@pytest.fixture(scope="module")
def driver():
    with headless_chromium(1280, 900, log_network=True) as drv:
        yield drv


def open_page(driver, url: str) -> None:
    driver.get(url)
    assert wait_for(driver, IMAGES_READY), f"images of {url} did not finish loading"


def data_of(index: Path, sub: str = "") -> dict:
    text = (index.parent / sub / "data.js").read_text(encoding="utf-8")
    return json.loads(text.split("=", 1)[1].rstrip().rstrip(";"))


def broken_images(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
        ".map(i => i.src);"
    )


def assert_offline(driver) -> None:
    """No request left the machine; the dashboard's own files were read from file://."""
    urls = requested_urls(driver)
    assert any(u.startswith("file://") for u in urls), f"no file:// request logged: {urls}"
    off = [u for u in urls if urlsplit(u).scheme in NETWORK_SCHEMES]
    assert not off, f"pages requested network URLs: {off}"


def visible_cards(driver) -> list[dict]:
    """Position in data.js and majority class of each displayed card, in page order."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('.card'))"
        ".filter(c => c.offsetParent !== null)"
        ".map(c => ({pos: +c.dataset.pos, majority: c.dataset.majority}));"
    )


def test_index_lists_active_dimensions_with_loaded_thumbnails(driver, dashboard):
    requested_urls(driver)  # clear the log
    open_page(driver, dashboard.as_uri())
    bundle = load_feature_bundle(dashboard.parent.parent / "bayesncl")
    n_active = int((np.abs(bundle.features.astype(np.float32)) > 1e-5).any(axis=0).sum())
    assert 0 < n_active < bundle.num_dims  # the demo has dead dimensions
    cards = driver.find_elements(By.CSS_SELECTOR, ".card")
    assert len(cards) == n_active
    # every card shows its strip, every thumbnail decodes
    data = data_of(dashboard)
    n_thumbs = sum(min(8, len(t)) for t in data["dims"]["top"])
    assert len(driver.find_elements(By.CSS_SELECTOR, ".card .thumb img")) == n_thumbs
    assert not broken_images(driver)
    # cards lead with the best-evidenced dimensions, in data.js order; the page says the rule
    ids = [int(c.get_attribute("href").split("d=")[1]) for c in cards]
    assert ids == data["dims"]["id"]
    evidence = data["dims"]["evidence"]
    assert evidence == sorted(evidence, reverse=True)  # every demo dimension fires on >= 1%
    rule = driver.find_element(By.ID, "order-rule").text
    assert "Wilson lower bound" in rule and "fewer than 1% of the images" in rule
    significant = data["dims"]["significant"]
    marked = [bool(c.find_elements(By.CSS_SELECTOR, ".ns")) for c in cards]
    assert marked == [not f for f in significant]
    # the header leads with the figures that compare methods; the rest wait in <details>
    lead = driver.find_element(By.ID, "lead-tiles").text
    assert "active dimensions" in lead and "gates open" in lead
    more = driver.find_element(By.ID, "more-tiles")
    assert "semantic consistency" not in more.text  # folded: only its summary shows
    more.find_element(By.TAG_NAME, "summary").click()
    assert "semantic consistency" in more.text
    assert_offline(driver)


def test_cards_start_above_the_fold_with_a_full_metric_set(driver, tmp_path):
    """Issue 25 (9): a report's ~30 metrics no longer push the cards below the first screen."""
    from solo_bayesncl.metrics import compute_interpretability_metrics

    report = make_demo_report(tmp_path / "rep", n=300, k=256)
    bundle = load_feature_bundle(report)
    metrics = compute_interpretability_metrics(
        bundle.features.astype(np.float32), bundle.labels, 10
    )
    meta = json.loads((report / "metrics.json").read_text())
    meta["metrics"] = {**metrics, "linear_top1": 80.5}
    (report / "metrics.json").write_text(json.dumps(meta))
    assert len(meta["metrics"]) >= 29
    open_page(driver, build_dashboard(report, tmp_path / "out").as_uri())
    top, height = driver.execute_script(
        "return [document.querySelector('.card').getBoundingClientRect().top, innerHeight];"
    )
    assert top < height / 2, f"the first card starts at {top}px of a {height}px window"


def test_class_filter_and_sorting(driver, dashboard):
    open_page(driver, dashboard.as_uri())
    total = len(visible_cards(driver))
    Select(driver.find_element(By.ID, "class-filter")).select_by_visible_text("Trouser")
    shown = visible_cards(driver)
    assert 0 < len(shown) < total
    assert {c["majority"] for c in shown} == {"1"}
    assert driver.find_element(By.ID, "shown").text.startswith(f"{len(shown)} of {total}")
    Select(driver.find_element(By.ID, "class-filter")).select_by_value("all")
    Select(driver.find_element(By.ID, "sort")).select_by_value("purity")
    data = data_of(dashboard)
    purity = [data["dims"]["purity"][c["pos"]] for c in visible_cards(driver)]
    assert len(purity) == total and purity == sorted(purity, reverse=True)
    Select(driver.find_element(By.ID, "sort")).select_by_value("least")
    assert [c["pos"] for c in visible_cards(driver)] == list(range(total))[::-1]
    Select(driver.find_element(By.ID, "sort")).select_by_value("count")
    counts = [data["dims"]["count"][c["pos"]] for c in visible_cards(driver)]
    assert counts == sorted(counts, reverse=True)


def test_search_by_class_or_id_and_minimum_support(driver, dashboard):
    open_page(driver, dashboard.as_uri())
    data = data_of(dashboard)
    total = len(visible_cards(driver))
    search = driver.find_element(By.ID, "search")
    search.send_keys("TROU")  # part of a class name, any case
    shown = visible_cards(driver)
    assert 0 < len(shown) < total and {c["majority"] for c in shown} == {"1"}
    search.clear()
    dim = data["dims"]["id"][5]
    search.send_keys(f"dim {dim}")
    assert [data["dims"]["id"][c["pos"]] for c in visible_cards(driver)] == [dim]
    search.clear()
    search.send_keys(" ")  # blank: every card again
    assert len(visible_cards(driver)) == total
    support = driver.find_element(By.ID, "min-support")
    assert support.get_attribute("value") == "1"  # the default: 1% of the images
    support.clear()
    support.send_keys("8")  # at least 64 of the 800 images
    counts = [data["dims"]["count"][c["pos"]] for c in visible_cards(driver)]
    assert counts and all(n >= 64 for n in counts) and len(counts) < total
    expected = sum(n >= 64 for n in data["dims"]["count"])
    assert len(counts) == expected
    assert driver.find_element(By.ID, "shown").text.startswith(f"{expected} of ")
    assert "support=8" in driver.current_url


@pytest.fixture(scope="module")
def evidence_dashboard(tmp_path_factory):
    """The demo report with two dimensions added that misled the former order: dim 48 fires on
    5 of the 800 images, all Trouser (purity 1 by a handful); dim 49 fires on many images whose
    majority is Pullover while its 8 strongest activations are all Dress (so the Pullover share
    of its top 8 is 0)."""
    root = tmp_path_factory.mktemp("evidence")
    base = load_feature_bundle(
        make_demo_report(root / "demo", n=800, k=48, method="BayesNCL (synthetic features)")
    )
    labels = base.labels
    extra = np.zeros((base.num_images, 2), np.float32)
    extra[np.flatnonzero(labels == 1)[:5], 0] = 0.9
    extra[np.flatnonzero(labels == 2)[:60], 1] = 0.05
    for c in (0, 4, 5, 6):
        extra[np.flatnonzero(labels == c)[:20], 1] = 0.05
    extra[np.flatnonzero(labels == 3)[:8], 1] = 0.9
    write_feature_bundle(
        root / "report",
        features=np.concatenate([base.features.astype(np.float32), extra], axis=1),
        labels=labels,
        class_names=base.class_names,
        thumbnails=base.thumbnails,
        method=base.method,
    )
    return build_dashboard(root / "report", root / "out")


def test_the_first_card_fires_on_one_percent_and_badges_show_their_own_purity(
    driver, evidence_dashboard
):
    open_page(driver, evidence_dashboard.as_uri())
    data = data_of(evidence_dashboard)
    n = data["meta"]["n_images"]
    dims = data["dims"]
    handful, mixed = dims["id"].index(48), dims["id"].index(49)
    assert dims["count"][handful] == 5 and dims["purity"][handful] == 1.0
    assert dims["majority"][mixed] == 2 and dims["top_purity"][mixed] == 0.0
    # the handful sorts after every dimension firing on >= 1% and is hidden by the filter
    assert handful == len(dims["id"]) - 1
    shown = visible_cards(driver)
    assert data["dims"]["count"][shown[0]["pos"]] >= 0.01 * n
    assert handful not in [c["pos"] for c in shown]
    support = driver.find_element(By.ID, "min-support")
    support.clear()
    support.send_keys("0")
    assert [c["pos"] for c in visible_cards(driver)][-1] == handful
    # a badge's purity is its class's share of the images the dimension fires on, never 0
    cards = driver.find_elements(By.CSS_SELECTOR, ".card")
    for card in cards:
        pos = int(card.get_attribute("data-pos"))
        purity = card.find_element(By.CSS_SELECTOR, ".stats .purity b").text
        assert purity != "0%" and "top 8" not in card.text, card.text
        colour = card.find_elements(By.CSS_SELECTOR, ".card-head .cls:not(.weak)")
        assert bool(colour) == dims["significant"][pos]
    card = cards[mixed]
    assert card.find_element(By.CSS_SELECTOR, ".card-head .cls").text == "Pullover"
    shown_purity = card.find_element(By.CSS_SELECTOR, ".stats .purity b").text
    assert shown_purity == f"{100 * dims['purity'][mixed]:.0f}%" != "0%"
    # its page names the class the share of the top 8 refers to
    card.click()
    wait_for(driver, "return document.getElementById('dim-title') !== null")
    facts = driver.find_element(By.CSS_SELECTOR, ".head .facts").text
    assert "share of Pullover among the top 8 images" in facts
    assert "evidence: 95% lower bound of the purity" in facts


def test_dimension_page_opens_from_its_card(driver, dashboard):
    requested_urls(driver)
    open_page(driver, dashboard.as_uri())
    card = driver.find_elements(By.CSS_SELECTOR, ".card")[2]
    dim = int(card.get_attribute("href").split("d=")[1])
    card.click()
    wait_for(driver, "return document.getElementById('dim-title') !== null")
    assert driver.current_url.endswith(f"dim.html?d={dim}")
    assert driver.find_element(By.ID, "dim-title").text.startswith(f"Dimension {dim}")
    assert wait_for(driver, IMAGES_READY) and not broken_images(driver)

    data = data_of(dashboard)
    pos = data["dims"]["id"].index(dim)
    top = driver.find_elements(By.CSS_SELECTOR, "#top-images figure")
    assert len(top) == len(data["dims"]["top"][pos]) > 0
    shown_values = [float(f.find_element(By.TAG_NAME, "b").text) for f in top]
    assert shown_values == sorted(shown_values, reverse=True)
    assert len(driver.find_elements(By.CSS_SELECTOR, "#random-images figure")) == len(
        data["dims"]["random"][pos]
    )
    assert len(driver.find_elements(By.CSS_SELECTOR, ".hrow")) == 10  # class histogram
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg.hist rect")) == 24
    assert "gate-open rate" in driver.find_element(By.CSS_SELECTOR, ".head").text
    assert_offline(driver)

    # a dead dimension gets an explanation, not an error
    dead = sorted(set(range(data["meta"]["n_dims"])) - set(data["dims"]["id"]))[0]
    driver.get(dashboard.with_name("dim.html").as_uri() + f"?d={dead}")
    assert "never fires" in driver.find_element(By.ID, "app").text


def test_compare_page(driver, dashboard):
    requested_urls(driver)
    open_page(driver, dashboard.with_name("compare.html").as_uri() + "#class=3")
    columns = driver.find_elements(By.CSS_SELECTOR, "#compare-cols .panel")
    assert [c.find_element(By.TAG_NAME, "h2").text.split(" ")[0] for c in columns] == [
        "BayesNCL",
        "NCL",
    ]
    a, b = data_of(dashboard), data_of(dashboard, "b")
    for column, data in zip(columns, (a, b), strict=True):
        rows = column.find_elements(By.CSS_SELECTOR, ".row")
        assert [int(r.get_attribute("href").split("d=")[1]) for r in rows] == data["specific"][3][
            "dims"
        ]
    assert not broken_images(driver)
    Select(driver.find_element(By.ID, "compare-class")).select_by_value("5")
    first_b = driver.find_elements(By.CSS_SELECTOR, "#compare-cols .panel")[1]
    link = first_b.find_element(By.CSS_SELECTOR, ".row")
    dim = int(link.get_attribute("href").split("d=")[1])
    assert dim == b["specific"][5]["dims"][0]
    link.click()
    wait_for(driver, "return document.getElementById('dim-title') !== null")
    assert "/b/dim.html" in driver.current_url
    assert "NCL" in driver.find_element(By.ID, "dim-title").text
    assert wait_for(driver, IMAGES_READY) and not broken_images(driver)
    assert_offline(driver)


def test_screenshots(dashboard, tmp_path):
    target = tmp_path
    dim = data_of(dashboard)["dims"]["id"][0]
    paths = save_screenshots(
        dashboard,
        target / "dashboard_index.png",
        target / "dashboard_dimension.png",
        dim=dim,
    )
    for path, min_height in zip(paths, (700, 950), strict=True):
        with Image.open(path) as img:
            assert img.size[0] >= 1000 and img.size[1] >= min_height
            # not a blank page: many distinct colours
            assert len(img.convert("RGB").getcolors(1 << 20) or []) > 200
