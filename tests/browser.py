"""Headless Debian Chromium driven by Selenium, for the `vit serve` page: the browser tests and
tools/serve_screenshot.py share it."""

import os
import shutil
import subprocess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INSTALL = "apt-get install chromium chromium-driver"


def start_chromium(width=1100, height=800):
    """Headless Debian Chromium through its own driver, with the browser console recorded.

    The flags keep Chromium off the network (this machine has none) and let it run as root in
    a container; Selenium is given the driver's path, so it never looks for one online.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--disable-sync",
                 "--disable-component-update", "--disable-quic", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver's own log goes nowhere: pytest closes the captured stderr it would inherit.
    service = Service(executable_path=CHROMEDRIVER, log_output=subprocess.DEVNULL)
    return webdriver.Chrome(service=service, options=options)


def classify_in_page(driver, base_url, image_path, timeout=60):
    """Opens the page, uploads `image_path` and waits for the answer; returns the body's
    data-state ('done' or 'error')."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base_url + "/")
    wait = WebDriverWait(driver, timeout)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
               == "ready")
    driver.find_element(By.ID, "file").send_keys(os.path.abspath(image_path))
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
               in ("done", "error"))
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-state")


HEATMAP_PIXELS = """
const canvas = document.getElementById("heatmap");
const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
let opaque = 0; const colours = new Set();
for (let i = 0; i < data.length; i += 4) {
  if (data[i + 3] > 0) { opaque++; colours.add(data[i] * 65536 + data[i + 1] * 256 + data[i + 2]); }
}
return [canvas.width, canvas.height, opaque, colours.size];
"""


def missing() -> str | None:
    """Why the browser cannot run here, or None when Chromium, its driver and Selenium are
    installed."""
    for path, what in ((CHROMIUM, "Chromium"), (CHROMEDRIVER, "ChromeDriver")):
        if not os.path.exists(path):
            return f"{what} is not installed ({path} missing); `{INSTALL}` installs it"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (a test extra: pip install -e '.[dev]')"
    return None


def skip_without_browser() -> None:
    """Skips the calling test without a browser, except where VIT_REQUIRE_BROWSER=1 (.ci/run)
    says it is there: then it fails."""
    import pytest

    why = missing()
    if why and os.environ.get("VIT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why}; VIT_REQUIRE_BROWSER=1 requires the browser tests to run")
    if why:
        pytest.skip(f"{why}; the browser tests need it")
