"""Chinese (中文) pages from gettext catalogs that say when they are stale.

Translated: the landing page, notebooks 03 and 04 (markdown cells) and the notes of the annotated
source of `labnn.feedback` (MODULES). Catalog `docs/locale/zh/<page>.po` (polib): msgctxt = the key
(`<notebook>#<cell id>`, `<module>:<note anchor>`, `docs/index.md:<heading>+<n>`), msgid = the
English it was made from, msgstr = the Chinese. An entry whose msgid is no longer the English (white
space aside) is stale: the page shows the English. `python docs/hooks/i18n.py status|update` (`make
translations [UPDATE=1]`) lists missing and stale entries / writes them (new ones empty, changed
ones fuzzy with `#| msgid`).

The build (`LABNN_I18N=0`: off, the English site byte for byte). on_files: `zh/index.md`,
`zh/source/<module>.md` (annotated.py's page, notes translated) and `zh/notebooks/<name>.ipynb`: the
executed copy notebooks.py renders, its markdown cells translated, and a note that code, outputs,
checks, exercise messages and plot labels are English. Links go to the Chinese page, else to the
English one with `（英文）` after the link text. on_nav: the Chinese pages' navigation (tabs, menu,
previous/next) is the English one mirrored, English pages as links marked `（英文）`; on_page_context
gives it, and Material's Chinese words (`theme.language`), to a Chinese page. on_post_page:
Material's language-selector markup, to the page's counterpart (else the Chinese home). Chinese
pages are searched by their prose (Material cuts it into words with jieba); code is found on English
pages.

Why not mkdocs-static-i18n 1.3.0 (tried 2026-11-26): it only takes files under docs_dir. A generated
page crashes it (`TypeError: expected str, bytes or os.PathLike object, not NoneType` in
`reconfigure_files`), the notebooks rendered from executed copies are dropped (`WARNING -
mkdocs_static_i18n: Unhandled file case - notebooks/01_attention.ipynb`), and it re-creates each
page's File from docs_dir. Why not Material's `extra.alternate`: its script looks the page up in
`<language root>/sitemap.xml` (there is one sitemap, at the root) and else goes to the root.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import os
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from mkdocs.structure.nav import Link, Navigation, Section
from mkdocs.utils import get_relative_url

sys.path.insert(0, str(Path(__file__).parent))
import annotated  # noqa: E402
import layout  # noqa: E402

LANG = "zh"
LOCALE = layout.ROOT / "docs" / "locale" / LANG
BUILD_DIR = layout.ROOT / ".cache" / "i18n"  # the translated notebooks mkdocs-jupyter renders
NOTEBOOKS = ["03_feedback_transformer", "04_kv_sharing_stack"]
MODULES = [m.stem for m in layout.modules() if m.stem.split("/")[0] == "feedback"]
EN = "（英文）"  # after a link to a page that has no Chinese version
ZH_BOOST = 0.3  # search rank of a Chinese page, times its English page's
TITLES = {"Home": "首页", "Notebooks": "笔记本", "Annotated source": "源码注解",
          "API reference": "API 参考", "The package: overview": "包概览", "Benchmarks": "基准测试",
          "Running labnn": "运行 labnn", "On a GPU": "在 GPU 上", "On several processes": "多进程",
          "torch versions, Colab": "torch 版本与 Colab"}
NOTE = ('<div class="admonition note labnn-zh-english"><p class="admonition-title">说明</p><p>'
        "本页只翻译了文字说明。代码、代码输出、结论检查行（“✅ claim holds …”）、"
        "练习未完成时的提示（“… not solved yet …”）、图中的标签以及交互图的说明文字都保持英文原文。</p></div>")


def enabled() -> bool:
    return os.environ.get("LABNN_I18N", "1").strip().lower() not in ("0", "false", "no", "off")


# ------------------------------------------------------------------------------------- catalog

@dataclasses.dataclass
class Entry:
    key: str
    english: str


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def notebook_entries(path: Path) -> list[Entry]:
    """One entry per markdown cell, keyed by the cell's id."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [Entry(f"{path.name}#{c['id']}", _source(c)) for c in cells
            if c["cell_type"] == "markdown"]


def _numbered(bases: list[str], prefix: str):
    """Unique keys: a base seen before gets `+1`, `+2`, ... (a note without its own heading)."""
    seen: dict[str, int] = {}
    for base in bases:
        seen[base] = seen.get(base, -1) + 1
        yield f"{prefix}{base}" + (f"+{seen[base]}" if seen[base] else "")


def module_sections(source: str, name: str) -> list[tuple[str | None, annotated.Section]]:
    """Each section of the annotated page with its key (None: no note to translate)."""
    sections, bases, base = annotated.split_module(source), [], "module"
    for section in sections:
        base = section.anchor or base
        bases.append(base)
    return [(k if s.note else None, s) for k, s in zip(_numbered(bases, f"{name}:"), sections)]


def markdown_blocks(text: str) -> list[str]:
    """A markdown page cut at blank lines outside fenced code."""
    blocks, current, fence = [], [], False
    for line in text.splitlines():
        fence ^= line.lstrip().startswith("```")
        if line.strip() or fence:
            current.append(line)
        elif current:
            blocks, current = blocks + ["\n".join(current)], []
    return blocks + (["\n".join(current)] if current else [])


def markdown_entries(text: str, name: str) -> list[tuple[str | None, str]]:
    """(key or None, block): code blocks have no key (kept as they are)."""
    bases, blocks, base = [], markdown_blocks(text), "top"
    for block in blocks:
        if block.startswith("#"):
            base = re.sub(r"[^a-z0-9]+", "-", block.lstrip("#").lower()).strip("-") or "top"
        bases.append(base)
    keys = _numbered(bases, f"{name}:")
    return [(None if b.lstrip().startswith("```") else k, b) for k, b in zip(keys, blocks)]


def page_entries(notebooks_dir: Path | None = None, package_dir: Path | None = None,
                 index: Path | None = None) -> dict[str, list[Entry]]:
    """Catalog name (`notebooks/03_feedback_transformer`, `source/feedback`, `index`) -> entries,
    from the English sources (folders overridable: tests check a modified copy)."""
    text = (index or layout.ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    pages = {"index": [Entry(k, b) for k, b in markdown_entries(text, "docs/index.md") if k]}
    for stem in NOTEBOOKS:
        path = (notebooks_dir or layout.NOTEBOOKS) / f"{stem}.ipynb"
        pages[f"notebooks/{stem}"] = notebook_entries(path)
    for stem in MODULES:
        path = (package_dir or layout.PACKAGE) / f"{stem}.py"
        path = path if path.exists() else path.with_suffix("") / "__init__.py"
        sections = module_sections(path.read_text("utf-8"), "labnn." + stem.replace("/", "."))
        pages[f"source/{stem}"] = [Entry(k, "\n\n".join(s.note)) for k, s in sections if k]
    return pages


def catalog_path(page: str, locale: Path | None = None) -> Path:
    return (locale or LOCALE) / f"{page}.po"


def same_text(a: str, b: str) -> bool:
    """Equal but for line wrapping and other runs of white space."""
    return " ".join(a.split()) == " ".join(b.split())


def read_catalog(path: Path):
    """The catalog at `path` (polib), empty when there is none yet."""
    import polib

    return polib.pofile(str(path), wrapwidth=0) if path.is_file() else polib.POFile(wrapwidth=0)


def made_from(entry) -> str | None:
    """The English an entry's Chinese was made from: msgid, or a fuzzy one's `#| msgid`."""
    return (entry.previous_msgid or None) if "fuzzy" in entry.flags else entry.msgid


def translations(page: str, locale: Path | None = None) -> dict[str, tuple[str | None, str]]:
    """key -> (the English it was made from, the Chinese) of a page's catalog."""
    return {e.msgctxt: (made_from(e), e.msgstr)
            for e in read_catalog(catalog_path(page, locale)) if e.msgctxt and not e.obsolete}


def status(pages: dict | None = None, locale: Path | None = None) -> dict[str, dict]:
    """Per page: `missing`, `stale` (made from another English text, or fuzzy), `obsolete` keys."""
    report = {}
    for page, entries in (page_entries() if pages is None else pages).items():
        done = translations(page, locale)
        has = [e for e in entries if e.key in done and done[e.key][1].strip()]
        report[page] = {"missing": [e.key for e in entries if e not in has],
                        "stale": [e.key for e in has if done[e.key][0] is None
                                  or not same_text(done[e.key][0], e.english)],
                        "obsolete": [k for k in done if k not in {e.key for e in entries}]}
    return report


def update(pages: dict | None = None, locale: Path | None = None) -> None:
    """Write every catalog in the English order: new entries with an empty msgstr, changed ones
    fuzzy (the Chinese kept, the English it was made from as `#| msgid`); obsolete ones dropped."""
    import polib

    for page, entries in (page_entries() if pages is None else pages).items():
        path = catalog_path(page, locale)
        old = {e.msgctxt: e for e in read_catalog(path) if e.msgctxt}
        catalog = polib.POFile(wrapwidth=0)
        catalog.header = (f"Chinese (zh) translation of the labnn page {page}.\n"
                          "msgctxt: the key; msgid: the English it was made from; "
                          "msgstr: the Chinese.\nTerms: docs/locale/zh/glossary.tsv. "
                          "What needs translating: make translations.")
        catalog.metadata = {"Project-Id-Version": "labnn", "Language": LANG, "MIME-Version": "1.0",
                            "Content-Type": "text/plain; charset=UTF-8",
                            "Content-Transfer-Encoding": "8bit"}
        for entry in entries:
            before = old.get(entry.key)
            item = polib.POEntry(msgctxt=entry.key, msgid=entry.english,
                                 msgstr=before.msgstr if before else "")
            source = made_from(before) if before else None
            if before and before.msgstr and not (source and same_text(source, entry.english)):
                item.flags.append("fuzzy")
                item.previous_msgid = source
            catalog.append(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        catalog.save(str(path))


def format_status(report: dict[str, dict]) -> str:
    lines = []
    for page, r in report.items():
        counts = ", ".join(f"{len(r[k])} {k}" for k in r if r[k])
        lines += [f"{page}: {counts or 'up to date'}", *(f"  {k}: {x}" for k in r for x in r[k])]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- the build

_zh: dict[str, str] = {}  # Chinese page src_uri -> its English page's
_codes: dict[str, list[str]] = {}  # Chinese annotated page -> highlighted code of each section
_state: dict = {}  # the Chinese navigation, the translate icon, the theme's language, heading ids


def _current(done: dict, key: str, english: str) -> str:
    """The Chinese of `key` if it was made from this English text, else the English."""
    source, chinese = done.get(key, (None, ""))
    return chinese if chinese.strip() and source and same_text(source, english) else english


def _url(uri: str) -> str:
    stem = re.sub(r"(^|/)index$", "", uri.rsplit(".", 1)[0])
    return f"{stem}/" if stem else ""


def _retarget(markdown: str, en_uri: str, zh_uris: set[str], site_url: str = "") -> str:
    """The links of a page moved from `en_uri` to `zh/en_uri`: to the page's Chinese version, else
    to the English page with `（英文）` after the link text; images and other files one folder up."""
    def fix(match: re.Match) -> str:
        bang, text, target = match.groups()
        path, hash_, anchor = target.partition("#")
        english = None
        if site_url and path.startswith(site_url):  # a page of the published site
            rest = path[len(site_url):]
            english = f"{LANG}/{rest}" not in {_url(u) for u in zh_uris}
            target = target if english else f"{site_url}{LANG}/{rest}{hash_}{anchor}"
        elif path and not re.match(r"^[a-z][a-z0-9+.-]*:|^/", path):
            uri = posixpath.normpath(posixpath.join(posixpath.dirname(en_uri), path))
            english = f"{LANG}/{uri}" not in zh_uris
            if english:
                target = posixpath.relpath(uri, posixpath.dirname(f"{LANG}/{en_uri}")) + hash_
                target += anchor
        mark = english and not bang and path.endswith(("/", ".md", ".ipynb")) and "英文" not in text
        return f"{bang}[{text}{EN if mark else ''}]({target})"

    return re.sub(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)", fix, markdown)


def on_config(config):
    for store in (_zh, _codes, _state):
        store.clear()
    # the language switch's icon: theme.icon.alternate (Material's setting for its own switch), from
    # the theme's folders as Material's templates find it (docs/overrides first)
    name = (config.theme.get("icon") or {}).get("alternate") or "material/translate"
    icon = next(path for path in (Path(d) / ".icons" / f"{name}.svg" for d in config.theme.dirs)
                if path.is_file())
    _state.update(icon=icon.read_text("utf-8").strip(), language=config.theme["language"])
    return config


@event_priority(50)  # after notebooks.py adds the executed notebooks, before mkdocs-jupyter (0)
def on_files(files, config):
    if not enabled():
        return files
    zh = {f"{LANG}/index.md", *(f"{LANG}/notebooks/{s}.ipynb" for s in NOTEBOOKS),
          *(f"{LANG}/source/{s}.md" for s in MODULES)}
    index, done = (Path(config["docs_dir"]) / "index.md").read_text("utf-8"), translations("index")
    text = "\n\n".join(_current(done, k, b) if k else b
                       for k, b in markdown_entries(index, "docs/index.md")) + "\n"
    files.append(File.generated(config, f"{LANG}/index.md",
                                content=_retarget(text, "index.md", zh)))
    for module in (m for m in layout.modules() if m.stem in MODULES):
        en_uri, sections = f"source/{module.stem}.md", []
        done = translations(f"source/{module.stem}")
        for key, section in module_sections(module.path.read_text("utf-8"), module.name):
            note = [_current(done, key, "\n\n".join(section.note))] if key else section.note
            heading = re.sub(r"^class ", "类 ", section.heading)
            sections.append(dataclasses.replace(section, note=note, heading=heading))
        text, _codes[f"{LANG}/{en_uri}"] = annotated.annotated_page(
            module, config["repo_url"], sections, ("源码注解", "API 参考（英文）", "GitHub 上的源文件"))
        files.append(File.generated(config, f"{LANG}/{en_uri}",
                                    content=_retarget(text, en_uri, zh)))
    for stem in NOTEBOOKS:  # the executed copy (notebooks.py), its prose translated
        en_uri, done = f"notebooks/{stem}.ipynb", translations(f"notebooks/{stem}")
        nb = json.loads(Path(files.get_file_from_path(en_uri).abs_src_path).read_text("utf-8"))
        for cell in (c for c in nb["cells"] if c["cell_type"] == "markdown"):
            chinese = _current(done, f"{stem}.ipynb#{cell['id']}", _source(cell))
            cell["source"] = _retarget(chinese, en_uri, zh, config.get("site_url") or "")
        title = next(i for i, c in enumerate(nb["cells"])
                     if c["cell_type"] == "markdown" and re.search(r"^# ", _source(c), re.M))
        nb["cells"].insert(title + 1, {"cell_type": "markdown", "id": "labnn-zh-note",
                                       "metadata": {}, "source": NOTE})
        target, text = BUILD_DIR / LANG / en_uri, json.dumps(nb, ensure_ascii=False, indent=1)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text("utf-8") != text:  # else mkdocs-jupyter's cache
            target.write_text(text, encoding="utf-8")
        files.append(File(f"{LANG}/{en_uri}", str(BUILD_DIR), config["site_dir"],
                          config["use_directory_urls"]))
    _zh.update({uri: uri.removeprefix(f"{LANG}/") for uri in zh})
    return files


def on_nav(nav, config, files):
    """The Chinese navigation: the English one, each page's Chinese version or a marked link."""
    if not enabled():
        return nav
    pages = {en: files.get_file_from_path(zh).page for zh, en in _zh.items()}
    flat: list = []

    def mirror(items: list, parent) -> list:
        out = []
        for item in items:
            title = TITLES.get(item.title, item.title)
            if item.is_section:
                new = Section(title, [])
                new.children = mirror(item.children, new)
                new.labnn_first = next((p for p in _leaves(new) if hasattr(p, "file")), None)
            elif item.is_page and item.file.src_uri in pages:  # a tab leads here: tabs-item.html
                new = pages[item.file.src_uri]
                if not new.file.src_uri.endswith(".ipynb"):  # a notebook's: its translated title
                    new.title = title
            else:
                new = Link(title, item.url)
            new.parent = parent
            out.append(new)
            flat.extend([] if item.is_section else [new])
        return out

    def mark(items: list) -> None:  # the English pages' links, or the section holding only them
        for item in items:
            if item.is_section and item.labnn_first:
                mark(item.children)
            elif not hasattr(item, "file"):
                item.title += EN

    items = mirror(nav.items, None)
    mark(items)
    flat = [p if hasattr(p, "file") else Link(p.title.removesuffix(EN) + EN, p.url) for p in flat]
    for before, page, after in zip([None, *flat], flat, [*flat[1:], None]):
        if hasattr(page, "file"):  # a Chinese page (the English ones are links here)
            page.previous_page, page.next_page = before, after
    _state["nav"] = Navigation(items, [p for p in flat if hasattr(p, "file")])
    _state["nav"].homepage = pages.get("index.md")
    return nav


def _leaves(item) -> list:
    return [x for child in item.children for x in _leaves(child)] if item.is_section else [item]


def _is_zh(page) -> bool:
    return page.file.src_uri in _zh


@event_priority(10)  # before notebooks.py (0) makes the table of contents from the heading ids
def on_page_content(content, page, config, files):
    """A Chinese annotated page gets its code beside its notes; a Chinese notebook's headings take
    the English page's ids (mkdocs-jupyter's are ASCII: a Chinese heading's is empty), so every
    `#anchor` of the English works on the Chinese page too."""
    uri, heading = page.file.src_uri, r'<h[1-6]\b[^>]*\bid="'
    if uri in _codes:  # a Chinese annotated page: its code beside its notes, as in English
        # (here, not by annotated.py's hook: mkdocs loads that file as another module than
        # the `import annotated` above, so its table of code never sees this one's)
        return annotated.with_code(content, _codes[uri])
    if uri.endswith(".ipynb") and f"{LANG}/{uri}" in _zh:
        _state[uri] = re.findall(heading + '([^"]*)', content)
    elif uri.endswith(".ipynb") and _is_zh(page):
        ids = _state[_zh[uri]]
        if len(ids) != len(re.findall(heading, content)):
            raise ValueError(f"{uri}: not as many headings as {_zh[uri]}: one was translated away")
        for pattern in (f"({heading})" + '[^"]*', r'(<a class="anchor-link" href="#)[^"]*'):
            it = iter(ids)
            content = re.sub(pattern, lambda m: m.group(1) + html.escape(next(it)), content)
    return content


@event_priority(60)  # before notebooks.py (50) and the search plugin (0) read the content
def on_page_context(context, page, config, nav):
    if _is_zh(page):
        context["nav"] = _state["nav"]
        config.theme["language"] = LANG  # Material's words, <html lang>: its zh language file
        # Code and outputs are found once, on the English page: a Chinese page gives its prose.
        page.content = re.sub(r"<pre(?![^>]*data-search-exclude)", "<pre data-search-exclude",
                              page.content)
        # One index for both languages: a Chinese word finds only Chinese pages anyway, and an
        # English word (an identifier in a note) finds the English page first.
        search = page.meta.setdefault("search", {})
        search["boost"] = ZH_BOOST * search.get("boost", 1)
    return context


def on_post_page(output, page, config):
    """Material's language-selector markup in the header: to this page in the other language."""
    if not enabled():
        return output
    config.theme["language"] = _state["language"]
    uri = page.file.src_uri
    en, zh = _zh.get(uri, uri), uri if _is_zh(page) else f"{LANG}/{uri}"
    if _is_zh(page):
        output = output.replace(" download>Download notebook</a>", " download>下载笔记本（中文版）</a>")
    choices = [("English", en, "en"),
               ("中文", zh, LANG) if zh in _zh else ("中文首页", f"{LANG}/index.md", LANG)]
    links = "".join(f'<li class="md-select__item"><a href="'
                    f'{html.escape(get_relative_url(_url(target), page.url))}" hreflang="{lang}" '
                    f'lang="{lang}" class="md-select__link">{name}</a></li>'
                    for name, target, lang in choices)
    switch = ('<div class="md-header__option labnn-lang-switch"><div class="md-select"><button '
              'class="md-header__button md-icon" aria-label="Language / 语言" title="Language / 语言">'
              f'{_state["icon"]}</button><div class="md-select__inner"><ul class="md-select__list">'
              f"{links}</ul></div></div></div>")
    marker = '<label class="md-header__button md-icon" for="__search">'
    return output.replace(marker, switch + marker, 1)


# ----------------------------------------------------------------------------------------- the CLI

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="What the Chinese pages need translated.")
    parser.add_argument("command", choices=["status", "update"], nargs="?", default="status",
                        help="status: list missing and stale entries (exit 1 if any); update: "
                             "also write them into docs/locale/zh (empty, or fuzzy)")
    command, report = parser.parse_args(argv).command, status()
    print(format_status(report))
    if command == "update":
        update()
        print(f"catalogs written under {LOCALE.relative_to(layout.ROOT)}/")
    return 1 if any(r["missing"] or r["stale"] for r in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
