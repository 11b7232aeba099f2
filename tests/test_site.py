"""The built site in a real browser: headless Chromium (Debian's) driven by Playwright, every page.

`make site` (or `make test`) builds `site/`; this test serves it on 127.0.0.1 and loads every page,
asserting: no console error; no request to any host but the local server; math typeset (no raw TeX
delimiters left in the visible text, no KaTeX error); every image decodes; every internal link (and its
#anchor) resolves; each Colab link points at a notebook that exists in the repository, and each notebook
page links to its own. It also reports page weights (the page's HTML, and everything a cold visit loads)
and takes screenshots (light and dark) into `.cache/site-report/` with `report.json`.

Chromium: `$LABNN_CHROMIUM`, default `/usr/bin/chromium` (`apt-get install -y chromium`); Playwright
drives it through `executable_path` (its own browser download does not work here).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import signal
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
REPORT = ROOT / ".cache" / "site-report"
CHROMIUM = os.environ.get("LABNN_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
COLAB = re.compile(r"^https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/(.+)$")
PAGE_TIMEOUT_S = 90  # one Chromium start in a dozen hangs: nothing may wait forever
SCREENSHOTS = {"landing": "index.html"}  # + first notebook page and first annotated-source page, below


def _pages() -> list[str]:
    if not (SITE / "index.html").is_file():
        return []
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("index.html"))
    return [p for p in pages if not p.startswith("assets/")]


PAGES = _pages()
NOT_BUILT = "site/ was not built: run `make site` (make test builds it before this test)"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(_Quiet, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _Alarm(Exception):
    pass


@pytest.fixture
def deadline():
    """Fail (rather than hang) when a page takes longer than PAGE_TIMEOUT_S."""
    def ring(signum, frame):
        raise _Alarm(f"timed out after {PAGE_TIMEOUT_S} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(PAGE_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the docs extra")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set LABNN_CHROMIUM)")
    manager = sync_api.sync_playwright().start()
    launched = None
    for attempt in range(3):  # a start that hangs is retried
        try:
            launched = manager.chromium.launch(executable_path=CHROMIUM, headless=True, timeout=30_000,
                                               args=FLAGS)  # Playwright gives it a fresh temporary profile
            break
        except sync_api.TimeoutError:
            continue
    if launched is None:
        manager.stop()
        pytest.fail("Chromium did not start within 30 s, three times")
    yield launched
    launched.close()
    manager.stop()


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def _fetch(url: str) -> tuple[int, frozenset[str]]:
    """HTTP status of a local URL and, for HTML, the ids its anchors may point at."""
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            body = response.read()
            status = response.status
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        return error.code, frozenset()
    ids = _Ids()
    if "html" in kind:
        ids.feed(body.decode("utf-8", "replace"))
    return status, frozenset(ids.ids)


# Text outside code, math and scripts: what a reader sees as prose.
_VISIBLE_TEXT_JS = """() => {
  const skip = "PRE,CODE,SCRIPT,STYLE,TEXTAREA,NOSCRIPT,SVG,MATH";
  const root = document.body;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode(node) {
      for (let el = node.parentElement; el && el !== root.parentElement; el = el.parentElement) {
        if (skip.includes(el.tagName.toUpperCase()) || el.classList.contains("katex")
            || el.classList.contains("clipboard-copy-txt")) return NodeFilter.FILTER_REJECT;  // hidden copy source
      }
      return NodeFilter.FILTER_ACCEPT;
    }
  });
  const out = [];
  while (walker.nextNode()) out.push(walker.currentNode.nodeValue);
  return out;
}"""
_RAW_TEX = [
    (re.compile(r"\$\$"), "$$"),
    (re.compile(r"\\\(|\\\)"), r"\( or \)"),
    (re.compile(r"\\\[|\\\]"), r"\[ or \]"),
    (re.compile(r"(?<![\w$])\$(?=\S)[^$\n]{1,200}?(?<=\S)\$(?![\w$])"), "$...$"),
    (re.compile(r"\\(?:frac|sqrt|sum|top|mathrm|mathbf|cdot|left|right|begin|end)\b"), "a TeX command"),
]
_IMAGES_JS = """async () => {
  const bad = [];
  for (const img of Array.from(document.images)) {
    try { await img.decode(); } catch (e) {}
    if (!img.complete || img.naturalWidth === 0) bad.push(img.currentSrc || img.src);
  }
  return bad;
}"""


_WEIGHTS: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def weight_report(request):
    yield
    if not _WEIGHTS:
        return
    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / "report.json").write_text(json.dumps(_WEIGHTS, indent=1, sort_keys=True))
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if terminal is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        _print_weights(terminal)


def _print_weights(terminal) -> None:
    terminal.write_line("")
    terminal.write_line("Page weights (cold visit, uncompressed): HTML KiB / all requests KiB (count)")
    for page, w in sorted(_WEIGHTS.items()):
        terminal.write_line(f"  {page:<48} {w['html'] / 1024:8.1f} {w['total'] / 1024:9.1f} ({w['requests']})")
    html_sizes = [w["html"] for w in _WEIGHTS.values()]
    terminal.write_line(f"  {len(html_sizes)} pages, HTML total {sum(html_sizes) / 1024:.0f} KiB; "
                        f"site/ on disk {sum(f.stat().st_size for f in SITE.rglob('*') if f.is_file()) / 2**20:.1f} MiB;"
                        f" report and screenshots in {REPORT.relative_to(ROOT)}/")


def _size_on_disk(url: str) -> int:
    """Bytes of the site file a local URL serves (what a cold visit downloads, uncompressed)."""
    path = SITE / unquote(urlsplit(url).path).lstrip("/")
    if path.is_dir():
        path = path / "index.html"
    return path.stat().st_size if path.is_file() else 0


def _screenshot_name(page_path: str) -> str | None:
    names = {v: k for k, v in SCREENSHOTS.items()}
    if page_path in names:
        return names[page_path]
    notebooks = [p for p in PAGES if p.startswith("notebooks/")]
    sources = [p for p in PAGES if p.startswith("source/") and p != "source/index.html"]
    if notebooks and page_path == notebooks[0]:
        return "notebook"
    if sources and page_path == (next((p for p in sources if "attention" in p), sources[0])):
        return "annotated"
    return None


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
@pytest.mark.parametrize("page_path", PAGES or ["-"])
def test_page(page_path, browser, server, deadline):
    url = f"{server}/{page_path}".removesuffix("index.html")
    local = urlsplit(server).netloc
    problems: list[str] = []
    foreign: list[str] = []
    sizes: dict[str, int] = {}

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        context.set_default_timeout(30_000)

        def route(r):
            target = urlsplit(r.request.url)
            if target.scheme in ("data", "blob") or target.netloc == local:
                r.continue_()
            else:
                foreign.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

        page.on("requestfinished", lambda request: sizes.setdefault(request.url, _size_on_disk(request.url)))
        response = page.goto(url, wait_until="networkidle")
        assert response is not None and response.status == 200, f"{url}: HTTP {response and response.status}"

        # Math: nothing raw left in the prose, no KaTeX error.
        for text in page.evaluate(_VISIBLE_TEXT_JS):
            for pattern, what in _RAW_TEX:
                hit = pattern.search(text)
                if hit:
                    problems.append(f"raw TeX ({what}) in visible text: {text[max(0, hit.start() - 40):hit.end() + 40]!r}")
        errors = page.eval_on_selector_all(".katex-error", "els => els.map(e => e.textContent)")
        problems += [f"KaTeX could not typeset: {e!r}" for e in errors]

        problems += [f"image does not decode: {src}" for src in page.evaluate(_IMAGES_JS)]

        hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        for href in sorted(set(hrefs)):
            parts = urlsplit(href)
            if parts.netloc == local:
                target = href.split("#")[0]
                status, ids = _fetch(target)
                if status != 200:
                    problems.append(f"broken internal link {href} (HTTP {status})")
                elif parts.fragment and ids and unquote(parts.fragment) not in ids:
                    problems.append(f"internal link {href}: no element with id {unquote(parts.fragment)!r}")
            match = COLAB.match(href)
            if match and not (ROOT / unquote(match.group(1))).is_file():
                problems.append(f"Colab link {href} names {match.group(1)}, which is not in the repository")
        if page_path.startswith("notebooks/"):
            stem = page_path.split("/")[1]
            own = [h for h in hrefs if (m := COLAB.match(h)) and m.group(1) == f"notebooks/{stem}.ipynb"]
            if not own:
                problems.append(f"no Open-in-Colab link to notebooks/{stem}.ipynb")
            if not any(h.endswith(f"/notebooks/{stem}/{stem}.ipynb") for h in hrefs):
                problems.append("no Download-notebook link")
            if page.locator("details[open]").count():
                problems.append("a <details> (solution) is open on load")

        name = _screenshot_name(page_path)
        if name:
            REPORT.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(REPORT / f"{name}.png"))
            page.set_viewport_size({"width": 700, "height": 1000})
            page.screenshot(path=str(REPORT / f"{name}-narrow.png"))
            dark = browser.new_context(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
            try:
                dark.route("**/*", route)
                dark_page = dark.new_page()
                dark_page.goto(url, wait_until="networkidle")
                dark_page.screenshot(path=str(REPORT / f"{name}-dark.png"))
            finally:
                dark.close()

        html_bytes = (SITE / page_path).stat().st_size
        _WEIGHTS[page_path] = {"html": html_bytes, "total": sum(sizes.values()), "requests": len(sizes)}
    finally:
        context.close()

    problems += [f"request to another host: {u}" for u in sorted(set(foreign))]
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)
