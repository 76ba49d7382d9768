"""The built docs site renders in headless Chromium: the index, an API reference page and
a tutorial show their headings with no console error, and the search finds
``cross_entropy``.

Uses ``EMBER_DOCS_SITE`` (a site ``make docs`` built) when set, else builds the site
strictly into a temporary folder. Serves it on 127.0.0.1 only; the browser is Debian's
``chromium`` (``apt-get install chromium``) driven by Playwright, and any request that
leaves the local server is refused and counted as a failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("EMBER_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; CI installs it)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    built = os.environ.get("EMBER_DOCS_SITE")
    if built:
        path = Path(built)
        assert (path / "index.html").exists(), f"EMBER_DOCS_SITE={built} holds no built site"
        return path
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    path = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002  (the base class's name)
        pass


@pytest.fixture(scope="module")
def base_url(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


class Page:
    """A page opened on the local server, with every console error, page error and refused
    or failed request it produced."""

    def __init__(self, browser, base_url: str, path: str) -> None:
        self.problems: list[str] = []
        self.page = page = browser.new_page()
        page.on("console", lambda m: m.type == "error" and self.problems.append(
            f"console: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(
            f"request failed: {r.url} ({r.failure})"))
        page.route("**/*", lambda route: route.continue_()
                   if route.request.url.startswith(base_url) else route.abort())
        response = page.goto(base_url + path, wait_until="networkidle")
        assert response is not None and response.ok, f"{path}: {response and response.status}"

    def heading(self) -> str:
        return self.page.locator("article h1").first.inner_text()

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_page(browser, base_url):
    pages = []

    def opener(path: str) -> Page:
        pages.append(Page(browser, base_url, path))
        return pages[-1]

    yield opener
    for page in pages:
        page.close()


def test_index_renders(open_page):
    page = open_page("")
    assert page.heading().startswith("ember")
    assert page.page.locator("nav").get_by_text("API reference").count() >= 1
    assert page.page.locator("article pre code").count() >= 1
    assert page.problems == []


def test_three_paths_diagram_loads(open_page):
    page = open_page("three-paths/")
    assert page.heading().startswith("The three paths")
    width = page.page.locator("article img[src$='actors.svg']").evaluate("img => img.naturalWidth")
    assert width > 0
    assert page.problems == []


def test_api_reference_renders(open_page):
    page = open_page("reference/functional/")
    assert page.heading().startswith("ember.nn.functional")
    entry = page.page.locator("[id='ember.nn.functional.cross_entropy']")
    assert entry.count() == 1 and "cross_entropy" in entry.inner_text()
    tensor = open_page("reference/tensor/")
    assert tensor.page.locator("[id='ember.Tensor.backward']").count() == 1
    assert page.problems == [] and tensor.problems == []


def test_tutorial_renders(open_page):
    page = open_page("tutorials/autodiff-from-scratch/")
    assert "autodiff" in page.heading().lower()
    assert page.problems == []


def test_search_finds_cross_entropy(open_page, base_url):
    page = open_page("")
    query = page.page.locator("input.md-search__input")
    results = page.page.locator(".md-search-result__item")
    # Material searches on key events (so type, not fill), in a web worker whose index
    # "networkidle" does not wait for: a query typed before it is ready finds nothing, so
    # type it again until results come (they fill a dropdown Material opens on focus:
    # wait for the items to exist).
    deadline = time.monotonic() + 60
    while results.count() == 0 and time.monotonic() < deadline:
        query.fill("")
        query.press_sequentially("cross_entropy")
        try:
            results.first.wait_for(state="attached", timeout=3_000)
        except sync_api.TimeoutError:
            pass
    links = [results.nth(i).locator("a").first.get_attribute("href")
             for i in range(results.count())]
    assert any("reference/functional/" in link for link in links), links
    assert page.problems == []
