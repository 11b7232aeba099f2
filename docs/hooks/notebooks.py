"""Notebook pages: `notebooks/*.ipynb` rendered by mkdocs-jupyter, made offline, light and linked.

* on_files (priority 100, before mkdocs-jupyter wraps files): every `notebooks/*.ipynb` of the
  repository becomes the page `notebooks/<name>/` (no hand-kept list, no symlink), rendered from an
  current executed copy: the one in `LABNN_EXECUTED_NOTEBOOKS` (written by
  `tests/nbval_capture.py` while nbval ran it in `make test`: current if all its cells match the
  repository's; or by `.ci/execute_notebooks.py` in `make site`: current under its cache key), else
  the one `.ci/execute_notebooks.py` keeps (and makes, side by side, when missing or stale) in
  `.cache/site-executed/<fast|full>/notebooks/`, current only under its cache key (labnn/**, the
  flags, torch): a bare `mkdocs build` after a change of labnn/ executes the notebooks again.
  mkdocs-jupyter never executes: its cache key is blind to a change of `labnn/` or `LABNN_FAST`.
* on_page_content: the badge image `colab-badge.svg` (another host) becomes a local badge; a bar with
  "Open in Colab" and "Download notebook" follows the title; links to `../source/x.md`, `../api/x.md`,
  another `.ipynb`, or a page of the published site (`site_url`, as notebooks opened in Colab need) point
  at their pages, relatively; nbconvert's MathJax/mermaid loaders (CDN) are removed. What mkdocs-jupyter
  has no option for: cell tags (its template shows them as chips) are dropped; heading anchors become
  Material's `headerlink` (search titles then lose their "¶") and the copy button's "Copied!" is kept out
  of the search index, as are the setup cells after the title and the links bar; each figure gets its
  alt text from its output's metadata (labnn.plot writes the words the figure draws there), else one
  from the titles and labels its cell's code gives the plot (nbconvert writes "No description has been
  provided"); the ~590 KB of JupyterLab CSS that every page would inline moves to one shared,
  cacheable `assets/notebook.css`, trimmed to the rules the notebook pages can use (~40 KB, cssprune.py).
* on_post_build: writes that stylesheet. mkdocs-jupyter's `include_source` puts the notebook it rendered
  beside its page, for download.

Why a hook: mkdocs-jupyter renders the notebooks under docs/ as nbconvert writes them; it has no
option to take them from elsewhere, to render pre-executed copies, or for the rewriting above.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import posixpath
import re
import sys
from pathlib import Path

import labnn
from labnn.plot.alt import plain
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).parent))
import cssprune  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / ".ci"))
import execute_notebooks  # noqa: E402
import layout  # noqa: E402

log = logging.getLogger("mkdocs.hooks.notebooks")
CSS_PATH = "assets/notebook.css"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
_styles: dict[str, str] = {}  # hash -> css, collected from the notebook pages of one build
_used: tuple[set[str], set[str]] = (set(), set())  # classes and ids of those pages


def on_config(config):
    _styles.clear()
    _used[0].clear()
    _used[1].clear()
    return config


def _cells(path: Path) -> list[tuple[str, str]]:
    """Every cell's type and source: an executed copy is current only if all of them (prose too) match."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]) for c in cells]


def executed_folder() -> Path:
    """Where the notebooks are executed when no current copy was given: .ci/execute_notebooks.py's
    cache, one folder per mode (a fast build never replaces the full-size outputs)."""
    mode = "fast" if labnn.fast_mode() else "full"
    return layout.ROOT / ".cache" / "site-executed" / mode / "notebooks"


def _current(notebook: Path, copy: Path, cached: bool) -> bool:
    """Whether `copy` holds `notebook` as the current labnn executes it: a copy with a key
    (`.ci/execute_notebooks.py`'s) is current only under that key (labnn/, flags, torch), and
    one in the cache (`cached`) only with one, its prose then refreshed as `execute_notebooks`
    does; a copy without a key (nbval's, `make test` writes them just before its build) when
    its cells match."""
    if not copy.is_file():
        return False
    keyed = execute_notebooks.KEY in json.loads(copy.read_text(encoding="utf-8"))["metadata"]
    if cached or keyed:
        return execute_notebooks.reuse(notebook, copy, execute_notebooks.cache_key(notebook))
    return _cells(copy) == _cells(notebook)


def _executed_copy(notebook: Path) -> Path | None:
    """The current executed copy of `notebook`: LABNN_EXECUTED_NOTEBOOKS's, else the cache's."""
    given = os.environ.get("LABNN_EXECUTED_NOTEBOOKS")
    if given and Path(given).name != "notebooks":
        raise SystemExit(f"LABNN_EXECUTED_NOTEBOOKS must name a folder notebooks/, got {given!r}")
    folders = [(Path(given), False)] if given else []
    for folder, cached in folders + [(executed_folder(), True)]:
        copy = folder.resolve() / notebook.name
        if _current(notebook, copy, cached):
            log.info("Rendering %s as executed in %s", notebook.name, folder)
            return copy
    return None


@event_priority(100)
def on_files(files, config):
    copies = {notebook: _executed_copy(notebook) for notebook in layout.notebooks()}
    missing = [notebook for notebook, copy in copies.items() if copy is None]
    if missing and execute_notebooks.run(missing, executed_folder(), jobs=os.cpu_count() or 1):
        raise SystemExit("A notebook failed to execute (see above): the site needs every one")
    copies.update({notebook: _executed_copy(notebook) for notebook in missing})
    stale = [notebook.name for notebook, copy in copies.items() if copy is None]
    if stale:  # its cells, labnn/ or the flags changed while it ran
        raise SystemExit(f"{', '.join(stale)} changed while the site was built (the notebook, "
                         "labnn/ or the flags): build again")
    for notebook, source in copies.items():
        src_uri = f"notebooks/{notebook.name}"
        existing = files.get_file_from_path(src_uri)
        if existing is not None:
            files.remove(existing)
        # A real File (mkdocs-jupyter's wrapper cannot read File.generated's backing path): the
        # folder holding the notebook is named notebooks/.
        files.append(File(src_uri, str(source.parent.parent), config["site_dir"],
                          config["use_directory_urls"]))
    return files


def _is_notebook(page) -> bool:  # notebooks/x.ipynb, or its translation zh/notebooks/x.ipynb (i18n.py)
    return re.match(r"(?:zh/)?notebooks/", page.file.src_uri) is not None and page.file.src_uri.endswith(".ipynb")


def _move_styles(content: str) -> str:
    def take(match: re.Match) -> str:
        css = match.group(1).strip()
        if css.startswith("[") and css.endswith("]"):  # mkdocs-jupyter formats a list of strings
            css = ""
        if css:
            _styles.setdefault(hashlib.sha256(css.encode()).hexdigest(), css)
        return ""

    return re.sub(r"<style[^>]*>(.*?)</style>", take, content, flags=re.DOTALL)


def _page_at_url(path: str, files):
    """The page the published site serves at `path` (relative to site_url), or None."""
    path = path.split("?")[0]
    wanted = {path, path.rstrip("/") + "/", path.removesuffix("index.html")}
    for file in files.documentation_pages():
        if file.url in wanted or (file.url == "" and path in ("", "index.html")):
            return file
    return None


def _rewrite_links(content: str, page, files, site_url: str = "") -> str:
    """Point notebook links to `.md`/`.ipynb` files of the docs, or to pages of the published site
    (under `site_url`), at their pages relative to this one: the built site stays self-contained and the
    browser test checks every anchor. A link under site_url to no page fails the (strict) build."""
    src_dir = posixpath.dirname(page.file.src_uri)

    def fix(match: re.Match) -> str:
        href = html.unescape(match.group(2))
        target, _, anchor = href.partition("#")
        if site_url and target.startswith(site_url):
            file = _page_at_url(target[len(site_url):], files)
            if file is None:
                log.warning("%s links to %r: the site has no page there", page.file.src_uri, href)
                return match.group(0)
            url = file.url_relative_to(page.file) + (f"#{anchor}" if anchor else "")
            return f"{match.group(1)}{html.escape(url)}{match.group(3)}"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or not target.endswith((".md", ".ipynb")):
            return match.group(0)
        uri = posixpath.normpath(posixpath.join(src_dir, target))
        file = files.get_file_from_path(uri)
        if file is None:
            log.warning("%s links to %r, which is not a page of the site (%s)", page.file.src_uri, href, uri)
            return match.group(0)
        url = file.url_relative_to(page.file) + (f"#{anchor}" if anchor else "")
        return f"{match.group(1)}{html.escape(url)}{match.group(3)}"

    return re.sub(r'(<a\s[^>]*?href=")([^"]*)(")', fix, content)


def _bar(colab: str, download: str, badge_src: str) -> str:
    return (
        '<p class="labnn-nb-links" data-search-exclude>'
        f'<a class="labnn-colab" href="{html.escape(colab)}"><img src="{badge_src}" alt="Open In Colab" '
        'width="117" height="20"></a> '
        f'<a class="md-button labnn-download" href="{html.escape(download)}" download>Download notebook</a>'
        "</p>"
    )


def _fix_toc(content: str, page) -> None:
    """Give the table of contents the heading ids and texts of the rendered notebook.

    mkdocs-jupyter builds the TOC from a markdown conversion that drops inline code from headings
    ("2. What `torch.stack` costs" -> `#2-what-costs`) while nbconvert's ids keep it
    (`#2-what-torchstack-costs`): the TOC's links would miss. Headings and TOC entries are in the same
    order, so they are matched one to one.
    """
    heads = [(m.group(1), m.group(2)) for m in
             re.finditer(r'<h[1-6][^>]*\bid="([^"]*)"[^>]*>(.*?)</h[1-6]>', content, flags=re.DOTALL)]
    items = []
    stack = list(reversed(page.toc.items if page.toc else []))
    while stack:
        item = stack.pop()
        items.append(item)
        stack.extend(reversed(item.children))
    if len(heads) != len(items):
        log.info("%s: %d TOC entries for %d headings, TOC left as is", page.file.src_uri, len(items), len(heads))
        return
    for item, (anchor, inner) in zip(items, heads):
        text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r'<a class="anchor-link".*?</a>', "", inner)))
        item.id = html.unescape(anchor)
        item.title = html.escape(text.strip())


_TITLE = re.compile(r"""\b(?:title|suptitle|set_title|xlabel|ylabel|set_xlabel|set_ylabel)\s*[=(]\s*(f?)(["'])((?:(?!\2).)+)\2""")
_NO_ALT = "No description has been provided for this image"
_IMG = re.compile(r'<img\s[^>]*>')


def _plain(tex: str) -> str:
    """A title in a cell's code as words (`labnn.plot.alt.plain`), its escaped backslashes read as one."""
    return plain(tex.replace("\\\\", "\\"))


def _figure_alts(notebook: Path) -> dict[str, str]:
    """Each figure's own alt text, as the executed notebook holds it: labnn.plot (labnn/plot/alt.py) puts
    the words a figure draws (its titles and labels, as drawn) in its output's metadata. Keyed by the
    image's base64 data, whitespace removed."""
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return {}
    alts = {}
    for cell in cells:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            text = (output.get("metadata", {}).get("image/png") or {}).get("alt")
            if png and text:
                png = "".join(png) if isinstance(png, list) else png
                alts["".join(png.split())] = text
    return alts


def _alt_texts(content: str, alts: dict[str, str] | None = None) -> str:
    """Give each figure of a code cell an alt text: its own (`alts`, from `_figure_alts`), else one made of
    the plot titles and axis labels its cell's code gives (placeholders of f-strings left out; the figures
    of one cell numbered)."""
    alts = alts or {}
    cells = re.split(r'(?=<div class="jp-Cell )', content)
    for index, cell in enumerate(cells):
        if _NO_ALT not in cell:
            continue
        source = re.search(r'<div class="highlight-ipynb[^"]*">(.*?)</div>', cell, flags=re.DOTALL)
        code = html.unescape(re.sub(r"<[^>]+>", "", source.group(1))) if source else ""
        found = [_plain(m.group(3)) for m in _TITLE.finditer(code) if not (m.group(1) and "{" in m.group(3))]
        words = "; ".join(dict.fromkeys(t for t in found if t))
        heading = None
        for earlier in reversed(cells[:index]):
            heads = re.findall(r"<h[1-4][^>]*>(.*?)</h[1-4]>", earlier, flags=re.DOTALL)
            if heads:
                heading = html.unescape(re.sub(r"<[^>]+>", "", heads[-1])).replace("¶", "").strip()
                break
        alt = f"Figure: {words}" if words else f"Figure of the section \u201c{_plain(heading or 'notebook')}\u201d"
        images = [m for m in _IMG.finditer(cell) if f'alt="{_NO_ALT}"' in m.group(0)]
        pieces, last = [], 0
        for k, image in enumerate(images, 1):
            data = re.search(r'src="data:image/png;base64,([^"]*)"', image.group(0))
            own = alts.get("".join(data.group(1).split())) if data else None
            text = own or (f"{alt} (figure {k} of {len(images)})" if len(images) > 1 else alt)
            pieces += [cell[last:image.start()], image.group(0).replace(f'alt="{_NO_ALT}"', f'alt="{html.escape(text)}"')]
            last = image.end()
        cells[index] = "".join(pieces) + cell[last:]
    return "".join(cells)


def _setup_out_of_search(content: str) -> str:
    """The code cells between the title and the first section (setup: install, imports, device) out of the
    search index: Material's indexer gives them to the page's own entry, the first hit of any search on
    the page, whose snippet would be import lines. The mark goes on their `<pre>`s (on_page_context
    flattens the divs). Every cell's hidden copy of its code (the copy button's source) is left out too:
    code is indexed once."""
    content = content.replace('<div class="clipboard-copy-txt"', '<div data-search-exclude class="clipboard-copy-txt"')
    cells = re.split(r'(?=<div class="jp-Cell )', content)
    heads = [i for i, cell in enumerate(cells) if re.search(r"<h[1-6][\s>]", cell)]
    if len(heads) < 2:
        return content
    for i in range(heads[0] + 1, heads[1]):
        cells[i] = cells[i].replace("<pre", "<pre data-search-exclude")
    return "".join(cells)


def on_page_content(content, page, config, files):
    if not _is_notebook(page):
        return content
    _fix_toc(content, page)
    # Heading anchors as Material's (search drops them from section titles), tag chips out, the copy
    # button's notice out of the search index.
    content = re.sub(r'<a class="anchor-link" href="([^"]*)">¶</a>',
                     r'<a class="headerlink" href="\1" title="Permanent link">¶</a>', content)
    content = re.sub(r'<div class="celltoolbar">\s*(?:<div class="button_container tags_button_container">'
                     r'.*?</div>\s*)*</div>', "", content, flags=re.DOTALL)
    content = re.sub(r'<span class="notice" hidden(="")?>', '<span class="notice" hidden data-search-exclude>', content)
    content = _alt_texts(content, _figure_alts(Path(page.file.abs_src_path or "")))
    content = _setup_out_of_search(content)
    name = posixpath.basename(page.file.src_uri)
    colab = layout.colab_url(config["repo_url"], f"notebooks/{name}")
    badge_src = posixpath.relpath("assets/images/colab-badge.svg", page.url or ".")
    # nbconvert's MathJax 2 loader (CDN; KaTeX from the site typesets instead) and mermaid loader (CDN).
    content = re.sub(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", "", content, flags=re.DOTALL)
    content = re.sub(r'<script type="module">(?:(?!</script>).)*mermaid(?:(?!</script>).)*</script>', "",
                     content, flags=re.DOTALL)
    content = _move_styles(content)
    # The notebook's own badge (an image on colab.research.google.com) goes: the bar below replaces it.
    badge = re.compile(r'<a\s[^>]*href="([^"]*)"[^>]*>\s*<img\s[^>]*src="' + re.escape(COLAB_BADGE) + r'"[^>]*/?>\s*</a>')
    for match in badge.finditer(content):
        if html.unescape(match.group(1)) != colab:
            log.warning("%s: its Colab badge points at %s, expected %s", page.file.src_uri, match.group(1), colab)
    content = badge.sub("", content)
    if COLAB_BADGE in content:
        log.warning("%s: the Colab badge image is used outside the expected badge link", page.file.src_uri)
    content = re.sub(r"<p>\s*</p>", "", content)
    content = _rewrite_links(content, page, files, config.get("site_url") or "")
    bar = _bar(colab, name, badge_src)
    head, h1, tail = content.partition("</h1>")
    content = head + h1 + bar + tail if h1 else bar + content
    for src in re.findall(r'<img\s[^>]*src="(https?://[^"]+)"', content):
        log.warning("%s: image from another host %s (the site must work offline)", page.file.src_uri, src)
    return content


@event_priority(50)  # before the search plugin (priority 0) indexes page.content; search_text.py restores it
def on_page_context(context, page, config, nav):
    """What the search plugin indexes: the page with its `<div>`s taken out. Each notebook cell is a nest of
    divs, and Material's indexer gives whatever follows a heading's cell (the section's code, outputs and
    prose without a heading) back to the page's own entry: one entry held every cell's code, the first hit
    of any search. Flat, each heading's section holds what a reader sees under it."""
    if _is_notebook(page):
        page.labnn_content = page.content
        flat = re.sub(r'<div data-search-exclude class="clipboard-copy-txt".*?</div>', "", page.content, flags=re.DOTALL)
        page.content = re.sub(r"</?div\b[^>]*>", "", flat)
    return context


def on_post_page(output, page, config):
    if not _is_notebook(page):
        return output
    classes, ids = cssprune.used_names(output)
    _used[0].update(classes)
    _used[1].update(ids)
    href = posixpath.relpath(CSS_PATH, page.url or ".")
    return output.replace("</head>", f'<link rel="stylesheet" href="{href}">\n</head>', 1)


def on_post_build(config):
    site = Path(config["site_dir"])
    (site / CSS_PATH).parent.mkdir(parents=True, exist_ok=True)
    css = cssprune.prune("\n".join(_styles.values()), *_used)
    (site / CSS_PATH).write_text(css, encoding="utf-8")
    log.info("%s: %.0f KiB of notebook CSS kept of %.0f KiB", CSS_PATH, len(css) / 1024,
             sum(len(c) for c in _styles.values()) / 1024)
