"""Takes the screenshot of the `vit serve` page in docs/: a real prediction with its heatmap.

Serves a trained model (by default the one `vit train` writes) on a free loopback port, opens
the page in headless Debian Chromium, uploads a digit from scikit-learn's test split that the
default job never trained on, and saves the page as a PNG.

Usage:
  vit train && python tools/serve_screenshot.py [--model saved_models/digits_tiny/model.keras]
      [--digit 1700] [--out docs/serve.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the browser and server helpers of the tests


def write_digit(index: int, path: str) -> str:
    """scikit-learn's digit `index` as an 8x8 RGB PNG; returns its label."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images[index] * (255 / 16)).astype(np.uint8)
    Image.fromarray(pixels).convert("RGB").save(path)
    return str(digits.target[index])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="saved_models/digits_tiny/model.keras")
    parser.add_argument("--digit", type=int, default=1700,
                        help="index into scikit-learn's 1797 digits")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "serve.png"))
    args = parser.parse_args(argv)
    import browser
    from localhost import served

    from vit_app.inference import classifier
    from vit_app.inference.server import create_app

    why = browser.missing()
    if why:
        raise SystemExit(why)
    model = classifier.load(args.model)
    with tempfile.TemporaryDirectory() as folder, served(create_app(model, "digits_tiny")) as url:
        image = os.path.join(folder, f"digit_{args.digit}.png")
        truth = write_digit(args.digit, image)
        driver = browser.start_chromium(width=1000, height=700)
        try:
            state = browser.classify_in_page(driver, url, image)
            top1 = driver.find_element("tag name", "body").get_attribute("data-top1")
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1000, height + 140)  # the whole page, browser bars included
            temporary = args.out + ".part.png"
            driver.save_screenshot(temporary)
            os.replace(temporary, args.out)
        finally:
            driver.quit()
    print(f"{args.out}: digit {args.digit} (a {truth}), the page says {top1!r} ({state})")
    return 0 if state == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
