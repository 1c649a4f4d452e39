"""Drive a local headless Chromium over a built dashboard (``file://``): screenshots and load
timing. Needs ``selenium`` and a system Chromium with its driver, given by path, so nothing is
downloaded; Chromium's background networking, updates and sync are off."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER_CANDIDATES = ("chromedriver",)
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--hide-scrollbars",
)


def find_browser() -> tuple[str, str] | None:
    """Paths of a Chromium binary and its chromedriver, or None when either is missing."""
    browser = next((p for p in map(shutil.which, CHROMIUM_CANDIDATES) if p), None)
    driver = next((p for p in map(shutil.which, CHROMEDRIVER_CANDIDATES) if p), None)
    return (browser, driver) if browser and driver else None


@contextmanager
def headless_chromium(
    width: int = 1280, height: int = 900, *, log_network: bool = False
) -> Iterator[Any]:
    """A selenium Chrome WebDriver on a local headless Chromium, closed on exit.

    With ``log_network`` the DevTools performance log is kept, so :func:`requested_urls` can
    list every URL the pages asked for.
    """
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as err:
        raise RuntimeError(
            "the dashboard browser helpers need selenium: pip install selenium"
        ) from err
    found = find_browser()
    if found is None:
        raise RuntimeError(
            "no local Chromium and chromedriver found on PATH (Debian: apt-get install chromium "
            "chromium-driver)"
        )
    browser, driver_path = found
    profile = tempfile.mkdtemp(prefix="dashboard-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument(f"--user-data-dir={profile}")
    if log_network:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def requested_urls(driver: Any) -> list[str]:
    """URLs requested since the last call (needs ``headless_chromium(log_network=True)``)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for(driver: Any, script: str, timeout: float = 120.0) -> Any:
    """Poll a JavaScript expression (``return ...``) until it is truthy; return its value.
    ``timeout`` only guards against a page that never gets there: it returns as soon as the
    expression holds, and a busy machine may take many seconds to lay out a page."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


IMAGES_READY = "return Array.from(document.images).every(function (i) { return i.complete; });"
LOAD_TIMING = """
const nav = performance.getEntriesByType('navigation')[0];
const render = performance.getEntriesByName('dashboard-render')[0];
return {load_ms: nav.loadEventEnd, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
        render_ms: render ? render.duration : null};
"""


def page_load_timing(driver: Any, url: str) -> dict[str, float]:
    """Open ``url`` and return its navigation timing (ms since navigation start)."""
    driver.get(url)
    wait_for(driver, "return performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
    return driver.execute_script(LOAD_TIMING)


def save_screenshots(
    index_html: str | Path,
    index_png: str | Path,
    dim_png: str | Path,
    *,
    dim: int | None = None,
    width: int = 1280,
    height: int = 900,
    dim_height: int = 1150,
) -> tuple[Path, Path]:
    """Screenshot a dashboard's index and one dimension page (default: its first card).

    ``index_html`` is the path returned by :func:`build_dashboard`; the dimension page is taken
    in a taller window (``dim_height``) so its histograms show. Returns the two PNG paths.
    """
    index_url = Path(index_html).resolve().as_uri()
    index_png, dim_png = Path(index_png), Path(dim_png)
    with headless_chromium(width, height) as driver:
        driver.get(index_url)
        wait_for(driver, IMAGES_READY)
        index_png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(index_png))
        if dim is None:
            href = driver.execute_script(
                "const c = document.querySelector('.card'); return c ? c.href : null;"
            )
            if href is None:
                raise RuntimeError(f"{index_html}: the dashboard has no active dimension")
        else:
            href = Path(index_html).resolve().with_name("dim.html").as_uri() + f"?d={dim}"
        driver.set_window_size(width, dim_height)
        driver.get(href)
        wait_for(driver, IMAGES_READY)
        dim_png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(dim_png))
    return index_png, dim_png
