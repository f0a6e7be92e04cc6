"""The `vit serve` page in headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium): upload a digit, see the same top-1 as `vit predict`, the heatmap drawn, no console
errors. Skips with the reason when Chromium or its driver is not installed."""

import contextlib
import io

import browser
import numpy as np
import pytest
from helpers import randomize_weights
from localhost import served
from PIL import Image

from vit_app.inference import classifier
from vit_app.inference.server import create_app
from vit_keras import VisionTransformer, ViTConfig

CONFIG = ViTConfig(image_size=16, patch_size=4, hidden_size=32, mlp_dim=64, num_heads=4,
                   num_layers=2, num_classes=10)


@pytest.fixture(scope="module")
def digit_model(tmp_path_factory):
    """A 16 px, 10-class model with labels zero..nine, and a digit PNG from scikit-learn."""
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("digits")
    model = randomize_weights(VisionTransformer(CONFIG), stddev=0.2, seed=3)
    model.save(str(folder / "model.keras"))
    names = "zero one two three four five six seven eight nine".split()
    (folder / "labels.txt").write_text("".join(f"{name}\n" for name in names))
    digit = load_digits().images[7] * (255 / 16)
    Image.fromarray(digit.astype(np.uint8)).convert("RGB").save(folder / "digit.png")
    return folder


def vit_predict_top1(model_path, image_path) -> str:
    """The class `vit predict IMAGE --model MODEL --top-k 1` prints."""
    from vit import cli

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["predict", str(image_path), "--model", str(model_path),
                         "--top-k", "1"]) == 0
    return printed.getvalue().splitlines()[1].split()[1]  # the header, then file, top-1, ...


def test_the_page_shows_vit_predicts_top1_and_draws_the_heatmap(digit_model):
    browser.skip_without_browser()
    from selenium.webdriver.common.by import By

    predicted = vit_predict_top1(digit_model / "model.keras", digit_model / "digit.png")
    served_model = classifier.load(str(digit_model / "model.keras"))
    with served(create_app(served_model, "digits")) as url:
        driver = browser.start_chromium()
        try:
            assert browser.classify_in_page(driver, url, digit_model / "digit.png") == "done", \
                driver.find_element(By.ID, "status").text
            shown = driver.find_element(By.CSS_SELECTOR, "#top li .label").text
            top1 = driver.find_element(By.TAG_NAME, "body").get_attribute("data-top1")
            width, height, opaque, colours = driver.execute_script(browser.HEATMAP_PIXELS)
            rows = len(driver.find_elements(By.CSS_SELECTOR, "#top li"))
            console = driver.get_log("browser")
        finally:
            driver.quit()
    assert shown == top1 == predicted
    assert rows == 5
    assert width > 100 and opaque == width * height and colours > 10  # a drawn, varied map
    assert not [entry for entry in console if entry["level"] == "SEVERE"], console


def test_the_page_shows_the_servers_error_for_a_bad_file(digit_model, tmp_path):
    browser.skip_without_browser()
    from selenium.webdriver.common.by import By

    broken = tmp_path / "broken.png"
    broken.write_bytes((digit_model / "digit.png").read_bytes()[:60])
    served_model = classifier.load(str(digit_model / "model.keras"))
    with served(create_app(served_model, "digits")) as url:
        driver = browser.start_chromium()
        try:
            assert browser.classify_in_page(driver, url, broken) == "error"
            status = driver.find_element(By.ID, "status").text
        finally:
            driver.quit()
    assert "corrupt image" in status or "truncated PNG" in status, status
