"""Screenshots of the built docs and of README.md, to look at them as a reader does.

    python devtools/screenshots.py                 # build the docs, then shoot the default pages
    python devtools/screenshots.py --no-build guides/slurm reference/cli

Needs a headless Chromium on the PATH (``apt-get install chromium``): a development tool, not a dependency
of tfdist. Writes PNGs into ``build/screenshots/`` (ignored by git); README.md is rendered with
python-markdown (installed with mkdocs) and the docs' own stylesheet-free HTML.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "build" / "site"
OUT = ROOT / "build" / "screenshots"
#: The pages a reader meets first: the front page, two guides, the command reference.
DEFAULT_PAGES = ("", "getting-started", "guides/slurm", "performance", "reference/cli")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SHOT_TIMEOUT_S = 60
#: A readable measure for README: GitHub renders it about this wide.
README_CSS = (
    "body{max-width:900px;margin:2em auto;font:16px/1.5 sans-serif;padding:0 1em}"
    "pre{background:#f6f8fa;padding:1em;overflow:auto}code{background:#f6f8fa}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}"
)


def browser() -> str:
    """The Chromium on the PATH, or exit 2 saying how to get one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    sys.stderr.write("screenshots: no Chromium on the PATH. Hint: apt-get install chromium\n")
    raise SystemExit(2)


def render_readme() -> Path:
    """README.md as one HTML file beside the site (links into docs/ are left as they are)."""
    import markdown

    body = markdown.markdown(
        (ROOT / "README.md").read_text(), extensions=["tables", "fenced_code", "attr_list"]
    )
    page = OUT / "readme.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><style>{README_CSS}</style>{body}")
    return page


def shoot(chromium: str, url: str, png: Path, height: int) -> None:
    """One full-width screenshot of ``url``."""
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",  # as root in a container, Chromium refuses to start with its sandbox
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={png}",
            f"--window-size=1280,{height}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=SHOT_TIMEOUT_S,
    )
    print(f"wrote {png.relative_to(ROOT)}")


def main(argv: list[str]) -> int:
    """Build (unless --no-build), then shoot README and each page."""
    parser = argparse.ArgumentParser(prog="devtools/screenshots.py")
    parser.add_argument("pages", nargs="*", default=list(DEFAULT_PAGES), help="site paths, e.g. guides/slurm")
    parser.add_argument("--no-build", action="store_true", help="use the site already in build/site/")
    parser.add_argument("--height", type=int, default=2000, help="window height in pixels (default 2000)")
    args = parser.parse_args(argv)
    chromium = browser()
    if not args.no_build:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"], cwd=ROOT, env=env, check=True
        )
    OUT.mkdir(parents=True, exist_ok=True)
    shoot(chromium, render_readme().as_uri(), OUT / "readme.png", args.height)
    for page in args.pages:
        index = SITE / page / "index.html"
        name = page.replace("/", "-") or "index"
        shoot(chromium, index.as_uri(), OUT / f"{name}.png", args.height)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
