"""The browser tests run only when asked (`make browser`, .ci/run): they need Chromium and Playwright, and a
few minutes. `make test` leaves them out."""
import os
import shutil

import pytest

collect_ignore_glob = [] if os.environ.get("STREAMALLOC_BROWSER") == "1" else ["test_*.py"]


def chromium() -> str:
    for candidate in (os.environ.get("CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
                      shutil.which("google-chrome")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("no Chromium found: install Debian's package (apt-get install -y chromium) or name the binary "
                "in $CHROMIUM")


# -- one browser for every test module (two sync Playwrights in one process cannot run at once) -----------
@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        import sys
        pytest.fail(f"Playwright is not installed in this environment: {sys.executable} -m pip install "
                    "'playwright>=1.40,<2' (into the course's .venv, as .ci/run does; its browser download is not "
                    "needed: the test drives Debian's chromium)")

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page that collects console errors and uncaught exceptions in page.errors."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(f"console: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(f"page error: {e}"))
    yield pg
    context.close()
