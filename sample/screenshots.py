"""Take the screenshots of the sample's site shown in docs/site.md: its front page, one
package page, one page of packages by first character, the table of all packages and the
output folder's list of branches, in Debian's Chromium driven by playwright (``.venv/bin/python
sample/screenshots.py``; the sample must have been synced with html, as config/sample.yaml
asks: ``crawler sync --all --config config/sample.yaml``, so that the list shows every
branch)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parent.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", type=Path, default=REPO / "output" / "develop" / "site")
    parser.add_argument("--into", type=Path, default=REPO / "docs" / "images")
    parser.add_argument("--package", default="mpich")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"no site at {args.site}: sync the sample first", file=sys.stderr)
        return 2
    shots = {
        "site-front.png": args.site / "index.html",
        "site-package.png": args.site / "packages" / f"{args.package}.html",
        "site-letter.png": args.site / "letters" / f"{args.package[0]}.html",
        "site-all.png": args.site / "all.html",
        "site-branches.png": args.site.parent.parent / "index.html",
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        for name, path in shots.items():
            page.goto(path.resolve().as_uri())
            if name == "site-front.png":
                page.fill("#search", "py")
                page.locator("#results a").first.wait_for()
            elif name == "site-package.png":  # one spec's dependencies unfolded
                page.locator("#specs tbody tr details.deps summary").last.click()
            page.screenshot(path=str(args.into / name), full_page=True)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
