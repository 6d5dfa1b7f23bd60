"""Open a page in Debian's headless Chromium through Playwright, recording what went wrong.

    with open_page(path, "dark") as (page, problems):
        assert problems == []
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


@contextmanager
def open_page(path: Path, color_scheme: str = "light", width: int = 1400
              ) -> Iterator[tuple[Any, list[str]]]:
    """The loaded page and every console error, uncaught exception, failed request and
    request for anything but the file itself."""
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is not installed (make browser-tools installs Debian's)")
    sync_api = pytest.importorskip("playwright.sync_api")
    problems: list[str] = []
    url = path.resolve().as_uri()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900},
                                    color_scheme=color_scheme)
            page.on("console", lambda m: m.type in ("error", "warning")
                    and problems.append(f"console {m.type}: {m.text}"))
            page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
            page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
            page.on("request", lambda r: r.url != url
                    and problems.append(f"request beyond the file: {r.url}"))
            page.goto(url, wait_until="load")
            yield page, problems
        finally:
            browser.close()
