"""Chinese (中文) pages beside the English ones, from gettext catalogs that say when they are stale.

What is translated: the landing page, notebooks 03 and 04 (every markdown cell) and the notes of the
annotated source of the Feedback Transformer's modules (MODULES: every module of `labnn.feedback`). Each
page has a catalog `docs/locale/zh/<page>.po` (polib reads and writes it): one entry per notebook markdown
cell, annotated-source note or landing-page block, with msgctxt = its key (`<notebook>#<cell id>`,
`<module>:<note anchor>`, `docs/index.md:<heading>+<n>`), msgid = the English it was made from, msgstr =
the Chinese. An entry whose msgid is no longer the English text (white space aside: rewrapping a docstring
changes nothing) is stale; `python docs/hooks/i18n.py status` (`make translations`) lists missing and
stale entries per page and `... update` (`make translations UPDATE=1`) writes them into the catalogs (new
ones with an empty msgstr, changed ones fuzzy with the English they were made from as `#| msgid`).
Terms: `docs/locale/zh/glossary.tsv`; tests/test_i18n.py checks terms, math, code and links.

The build (on unless `LABNN_I18N=0`; off, this hook changes nothing and the site is byte for byte the
English one):

* `zh/index.md` and `zh/source/<module>.md` are generated like their English pages with the translated
  text; `zh/notebooks/<name>.ipynb` is the repository notebook with its markdown cells translated, rendered
  by mkdocs-jupyter WITHOUT execution, and its page is the English notebook page's HTML (as this build
  executed it, or as nbval did through LABNN_EXECUTED_NOTEBOOKS) with each markdown cell's HTML replaced by
  the translated cell's: code and outputs are the English page's bytes, nothing runs twice. Heading ids stay
  the English ones, so every `#anchor` keeps working. An entry without a current translation (missing, or
  made from another English text) shows its English: a stale note could describe code that changed.
* Links from a Chinese page (its navigation too) go to the Chinese page where there is one, else to the
  English page; there, a reader who chose Chinese (remembered in localStorage by the switch's script) sees
  a note in Chinese that the page is only in English, and on an English page that has a translation, a
  link to it. Material's interface words on a Chinese page come from its own zh language file.
* The switch (English / 中文) is Material's own language-selector markup, put in the header of every page
  with the counterpart of THAT page (or the Chinese home, marked "no translation"). Why not a maintained
  tool: mkdocs-static-i18n builds every page once per language (notebook pages are generated and
  post-processed by the hooks, and the build time must not double), and Material's `extra.alternate`
  links site-wide roots and emits `<link rel=alternate>`, from which Material's script fetches
  `<root>/sitemap.xml` of each language (a 404 here: one sitemap for both) to guess the page.
* Chinese pages are left out of the search index (lunr has no Chinese word segmentation here; their code
  would duplicate the English hits).
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import logging
import os
import posixpath
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import annotated  # noqa: E402
import layout  # noqa: E402
from mkdocs.plugins import event_priority  # noqa: E402

log = logging.getLogger("mkdocs.hooks.i18n")
LANG = "zh"
LOCALE = layout.ROOT / "docs" / "locale" / LANG
GLOSSARY = LOCALE / "glossary.tsv"
BUILD_DIR = layout.ROOT / ".cache" / "i18n"  # the translated notebooks mkdocs-jupyter renders
NOTEBOOKS = ["03_feedback_transformer", "04_kv_sharing_stack"]
# Page stems (layout.Module.stem): the sub-package labnn.feedback, every module of it, so that every link of
# the Chinese notebooks 03 and 04 into the package reaches a Chinese page.
MODULES = [m.stem for m in layout.modules() if m.stem.split("/")[0] == "feedback"]
FALLBACK_NOTE = "本页暂无中文版，以下为英文原文。"


def enabled() -> bool:
    return os.environ.get("LABNN_I18N", "1").strip().lower() not in ("0", "false", "no", "off")


# --------------------------------------------------------------------------------------------- catalog

@dataclasses.dataclass
class Entry:
    key: str
    english: str


def notebook_entries(path: Path) -> list[Entry]:
    """One entry per markdown cell, keyed by the cell's id."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for cell in cells:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            out.append(Entry(f"{path.name}#{cell['id']}", source))
    return out


def _numbered(bases: list[str], prefix: str) -> list[str]:
    """Unique keys: a base seen before gets `+1`, `+2`, ... (a note without a heading of its own, a method
    defined twice)."""
    seen: dict[str, int] = {}
    keys = []
    for base in bases:
        n = seen.get(base, 0)
        seen[base] = n + 1
        keys.append(f"{prefix}{base}" + (f"+{n}" if n else ""))
    return keys


def module_sections(source: str, name: str) -> list[tuple[str | None, annotated.Section]]:
    """Each section of the annotated page with its key (None: no note to translate)."""
    sections = annotated.split_module(source)
    bases, base = [], "module"
    for section in sections:
        base = section.anchor or base
        bases.append(base)
    keys = _numbered(bases, f"{name}:")
    return [(key if section.note else None, section) for key, section in zip(keys, sections)]


def module_entries(source: str, name: str) -> list[Entry]:
    return [Entry(key, "\n\n".join(s.note)) for key, s in module_sections(source, name) if key]


def markdown_blocks(text: str) -> list[str]:
    """A markdown page cut at blank lines outside fenced code."""
    blocks, current, fence = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        if not line.strip() and not fence:
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") or "top"


def markdown_entries(text: str, name: str) -> list[tuple[str | None, str]]:
    """(key or None, block): code blocks have no key (kept as they are)."""
    bases, blocks, base = [], markdown_blocks(text), "top"
    for block in blocks:
        if block.startswith("#"):
            base = _slug(block.lstrip("#"))
        bases.append(base)
    keys = _numbered(bases, f"{name}:")
    return [(None if block.lstrip().startswith("```") else key, block) for key, block in zip(keys, blocks)]


def page_entries(notebooks_dir: Path | None = None, package_dir: Path | None = None,
                 index: Path | None = None) -> dict[str, list[Entry]]:
    """Catalog name (`notebooks/03_feedback_transformer`, `source/feedback`, `index`) -> its entries, from
    the English sources (folders overridable: tests check a modified copy)."""
    notebooks_dir = notebooks_dir or layout.NOTEBOOKS
    package_dir = package_dir or layout.PACKAGE
    index = index or layout.ROOT / "docs" / "index.md"
    pages = {"index": [Entry(k, b) for k, b in markdown_entries(index.read_text(encoding="utf-8"),
                                                               "docs/index.md") if k]}
    for stem in NOTEBOOKS:
        pages[f"notebooks/{stem}"] = notebook_entries(notebooks_dir / f"{stem}.ipynb")
    for stem in MODULES:
        path = package_dir / f"{stem}.py"
        path = path if path.exists() else package_dir / stem / "__init__.py"
        name = "labnn." + stem.replace("/", ".")
        pages[f"source/{stem}"] = module_entries(path.read_text(encoding="utf-8"), name)
    return pages


def catalog_path(page: str, locale: Path | None = None) -> Path:
    return (locale or LOCALE) / f"{page}.po"


def same_text(a: str, b: str) -> bool:
    """Equal but for line wrapping and other runs of white space (rewrapping a docstring keeps its
    translation: in markdown a line break inside a paragraph is a space)."""
    return " ".join(a.split()) == " ".join(b.split())


def read_catalog(path: Path):
    """The catalog at `path` (polib), empty when there is none yet."""
    import polib

    return polib.pofile(str(path), wrapwidth=0) if path.is_file() else polib.POFile(wrapwidth=0)


def made_from(entry) -> str | None:
    """The English a catalog entry's Chinese was made from: its msgid, or for a fuzzy entry (updated after
    the English changed) the `#| msgid` it keeps; None when unknown (fuzzy without one)."""
    if "fuzzy" in entry.flags:
        return entry.previous_msgid or None
    return entry.msgid


def translations(page: str, locale: Path | None = None) -> dict[str, tuple[str | None, str]]:
    """key -> (the English it was made from, the Chinese) of a page's catalog."""
    return {e.msgctxt: (made_from(e), e.msgstr)
            for e in read_catalog(catalog_path(page, locale)) if e.msgctxt and not e.obsolete}


def status(pages: dict[str, list[Entry]] | None = None, locale: Path | None = None) -> dict[str, dict]:
    """Per page: `missing` (no translation), `stale` (made from another English text, or fuzzy) and
    `obsolete` (a key the English no longer has) entry keys."""
    pages = page_entries() if pages is None else pages
    report = {}
    for page, entries in pages.items():
        done = translations(page, locale)
        missing = [e.key for e in entries if e.key not in done or not done[e.key][1].strip()]
        stale = [e.key for e in entries if e.key in done and done[e.key][1].strip()
                 and (done[e.key][0] is None or not same_text(done[e.key][0], e.english))]
        keys = {e.key for e in entries}
        report[page] = {"missing": missing, "stale": stale, "obsolete": [k for k in done if k not in keys]}
    return report


def update(pages: dict[str, list[Entry]] | None = None, locale: Path | None = None) -> None:
    """Write every page's catalog in the English order: new entries with an empty msgstr, changed ones
    fuzzy (msgid the new English, the Chinese kept, the English it was made from as `#| msgid`); entries
    the English no longer has are dropped."""
    import polib

    pages = page_entries() if pages is None else pages
    for page, entries in pages.items():
        path = catalog_path(page, locale)
        old = {e.msgctxt: e for e in read_catalog(path) if e.msgctxt}
        catalog = polib.POFile(wrapwidth=0)
        catalog.header = (f"Chinese (zh) translation of the labnn page {page}.\n"
                          "msgctxt: the key; msgid: the English it was made from; msgstr: the Chinese.\n"
                          "Terms: docs/locale/zh/glossary.tsv. What needs translating: make translations.")
        catalog.metadata = {"Project-Id-Version": "labnn", "Language": LANG, "MIME-Version": "1.0",
                            "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit"}
        for entry in entries:
            before = old.get(entry.key)
            item = polib.POEntry(msgctxt=entry.key, msgid=entry.english, msgstr=before.msgstr if before else "")
            source = made_from(before) if before else None
            if before and before.msgstr and (source is None or not same_text(source, entry.english)):
                item.flags.append("fuzzy")
                item.previous_msgid = source
            catalog.append(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        catalog.save(str(path))


def format_status(report: dict[str, dict]) -> str:
    lines = []
    for page, r in report.items():
        counts = ", ".join(f"{len(r[k])} {k}" for k in ("missing", "stale", "obsolete") if r[k])
        lines.append(f"{page}: {counts or 'up to date'}")
        for kind in ("missing", "stale", "obsolete"):
            lines += [f"  {kind}: {key}" for key in r[kind]]
    return "\n".join(lines)


def load_glossary(path: Path | None = None) -> list[dict]:
    """Rows of glossary.tsv: english, accepted (|), forbidden (|), checked (yes: the English term in an
    entry needs one accepted rendering in its Chinese)."""
    rows = []
    for line in (path or GLOSSARY).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cols = (line.split("\t") + ["", "", "", ""])[:4]
        rows.append({"english": cols[0].strip(), "accepted": [a for a in cols[1].split("|") if a.strip()],
                     "forbidden": [f for f in cols[2].split("|") if f.strip()], "checked": cols[3].strip() == "yes"})
    return rows


# ------------------------------------------------------------------------------------------- the build

_pages: dict[str, str] = {}  # English src_uri -> Chinese src_uri, for the pages translated in this build
_raw: dict[str, str] = {}  # English notebook src_uri -> its page HTML as mkdocs-jupyter rendered it
_codes: dict[str, list[str]] = {}  # zh source page -> highlighted code of each section


def _zh_uri(uri: str) -> str:
    return f"{LANG}/{uri}"


def _retarget(markdown: str, en_uri: str, zh_uris: set[str]) -> str:
    """Relative `.md`/`.ipynb` links and images of a page moved from `en_uri` to `zh/en_uri`: to the Chinese
    page where there is one, else to the English file."""
    src_dir = posixpath.dirname(en_uri)

    def fix(match: re.Match) -> str:
        target = match.group(2)
        path, _, anchor = target.partition("#")
        if not path or re.match(r"^[a-z][a-z0-9+.-]*:", path) or path.startswith("/"):
            return match.group(0)
        uri = posixpath.normpath(posixpath.join(src_dir, path))
        if _zh_uri(uri) in zh_uris:
            return match.group(0)  # the same relative path reaches the Chinese page
        new = posixpath.relpath(uri, posixpath.dirname(_zh_uri(en_uri)))
        return f"{match.group(1)}{new}{'#' + anchor if anchor else ''}{match.group(3)}"

    return re.sub(r"(\]\()([^)\s]+)(\))", fix, markdown)


def _current(done: dict, key: str, english: str) -> str:
    """The Chinese of `key` if it was made from this English text, else the English (a stale translation
    could describe code or results that are no longer there). tests/test_i18n.py and `make translations`
    report it; the build only logs it (a docstring edit must not break the English site's build)."""
    source, msgstr = done.get(key, (None, ""))
    if not msgstr.strip():
        log.info("zh: %s has no translation: English shown", key)
        return english
    if source is None or not same_text(source, english):
        log.info("zh: the translation of %s is stale: English shown (make translations)", key)
        return english
    return msgstr


def _translate_notebook(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    done = translations(f"notebooks/{path.stem}")
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cell["source"] = _current(done, f"{path.name}#{cell['id']}", source).splitlines(keepends=True)
    return nb


def _translate_markdown(text: str, page: str, name: str) -> str:
    done = translations(page)
    out = []
    for key, block in markdown_entries(text, name):
        out.append(_current(done, key, block) if key else block)
    return "\n\n".join(out) + "\n"


def _translated_module(module: layout.Module, repo_url: str) -> tuple[str, list[str]]:
    done = translations(f"source/{module.stem}")
    source = module.path.read_text(encoding="utf-8")
    sections = []
    for key, section in module_sections(source, module.name):
        if key:
            section = dataclasses.replace(section, note=[_current(done, key, "\n\n".join(section.note))])
        if section.heading.startswith("class "):
            section = dataclasses.replace(section, heading="类 " + section.heading.removeprefix("class "))
        sections.append(section)
    return annotated.annotated_page(module, repo_url, sections=sections,
                                    labels=("源码注解", "API 参考（英文）", "GitHub 上的源文件"))


def on_config(config):
    _pages.clear()
    _raw.clear()
    _codes.clear()
    if enabled():
        import material

        theme = Path(material.__file__).parent
        _icon[0] = (theme / "templates" / ".icons" / "material" / "translate.svg").read_text(encoding="utf-8").strip()
        _ui.clear()
        _ui.update(_material_words(theme))
    return config


@event_priority(50)  # after the notebooks hook adds the notebooks, before mkdocs-jupyter (0) wraps them
def on_files(files, config):
    from mkdocs.structure.files import File

    if not enabled():
        return files
    zh = {_zh_uri("index.md")} | {_zh_uri(f"notebooks/{s}.ipynb") for s in NOTEBOOKS} \
        | {_zh_uri(f"source/{s}.md") for s in MODULES}
    index = (Path(config["docs_dir"]) / "index.md").read_text(encoding="utf-8")
    text = _translate_markdown(index, "index", "docs/index.md")
    files.append(File.generated(config, _zh_uri("index.md"), content=_retarget(text, "index.md", zh)))
    _pages["index.md"] = _zh_uri("index.md")
    for module in layout.modules():
        if module.stem not in MODULES:
            continue
        en_uri = f"source/{module.stem}.md"
        text, codes = _translated_module(module, config["repo_url"])
        _codes[_zh_uri(en_uri)] = codes
        files.append(File.generated(config, _zh_uri(en_uri), content=_retarget(text, en_uri, zh)))
        _pages[en_uri] = _zh_uri(en_uri)
    folder = BUILD_DIR / LANG / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    for stem in NOTEBOOKS:
        source = layout.NOTEBOOKS / f"{stem}.ipynb"
        nb = _translate_notebook(source)
        target = folder / source.name
        text = json.dumps(nb, ensure_ascii=False, indent=1) + "\n"
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        en_uri = f"notebooks/{source.name}"
        files.append(File(_zh_uri(en_uri), str(BUILD_DIR), config["site_dir"], config["use_directory_urls"]))
        _pages[en_uri] = _zh_uri(en_uri)
    return files


_CELL = re.compile(r'(?=<div\s[^>]*class="jp-Cell )')
_CELL_ID = re.compile(r'^<div\s[^>]*id="cell-id=([^"]+)"')
_HEAD_ID = re.compile(r'(<h[1-6]\b[^>]*\bid=")([^"]*)(")')


def _splice(english: str, chinese: str, page) -> str:
    """The English notebook page with each markdown cell's HTML from the Chinese render (same cell ids);
    the Chinese headings take the English heading ids (and their `¶` links)."""
    zh_cells = {}
    for chunk in _CELL.split(chinese):
        match = _CELL_ID.match(chunk)
        if match and "jp-MarkdownCell" in chunk[:300]:
            zh_cells[match.group(1)] = chunk
    out = []
    for chunk in _CELL.split(english):
        match = _CELL_ID.match(chunk)
        if not (match and "jp-MarkdownCell" in chunk[:300] and match.group(1) in zh_cells):
            out.append(chunk)
            continue
        zh_chunk = zh_cells[match.group(1)]
        en_ids = [m.group(2) for m in _HEAD_ID.finditer(chunk)]
        zh_ids = [m.group(2) for m in _HEAD_ID.finditer(zh_chunk)]
        if len(en_ids) != len(zh_ids):
            log.warning("%s cell %s: %d headings in English, %d in Chinese", page.file.src_uri,
                        match.group(1), len(en_ids), len(zh_ids))
        for en_id, zh_id in zip(en_ids, zh_ids):
            zh_chunk = zh_chunk.replace(f'id="{zh_id}"', f'id="{en_id}"', 1)
            zh_chunk = zh_chunk.replace(f'href="#{zh_id}"', f'href="#{en_id}"', 1)
        out.append(zh_chunk)  # the last cell's chunk ends with the same closing tags in both renders
    return "".join(out)


def _retarget_html(content: str, page, config, files) -> str:
    """Links of a Chinese notebook page, before the notebooks hook resolves them from `zh/notebooks/`: a
    relative `.md`/`.ipynb` link reaches the Chinese page if there is one, else (one folder up) the English
    one; a link to a page of the published site (`site_url`) goes to its Chinese page if there is one."""
    site_url = config.get("site_url") or ""
    en_uri = page.file.src_uri.removeprefix(f"{LANG}/")
    urls = {files.get_file_from_path(en).url: files.get_file_from_path(zh).url for en, zh in _pages.items()}

    def fix(match: re.Match) -> str:
        href = html.unescape(match.group(2))
        target, _, anchor = href.partition("#")
        anchor = f"#{anchor}" if anchor else ""
        if site_url and target.startswith(site_url):
            rest = target[len(site_url):].split("?")[0]
            rest = rest.removesuffix("index.html")
            for url in (rest, rest.rstrip("/") + "/" if rest else rest):
                if url in urls:
                    return f"{match.group(1)}{html.escape(site_url + urls[url] + anchor)}{match.group(3)}"
            return match.group(0)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or not target.endswith((".md", ".ipynb")):
            return match.group(0)
        uri = posixpath.normpath(posixpath.join(posixpath.dirname(en_uri), target))
        if _zh_uri(uri) in _pages.values():
            return match.group(0)
        new = posixpath.relpath(uri, posixpath.dirname(page.file.src_uri))
        return f"{match.group(1)}{html.escape(new + anchor)}{match.group(3)}"

    return re.sub(r'(<a\s[^>]*?href=")([^"]*)(")', fix, content)


def _is_zh(page) -> bool:
    return page.file.src_uri.startswith(f"{LANG}/")


@event_priority(100)  # before the notebooks hook (links, bar, CSS) treats the page as any notebook page
def on_page_content(content, page, config, files):
    if not enabled():
        return content
    uri = page.file.src_uri
    if uri.startswith("notebooks/") and _pages.get(uri):
        _raw[uri] = content
        return content
    if not _is_zh(page):
        return content
    page.meta["search"] = {"exclude": True}
    en_uri = uri.removeprefix(f"{LANG}/")
    if uri.endswith(".ipynb"):
        if en_uri not in _raw:
            raise RuntimeError(f"{uri}: the English page {en_uri} was not rendered before it")
        content = _retarget_html(_splice(_raw[en_uri], content, page), page, config, files)
    codes = _codes.get(uri)
    if codes is not None:
        content = annotated._PLACEHOLDER.sub(lambda m: f'<div class="ann-code">{codes[int(m.group(1))]}</div>',
                                             content)
    return content


def _here(page) -> str:
    """A link to the page itself."""
    return "./" if not page.file.url or page.file.url.endswith("/") else posixpath.basename(page.file.url)


def _switch(page, files) -> str:
    """Material's language selector (its markup, its style) linking to this page's counterpart. An English
    page without a translation links to the Chinese home, says so, and is marked `data-labnn-en-only`
    (where the script shows a reader from the Chinese side the note)."""
    home = files.get_file_from_path(_zh_uri("index.md")).url_relative_to(page.file)
    marks = ""
    if _is_zh(page):
        english = files.get_file_from_path(page.file.src_uri.removeprefix(f"{LANG}/")).url_relative_to(page.file)
        items = [("English", english, "en"), ("中文", _here(page), "zh")]
    elif page.file.src_uri in _pages:
        chinese = files.get_file_from_path(_pages[page.file.src_uri]).url_relative_to(page.file)
        items = [("English", _here(page), "en"), ("中文", chinese, "zh")]
    else:
        items = [("English", _here(page), "en"), ("中文（本页暂无译文，转到中文首页）", home, "zh")]
        marks = " data-labnn-en-only"
    links = "".join(f'<li class="md-select__item"><a href="{html.escape(href)}" hreflang="{lang}" lang="{lang}"'
                    f' class="md-select__link labnn-lang">{name}</a></li>' for name, href, lang in items)
    return (f'<div class="md-header__option labnn-lang-switch" data-labnn-lang="{LANG if _is_zh(page) else "en"}"'
            f' data-labnn-zh-home="{html.escape(home)}"{marks}><div class="md-select">'
            f'<button class="md-header__button md-icon" aria-label="Language / 语言" title="Language / 语言">'
            f'{_icon[0]}</button><div class="md-select__inner"><ul class="md-select__list">{links}</ul></div>'
            f'</div>{_SCRIPT}</div>')


_icon = [""]  # Material's translate icon (the one its own language selector shows), read in on_config
_ui: dict[str, str] = {}  # Material's interface words on a Chinese page: English -> its zh translation
_UI_KEYS = ("search.placeholder", "toc", "top", "source", "clipboard.copy", "nav", "footer")


def _material_words(material_dir: Path) -> dict[str, str]:
    def words(lang: str) -> dict[str, str]:
        text = (material_dir / "templates" / "partials" / "languages" / f"{lang}.html").read_text(encoding="utf-8")
        return dict(re.findall(r'^\s*"([\w.]+)":\s*"([^"]*)"', text, flags=re.M))

    english, chinese = words("en"), words(LANG)
    return {english[k]: chinese[k] for k in _UI_KEYS if k in english and k in chinese}
# The reader's language (set by a Chinese page or a click on the switch) and, on an English page without
# a translation reached from the Chinese side, a note in Chinese. Inline: the switch is one piece.
_SCRIPT = """<script>(function () {
  var s = document.currentScript.parentElement, k = "labnn.lang", l = null;
  try { if (s.dataset.labnnLang === "zh") localStorage.setItem(k, "zh"); l = localStorage.getItem(k); } catch (e) {}
  s.querySelectorAll("a.labnn-lang").forEach(function (a) {
    a.addEventListener("click", function () { try { localStorage.setItem(k, a.hreflang); } catch (e) {} });
  });
  if (l !== "zh" || s.dataset.labnnLang === "zh") return;
  var only = s.hasAttribute("data-labnn-en-only"), zh = s.querySelector("a[hreflang=zh]");
  document.addEventListener("DOMContentLoaded", function () {
    var c = document.querySelector(".md-content__inner"), n = document.createElement("div");
    if (!c) return;
    n.className = "admonition note " + (only ? "labnn-zh-fallback" : "labnn-zh-available");
    n.lang = "zh";
    n.innerHTML = only
      ? '<p class="admonition-title">仅有英文版</p><p>""" + FALLBACK_NOTE + """<a href="'
        + s.dataset.labnnZhHome + '">返回中文首页</a></p>'
      : '<p class="admonition-title">中文</p><p>本页有中文版：<a href="' + zh.getAttribute("href")
        + '">切换到中文</a></p>';
    c.insertBefore(n, c.firstChild);
  });
})();</script>"""


def on_post_page(output, page, config):
    if not enabled():
        return output
    files = _files[0]
    if _is_zh(page):
        output = output.replace('<html lang="en"', '<html lang="zh-Hans"', 1)
        output = output.replace(" download>Download notebook</a>", " download>下载笔记本（中文版）</a>", 1)
        for english, chinese in _ui.items():  # Material's own words, from its Chinese language file
            output = re.sub(rf'((?:placeholder|aria-label|title|data-md-state-title)="|>\s*){re.escape(english)}(?=["\s]*[<"])',
                            lambda m, c=chinese: m.group(1) + c, output)
        output = _zh_links(output, page, files)
    switch = _switch(page, files)
    marker = '<label class="md-header__button md-icon" for="__search">'
    if marker not in output:
        log.warning("%s: no search button in the header, language switch left out", page.file.src_uri)
        return output
    return output.replace(marker, switch + marker, 1)


def _zh_links(output: str, page, files) -> str:
    """On a Chinese page, every link to an English page that has a Chinese one (the navigation too) goes
    to the Chinese one."""
    here = posixpath.dirname("/" + page.file.url) if not page.file.url.endswith("/") else "/" + page.file.url
    def norm(url: str) -> str:
        return posixpath.normpath(url).rstrip("/") or "/"

    targets = {norm("/" + files.get_file_from_path(en).url): files.get_file_from_path(zh) for en, zh in _pages.items()}

    def fix(match: re.Match) -> str:
        href = html.unescape(match.group(2))
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", href):
            return match.group(0)
        path, _, anchor = href.partition("#")
        zh = targets.get(norm(posixpath.join(here, path)))
        if zh is None or zh.src_uri == page.file.src_uri and not path:
            return match.group(0)
        new = zh.url_relative_to(page.file) + (f"#{anchor}" if anchor else "")
        return f"{match.group(1)}{html.escape(new)}{match.group(3)}"

    return re.sub(r'(<a\s[^>]*?href=")([^"]*)(")', fix, output)


_files: list = [None]


def on_env(env, config, files):
    _files[0] = files
    return env


# ---------------------------------------------------------------------------------------------- the CLI

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="What the Chinese pages need translated (docs/locale/zh).")
    parser.add_argument("command", choices=["status", "update"], nargs="?", default="status",
                        help="status: list missing and stale entries (exit 1 if any); update: also write them "
                             "into the catalogs (empty msgstr, or fuzzy with the old English)")
    args = parser.parse_args(argv)
    report = status()
    print(format_status(report))
    if args.command == "update":
        update()
        print(f"catalogs written under {LOCALE.relative_to(layout.ROOT)}/")
    return 1 if any(r["missing"] or r["stale"] for r in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
