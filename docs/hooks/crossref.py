"""Names in the annotated notes as links: `labnn.feedback.layer.LayerMix`, `feedback_weights`
and `XLBlock.memory_cache` in a note lead to the section that defines them.

An equation is written once, where it is computed, and the other notes name it (`the weights p
of `feedback_weights``, `(`labnn.feedback.layer.memory_keys_values`)`); as plain inline code, a
reader of source/feedback/model/ had to find feedback.layer in the sidebar and scroll it for the
name. Inline code in a note (not in code blocks, headings, links, nor the name an `Args:` entry
opens) becomes a link when its text, less a trailing `()`, is

* a module (`labnn.feedback.kv`): its page;
* a module and a name it defines (`labnn.xl.cache.attend_one_token`, `labnn.x.y.Class.method`);
* a name the page's own module defines (`feedback_weights`, `LayerMix.weights`) or imports from
  labnn (`memory_keys_values` on source/feedback/model/);
* a class or `Class.method` that exactly one module defines (`XLBlock.memory_cache`); a bare
  function name of another module is left alone (`generate`, `step`: common words, and names
  of several modules).

Anchors are those of docs/hooks/annotated.py (`Class`, `Class.method`, a dunder without its
underscores). A Chinese page (zh/source/...) links only Chinese pages: a link there to an English
page says so (（英文）, tests/test_site_zh.py), which a name cannot.

Why not mkdocs-autorefs (installed with mkdocstrings): it links `[text][identifier]` Markdown,
not inline code (backticks are an open request, mkdocstrings/python#294), and knows the API
pages' anchors, not these sections'; the docstrings stay plain code for `help()` and editors.
"""

from __future__ import annotations

import ast
import functools
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority

sys.path.insert(0, str(Path(__file__).parent))
import layout  # noqa: E402
from annotated import _slug  # noqa: E402

_PAGE = re.compile(r"^(zh/)?source/(.+)\.md$")
# Regions never touched (code blocks, headings, existing links, the name an `Args:` entry opens:
# an argument `linear` is not the function `linear`), else an inline code element.
_INLINE = re.compile(r"(<(pre|h[1-6]|a|script|style)\b.*?</\2>|<li><code>[^<]*</code>\s*:)"
                     r"|<code>([A-Za-z_][\w.]*?)(\(\))?</code>", re.DOTALL)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=1)
def definitions() -> dict[str, tuple[str, dict[str, str], dict[str, str]]]:
    """Module name -> (page stem, {qualified name: anchor}, {name imported from a labnn module:
    its dotted path}) of every module of the package."""
    found = {}
    for module in layout.modules():
        names: dict[str, str] = {}
        imports: dict[str, str] = {}
        for node in ast.parse(module.path.read_text(encoding="utf-8")).body:
            if isinstance(node, _DEFS):
                names[node.name] = _slug(node.name)
            elif isinstance(node, ast.ClassDef):
                names[node.name] = node.name
                for child in node.body:
                    if isinstance(child, _DEFS):
                        names[f"{node.name}.{child.name}"] = f"{node.name}.{_slug(child.name)}"
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labnn"):
                imports.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        found[module.name] = (module.stem, names, imports)
    return found


def _qualified(text: str) -> tuple[str, str] | None:
    defs = definitions()
    if text in defs:
        return defs[text][0], ""
    module, _, qual = text.rpartition(".")
    while module:  # labnn.a.b.Name, labnn.a.b.Class.method
        if module in defs and qual in defs[module][1]:
            return defs[module][0], defs[module][1][qual]
        module, _, head = module.rpartition(".")
        qual = f"{head}.{qual}"
    return None


def resolve(text: str, here: str) -> tuple[str, str] | None:
    """(page stem, anchor or "") that `text` names, read on the page of module stem `here`: a
    dotted path, else a name the page's module defines or imports from labnn, else a class (or
    its method) that one module defines."""
    found = _qualified(text)
    if found:
        return found
    defs = definitions()
    _, own, imported = next((d for d in defs.values() if d[0] == here), ("", {}, {}))
    if text in own:
        return here, own[text]
    head, dot, rest = text.partition(".")
    found = _qualified(imported[head] + dot + rest) if head in imported else None
    if found:  # else re-exported (`KVBuffer` from labnn.nn.attention): found by the rule below
        return found
    if not (text[:1].isupper() or "." in text):
        return None
    owners = [(stem, names[text]) for stem, names, _ in defs.values() if text in names]
    return owners[0] if len(owners) == 1 else None


def link_names(content: str, here: str, url_of) -> str:
    """`content` with each inline code that names a definition wrapped in a link; `url_of(stem,
    anchor)` is the relative URL of that anchor on that module's annotated page ("#anchor" on this
    page), None where the page has no such anchor."""
    def replace(match: re.Match) -> str:
        target = None if match.group(1) else resolve(match.group(3).rstrip("."), here)
        href = url_of(*target) if target else None
        if not href:
            return match.group(0)
        return f'<a class="labnn-ref" href="{href}">{match.group(0)}</a>'
    return _INLINE.sub(replace, content)


def on_page_content(content, page, config, files):
    """Every page's content is rendered before any page is written: its ids (a section's anchor
    is the one Markdown gave its heading), kept on the page, and the site's files, are there for
    on_page_context, which links."""
    if _PAGE.match(page.file.src_uri):
        page.labnn_ids, page.labnn_files = set(re.findall(r'\bid="([^"]+)"', content)), files
    return content


@event_priority(60)  # before annotated.py (50) keeps the page's HTML and hands the search a copy
def on_page_context(context, page, config, nav):
    """Link the names of an annotated page's notes (`link_names`), in the HTML shown and the
    copy indexed."""
    found = _PAGE.match(page.file.src_uri)
    files = getattr(page, "labnn_files", None)
    if not found or files is None:
        return context
    zh, here = found.group(1) or "", found.group(2)

    def url_of(stem: str, anchor: str) -> str | None:
        target = files.get_file_from_path(f"{zh}source/{stem}.md")  # a zh page: zh pages only
        ids = getattr(target.page, "labnn_ids", ()) if target is not None else ()
        if target is None or (anchor and anchor not in ids):
            return None
        if target is page.file:
            return f"#{anchor}" if anchor else None
        href = posixpath.relpath(target.url, page.file.url) + "/"  # directory URLs: source/a/b/
        return href + (f"#{anchor}" if anchor else "")
    page.content = link_names(page.content, here, url_of)
    return context
